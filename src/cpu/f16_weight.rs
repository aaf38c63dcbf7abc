//! Products with an f16 weight on the CPU, `x · Wᵀ` with `W` row-major (a layer with f16
//! weights): one row (decode) reads the weights in place (`matvec_t`), 2-16 rows (a batched
//! decode step) read each weight row once for all of them (`matvec_t_rows`), and from
//! `PANEL_MIN_ROWS` rows (prefill) `W` is widened 64 rows at a time for gemm (`panels`), never
//! all of it at once. Between 2 and `PANEL_MIN_ROWS` rows with a gemm-shaped view, and every
//! other layout, the caller takes the general path.

use super::storage::CpuStorage;
use super::{matvec, panels};
use crate::shape::Layout;
use crate::{Result, WithDType};
use half::f16;
use half::slice::HalfFloatSliceExt;

/// `(m, k, n)` of a product `[m, k] · [k, n]`.
type Mkn = (usize, usize, usize);

/// `(m, k, n)` of the product of the views `la` (`[..batch, M, K]`) and `lb` when it is one
/// product of packed rows with the transpose of a row-major matrix (`lb` views `Wᵀ`), with one
/// row or at least `PANEL_MIN_ROWS`; `None` otherwise.
fn f16_weight_plan(la: &Layout, lb: &Layout) -> Option<Mkn> {
    // Below this many rows gemm on the whole widened matrix is as fast.
    const PANEL_MIN_ROWS: usize = 16;
    let nd = la.shape.len();
    let (m, k, n) = (la.shape[nd - 2], la.shape[nd - 1], lb.shape[nd - 1]);
    let batches: usize = la.shape[..nd - 2].iter().product();
    let rows_packed = m == 1 || la.strides[nd - 2] == k;
    if batches != 1
        || !(m == 1 || m >= PANEL_MIN_ROWS)
        || k == 0
        || la.strides[nd - 1] != 1
        || !rows_packed
        || lb.strides[nd - 2] != 1
    {
        return None;
    }
    Some((m, k, n))
}

/// `x · Wᵀ` in f32 for `x` `[m, k]` and the f16 `W` that `lb` views as `Wᵀ`.
fn f16_weight_product(x: &[f32], b: &[f16], lb: &Layout, (m, k, n): Mkn) -> Result<Vec<f32>> {
    let nd = lb.shape.len();
    let (w0, ws) = (lb.offset, lb.strides[nd - 1]);
    if m == 1 {
        let mut out = vec![0f32; n];
        matvec::matvec_t(x, b, w0, n, ws, &mut out);
        return Ok(out);
    }
    if m <= 16 {
        // A batched decode step: each weight row read once for all `m` rows.
        let mut out = vec![0f32; m * n];
        matvec::matvec_t_rows(x, m, b, w0, n, ws, &mut out);
        return Ok(out);
    }
    // Every row r of W is b[w0 + r * ws..][..k] (the view was checked against its storage).
    panels::matmul_t_panels("matmul", n, k, x, m, |r0, np, buf| {
        for (i, row) in buf.chunks_exact_mut(k).take(np).enumerate() {
            b[w0 + (r0 + i) * ws..][..k].convert_to_f32_slice(row);
        }
    })
}

/// The element type of the rows `x` of `x · Wᵀ` with an f16 `W`, with the roundings its
/// product takes around the f32 one both run.
pub(crate) trait Rows: WithDType {
    /// The rows as the f32 the product runs in.
    fn widen(rows: &[Self]) -> Vec<f32>;
    /// The f32 product stored as the caller takes it.
    fn finish(out: Vec<f32>) -> CpuStorage;
}

/// f16 rows: the product is rounded to f16 once, as the general path rounds it.
impl Rows for f16 {
    fn widen(rows: &[f16]) -> Vec<f32> {
        let mut x = vec![0f32; rows.len()];
        // Slice conversions run F16C where the CPU has it (an element at a time they do not).
        rows.convert_to_f32_slice(&mut x);
        x
    }

    fn finish(out: Vec<f32>) -> CpuStorage {
        let mut h = vec![f16::ZERO; out.len()];
        h.convert_from_f32_slice(&out);
        CpuStorage::F16(h)
    }
}

/// f32 rows (an f16 layer on f32 activations): the values of rounding `x` to f16, multiplying
/// as for f16 rows and widening the product back, each rounding once.
impl Rows for f32 {
    fn widen(rows: &[f32]) -> Vec<f32> {
        let mut x = rows.to_vec();
        round_through_f16(&mut x);
        x
    }

    fn finish(mut out: Vec<f32>) -> CpuStorage {
        round_through_f16(&mut out);
        CpuStorage::F32(out)
    }
}

/// `x · Wᵀ` for rows `x` (`a`'s `[m, k]` view) of `T` and the f16 `W` that `lb` views as `Wᵀ`
/// (contiguous rows), with `T`'s roundings ([`Rows`]); `None` unless `a` holds `T` and `b`
/// f16, and the views make a plan ([`f16_weight_plan`]).
pub(crate) fn matmul_t<T: Rows>(
    a: &CpuStorage,
    la: &Layout,
    b: &CpuStorage,
    lb: &Layout,
) -> Result<Option<CpuStorage>> {
    let (Some(a), CpuStorage::F16(b)) = (a.as_slice::<T>(), b) else {
        return Ok(None);
    };
    let Some(mkn @ (m, k, _)) = f16_weight_plan(la, lb) else {
        return Ok(None);
    };
    let x = T::widen(&a[la.offset..][..m * k]);
    let out = f16_weight_product(&x, b, lb, mkn)?;
    Ok(Some(T::finish(out)))
}

/// Rounds every value to the nearest f16 and back, in place (vectorized slice conversions).
fn round_through_f16(v: &mut [f32]) {
    let mut h = vec![f16::ZERO; v.len().min(4096)];
    for c in v.chunks_mut(4096) {
        let h = &mut h[..c.len()];
        h.convert_from_f32_slice(c);
        h.convert_to_f32_slice(c);
    }
}
