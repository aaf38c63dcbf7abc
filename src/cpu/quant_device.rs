//! The CPU's side of the quantized-matrix interface (`crate::ops::backend::QuantDevice`): the
//! planes stay in host memory as they were split (no copy), and each op runs the kernels of
//! `quant.rs` (dequantization) and `quant_dot.rs` (products) part by part. Also the host-side
//! block formatting every device's matrices are built from and written back to: ggml's bytes
//! split into planes, ggml's reference rounding, and the planes joined back into ggml's bytes.

use super::backend::CpuDevice;
use super::storage::CpuStorage;
use super::{alloc, gather, quant, quant_dot};
use crate::ops::backend::{OpIds, QMatrix, QPart, QuantDevice};
use crate::{Error, QType, Result};
use half::f16;

/// New planes for `blocks` blocks of `q`, filled by `fill` (which appends to both).
fn planes(
    op: &'static str,
    q: QType,
    blocks: usize,
    fill: impl FnOnce(&mut Vec<f16>, &mut Vec<u8>),
) -> Result<(Vec<f16>, Vec<u8>)> {
    let mut scales = alloc::try_vec(op, blocks * q.scale_halfs())?;
    let mut body = alloc::try_vec(op, blocks * q.body_bytes())?;
    fill(&mut scales, &mut body);
    Ok((scales, body))
}

/// The planes of `bytes`, whole ggml blocks of `q`.
pub(crate) fn split_ggml(op: &'static str, q: QType, bytes: &[u8]) -> Result<(Vec<f16>, Vec<u8>)> {
    planes(op, q, bytes.len() / q.block_bytes(), |s, b| {
        quant::split_blocks(q, bytes, s, b)
    })
}

/// The planes of `x` (whole blocks of values) rounded to Q8_0 or Q4_0 by ggml's reference
/// quantization; `Error::InvalidArgument` for the types without one.
pub(crate) fn quantize(op: &'static str, q: QType, x: &[f32]) -> Result<(Vec<f16>, Vec<u8>)> {
    let round = match q {
        QType::Q8_0 => quant::quantize_q8_0,
        QType::Q4_0 => quant::quantize_q4_0,
        QType::Q4_K | QType::Q6_K => {
            return Err(Error::InvalidArgument {
                op,
                message: format!("quantizing to {q} is not implemented (Q8_0 and Q4_0 are)"),
            })
        }
    };
    planes(op, q, x.len() / q.block_len(), |s, b| round(x, s, b))
}

/// Appends ggml's bytes of the planes `scales` and `body` (of `q`) to `out`.
pub(crate) fn join_ggml(q: QType, scales: &[f16], body: &[u8], out: &mut Vec<u8>) {
    quant::join_blocks(q, scales, body, out)
}

/// A part's planes as host slices.
fn host<'a>(op: &'static str, p: &QPart<'a, CpuStorage>) -> Result<(&'a [f16], &'a [u8])> {
    match (p.scales, p.body) {
        (CpuStorage::F16(s), CpuStorage::U8(b)) => Ok((s, b)),
        _ => Err(Error::InvalidArgument {
            op,
            message: "a quantized matrix's planes must be F16 scales and U8 bodies".into(),
        }),
    }
}

/// `n` zeroed f32, or the allocation error of `op`.
fn zeroed(op: &'static str, n: usize) -> Result<Vec<f32>> {
    let mut out = alloc::try_vec::<f32>(op, n)?;
    out.resize(n, 0.0);
    Ok(out)
}

// Integer dot products on Q8-rounded activations where `integer` allows them (Q8_0 and Q4_0,
// and the one-row pass over several matrices); every op reads the planes in place.
impl QuantDevice for CpuDevice {
    const GROUPED_MATVEC: bool = true;

    fn quant_planes(
        &self,
        _op: &'static str,
        scales: Vec<f16>,
        body: Vec<u8>,
    ) -> Result<[CpuStorage; 2]> {
        Ok([CpuStorage::F16(scales), CpuStorage::U8(body)])
    }

    fn quant_dequantize(&self, op: &'static str, mat: &QMatrix<CpuStorage>) -> Result<CpuStorage> {
        let [rows, cols] = mat.shape;
        let mut out = zeroed(op, rows * cols)?;
        for p in &mat.parts {
            let (s, b) = host(op, p)?;
            let dst = &mut out[p.row0 * cols..(p.row0 + p.rows) * cols];
            quant::dequantize(mat.qtype, s, b, dst);
        }
        Ok(CpuStorage::F32(out))
    }

    fn quant_matmul_t(
        &self,
        op: &'static str,
        mat: &QMatrix<CpuStorage>,
        (x, offset): (&CpuStorage, usize),
        m: usize,
        integer: bool,
    ) -> Result<CpuStorage> {
        let [rows, cols] = mat.shape;
        let xs = f32_rows(op, x, offset, m * cols)?;
        let mut out = Vec::new();
        for p in &mat.parts {
            let (s, b) = host(op, p)?;
            let y = quant_dot::matmul_t(mat.qtype, p.rows, cols, s, b, xs, m, integer)?;
            if mat.parts.len() == 1 {
                out = y;
            } else {
                // Each part's columns of every output row.
                out.resize(m * rows, 0.0);
                for i in 0..m {
                    out[i * rows + p.row0..i * rows + p.row0 + p.rows]
                        .copy_from_slice(&y[i * p.rows..(i + 1) * p.rows]);
                }
            }
        }
        Ok(CpuStorage::F32(out))
    }

    fn quant_gather_rows(
        &self,
        mat: &QMatrix<CpuStorage>,
        OpIds { op, ids, view }: OpIds<'_, CpuStorage>,
    ) -> Result<CpuStorage> {
        let ([rows, cols], q) = (mat.shape, mat.qtype);
        // Every id is checked before anything runs.
        let host_ids = gather::host_ids(op, ids, view, rows)?;
        let mut out = zeroed(op, host_ids.len() * cols)?;
        let nb = cols / q.block_len();
        let (ns, bb) = (nb * q.scale_halfs(), nb * q.body_bytes());
        for (dst, &id) in out.chunks_exact_mut(cols).zip(&host_ids) {
            let id = id as usize;
            // The part holding row `id`.
            let i = mat.parts.partition_point(|p| p.row0 + p.rows <= id);
            let p = &mat.parts[i.min(mat.parts.len() - 1)];
            let (s, b) = host(op, p)?;
            let r = id - p.row0;
            quant::dequantize(q, &s[r * ns..(r + 1) * ns], &b[r * bb..(r + 1) * bb], dst);
        }
        Ok(CpuStorage::F32(out))
    }

    fn quant_matvec_group(
        &self,
        op: &'static str,
        mats: &[QMatrix<CpuStorage>],
        (x, offset): (&CpuStorage, usize),
    ) -> Result<Option<Vec<CpuStorage>>> {
        let Some(first) = mats.first() else {
            return Ok(Some(Vec::new()));
        };
        let (q, cols) = (first.qtype, first.shape[1]);
        let xs = f32_rows(op, x, offset, cols)?;
        // A matrix's parts are its rows in order, so its outputs are its parts' in turn.
        let mut planes = Vec::new();
        for p in mats.iter().flat_map(|m| &m.parts) {
            let (scales, body) = host(op, p)?;
            planes.push(quant_dot::Planes {
                rows: p.rows,
                scales,
                body,
            });
        }
        let all = quant_dot::matvec_group(q, cols, &planes, xs)?;
        let mut at = 0;
        let mut out = Vec::with_capacity(mats.len());
        for m in mats {
            let rows = m.shape[0];
            out.push(CpuStorage::F32(all[at..at + rows].to_vec()));
            at += rows;
        }
        Ok(Some(out))
    }
}

/// The `n` f32 of `x` from element `offset` (a packed view's, read in place).
fn f32_rows<'a>(op: &'static str, x: &'a CpuStorage, offset: usize, n: usize) -> Result<&'a [f32]> {
    match x {
        CpuStorage::F32(v) => v.get(offset..offset + n),
        _ => None,
    }
    .ok_or_else(|| Error::InvalidArgument {
        op,
        message: format!(
            "activations {offset}..{} are not f32 in their storage",
            offset + n
        ),
    })
}
