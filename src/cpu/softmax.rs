//! CPU softmax, log_softmax and softmin (the softmax of -x): the fallback device and the
//! oracle for `shaders/softmax.wgsl`. Rows that are contiguous in memory (softmax over the last
//! dim) take `rows_fast`: no allocation per row, 8-lane chunked loops the compiler vectorises,
//! a polynomial `exp` (`fast_exp.rs`), rayon over rows. Other dims take the generic strided
//! fold.

use super::reduce::{add, fold, fold_adjacent, max_nan, Rows, SUM_ID};
use super::strided::PAR_THRESHOLD;
use crate::ops::RowOp;
use crate::shape::Layout;
use rayon::prelude::*;

/// Elements per rayon task in the elementwise passes.
const PAR_CHUNK: usize = 1 << 14;

/// `softmax` (or `log_softmax` when `log`) over dim `d` of the view `layout` of `src`, packed
/// row-major. Subtracting the row max keeps `exp` finite; NaN anywhere in a row makes the row NaN.
pub(crate) fn softmax(op: RowOp, src: &[f32], layout: &Layout, d: usize) -> Vec<f32> {
    if op == RowOp::Softmin {
        // softmin(x) = softmax(-x): the storage negated (the view's layout still applies).
        let neg: Vec<f32> = src.iter().map(|v| -v).collect();
        return softmax(RowOp::Softmax, &neg, layout, d);
    }
    let log = op == RowOp::LogSoftmax;
    let rows = Rows::along(layout, d);
    let inner: usize = layout.shape[d + 1..].iter().product();
    let n = layout.numel();
    if n > 0 && inner == 1 && rows.stride == 1 {
        return super::fast_exp::softmax_rows(src, &rows, n, log);
    }
    let mut out = super::alloc::zeros_f32(n);
    if n == 0 {
        return out;
    }
    // The output is a sequence of [len, inner] blocks, one per index of the dims before `d`;
    // block `b` holds rows `b * inner ..` interleaved with stride `inner`.
    let block = rows.len * inner;
    let run = |(b, o): (usize, &mut [f32])| softmax_block(src, &rows, b * inner, inner, o, log);
    if n >= PAR_THRESHOLD && n > block {
        out.par_chunks_mut(block).enumerate().for_each(run);
    } else {
        out.chunks_mut(block).enumerate().for_each(run);
    }
    out
}

/// `f(k, i, &mut out[k * inner + i])` for the whole block, in parallel when it is large.
fn each(out: &mut [f32], inner: usize, f: impl Fn(usize, usize, &mut f32) + Sync) {
    let line = |(k, l): (usize, &mut [f32])| {
        for (i, o) in l.iter_mut().enumerate() {
            f(k, i, o);
        }
    };
    if out.len() >= PAR_THRESHOLD {
        let min_len = (PAR_CHUNK / inner).max(1);
        out.par_chunks_mut(inner)
            .enumerate()
            .with_min_len(min_len)
            .for_each(line);
    } else {
        out.chunks_mut(inner).enumerate().for_each(line);
    }
}

/// Softmax of the `inner` rows starting at row `first`, written as `[len, inner]` into `out`.
/// `exp` runs once per element: `out` holds `exp(x - max)` until the row sums are known.
fn softmax_block(src: &[f32], rows: &Rows, first: usize, inner: usize, out: &mut [f32], log: bool) {
    let (len, stride) = (rows.len, rows.stride);
    let bases: Vec<usize> = (0..inner).map(|i| rows.base(first + i)).collect();
    let x = |k: usize, i: usize| src[bases[i] + k * stride];
    let mut max = vec![0f32; inner];
    // Rows that interleave (softmax over a non-last dim) are folded a tile at a time.
    if inner > 1 && stride != 1 && bases.windows(2).all(|w| w[1] == w[0] + 1) {
        let id = |_: usize, v: f32| v;
        fold_adjacent(
            src,
            bases[0],
            stride,
            len,
            f32::NEG_INFINITY,
            max_nan,
            id,
            &mut max,
        );
    } else {
        for (m, &b) in max.iter_mut().zip(&bases) {
            *m = fold(src, b, stride, len, f32::NEG_INFINITY, max_nan, |v| v);
        }
    }
    each(out, inner, |k, i, o| *o = (x(k, i) - max[i]).exp());
    let mut sum = vec![0f32; inner];
    if inner > 1 {
        fold_adjacent(out, 0, inner, len, SUM_ID, add, |_, v| v, &mut sum);
    } else {
        sum[0] = fold(out, 0, 1, len, SUM_ID, add, |v| v);
    }
    if log {
        let ln: Vec<f32> = sum.iter().map(|s| s.ln()).collect();
        each(out, inner, |k, i, o| *o = (x(k, i) - max[i]) - ln[i]);
    } else {
        each(out, inner, |_, i, o| *o /= sum[i]);
    }
}
