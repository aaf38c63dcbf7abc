//! The GPU row kernels of the row-op table (`src/ops/rows.rs`), one shader per family:
//! softmax / log_softmax (`shaders/softmax.wgsl`), layer_norm / rms_norm (`layer_norm.wgsl`)
//! and cross-entropy (`cross_entropy.wgsl`); an op is its family's shader run with the op's
//! code as its `OP` override. Each is one dispatch per op,
//! any row length, in one of two autotuned variants: one workgroup per row (per-thread
//! statistics merged across the workgroup by `row_tree.wgsl`, or `row_subgroup.wgsl` where the
//! adapter has SUBGROUP, then a write pass) or one invocation per row (for many short rows).
//! The kernels are one table, [`ROW_SHADERS`]; [`GpuDevice::row_dispatch`] picks the variant,
//! launches and counts. Cross-entropy's targets are never read on the host: an out-of-range
//! target reports to the error word (`ids.rs`).

use super::buffer::GpuBuffer;
use super::device::GpuDevice;
use super::gather::Ids;
use super::ids;
use super::kernels::{Bindings, Launch, Shader, WORKGROUP};
use super::params::{check_u32, extend, w};
use crate::ops::backend::{CeRows, NormSpec};
use crate::ops::geometry::CeSpec;
use crate::ops::{RowFamily, RowOp};
use crate::shape::Layout;
use crate::Result;
use std::cell::Cell;

thread_local! {
    /// Row-kernel dispatches (softmax, layer_norm) issued by this thread, for the tests'
    /// one-dispatch-per-op checks (`wgtensor::testing::row_dispatches`). Per thread so that
    /// tests running in parallel do not see each other's launches.
    static ROW_DISPATCHES: Cell<u64> = const { Cell::new(0) };
}

thread_local! {
    /// A row-kernel variant forced by a test on this thread (`testing::force_row_variant`).
    static FORCED: Cell<Option<RowKernel>> = const { Cell::new(None) };
}

/// The row-kernel variants (softmax.wgsl and layer_norm.wgsl each have both entries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RowKernel {
    /// One 256-thread workgroup per row; statistics merged with subgroup operations or a tree.
    Workgroup,
    /// One invocation per row, 256 rows per workgroup.
    PerRow,
}

impl RowKernel {
    pub(crate) const ALL: [RowKernel; 2] = [RowKernel::Workgroup, RowKernel::PerRow];

    pub(crate) fn name(self) -> &'static str {
        match self {
            RowKernel::Workgroup => "workgroup_per_row",
            RowKernel::PerRow => "invocation_per_row",
        }
    }
}

/// Forces (or with `None`, stops forcing) the row-kernel variant named `name` on this thread.
/// Returns false for an unknown name.
pub(crate) fn force_variant(name: Option<&str>) -> bool {
    super::autotune::force_named(&FORCED, &RowKernel::ALL, RowKernel::name, name)
}

/// Row-kernel dispatches issued so far by the calling thread.
pub(crate) fn row_dispatches() -> u64 {
    ROW_DISPATCHES.with(Cell::get)
}

/// Counts one row-kernel dispatch on this thread.
pub(crate) fn count_row_dispatch() {
    ROW_DISPATCHES.with(|c| c.set(c.get() + 1));
}

/// A row kernel: its shader and the entry point of each variant.
pub(crate) struct RowShader {
    /// The autotuning family (`softmax/rows.. len..`).
    pub family: &'static str,
    pub shader: Shader,
    /// The same kernel with its row merge in subgroup operations, where the adapter has them.
    pub subgroup: Option<Shader>,
    /// The entry of [`RowKernel::Workgroup`] (one workgroup per row).
    pub workgroup: &'static str,
    /// The entry of [`RowKernel::PerRow`] (one invocation per row).
    pub per_row: &'static str,
}

pub(crate) const SOFTMAX: RowShader = RowShader {
    family: "softmax",
    shader: Shader::Softmax,
    subgroup: Some(Shader::SoftmaxSubgroup),
    workgroup: "softmax",
    per_row: "softmax_per_row",
};

pub(crate) const LAYER_NORM: RowShader = RowShader {
    family: "layer_norm",
    shader: Shader::LayerNorm,
    subgroup: None,
    workgroup: "layer_norm",
    per_row: "layer_norm_per_row",
};

pub(crate) const CROSS_ENTROPY: RowShader = RowShader {
    family: "cross_entropy",
    shader: Shader::CrossEntropy,
    subgroup: None,
    workgroup: "ce_forward",
    per_row: "ce_forward_per_row",
};

/// Every row kernel (a new family: its shader in `kernels::SHADERS`, an entry here, and the
/// launch that fills its params and calls [`GpuDevice::row_dispatch`]; a new op of a family
/// needs none of these).
#[allow(dead_code)]
pub(crate) const ROW_SHADERS: [&RowShader; 3] = [&SOFTMAX, &LAYER_NORM, &CROSS_ENTROPY];

/// The kernel of a row-op family.
pub(crate) fn row_shader(family: RowFamily) -> &'static RowShader {
    match family {
        RowFamily::Softmax => &SOFTMAX,
        RowFamily::Norm => &LAYER_NORM,
        RowFamily::CrossEntropy => &CROSS_ENTROPY,
    }
}

/// One row dispatch: the kernel, its `OP` override, buffers and params, and the rows.
pub(crate) struct RowLaunch<'a> {
    pub kernel: &'static RowShader,
    pub bind: Bindings<'a>,
    pub nrows: usize,
    pub len: usize,
}

/// The op the cross-entropy kernels run for, as their errors name it.
const CE_OP: &str = "cross_entropy";

/// The options the cross-entropy kernels read, as words: `[ignore bits, flags, code, ε bits]`,
/// the ignored class as the targets' bits (flag off when no target of that signedness can
/// equal it).
fn ce_words(spec: &CeSpec, signed: bool) -> [u32; 4] {
    let ignore = spec.ignore.and_then(|i| {
        if signed {
            i32::try_from(i).ok().map(|v| v as u32)
        } else {
            u32::try_from(i).ok()
        }
    });
    [
        ignore.unwrap_or(0),
        u32::from(ignore.is_some()),
        ids::code(CE_OP, signed),
        spec.smoothing.to_bits(),
    ]
}

impl GpuDevice {
    /// Records `l` in its autotuned variant (see [`GpuDevice::row_kernel`]) and counts it.
    pub(crate) fn row_dispatch(&self, op: &'static str, l: RowLaunch<'_>) -> Result<()> {
        let k = l.kernel;
        let shader = match k.subgroup {
            Some(s) if self.subgroups() => s,
            _ => k.shader,
        };
        let launch = |v: RowKernel| {
            let (entry, threads) = match v {
                RowKernel::Workgroup => (k.workgroup, l.nrows as u64 * WORKGROUP),
                RowKernel::PerRow => (k.per_row, l.nrows as u64),
            };
            self.launch(
                op,
                Launch {
                    shader,
                    entry,
                    bind: l.bind,
                    threads,
                },
            )
        };
        launch(self.row_kernel(k.family, l.nrows, l.len, launch)?)?;
        count_row_dispatch();
        Ok(())
    }

    /// The table's row op `row` over `nrows` rows of `len`: its family's kernel, with the
    /// op's code as the `OP` override.
    fn row_op(
        &self,
        row: RowOp,
        (nrows, len): (usize, usize),
        inputs: &[&wgpu::Buffer],
        output: &wgpu::Buffer,
        meta: &[u32],
    ) -> Result<()> {
        let bind = Bindings {
            op_code: Some(row.code()),
            inputs,
            output,
            meta,
        };
        let kernel = row_shader(row.family());
        self.row_dispatch(
            row.name(),
            RowLaunch {
                kernel,
                bind,
                nrows,
                len,
            },
        )
    }

    /// The softmax-family `row` (softmax or log_softmax) over dim `d` of the non-empty view
    /// `layout` of `src`.
    pub(crate) fn softmax(
        &self,
        row: RowOp,
        src: &GpuBuffer,
        layout: &Layout,
        d: usize,
    ) -> Result<GpuBuffer> {
        let op = row.name();
        check_u32(op, layout)?;
        let n = layout.numel();
        let len = layout.shape[d];
        let nrows = n / len;
        let inner: usize = layout.shape[d + 1..].iter().product();
        // Every element is written by the kernel: no clear.
        let out = self.alloc_uninit(op, n as u64 * 4)?;
        let mut params = vec![
            w(nrows),
            w(len),
            w(inner),
            w(layout.offset),
            w(layout.strides[d]),
            w(layout.shape.len()),
        ];
        extend(&mut params, &layout.shape);
        extend(&mut params, &layout.strides);
        self.row_op(row, (nrows, len), &[&src.buffer], &out.buffer, &params)?;
        Ok(out)
    }

    /// The norm `spec.row` (layer_norm or rms_norm) of the packed `[nrows, len]` f32 data
    /// `src` (`len > 0`); `weight` and `bias` hold `len` f32 each when given.
    pub(crate) fn norm(
        &self,
        src: &GpuBuffer,
        spec: &NormSpec,
        weight: Option<&GpuBuffer>,
        bias: Option<&GpuBuffer>,
    ) -> Result<GpuBuffer> {
        let NormSpec {
            row,
            nrows,
            len,
            eps,
        } = *spec;
        let op = row.name();
        let out = self.alloc(op, (nrows * len) as u64 * 4)?;
        let flags = u32::from(weight.is_some()) | u32::from(bias.is_some()) << 1;
        // An absent weight or bias binds the input instead (never read: the flag is off).
        let wb = weight.unwrap_or(src);
        let bb = bias.unwrap_or(src);
        let inputs = [&src.buffer, &wb.buffer, &bb.buffer];
        let meta = [w(nrows), w(len), eps.to_bits(), flags];
        self.row_op(row, (nrows, len), &inputs, &out.buffer, &meta)?;
        Ok(out)
    }

    /// The output and params of the two cross-entropy kernels over the logits `ce` describes:
    /// the params `[lead, c, logits' offset, targets' offset, the options' words, tail]`, the
    /// output `out_len` f32 uninitialised (the kernels write every element).
    fn ce_setup(
        &self,
        ce: &CeRows,
        targets: Ids<'_>,
        (lead, out_len): (usize, usize),
        tail: [u32; 2],
    ) -> Result<(GpuBuffer, Vec<u32>)> {
        check_u32(CE_OP, &Layout::contiguous(&[ce.n, ce.c]))?;
        let out = self.alloc_uninit(CE_OP, out_len as u64 * 4)?;
        let (_, t_offset, _, signed) = targets;
        let mut params = vec![w(lead), w(ce.c), w(ce.offset), w(t_offset)];
        params.extend(ce_words(ce.spec, signed));
        params.extend(tail);
        Ok((out, params))
    }

    /// Per-row `[loss[N], valid[N], lse[N]]` of the packed logits `x` that `ce` describes.
    pub(crate) fn cross_entropy_rows(
        &self,
        x: &GpuBuffer,
        ce: &CeRows,
        targets: Ids<'_>,
    ) -> Result<GpuBuffer> {
        let n = ce.n;
        let (out, params) = self.ce_setup(ce, targets, (n, 3 * n), [0, 0])?;
        let t = targets.0;
        let dummy = &self.0.errors.dummy;
        self.row_dispatch(
            CE_OP,
            RowLaunch {
                kernel: &CROSS_ENTROPY,
                bind: Bindings {
                    op_code: None,
                    inputs: &[&x.buffer, &t.buffer, dummy, dummy],
                    output: &out.buffer,
                    meta: &params,
                },
                nrows: n,
                len: ce.c,
            },
        )?;
        Ok(out)
    }

    /// The gradient `[n, c]` of the logits given the forward's rows (`lse` at `stats[2n..]`)
    /// and the per-row upstream gradient `g` (from element `g_offset`).
    pub(crate) fn cross_entropy_backward(
        &self,
        x: &GpuBuffer,
        ce: &CeRows,
        targets: Ids<'_>,
        stats: &GpuBuffer,
        (g, g_offset): (&GpuBuffer, usize),
    ) -> Result<GpuBuffer> {
        let total = ce.n * ce.c;
        let tail = [w(2 * ce.n), w(g_offset)];
        let (out, params) = self.ce_setup(ce, targets, (total, total), tail)?;
        let t = targets.0;
        self.launch(
            CE_OP,
            Launch {
                shader: Shader::CrossEntropy,
                entry: "ce_backward",
                bind: Bindings {
                    op_code: None,
                    inputs: &[&x.buffer, &t.buffer, &stats.buffer, &g.buffer],
                    output: &out.buffer,
                    meta: &params,
                },
                threads: total as u64,
            },
        )?;
        Ok(out)
    }

    /// The row-kernel variant of `family` for `nrows` rows of `len`: a test's forced one, else
    /// the heuristic in deterministic mode (the default; the variants merge a row in different
    /// orders), else the autotuned one (classes bucketed to powers of two): the heuristic (one invocation per row for rows of at most 64, and for 16 rows or
    /// more on software adapters; else a workgroup per row) on a class's first call, a search on its
    /// second (`run` records one run of a candidate), the winner after.
    pub(crate) fn row_kernel(
        &self,
        family: &str,
        nrows: usize,
        len: usize,
        run: impl Fn(RowKernel) -> Result<()>,
    ) -> Result<RowKernel> {
        if let Some(k) = FORCED.with(Cell::get) {
            return Ok(k);
        }
        // A workgroup's barriers are cheap on a GPU and very dear on a software adapter (each
        // one switches every invocation out); short rows leave a workgroup mostly idle.
        let software = self.0.info.device_type == wgpu::DeviceType::Cpu;
        let heuristic = if (software && nrows >= 16) || len <= 64 {
            RowKernel::PerRow
        } else {
            RowKernel::Workgroup
        };
        let b = |x: usize| x.next_power_of_two();
        let key = super::autotune::class_key(family, &format!("rows{} len{}", b(nrows), b(len)));
        let (chosen, tune_now) = self.0.tuner.lookup(&key);
        // The two variants merge a row in different orders: deterministic mode (the default)
        // keeps the heuristic, whatever the cache says.
        let det = super::autotune::deterministic();
        if let Some(k) = chosen.and_then(|n| RowKernel::ALL.into_iter().find(|k| k.name() == n)) {
            if !det {
                return Ok(k);
            }
        }
        // Searching re-runs the softmax a dozen times: large classes keep the heuristic.
        if det || !tune_now || nrows as u64 * len as u64 > 1 << 26 {
            self.0.tuner.note_heuristic(&key, heuristic.name());
            return Ok(heuristic);
        }
        let found =
            self.time_candidates("softmax autotune", &RowKernel::ALL, RowKernel::name, run)?;
        let (winner, timings) = found.unwrap_or((heuristic, Vec::new()));
        self.0.tuner.record(&key, winner.name(), timings);
        Ok(winner)
    }
}
