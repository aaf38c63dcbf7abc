//! The convolution family's dispatch past `conv2d` itself (in `dispatch.rs`): whether the
//! operands' backend runs the family as kernels of its own (`BackendStorage::OWN_CONV`, asked
//! from the device before any data is read), and batch norm's forward and backward.

use super::{backend, Backend, Data};
use crate::gpu::GpuBuffer;
use crate::ops::backend::{BackendStorage, BnBackward, BnForward};
use crate::ops::geometry::BnGeom;
use crate::storage::{CpuStorage, Storage};
use crate::{Result, Tensor};

/// Whether the convolution family runs as its backend's own kernels, recorded as one node each
/// (see `BackendStorage::OWN_CONV`), for every one of `ts`.
pub(crate) fn own_conv(ts: &[&Tensor]) -> bool {
    ts.iter().all(|t| match backend(t.device()) {
        Backend::Cpu => CpuStorage::OWN_CONV,
        Backend::Gpu(_) => GpuBuffer::OWN_CONV,
    })
}

/// A backend's storage picked out of a tensor's data (also the quantized family's, in
/// `quant.rs`).
pub(super) trait Pick: BackendStorage {
    fn pick(d: Data<'_>) -> Option<&Self>;
}

impl Pick for CpuStorage {
    fn pick(d: Data<'_>) -> Option<&Self> {
        match d {
            Data::Cpu(s) => Some(s),
            Data::Gpu(_) => None,
        }
    }
}

impl Pick for GpuBuffer {
    fn pick(d: Data<'_>) -> Option<&Self> {
        match d {
            Data::Gpu(b) => Some(b),
            Data::Cpu(_) => None,
        }
    }
}

/// `t`'s storage on `x`'s backend, or the mixed-device error of `op`.
fn on<'a, S: Pick>(op: &'static str, x: &Tensor, t: &'a Tensor) -> Result<&'a S> {
    if t.device() != x.device() {
        return Err(x.device_mismatch(op, t));
    }
    S::pick(t.data()?).ok_or_else(|| x.device_mismatch(op, t))
}

/// The operands of one batch norm, `[weight, bias, running_mean, running_var]`, packed.
type BnOperands<'a> = [Option<&'a Tensor>; 4];

fn bn_forward<S: Pick>(
    x: &Tensor,
    xs: &S,
    geo: &BnGeom,
    operands: BnOperands,
    eps: f32,
) -> Result<Option<BnForward<Storage>>>
where
    Storage: From<S>,
{
    let op = "batch_norm";
    let [w, b, m, v] = operands.map(|t| t.map(|t| on::<S>(op, x, t)).transpose());
    let (w, b, m, v) = (w?, b?, m?, v?);
    let stats = m.zip(v);
    Ok(xs.batch_norm(geo, stats, (w, b), eps)?.map(|f| BnForward {
        y: Storage::from(f.y),
        mean: f.mean,
        var: f.var,
        std: f.std,
    }))
}

/// Batch norm of the packed `x` (see `BackendStorage::batch_norm`) with its packed `operands`
/// (the running statistics both or neither), on one device.
pub(crate) fn batch_norm(
    x: &Tensor,
    geo: &BnGeom,
    operands: BnOperands,
    eps: f32,
) -> Result<Option<BnForward<Storage>>> {
    match x.data()? {
        Data::Cpu(s) => bn_forward(x, s, geo, operands, eps),
        Data::Gpu(b) => bn_forward(x, b, geo, operands, eps),
    }
}

fn bn_backward<S: Pick>(
    x: &Tensor,
    xs: &S,
    g: &Tensor,
    weight: Option<&Tensor>,
    spec: &BnBackward,
) -> Result<Option<[Storage; 3]>>
where
    Storage: From<S>,
{
    let op = "batch_norm backward";
    let gs = on::<S>(op, x, g)?;
    let w = weight.map(|w| on::<S>(op, x, w)).transpose()?;
    Ok(xs
        .batch_norm_backward(gs, w, spec)?
        .map(|v| v.map(Storage::from)))
}

/// The gradients `[dx, dweight, dbias]` of [`batch_norm`] of the packed `x` from the packed
/// output gradient `g` (see `BackendStorage::batch_norm_backward`).
pub(crate) fn batch_norm_backward(
    x: &Tensor,
    g: &Tensor,
    weight: Option<&Tensor>,
    spec: &BnBackward,
) -> Result<Option<[Storage; 3]>> {
    match x.data()? {
        Data::Cpu(s) => bn_backward(x, s, g, weight, spec),
        Data::Gpu(b) => bn_backward(x, b, g, weight, spec),
    }
}
