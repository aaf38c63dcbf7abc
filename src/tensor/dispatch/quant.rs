//! The quantized family's dispatch (`tensor/quant.rs`, `QTensor`): the device holding a matrix
//! runs its ops (`QuantDevice`), on its parts' planes picked out of their tensors; the host-side
//! block formatting (ggml's bytes to planes and back, reference rounding) is the CPU's code
//! whatever the device, as every matrix is built on the host and uploaded.

use super::conv::Pick;
use super::create::on_device;
use super::{backend, Backend};
use crate::cpu::backend::CpuDevice;
use crate::cpu::quant_device;
use crate::ops::backend::{OpIds, QMatrix, QPart, QuantDevice};
use crate::storage::Storage;
use crate::{Device, QType, Result, Tensor};
use half::f16;

/// A quantized matrix's planes: f16 scales and u8 bodies.
pub(crate) type Planes = (Vec<f16>, Vec<u8>);

/// The planes of `bytes`, whole ggml blocks of `q`.
pub(crate) fn split_ggml(op: &'static str, q: QType, bytes: &[u8]) -> Result<Planes> {
    quant_device::split_ggml(op, q, bytes)
}

/// The planes of the f32 values `x` (whole blocks) rounded to `q` by ggml's reference
/// quantization (Q8_0 and Q4_0).
pub(crate) fn quantize(op: &'static str, q: QType, x: &[f32]) -> Result<Planes> {
    quant_device::quantize(op, q, x)
}

/// Appends ggml's bytes of the planes `scales` and `body` (of `q`) to `out`.
pub(crate) fn join_ggml(q: QType, scales: &[f16], body: &[u8], out: &mut Vec<u8>) {
    quant_device::join_ggml(q, scales, body, out)
}

/// One part's planes as `device` keeps weights: `[scales, body]`.
pub(crate) fn upload(op: &'static str, (s, b): Planes, device: &Device) -> Result<[Storage; 2]> {
    on_device!(device, |d| Ok(
        QuantDevice::quant_planes(d, op, s, b)?.map(Storage::from)
    ))
}

/// The tensor `t` as a plane or an operand on the backend `S`.
fn pick<'a, S: Pick>(op: &'static str, t: &'a Tensor) -> Result<&'a S> {
    S::pick(t.data()?).ok_or_else(|| t.unsupported(op))
}

/// The matrix `mat` with its planes picked out of their tensors for the backend `S`.
fn picked<'a, S: Pick>(op: &'static str, mat: &QMatrix<'a, Tensor>) -> Result<QMatrix<'a, S>> {
    let parts = mat
        .parts
        .iter()
        .map(|p| {
            Ok(QPart {
                row0: p.row0,
                rows: p.rows,
                scales: pick(op, p.scales)?,
                body: pick(op, p.body)?,
            })
        })
        .collect::<Result<_>>()?;
    Ok(QMatrix {
        qtype: mat.qtype,
        shape: mat.shape,
        parts,
    })
}

/// The matrix `mat` on `device` in f32 (see `QuantDevice::quant_dequantize`).
pub(crate) fn dequantize(
    op: &'static str,
    mat: &QMatrix<Tensor>,
    device: &Device,
) -> Result<Storage> {
    on_device!(device, |d| Ok(QuantDevice::quant_dequantize(
        d,
        op,
        &picked(op, mat)?
    )?
    .into()))
}

/// `x @ W^T` for the `m` packed f32 rows `x` (see `QuantDevice::quant_matmul_t`).
pub(crate) fn matmul_t(
    op: &'static str,
    mat: &QMatrix<Tensor>,
    x: &Tensor,
    m: usize,
    integer: bool,
) -> Result<Storage> {
    on_device!(x.device(), |d| {
        let xs = (pick(op, x)?, x.layout().offset);
        Ok(QuantDevice::quant_matmul_t(d, op, &picked(op, mat)?, xs, m, integer)?.into())
    })
}

/// Rows `ids` (U32 or I32) of `mat`, dequantized (see `QuantDevice::quant_gather_rows`).
pub(crate) fn gather_rows(
    op: &'static str,
    mat: &QMatrix<Tensor>,
    ids: &Tensor,
) -> Result<Storage> {
    let ids = super::device_ids(ids)?;
    on_device!(ids.tensor.device(), |d| {
        let view = ids.view();
        let ids = OpIds {
            op,
            ids: pick(op, &ids.tensor)?,
            view: &view,
        };
        Ok(QuantDevice::quant_gather_rows(d, &picked(op, mat)?, ids)?.into())
    })
}

/// Whether `device` multiplies one row by several matrices in one pass (see
/// `QuantDevice::GROUPED_MATVEC`), asked before any data is read.
pub(crate) fn grouped_matvec(device: &Device) -> bool {
    on_device!(device, |d| grouped(d))
}

/// `D::GROUPED_MATVEC` for the device `_d`.
fn grouped<D: QuantDevice>(_d: &D) -> bool {
    D::GROUPED_MATVEC
}

/// `x @ W^T` for the one packed f32 row `x` against every matrix of `mats` in one pass (see
/// `QuantDevice::quant_matvec_group`); `None` where the device has no such pass.
pub(crate) fn matvec_group(
    op: &'static str,
    mats: &[QMatrix<Tensor>],
    x: &Tensor,
) -> Result<Option<Vec<Storage>>> {
    on_device!(x.device(), |d| {
        let mats = mats
            .iter()
            .map(|m| picked(op, m))
            .collect::<Result<Vec<_>>>()?;
        let xs = (pick(op, x)?, x.layout().offset);
        Ok(QuantDevice::quant_matvec_group(d, op, &mats, xs)?
            .map(|v| v.into_iter().map(Storage::from).collect()))
    })
}
