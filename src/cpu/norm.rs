//! CPU norms over the last dim (the norm family of the row-op table, `src/ops/rows.rs`:
//! layer_norm and rms_norm), forward and backward: the fallback device and the oracle for
//! `shaders/layer_norm.wgsl`. An op that is not `centered` (rms_norm) takes 0 for the row's
//! centre, so its variance is the mean square. One read of a row computes its statistics (16 f32 lanes the
//! compiler vectorises: the row stays in cache for the second, centred pass), one more writes
//! the output (with streaming stores when the output is large, `stream.rs`); no allocation per
//! row, rayon over blocks of rows. A row's result never depends on how rows are split across
//! threads.

use super::alloc::{fill_chunks_uninit, try_vec};
use super::stream::as_uninit;
use super::strided::PAR_THRESHOLD;
use crate::ops::RowOp;
use crate::Result;
use rayon::prelude::*;
use std::mem::MaybeUninit;

const LANES: usize = 8;

/// Rows per parallel task, and per partial sum of the weight and bias gradients: fixed, so the
/// gradients' summation order does not depend on the number of threads.
const ROWS_PER_TASK: usize = 64;

/// f32 lanes of [`lane_sum`]: two AVX registers, so the loop runs at full SIMD width (f64 lanes
/// halve it), and each lane sums only `len / 16` values, well within f32's precision for rows.
const SUM_LANES: usize = 16;

/// Sum of `f(x)` over `xs` in 16 independent f32 lanes (vectorisable), the lanes added in
/// order in f64.
#[inline(always)]
fn lane_sum(xs: &[f32], f: impl Fn(f32) -> f32) -> f64 {
    let mut acc = [0f32; SUM_LANES];
    let mut chunks = xs.chunks_exact(SUM_LANES);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += f(v);
        }
    }
    for (a, &v) in acc.iter_mut().zip(chunks.remainder()) {
        *a += f(v);
    }
    acc.iter().map(|&a| f64::from(a)).sum()
}

/// The centre (the mean; 0 for a norm that is not centred) and `1 / sqrt(var + eps)` of one
/// row, the variance taken about the centre (biased; two passes over the cached row, so no
/// cancellation of a one-pass sum of squares).
#[inline(always)]
fn stats(xs: &[f32], eps: f32, centered: bool) -> (f32, f32) {
    let n = xs.len() as f64;
    let mean = if centered {
        (lane_sum(xs, |v| v) / n) as f32
    } else {
        0.0
    };
    let var = lane_sum(xs, |v| (v - mean) * (v - mean)) / n;
    (mean, (1.0 / (var + eps as f64).sqrt()) as f32)
}

/// Runs `f(first_row, out_rows)` over blocks of `ROWS_PER_TASK` rows of `out` (`len` wide), in
/// parallel when the data is large.
fn by_blocks(out: &mut [f32], len: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    let block = ROWS_PER_TASK * len;
    let run = |(i, o): (usize, &mut [f32])| f(i * ROWS_PER_TASK, o);
    if out.len() >= PAR_THRESHOLD {
        out.par_chunks_mut(block).enumerate().for_each(run);
    } else {
        out.chunks_mut(block).enumerate().for_each(run);
    }
}

/// The norm of the rows `first..` of the packed `[rows, len]` data `x`, into `out` (whole rows: every
/// element of `out` is written). With `stream`, each row goes through a cached scratch row and
/// then streams to `out` (`stream.rs`), so the output's lines are never read from memory.
#[inline(always)]
fn forward_rows(
    x: &[f32],
    (len, centered, stream): (usize, bool, bool),
    wb: (Option<&[f32]>, Option<&[f32]>),
    eps: f32,
    first: usize,
    out: &mut [MaybeUninit<f32>],
) {
    // One call site for `forward_row`: two inlined copies can leave one of them scalar.
    let mut scratch = if stream { vec![0f32; len] } else { Vec::new() };
    for (r, o) in out.chunks_mut(len).enumerate() {
        let xs = &x[(first + r) * len..][..len];
        let dst = if stream {
            // SAFETY: `forward_row` writes only initialised values.
            unsafe { as_uninit(&mut scratch) }
        } else {
            &mut *o
        };
        forward_row(xs, centered, wb, eps, dst);
        if stream {
            super::stream::copy(o, &scratch);
        }
    }
    if stream {
        super::stream::fence();
    }
}

/// One row of [`forward_rows`]: every element of `o` written.
#[inline(always)]
fn forward_row(
    xs: &[f32],
    centered: bool,
    (weight, bias): (Option<&[f32]>, Option<&[f32]>),
    eps: f32,
    o: &mut [MaybeUninit<f32>],
) {
    // x - 0.0 is x, bit for bit: rms_norm shares the loops below.
    let (mean, rstd) = stats(xs, eps, centered);
    match (weight, bias) {
        (Some(w), Some(b)) => {
            for (((o, &v), &w), &b) in o.iter_mut().zip(xs).zip(w).zip(b) {
                o.write((v - mean) * rstd * w + b);
            }
        }
        (Some(w), None) => {
            for ((o, &v), &w) in o.iter_mut().zip(xs).zip(w) {
                o.write((v - mean) * rstd * w);
            }
        }
        (None, Some(b)) => {
            for ((o, &v), &b) in o.iter_mut().zip(xs).zip(b) {
                o.write((v - mean) * rstd + b);
            }
        }
        (None, None) => {
            for (o, &v) in o.iter_mut().zip(xs) {
                o.write((v - mean) * rstd);
            }
        }
    }
}

/// [`forward_rows`] compiled for AVX2 (4 f64 lanes per instruction instead of 2). Rust never
/// contracts a multiply and an add into an FMA on its own, and the lanes are explicit, so
/// the bits are those of the baseline build.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn forward_rows_avx2(
    x: &[f32],
    len: (usize, bool, bool),
    wb: (Option<&[f32]>, Option<&[f32]>),
    eps: f32,
    first: usize,
    out: &mut [MaybeUninit<f32>],
) {
    forward_rows(x, len, wb, eps, first, out)
}

/// The norm `op` (layer_norm or rms_norm) of the packed `[rows, len]` data `x` (`len > 0`).
pub(crate) fn norm(
    op: RowOp,
    x: &[f32],
    len: usize,
    weight: Option<&[f32]>,
    bias: Option<&[f32]>,
    eps: f32,
) -> Result<Vec<f32>> {
    let out = try_vec::<f32>(op.name(), x.len())?;
    let shape = (len, op.centered(), super::stream::wanted(x.len()));
    #[cfg(target_arch = "x86_64")]
    let avx2 = std::arch::is_x86_feature_detected!("avx2");
    let par = x.len() >= PAR_THRESHOLD;
    Ok(fill_chunks_uninit(
        out,
        x.len(),
        ROWS_PER_TASK * len,
        par,
        |t, o| {
            let first = t * ROWS_PER_TASK;
            #[cfg(target_arch = "x86_64")]
            if avx2 {
                // SAFETY: the CPU supports AVX2 (checked above).
                return unsafe { forward_rows_avx2(x, shape, (weight, bias), eps, first, o) };
            }
            forward_rows(x, shape, (weight, bias), eps, first, o)
        },
    ))
}

/// `dx`, and the weight and bias gradients when asked for.
pub(crate) type LayerNormGrads = (Vec<f32>, Option<(Vec<f32>, Vec<f32>)>);

/// What the backward's row blocks need besides the data.
struct RowsBack<'a> {
    len: usize,
    weight: Option<&'a [f32]>,
    eps: f32,
    centered: bool,
    want_wb: bool,
}

/// The backward of the rows `first..` (`dxs` holds whole rows): their `dx`, and when asked
/// the partial weight and bias gradients of these rows added into `part` (`[2, len]`).
#[inline(always)]
fn backward_rows(
    spec: &RowsBack<'_>,
    (x, g): (&[f32], &[f32]),
    first: usize,
    dxs: &mut [f32],
    part: &mut [f32],
) {
    let RowsBack {
        len,
        weight,
        eps,
        centered,
        want_wb,
    } = *spec;
    let mut gh = vec![0f32; len];
    for (r, d) in dxs.chunks_mut(len).enumerate() {
        let at = (first + r) * len;
        let (xs, gs) = (&x[at..at + len], &g[at..at + len]);
        let (mean, rstd) = stats(xs, eps, centered);
        match weight {
            Some(w) => gh
                .iter_mut()
                .zip(gs)
                .zip(w)
                .for_each(|((h, &g), &w)| *h = g * w),
            None => gh.copy_from_slice(gs),
        }
        let n = len as f64;
        // h - 0.0 is h, bit for bit.
        let a = if centered {
            (lane_sum(&gh, |v| v) / n) as f32
        } else {
            0.0
        };
        // mean(ĝ · x̂), x̂ recomputed from the cached row.
        let mut acc = [0f64; LANES];
        let mut hc = gh.chunks_exact(LANES);
        let mut vc = xs.chunks_exact(LANES);
        for (h, v) in (&mut hc).zip(&mut vc) {
            for k in 0..LANES {
                acc[k] += (h[k] * ((v[k] - mean) * rstd)) as f64;
            }
        }
        for (k, (&h, &v)) in hc.remainder().iter().zip(vc.remainder()).enumerate() {
            acc[k] += (h * ((v - mean) * rstd)) as f64;
        }
        let b = (acc.iter().sum::<f64>() / n) as f32;
        for ((d, &h), &v) in d.iter_mut().zip(&gh).zip(xs) {
            *d = rstd * (h - a - (v - mean) * rstd * b);
        }
        if want_wb {
            let (pw, pb) = part.split_at_mut(len);
            for (((pw, pb), &gv), &v) in pw.iter_mut().zip(pb).zip(gs).zip(xs) {
                *pw += gv * ((v - mean) * rstd);
                *pb += gv;
            }
        }
    }
}

multiversion! {
    /// [`backward_rows`], compiled for AVX2 where the CPU has it (no FMA: the lanes and
    /// operations are explicit, so the bits are the baseline build's).
    fn backward_block(
        spec: &RowsBack<'_>,
        xg: (&[f32], &[f32]),
        first: usize,
        dxs: &mut [f32],
        part: &mut [f32]
    ) => backward_rows, ["avx2"]
}

/// The gradients of the norm `op` ([`norm`]) from the output gradient `g` (same shape as
/// `x`): `dx`, and when `want_wb` the `[len]` sums over rows of `g * x̂` (weight) and `g`
/// (bias). With `x̂ = (x - mean) * rstd` and `ĝ = g * weight`:
/// `dx = rstd * (ĝ - mean(ĝ) - x̂ * mean(ĝ * x̂))` (PyTorch's formulas); a norm that is not
/// centred has mean 0 and no `mean(ĝ)` term.
pub(crate) fn norm_backward(
    op: RowOp,
    x: &[f32],
    g: &[f32],
    len: usize,
    weight: Option<&[f32]>,
    eps: f32,
    want_wb: bool,
) -> Result<LayerNormGrads> {
    let centered = op.centered();
    let op = op.name();
    let rows = x.len() / len;
    let tasks = rows.div_ceil(ROWS_PER_TASK);
    let mut dx = try_vec::<f32>(op, x.len())?;
    // Zeroed, though every element is written: a pooled buffer's `resize` touches no new
    // pages, and the rows are written through `&mut [f32]` blocks.
    dx.resize(x.len(), 0.0);
    // Per task: the partial weight and bias gradients of its rows.
    let mut partial = try_vec::<f32>(op, if want_wb { tasks * 2 * len } else { 0 })?;
    partial.resize(if want_wb { tasks * 2 * len } else { 0 }, 0.0);
    let spec = RowsBack {
        len,
        weight,
        eps,
        centered,
        want_wb,
    };
    let task = |t: usize, dxs: &mut [f32], part: &mut [f32]| {
        backward_block(&spec, (x, g), t * ROWS_PER_TASK, dxs, part)
    };
    let block = ROWS_PER_TASK * len;
    if want_wb {
        let run = |(t, (d, p)): (usize, (&mut [f32], &mut [f32]))| task(t, d, p);
        if x.len() >= PAR_THRESHOLD {
            dx.par_chunks_mut(block)
                .zip(partial.par_chunks_mut(2 * len))
                .enumerate()
                .for_each(run);
        } else {
            dx.chunks_mut(block)
                .zip(partial.chunks_mut(2 * len))
                .enumerate()
                .for_each(run);
        }
    } else {
        by_blocks(&mut dx, len, |first, d| {
            task(first / ROWS_PER_TASK, d, &mut [])
        });
    }
    if !want_wb {
        return Ok((dx, None));
    }
    // The tasks' partial sums, added in task order.
    let (mut dw, mut db) = (vec![0f32; len], vec![0f32; len]);
    for p in partial.chunks(2 * len) {
        dw.iter_mut().zip(&p[..len]).for_each(|(a, b)| *a += b);
        db.iter_mut().zip(&p[len..]).for_each(|(a, b)| *a += b);
    }
    Ok((dx, Some((dw, db))))
}
