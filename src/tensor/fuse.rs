//! Lazy elementwise fusion on GPU tensors, and on CPU tensors with `WGTENSOR_CPU_FUSION=1`.
//!
//! An elementwise op on GPU tensors (unary, binary, scalar, comparison, `where_cond`, `clamp`,
//! `to_dtype`) does not dispatch: it returns a tensor whose storage cell holds a *pending*
//! [`Program`] over already materialised inputs. An elementwise op that reads a pending tensor
//! whole and packed (same shape, no broadcast or view) inlines the pending program into its own,
//! so a chain of k ops becomes one generated kernel and one pass over memory. Anything else that
//! needs the data (a readback, matmul, a reduction, a strided view, `wgpu_buffer`) materialises
//! the cell with one dispatch, once (`StorageCell::get`, in `cell.rs`).
//!
//! Chains end where a kernel would get too large: at [`MAX_NODES`] nodes, or when the inputs
//! would exceed [`MAX_INPUTS`] bindings (WebGPU guarantees 8 storage buffers per stage: the
//! inputs, the output and the params). Errors of the kernel (out of memory, device loss) surface
//! from the call that materialises; shape, dtype and device errors stay eager.
//!
//! A pending tensor that is inlined into a consumer and later materialised as well is computed
//! twice: fusion trades that recomputation (cheap, elementwise) for memory passes and launches.
//!
//! On the CPU the same programs run in one pass over memory, block by block, calling the
//! op-by-op kernels' scalar functions (`cpu/fused.rs`): same bits, no intermediate tensors.

use super::cell::{register, Pending, StorageCell};
use super::dispatch::{check_buffer_size, fused};
use super::{Tensor, TensorInner};
use crate::ops::program::{Expr, NodeId, Program};
use crate::shape::Layout;
use crate::{DType, Device, Error, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Whether elementwise ops on CPU tensors record programs too (run in one blocked pass when
/// read, `cpu/fused.rs`) instead of running one by one: `WGTENSOR_CPU_FUSION=1` turns it on,
/// read once per process.
/// Also on inside [`fused_on_cpu`].
pub(crate) fn cpu_fusion() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("WGTENSOR_CPU_FUSION").as_deref() == Ok("1"))
        || CPU_SCOPE.with(|d| d.get() > 0)
}

thread_local! {
    /// How many [`fused_on_cpu`] calls the current thread is inside.
    static CPU_SCOPE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Runs `f`, an elementwise formula (the backward of an elementwise op: gelu's is 11 ops), with
/// CPU ops recorded, and then runs the recorded chain as one blocked pass (`cpu/fused.rs`): one
/// read of the operands and one write instead of a tensor per step. The fused pass calls the
/// op-by-op kernels' scalar functions, so the result has the same bits. GPU ops always record;
/// their chain stays pending, to fuse on with what reads it.
pub(crate) fn fused_on_cpu(f: impl FnOnce() -> Result<Tensor>) -> Result<Tensor> {
    struct Scope;
    impl Drop for Scope {
        fn drop(&mut self) {
            CPU_SCOPE.with(|d| d.set(d.get() - 1));
        }
    }
    CPU_SCOPE.with(|d| d.set(d.get() + 1));
    let scope = Scope;
    let t = f();
    drop(scope);
    let t = t?;
    if !fused::queues(t.device()) {
        // Ops outside the scope run op by op and expect data, not a program.
        t.0.storage.get()?;
    }
    Ok(t)
}

/// Nodes at most in one fused kernel.
pub(crate) const MAX_NODES: usize = 48;

/// Input bindings at most in one fused kernel (8 storage buffers per stage, less the output and
/// the params).
pub(crate) const MAX_INPUTS: usize = 6;

/// Builds one fused program for an op whose output has `shape`, inlining pending operands.
pub(crate) struct Fuser {
    /// The device that runs the program.
    device: Device,
    shape: Vec<usize>,
    program: Program,
    inputs: Vec<(Arc<StorageCell>, Layout)>,
    input_nodes: Vec<NodeId>,
    scalars: Vec<u32>,
    /// Pending cells already inlined, with their result node (a tensor used twice is inlined
    /// once).
    inlined: HashMap<*const StorageCell, NodeId>,
    /// An input is shared with the application: run now (see `StorageCell::exported`).
    eager: bool,
}

impl Fuser {
    /// A builder for `op` on `device`. Like any call on a device, it reports a lost device or
    /// errors that escaped wgpu's scopes at once, though it records nothing yet.
    pub(crate) fn new(op: &'static str, device: &Device, shape: &[usize]) -> Result<Fuser> {
        fused::check(op, device)?;
        Ok(Fuser::with(device, shape))
    }

    /// A builder for `op` on `device` when its elementwise ops record: always on a device that
    /// queues work (a GPU), on the host when [`cpu_fusion`] is on; `None` runs the op at once.
    pub(crate) fn on(op: &'static str, device: &Device, shape: &[usize]) -> Result<Option<Fuser>> {
        if fused::queues(device) {
            Fuser::new(op, device, shape).map(Some)
        } else if cpu_fusion() {
            Ok(Some(Fuser::with(device, shape)))
        } else {
            Ok(None)
        }
    }

    fn with(device: &Device, shape: &[usize]) -> Fuser {
        Fuser {
            device: device.clone(),
            shape: shape.to_vec(),
            program: Program::default(),
            inputs: Vec::new(),
            input_nodes: Vec::new(),
            scalars: Vec::new(),
            inlined: HashMap::new(),
            eager: false,
        }
    }

    /// The node reading `t` through `layout` (its layout broadcast to the output shape).
    pub(crate) fn operand(&mut self, t: &Tensor, layout: &Layout) -> Result<NodeId> {
        let cell = &t.0.storage;
        let whole = layout.is_contiguous() && layout.offset == 0 && layout.shape == self.shape;
        if whole {
            if let Some(&id) = self.inlined.get(&Arc::as_ptr(cell)) {
                return Ok(id);
            }
            if let Some(p) = cell.pending() {
                let fits = self.program.nodes.len() + p.program.nodes.len() < MAX_NODES
                    && self.inputs.len() + p.inputs.len() <= MAX_INPUTS;
                // A kernel unravels every strided input over one shape: a program read through
                // a reshape inlines only if its inputs are packed (positions `offset + e`).
                let same_frame =
                    p.shape == self.shape || p.inputs.iter().all(|(_, l)| l.is_contiguous());
                if fits && same_frame {
                    let id = self.inline(&p);
                    self.inlined.insert(Arc::as_ptr(cell), id);
                    return Ok(id);
                }
            }
        }
        cell.get()?;
        Ok(self.bind(cell, layout, t.dtype()))
    }

    /// A scalar parameter (canonical bits) of `dtype`.
    pub(crate) fn scalar(&mut self, bits: u32, dtype: DType) -> NodeId {
        self.scalars.push(bits);
        self.program.scalar(dtype)
    }

    pub(crate) fn push(&mut self, e: Expr, dtype: DType) -> NodeId {
        self.program.push(e, dtype)
    }

    /// The pending tensor computing node `out` (normally the last node pushed); run and
    /// submitted at once when an input is shared with the application.
    pub(crate) fn finish(
        mut self,
        name: &'static str,
        out: NodeId,
        device: &crate::Device,
    ) -> Result<Tensor> {
        let dtype = self.program.nodes[out].1;
        if out + 1 != self.program.nodes.len() {
            // The stored node must be the last: an identity cast makes it so.
            self.program.push(Expr::Cast(out), dtype);
        }
        let n: usize = self.shape.iter().product();
        // Sizes are checked when the op is made, as for an eager allocation: a result that can
        // never fit one buffer is an error now, not when it runs.
        let bytes = (n as u64).saturating_mul(dtype.size_in_bytes() as u64);
        check_buffer_size(name, &self.device, bytes)?;
        let (eager, on) = (self.eager, self.device.clone());
        let queued = fused::queues(&on);
        let pending = Pending {
            name,
            device: self.device,
            program: self.program,
            inputs: self.inputs,
            scalars: self.scalars,
            n,
            shape: self.shape.clone(),
        };
        let cell = Arc::new(StorageCell {
            value: OnceLock::new(),
            pending: Mutex::new(Some(Arc::new(pending))),
            exported: AtomicBool::new(false),
        });
        if queued && eager {
            cell.get()?;
            fused::flush(name, &on)?;
        } else if queued {
            // `Device::synchronize` runs what is queued on a GPU.
            register(&cell);
        }
        // The host has no queue: a pending CPU tensor runs when it is read.
        Ok(Tensor(Arc::new(TensorInner {
            storage: cell,
            layout: Layout::contiguous(&self.shape),
            dtype,
            device: device.clone(),
            autograd: Default::default(),
        })))
    }

    fn bind(&mut self, cell: &Arc<StorageCell>, layout: &Layout, dtype: DType) -> NodeId {
        self.eager |= cell.exported.load(Ordering::SeqCst);
        if let Some(k) = self
            .inputs
            .iter()
            .position(|(c, l)| Arc::ptr_eq(c, cell) && l == layout)
        {
            return self.input_nodes[k];
        }
        self.inputs.push((cell.clone(), layout.clone()));
        let id = self.program.input(dtype);
        self.input_nodes.push(id);
        id
    }

    /// Copies `p`'s nodes into this program; returns the node of its result.
    fn inline(&mut self, p: &Pending) -> NodeId {
        let mut map: Vec<NodeId> = Vec::with_capacity(p.program.nodes.len());
        for &(e, dt) in &p.program.nodes {
            let m = |i: NodeId| map[i];
            let id = match e {
                Expr::Input(k) => {
                    let (cell, layout) = &p.inputs[k];
                    self.bind(cell, layout, p.program.inputs[k])
                }
                Expr::Scalar(k) => self.scalar(p.scalars[k], dt),
                Expr::Index => self.program.push(Expr::Index, dt),
                Expr::Random(d, w) => self.program.push(Expr::Random(d, w.map(m)), dt),
                Expr::Unary(op, a) => self.program.push(Expr::Unary(op, m(a)), dt),
                Expr::Binary(op, a, b) => self.program.push(Expr::Binary(op, m(a), m(b)), dt),
                Expr::Compare(op, a, b) => self.program.push(Expr::Compare(op, m(a), m(b)), dt),
                Expr::Where(c, a, b) => self.program.push(Expr::Where(m(c), m(a), m(b)), dt),
                Expr::Clamp(x, a, b) => self.program.push(Expr::Clamp(m(x), m(a), m(b)), dt),
                Expr::Cast(a) => self.program.push(Expr::Cast(m(a)), dt),
            };
            map.push(id);
        }
        *map.last().expect("a pending program has at least one node")
    }
}

impl Tensor {
    /// Runs this tensor's pending program now (its kernel is recorded, not waited for), so that
    /// later ops read its buffer instead of inlining the program and computing it again. A
    /// materialised tensor is returned as it is.
    pub(crate) fn materialized(self) -> Result<Tensor> {
        self.0.storage.get()?;
        Ok(self)
    }
}

/// `arange` as a generated program on `device` (`start + f32(i) * step`, the CPU kernel's
/// formula, so the same values), for a backend with no kernel of its own
/// (`BackendDevice::arange`): it fuses into whatever consumes it. Past one binding, blocks of
/// `start + f32(base + i) * step` joined by buffer copies.
pub(crate) fn arange_program(n: usize, start: f32, step: f32, device: &Device) -> Result<Tensor> {
    if !fused::queues(device) {
        return Err(Error::InvalidArgument {
            op: "arange",
            message: "a generated arange on a device that runs ops at once".into(),
        });
    };
    let blocked = super::chunked::blocked(device).ok_or_else(|| Error::InvalidArgument {
        op: "arange",
        message: "a generated arange on a device without binding limits".into(),
    })?;
    let per = super::chunked::elems_per_block(blocked, 4);
    // Checked before any block runs: a request that cannot succeed allocates nothing (as
    // `alloc` would refuse the whole buffer).
    check_buffer_size("arange", device, n as u64 * 4)?;
    let block = |base: Option<usize>, len: usize| {
        let mut f = Fuser::new("arange", device, &[len])?;
        let (a, b) = (
            f.scalar(start.to_bits(), DType::F32),
            f.scalar(step.to_bits(), DType::F32),
        );
        let o = base.map(|base| f.scalar(base as u32, DType::U32));
        let mut i = f.push(Expr::Index, DType::U32);
        if let Some(o) = o {
            i = f.push(Expr::Binary(crate::ops::BinaryOp::Add, i, o), DType::U32);
        }
        let x = f.push(Expr::Cast(i), DType::F32);
        let m = f.push(Expr::Binary(crate::ops::BinaryOp::Mul, x, b), DType::F32);
        let out = f.push(Expr::Binary(crate::ops::BinaryOp::Add, a, m), DType::F32);
        f.finish("arange", out, device)
    };
    if n > per {
        let blocks = (0..n)
            .step_by(per)
            .map(|base| block(Some(base), per.min(n - base))?.contiguous())
            .collect::<Result<Vec<Tensor>>>()?;
        return super::chunked::join_rows("arange", &blocks);
    }
    block(None, n)
}

/// `n` draws of `dist` (the stream at `words`: seed and offset, low word first) as a generated
/// program on `device` (`Expr::Random`), for a backend with no kernel of its own
/// (`BackendDevice::random`).
pub(crate) fn random_program(
    op: &'static str,
    dist: crate::ops::program::Dist,
    words: [u32; 4],
    shape: &[usize],
    device: &Device,
) -> Result<Tensor> {
    if !fused::queues(device) {
        return Err(Error::InvalidArgument {
            op,
            message: "a generated random tensor on a device that runs ops at once".into(),
        });
    };
    let mut f = Fuser::new(op, device, shape)?;
    let words = words.map(|w| f.scalar(w, DType::U32));
    let out = f.push(Expr::Random(dist, words), DType::F32);
    f.finish(op, out, device)
}
