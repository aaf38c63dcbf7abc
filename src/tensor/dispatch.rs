//! The one place that decides CPU or GPU. Every op of the tensor layer (and the host readers of
//! `optim`, `nn` and `distributed`) asks here where a tensor's data lives instead of matching on
//! `Storage`, so the backends can change behind one enum and a mixed-device call gets the same
//! typed error from every op.

use super::Tensor;
use crate::gpu::GpuBuffer;
use crate::ops::backend::{
    BackendStorage, Cat, CeBackward, CeRows, Gather, IdsView, MatmulSpec, NormGrads, NormSpec,
    OpIds, ReduceCall, Scatter, ScatterSpec,
};
use crate::ops::geometry::{DecodeDims, Geom, PoolGeom};
use crate::shape::Layout;
use crate::storage::{CpuStorage, Storage};
use crate::{DType, Device, Result};
use std::sync::Arc;

// The dispatch point grows by family in the files of `tensor/dispatch/` (still the one place
// that matches on where data lives: the ratchet exempts this file and that folder only).
pub(crate) mod attention;
pub(crate) mod blocks;
pub(crate) mod conv;
pub(crate) mod create;
pub(crate) mod fused;
mod limits;
mod place;
pub(crate) mod quant;
pub(crate) mod transfer;
pub(crate) use limits::check_buffer_size;
pub(crate) use place::{backend, on_cpu, on_gpu, Backend};

/// A tensor's data as the backend that holds it sees it.
pub(crate) enum Data<'a> {
    Cpu(&'a CpuStorage),
    Gpu(&'a GpuBuffer),
}

/// The data of several operands that share one device.
pub(crate) enum DataN<'a, const N: usize> {
    Cpu([&'a CpuStorage; N]),
    Gpu([&'a GpuBuffer; N]),
}

/// The data and views of a list of operands that share one device.
pub(crate) enum DataList<'a> {
    Cpu(Vec<(&'a CpuStorage, &'a Layout)>),
    Gpu(Vec<(&'a GpuBuffer, &'a Layout)>),
}

/// A uniquely held tensor's data, to write in place.
pub(crate) enum DataMut<'a> {
    Cpu(&'a mut CpuStorage),
    Gpu(&'a mut GpuBuffer),
}

/// Ids packed for a kernel: the tensor that owns them (kept alive by the caller) and the
/// kernels' view of them.
pub(crate) struct DeviceIds {
    pub tensor: Tensor,
    pub signed: bool,
}

impl DeviceIds {
    /// The kernels' view of the ids.
    pub(crate) fn view(&self) -> IdsView {
        IdsView {
            offset: self.tensor.layout().offset,
            count: self.tensor.numel(),
            signed: self.signed,
        }
    }
}

/// Ids packed for a kernel (a copy kernel only for strided ids).
pub(crate) fn device_ids(ids: &Tensor) -> Result<DeviceIds> {
    Ok(DeviceIds {
        tensor: ids.contiguous()?,
        signed: ids.dtype() == DType::I32,
    })
}

/// Runs the fused programs queued on `device` now, without waiting for their results (the CPU
/// never defers work). Layers above the tensor (an optimizer ending its step) call this so the
/// next step reads buffers instead of inlining every earlier step's chain.
pub(crate) fn run_pending(device: &Device) -> Result<()> {
    match backend(device) {
        Backend::Cpu => Ok(()),
        Backend::Gpu(_) => super::cell::materialize_pending(device),
    }
}

/// The data of `ts`, all on `ts[0]`'s device, or the device-mismatch error of `op` naming the
/// first operand and the first one elsewhere.
pub(crate) fn data_n<'a, const N: usize>(
    op: &'static str,
    ts: [&'a Tensor; N],
) -> Result<DataN<'a, N>> {
    let mut cpu: [Option<&CpuStorage>; N] = [None; N];
    let mut gpu: [Option<&GpuBuffer>; N] = [None; N];
    for (i, t) in ts.iter().enumerate() {
        if t.device() != ts[0].device() {
            return Err(ts[0].device_mismatch(op, t));
        }
        match t.data()? {
            Data::Cpu(s) => cpu[i] = Some(s),
            Data::Gpu(b) => gpu[i] = Some(b),
        }
    }
    // One device means one backend, so every slot of one array is filled: the first entry
    // stands in for the impossible empty slot, which keeps this free of panics.
    Ok(
        match (
            cpu.first().copied().flatten(),
            gpu.first().copied().flatten(),
        ) {
            (Some(c0), _) => DataN::Cpu(cpu.map(|s| s.unwrap_or(c0))),
            (_, Some(g0)) => DataN::Gpu(gpu.map(|b| b.unwrap_or(g0))),
            // N == 0 (no op asks for this).
            _ => {
                return Err(crate::Error::InvalidArgument {
                    op,
                    message: "an op dispatched on no operand".into(),
                });
            }
        },
    )
}

/// The data and views of `ts` (a non-empty list), all on `ts[0]`'s device, or the
/// device-mismatch error of `op` naming the first operand and the first one elsewhere.
pub(crate) fn data_list<'a>(op: &'static str, ts: &[&'a Tensor]) -> Result<DataList<'a>> {
    let (mut cpu, mut gpu) = (Vec::new(), Vec::new());
    for t in ts {
        if t.device() != ts[0].device() {
            return Err(ts[0].device_mismatch(op, t));
        }
        match t.data()? {
            Data::Cpu(s) => cpu.push((s, t.layout())),
            Data::Gpu(b) => gpu.push((b, t.layout())),
        }
    }
    // One device means one backend: one of the lists is empty.
    Ok(if gpu.is_empty() {
        DataList::Cpu(cpu)
    } else {
        DataList::Gpu(gpu)
    })
}

impl Tensor {
    /// The tensor's data, materialising a pending fused program first (one dispatch). Private
    /// to this module: everything else reads data through the accessors below.
    fn storage(&self) -> Result<&Storage> {
        self.0.storage.get()
    }

    /// Where this tensor's data lives (materialising a pending fused program first).
    pub(crate) fn data(&self) -> Result<Data<'_>> {
        Ok(match self.storage()? {
            Storage::Cpu(s) => Data::Cpu(s),
            Storage::Gpu(b) => Data::Gpu(b),
        })
    }

    /// The data to write in place, when nothing else can observe the write: this handle owns
    /// the tensor and its storage (no view, clone or pending fused program holds it).
    pub(crate) fn data_mut(&mut self) -> Option<DataMut<'_>> {
        let inner = Arc::get_mut(&mut self.0)?;
        Some(match Arc::get_mut(&mut inner.storage)?.get_mut()? {
            Storage::Cpu(s) => DataMut::Cpu(s),
            Storage::Gpu(b) => DataMut::Gpu(b),
        })
    }

    /// The host data, or `None` for a GPU tensor.
    pub(crate) fn host_data(&self) -> Result<Option<&CpuStorage>> {
        Ok(match self.data()? {
            Data::Cpu(s) => Some(s),
            Data::Gpu(_) => None,
        })
    }

    /// The GPU buffer, or `None` for a CPU tensor.
    pub(crate) fn gpu_data(&self) -> Result<Option<&GpuBuffer>> {
        Ok(match self.data()? {
            Data::Cpu(_) => None,
            Data::Gpu(b) => Some(b),
        })
    }

    /// The f32 host data (the whole storage, index it with the layout), or the
    /// unsupported-dtype error of `op` for other dtypes and GPU tensors.
    pub(crate) fn host_f32(&self, op: &'static str) -> Result<&[f32]> {
        match self.host_data()? {
            Some(CpuStorage::F32(v)) => Ok(v),
            _ => Err(self.unsupported(op)),
        }
    }

    /// The first element of this tensor's view when it is a CPU tensor of dtype `T`; `None` for
    /// a GPU tensor, another dtype or no element. Reads host hyperparameters (an optimizer's
    /// `lr` and step counts) without a transfer.
    pub(crate) fn host_first<T: crate::WithDType>(&self) -> Result<Option<T>> {
        Ok(self
            .host_data()?
            .and_then(|s| s.as_slice::<T>())
            .and_then(|v| v.get(self.layout().offset))
            .copied())
    }

    /// A packed CPU tensor of `dtype` from the little-endian bytes of its elements (checkpoint
    /// loading); the length must be a whole number of elements.
    pub(crate) fn from_host_bytes(
        dtype: crate::DType,
        bytes: &[u8],
        shape: &[usize],
    ) -> Result<Tensor> {
        let storage = CpuStorage::from_bytes(dtype, bytes)?;
        Ok(Tensor::from_parts(storage, shape, dtype, Device::cpu()))
    }

    /// The bytes of this tensor's elements when it is a packed CPU tensor (read in place, no
    /// copy); `None` for GPU tensors and strided views.
    pub(crate) fn host_packed_bytes(&self) -> Result<Option<&[u8]>> {
        if !self.is_contiguous() {
            return Ok(None);
        }
        let esize = self.dtype().size_in_bytes();
        let start = self.layout().offset * esize;
        Ok(self
            .host_data()?
            .and_then(|s| s.as_bytes().get(start..start + self.numel() * esize)))
    }

    /// A new contiguous tensor with this one's dtype and device from freshly computed data.
    pub(crate) fn derived(&self, storage: impl Into<Storage>, shape: &[usize]) -> Tensor {
        Tensor::from_parts(storage, shape, self.dtype(), self.device().clone())
    }
}

// ---------------------------------------------------------------------------------------------
// The backend interface: each op below asks the operands' backend once, through
// `crate::ops::backend::BackendStorage`, and wraps what it returns in a `Storage`. The tensor
// layer validates and plans; which kernel runs is the backend's choice.

/// The product `spec` describes of `a` and `b` (one device), with the dtype the result holds;
/// `None` when the backend has no kernel for the dtype (see `BackendStorage::matmul`).
pub(crate) fn matmul(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    spec: &MatmulSpec,
) -> Result<Option<(Storage, DType)>> {
    Ok(match data_n(op, [a, b])? {
        DataN::Cpu([x, y]) => x.matmul(y, spec)?.map(|(s, d)| (s.into(), d)),
        DataN::Gpu([x, y]) => x.matmul(y, spec)?.map(|(s, d)| (s.into(), d)),
    })
}

/// `a · b + bias` in one pass where the backend has a fused kernel (see
/// `BackendStorage::matmul_bias`); `None` when it has none or the operands live on different
/// devices (the caller's general path then reports that).
pub(crate) fn matmul_bias(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    spec: &MatmulSpec,
    bias: &Tensor,
) -> Result<Option<Storage>> {
    if a.device() != b.device() || a.device() != bias.device() {
        return Ok(None);
    }
    let offset = bias.layout().offset;
    Ok(match data_n(op, [a, b, bias])? {
        DataN::Cpu([x, y, c]) => x.matmul_bias(y, spec, c, offset)?.map(Storage::from),
        DataN::Gpu([x, y, c]) => x.matmul_bias(y, spec, c, offset)?.map(Storage::from),
    })
}

/// `x · wᵀ` for f32 rows and an f16 weight (see `BackendStorage::matmul_t_f16_weight`); `None`
/// when the backend has no such kernel or the operands live on different devices.
#[cfg_attr(not(feature = "models"), allow(dead_code))]
pub(crate) fn matmul_t_f16_weight(
    x: &Tensor,
    wt: &Tensor,
    spec: &MatmulSpec,
) -> Result<Option<Storage>> {
    if x.device() != wt.device() {
        return Ok(None);
    }
    Ok(match data_n("matmul", [x, wt])? {
        DataN::Cpu([a, w]) => a.matmul_t_f16_weight(w, spec)?.map(Storage::from),
        DataN::Gpu([a, w]) => a.matmul_t_f16_weight(w, spec)?.map(Storage::from),
    })
}

/// The kernel `matmul` would run for `spec` on `a`'s backend.
pub(crate) fn matmul_kernel_name(a: &Tensor, spec: &MatmulSpec) -> Result<&'static str> {
    Ok(match a.data()? {
        Data::Cpu(s) => s.matmul_kernel_name(spec),
        Data::Gpu(b) => b.matmul_kernel_name(spec),
    })
}

/// The matmul kernel names a caller may ask for by name (the GPU's; the CPU has one kernel and
/// ignores the name once it is validated).
pub(crate) fn matmul_kernel_names() -> Vec<&'static str> {
    crate::gpu::backend::matmul_kernel_names()
}

/// The softmax-family row op `op` over dim `d` of `t` (f32), packed in `t`'s shape; `None` for
/// a dtype the backend has no kernel for.
pub(crate) fn softmax(t: &Tensor, op: crate::ops::RowOp, d: usize) -> Result<Option<Storage>> {
    Ok(match t.data()? {
        Data::Cpu(s) => s.softmax(op, t.layout(), d)?.map(Storage::from),
        Data::Gpu(b) => b.softmax(op, t.layout(), d)?.map(Storage::from),
    })
}

/// Runs `$call` on the backend data of `$t` (one tensor) or of `[$ts]` (one device), wrapping
/// the returned backend storage (`Option<S>`) in a `Storage`.
macro_rules! ask {
    ($op:expr, [$($t:expr),+], |[$($x:ident),+]| $call:expr) => {
        match data_n($op, [$($t),+])? {
            DataN::Cpu([$($x),+]) => $call.map(Storage::from),
            DataN::Gpu([$($x),+]) => $call.map(Storage::from),
        }
    };
}

/// [`ask!`] for an op whose second operand is ids: packed by [`device_ids`], and bound in
/// `$call` as `$i`, the ids' storage with their view, as a kernel takes them.
macro_rules! ask_ids {
    ($op:expr, [$t0:expr, $ids:expr $(, $t:expr)*], |[$x0:ident, $i:ident $(, $x:ident)*]| $call:expr) => {{
        let packed = device_ids($ids)?;
        let view = packed.view();
        Ok(ask!($op, [$t0, &packed.tensor $(, $t)*], |[$x0, $i $(, $x)*]| {
            let $i = OpIds {
                op: $op,
                ids: $i,
                view: &view,
            };
            $call
        }))
    }};
}

/// `conv2d` of the packed `x`, `w` and `bias` (one device) by the backend's own algorithm; `None`
/// when it has none for `geo` (see `BackendStorage::conv2d`).
pub(crate) fn conv2d(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    geo: &Geom,
) -> Result<Option<Storage>> {
    let op = "conv2d";
    Ok(match bias {
        Some(b) => ask!(op, [x, w, b], |[x, w, b]| x.conv2d(w, Some(b), geo)?),
        None => ask!(op, [x, w], |[x, w]| x.conv2d(w, None, geo)?),
    })
}

/// The input gradient of `conv2d` from the packed output gradient `g` and weight `w`.
pub(crate) fn conv2d_input_grad(g: &Tensor, w: &Tensor, geo: &Geom) -> Result<Option<Storage>> {
    Ok(ask!("conv2d backward", [g, w], |[g, w]| g
        .conv2d_input_grad(w, geo)?))
}

/// The weight gradient of `conv2d` from the packed output gradient `g` and input `x`.
pub(crate) fn conv2d_weight_grad(g: &Tensor, x: &Tensor, geo: &Geom) -> Result<Option<Storage>> {
    Ok(ask!("conv2d backward", [g, x], |[g, x]| g
        .conv2d_weight_grad(x, geo)?))
}

/// The bias gradient of `conv2d` from the packed output gradient `g`.
pub(crate) fn conv2d_bias_grad(g: &Tensor, geo: &Geom) -> Result<Option<Storage>> {
    Ok(ask!("conv2d backward", [g], |[g]| g.conv2d_bias_grad(geo)?))
}

/// Max pooling of the packed `x`: the maxima and their plane offsets, or `None` where the
/// backend has no kernel.
pub(crate) fn max_pool2d(x: &Tensor, geo: &PoolGeom) -> Result<Option<(Storage, Vec<u32>)>> {
    Ok(match x.data()? {
        Data::Cpu(s) => s.max_pool2d(geo)?.map(|(v, i)| (v.into(), i)),
        Data::Gpu(b) => b.max_pool2d(geo)?.map(|(v, i)| (v.into(), i)),
    })
}

/// The input gradient of max pooling from the packed output gradient `g`.
pub(crate) fn max_pool2d_backward(
    g: &Tensor,
    idx: &[u32],
    geo: &PoolGeom,
) -> Result<Option<Storage>> {
    Ok(ask!("max_pool2d backward", [g], |[g]| g
        .max_pool2d_backward(idx, geo)?))
}

/// `op(t)` by the backend's own kernel, or `None` where it runs elementwise ops only as
/// generated programs.
pub(crate) fn unary(t: &Tensor, op: crate::ops::UnaryOp) -> Result<Option<Storage>> {
    Ok(ask!(op.name(), [t], |[s]| s.unary(op, t.layout())?))
}

/// `op(a, b)` over the views `la` and `lb` (one device), as [`unary`].
pub(crate) fn binary(
    a: &Tensor,
    b: &Tensor,
    op: crate::ops::BinaryOp,
    la: &crate::shape::Layout,
    lb: &crate::shape::Layout,
) -> Result<Option<Storage>> {
    Ok(ask!(op.name(), [a, b], |[x, y]| x.binary(op, la, y, lb)?))
}

/// `op(t, s)` (or `op(s, t)` when `first`), as [`unary`].
pub(crate) fn scalar(
    t: &Tensor,
    op: crate::ops::BinaryOp,
    s: crate::ops::backend::Scalar,
    first: bool,
) -> Result<Option<Storage>> {
    Ok(ask!(op.scalar_name(), [t], |[x]| x.scalar(
        op,
        t.layout(),
        s,
        first
    )?))
}

/// GELU's input gradient in one pass where the backend has the kernel (see
/// `BackendStorage::gelu_backward`); `None` otherwise, or for operands on different devices.
pub(crate) fn gelu_backward(x: &Tensor, g: &Tensor) -> Result<Option<Storage>> {
    if x.device() != g.device() {
        return Ok(None);
    }
    Ok(ask!("gelu backward", [x, g], |[a, b]| a.gelu_backward(
        x.layout(),
        b,
        g.layout()
    )?))
}

/// A packed copy of `t`'s view in `dtype` by the backend's own kernel, or `None` where it
/// converts only in generated programs.
pub(crate) fn convert(t: &Tensor, dtype: DType) -> Result<Option<Storage>> {
    Ok(ask!("to_dtype", [t], |[s]| s.convert(t.layout(), dtype)?))
}

/// The u8 mask of `a OP b` over the views `la` and `lb` (one device), as [`convert`].
pub(crate) fn compare(
    op: crate::ops::CmpOp,
    (a, la): (&Tensor, &crate::shape::Layout),
    (b, lb): (&Tensor, &crate::shape::Layout),
) -> Result<Option<Storage>> {
    Ok(ask!(op.name(), [a, b], |[x, y]| x.compare(op, la, y, lb)?))
}

/// The u8 mask of `a OP s` over the view `la`, as [`convert`].
pub(crate) fn compare_scalar(
    op: crate::ops::CmpOp,
    a: &Tensor,
    la: &crate::shape::Layout,
    s: crate::ops::backend::Scalar,
) -> Result<Option<Storage>> {
    Ok(ask!(op.scalar_name(), [a], |[x]| x.compare_scalar(op, la, s)?))
}

/// `t` clamped to `[lo, hi]`, as [`convert`].
pub(crate) fn clamp(
    t: &Tensor,
    lo: crate::ops::backend::Scalar,
    hi: crate::ops::backend::Scalar,
) -> Result<Option<Storage>> {
    Ok(ask!("clamp", [t], |[s]| s.clamp(t.layout(), lo, hi)?))
}

/// `where_cond` of the mask `m` over views of one shape (one device), as [`convert`].
pub(crate) fn where_cond(
    (m, lm): (&Tensor, &crate::shape::Layout),
    (t, lt): (&Tensor, &crate::shape::Layout),
    (f, lf): (&Tensor, &crate::shape::Layout),
) -> Result<Option<Storage>> {
    Ok(ask!("where_cond", [m, t, f], |[a, b, c]| a.where_cond(
        lm,
        (b, lt),
        (c, lf)
    )?))
}

/// The reduction `op` of each row of `rows`, a description of `t`'s view (see
/// `BackendStorage::reduce`); `None` for a dtype the backend has no kernel for.
pub(crate) fn reduce(
    t: &Tensor,
    op: crate::ops::ReduceOp,
    rows: &crate::ops::geometry::Rows,
) -> Result<Option<Storage>> {
    let r = ReduceCall {
        op,
        dtype: t.dtype(),
        layout: t.layout(),
        rows,
    };
    Ok(ask!(op.name(), [t], |[s]| s.reduce(&r)?))
}

/// The norm `spec` of the packed `x`, with the packed affine parameters when given (one device);
/// `None` for a dtype the backend has no kernel for.
pub(crate) fn norm(
    x: &Tensor,
    spec: &NormSpec,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
) -> Result<Option<Storage>> {
    let op = spec.row.name();
    Ok(match (weight, bias) {
        (Some(w), Some(b)) => ask!(op, [x, w, b], |[x, w, b]| x
            .norm(spec, (Some(w), Some(b)))?),
        (Some(w), None) => ask!(op, [x, w], |[x, w]| x.norm(spec, (Some(w), None))?),
        (None, Some(b)) => ask!(op, [x, b], |[x, b]| x.norm(spec, (None, Some(b)))?),
        (None, None) => ask!(op, [x], |[x]| x.norm(spec, (None, None))?),
    })
}

/// The norm's gradients by the backend's own kernel (see `BackendStorage::norm_backward`):
/// packed `dx`, and with `want_wb` the weight and bias gradients; `None` where it has none or
/// the operands live on different devices.
pub(crate) fn norm_backward(
    x: &Tensor,
    g: &Tensor,
    weight: Option<&Tensor>,
    spec: &NormSpec,
    want_wb: bool,
) -> Result<Option<NormGrads<Storage>>> {
    if x.device() != g.device() || weight.is_some_and(|w| w.device() != x.device()) {
        return Ok(None);
    }
    let op = spec.row.name();
    let (lx, lg) = (x.layout(), g.layout());
    Ok(match weight {
        Some(w) => match data_n(op, [x, g, w])? {
            DataN::Cpu([a, b, c]) => a
                .norm_backward(lx, (b, lg), Some((c, w.layout())), spec, want_wb)?
                .map(wrap_grads),
            DataN::Gpu([a, b, c]) => a
                .norm_backward(lx, (b, lg), Some((c, w.layout())), spec, want_wb)?
                .map(wrap_grads),
        },
        None => match data_n(op, [x, g])? {
            DataN::Cpu([a, b]) => a
                .norm_backward(lx, (b, lg), None, spec, want_wb)?
                .map(wrap_grads),
            DataN::Gpu([a, b]) => a
                .norm_backward(lx, (b, lg), None, spec, want_wb)?
                .map(wrap_grads),
        },
    })
}

/// A backend's norm gradients as `Storage`.
fn wrap_grads<S: Into<Storage>>((dx, wb): NormGrads<S>) -> NormGrads<Storage> {
    (dx.into(), wb.map(|(dw, db)| (dw.into(), db.into())))
}

/// Checks `ids` against `bound` where the backend reads them without waiting (see
/// `BackendStorage::check_ids`): for an op whose output is empty.
pub(crate) fn check_ids(op: &'static str, ids: &Tensor, bound: usize) -> Result<()> {
    let packed = device_ids(ids)?;
    let view = packed.view();
    match packed.tensor.data()? {
        Data::Cpu(s) => s.check_ids(op, &view, bound),
        Data::Gpu(b) => b.check_ids(op, &view, bound),
    }
}

/// `index_select` (without `index_shape`) or `gather` of `t` along `d` by `ids` (one device; see
/// `BackendStorage::gather`).
pub(crate) fn gather(
    op: &'static str,
    t: &Tensor,
    d: usize,
    ids: &Tensor,
    index_shape: Option<&[usize]>,
) -> Result<Option<Storage>> {
    ask_ids!(op, [t, ids], |[s, i]| s.gather(&Gather {
        layout: t.layout(),
        d,
        ids: i,
        index_shape
    })?)
}

/// A packed copy of the packed `base` with the packed `vals` added where `spec` sends them by
/// `ids` (one device; see `BackendStorage::scatter_add`).
pub(crate) fn scatter_add(
    op: &'static str,
    base: &Tensor,
    ids: &Tensor,
    vals: &Tensor,
    spec: &ScatterSpec,
) -> Result<Option<Storage>> {
    ask_ids!(op, [base, ids, vals], |[b, i, v]| b.scatter_add(
        &Scatter {
            base: base.layout(),
            ids: i,
            vals: (v, vals.layout()),
            spec
        }
    )?)
}

/// The list form of [`ask!`]: `$call` with `$p`, the packed views of `$ts` (one device) in
/// the backend's own storage, and `$dtype`, their dtype; `None` for an empty list.
macro_rules! ask_list {
    ($op:expr, $ts:expr, |$p:ident, $dtype:ident| $call:expr) => {{
        let Some(first) = $ts.first() else {
            return Ok(None);
        };
        let $dtype = first.dtype();
        Ok(match data_list($op, $ts)? {
            DataList::Cpu($p) => $call.map(Storage::from),
            DataList::Gpu($p) => $call.map(Storage::from),
        })
    }};
}

/// `cat` of `ts` (one device, one dtype) along `d` into `out_shape`; `None` where the backend
/// has no kernel for the dtype (see `BackendStorage::cat`).
pub(crate) fn cat(
    op: &'static str,
    ts: &[&Tensor],
    d: usize,
    out_shape: &[usize],
) -> Result<Option<Storage>> {
    ask_list!(op, ts, |p, dtype| BackendStorage::cat(&Cat {
        parts: &p,
        d,
        out_shape,
        dtype
    })?)
}

/// The packed `ts` (one device, one dtype) back to back by plain copies, for a `cat` along dim
/// 0 past one binding (see `BackendStorage::assemble`); `None` where the backend has no such
/// path.
pub(crate) fn assemble(op: &'static str, ts: &[&Tensor]) -> Result<Option<Storage>> {
    ask_list!(op, ts, |p, dtype| BackendStorage::assemble(op, &p, dtype)?)
}

/// Per-row cross-entropy statistics of the packed f32 logits `x` that `ce` describes against
/// `targets` (one device; see `BackendStorage::cross_entropy`).
pub(crate) fn cross_entropy(x: &Tensor, targets: &Tensor, ce: &CeRows) -> Result<Option<Storage>> {
    ask_ids!("cross_entropy", [x, targets], |[s, t]| s
        .cross_entropy(t, ce)?)
}

/// The logits' gradient of [`cross_entropy`] from its packed statistics `stats` and the packed
/// per-row upstream gradient `g` (one device; see `BackendStorage::cross_entropy_backward`).
pub(crate) fn cross_entropy_backward(
    x: &Tensor,
    targets: &Tensor,
    ce: &CeRows,
    stats: &Tensor,
    g: &Tensor,
) -> Result<Option<Storage>> {
    let (ls, lg) = (stats.layout(), g.layout());
    ask_ids!("cross_entropy", [x, targets, stats, g], |[s, t, st, gg]| s
        .cross_entropy_backward(&CeBackward {
            targets: t,
            ce,
            stats: (st, ls),
            g: (gg, lg),
        })?)
}

/// Decode attention of the packed `q` over the packed caches `k` and `v` (one device; see
/// `BackendStorage::attention_decode`); `None` for a dtype the backend has no kernel for.
pub(crate) fn attention_decode(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    dims: &DecodeDims,
) -> Result<Option<Storage>> {
    Ok(ask!("attention_decode", [q, k, v], |[q, k, v]| q
        .attention_decode(k, v, dims)?))
}

/// Overwrites `len` bytes of `dst` from byte `at` with the packed `src` (one device, one
/// dtype), in place; `dst` must be uniquely held (see `Tensor::data_mut`), else
/// `Error::InvalidArgument` naming `op` (see `BackendStorage::write_bytes`).
pub(crate) fn write_bytes(
    op: &'static str,
    dst: &mut Tensor,
    at: usize,
    src: &Tensor,
    len: usize,
) -> Result<()> {
    if dst.device() != src.device() {
        return Err(dst.device_mismatch(op, src));
    }
    let src = src.data()?;
    let Some(dst) = dst.data_mut() else {
        return Err(crate::Error::InvalidArgument {
            op,
            message: "the tensor stopped being unique (a wgtensor bug)".into(),
        });
    };
    match (dst, src) {
        (DataMut::Cpu(d), Data::Cpu(s)) => d.write_bytes(at, s, len),
        (DataMut::Gpu(d), Data::Gpu(s)) => d.write_bytes(at, s, len),
        _ => Err(crate::Error::InvalidArgument {
            op,
            message: "storage on two kinds of device".into(),
        }),
    }
}

/// One fused Adam update of `p` (see `BackendStorage::adam_step`): packed `[parameter, m, v]`,
/// or `None` where the backend has no fused step for these operands or they live on different
/// devices (the caller then runs the op-by-op formula).
pub(crate) fn adam_step(
    p: &Tensor,
    grad: &Tensor,
    moments: Option<(&Tensor, &Tensor)>,
    hyper: &crate::ops::geometry::AdamStep,
) -> Result<Option<[Storage; 3]>> {
    let fused = match backend(p.device()) {
        Backend::Cpu => CpuStorage::FUSED_ADAM,
        Backend::Gpu(_) => GpuBuffer::FUSED_ADAM,
    };
    if !fused {
        return Ok(None);
    }
    let (lp, lg) = (p.layout(), grad.layout());
    Ok(match moments {
        Some((m, v)) => {
            if [grad, m, v].iter().any(|t| t.device() != p.device()) {
                return Ok(None);
            }
            let (lm, lv) = (m.layout(), v.layout());
            match data_n("adam", [p, grad, m, v])? {
                DataN::Cpu([a, b, c, d]) => {
                    wrap3(a.adam_step(lp, (b, lg), Some([(c, lm), (d, lv)]), hyper)?)
                }
                DataN::Gpu([a, b, c, d]) => {
                    wrap3(a.adam_step(lp, (b, lg), Some([(c, lm), (d, lv)]), hyper)?)
                }
            }
        }
        None => {
            if grad.device() != p.device() {
                return Ok(None);
            }
            match data_n("adam", [p, grad])? {
                DataN::Cpu([a, b]) => wrap3(a.adam_step(lp, (b, lg), None, hyper)?),
                DataN::Gpu([a, b]) => wrap3(a.adam_step(lp, (b, lg), None, hyper)?),
            }
        }
    })
}

/// A backend's three results as `Storage`.
fn wrap3<S: Into<Storage>>(r: Option<[S; 3]>) -> Option<[Storage; 3]> {
    r.map(|s| s.map(Into::into))
}
