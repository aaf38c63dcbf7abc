//! CPU cross-entropy rows and gradient: the fallback device and the oracle for
//! `shaders/cross_entropy.wgsl` (same formulas, f32 arithmetic). Rows run in blocks across
//! threads; within a row the max, `exp` and sums are 8-lane loops with the polynomial `exp`
//! (`fast_exp.rs`), compiled for AVX2+FMA where the CPU has them. Each row is one task's, in a
//! fixed order: the same logits give the same bits at any thread count.

use super::fast_exp::{exp_le0, exp_neg, lane_max};
use super::storage::CpuStorage;
use super::strided::PAR_THRESHOLD;
use crate::ops::backend::IdsView;
pub(crate) use crate::ops::geometry::CeSpec;
use crate::{Error, Result};
use rayon::prelude::*;

/// Logits per rayon task (enough work to amortise the hand-off).
const PAR_CHUNK: usize = 1 << 13;

impl CeSpec {
    /// Whether row target `t` takes part (not the ignored class).
    fn counts(&self, t: i64) -> bool {
        self.ignore != Some(t)
    }
}

/// The packed targets `view` of `s` as classes, each checked to lie in `0..c` or be the ignored
/// class before any kernel runs (the ignored class may be negative, as torch's -100, so ids
/// are read as i64 rather than through `gather::host_ids`).
pub(crate) fn host_targets(
    op: &'static str,
    s: &CpuStorage,
    view: &IdsView,
    (c, spec): (usize, &CeSpec),
) -> Result<Vec<i64>> {
    let range = view.offset..view.offset + view.count;
    let short = || Error::InvalidArgument {
        op,
        message: format!("targets {range:?} past their storage"),
    };
    // Both id dtypes widen losslessly to i64, where a negative ignored class compares.
    fn widen<T: Copy + Into<i64>>(v: &[T]) -> Vec<i64> {
        v.iter().map(|&i| i.into()).collect()
    }
    let t: Vec<i64> = match s {
        CpuStorage::I32(v) => widen(v.get(range.clone()).ok_or_else(short)?),
        CpuStorage::U32(v) => widen(v.get(range.clone()).ok_or_else(short)?),
        _ => {
            return Err(Error::InvalidArgument {
                op,
                message: "targets must be U32 or I32".into(),
            })
        }
    };
    if let Some(&bad) = t
        .iter()
        .find(|&&id| spec.counts(id) && (id < 0 || id as usize >= c))
    {
        return Err(Error::IndexOutOfRange {
            op,
            index: bad,
            bound: c,
        });
    }
    Ok(t)
}

/// Rows per task for rows of `c` logits, and whether to use threads at all.
fn tasks(n: usize, c: usize) -> (usize, bool) {
    ((PAR_CHUNK / c.max(1)).max(1), n * c >= PAR_THRESHOLD)
}

/// `log Σ exp(row)`: NaN when the row holds a NaN or +inf; -inf for a row of -inf only.
#[inline(always)]
fn row_lse(row: &[f32]) -> f32 {
    let mut mx = [f32::NEG_INFINITY; 8];
    let mut bad = [false; 8];
    let mut cs = row.chunks_exact(8);
    for ch in &mut cs {
        for j in 0..8 {
            mx[j] = lane_max(mx[j], ch[j]);
            bad[j] |= ch[j].is_nan() || ch[j] == f32::INFINITY;
        }
    }
    for (j, &v) in cs.remainder().iter().enumerate() {
        mx[j] = lane_max(mx[j], v);
        bad[j] |= v.is_nan() || v == f32::INFINITY;
    }
    if bad.iter().any(|&b| b) {
        return f32::NAN;
    }
    let m = mx.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if m == f32::NEG_INFINITY {
        // exp of nothing: Σ = 0, and ln 0 = -inf.
        return f32::NEG_INFINITY;
    }
    let mut acc = [0f32; 8];
    let mut cs = row.chunks_exact(8);
    for ch in &mut cs {
        for j in 0..8 {
            acc[j] += exp_neg(ch[j] - m);
        }
    }
    for (j, &v) in cs.remainder().iter().enumerate() {
        acc[j] += exp_neg(v - m);
    }
    let s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    m + s.ln()
}

/// Loss, valid flag and log-sum-exp of the rows of `x` starting at row `first`.
#[inline(always)]
fn rows_block(
    (x, c, first): (&[f32], usize, usize),
    targets: &[i64],
    spec: &CeSpec,
    loss: &mut [f32],
    valid: &mut [f32],
    lse: &mut [f32],
) {
    for r in 0..lse.len() {
        let i = first + r;
        let row = &x[i * c..(i + 1) * c];
        let l = row_lse(row);
        lse[r] = l;
        let t = targets[i];
        if !spec.counts(t) {
            (loss[r], valid[r]) = (0.0, 0.0);
            continue;
        }
        let mut v = l - row[t as usize];
        if spec.smoothing > 0.0 {
            let mean = row.iter().sum::<f32>() / c as f32;
            v = (1.0 - spec.smoothing) * v + spec.smoothing * (l - mean);
        }
        (loss[r], valid[r]) = (v, 1.0);
    }
}

multiversion! {
    /// [`rows_block`], compiled for AVX2 and FMA where the CPU has them.
    fn run_rows(
        xc: (&[f32], usize, usize),
        targets: &[i64],
        spec: &CeSpec,
        loss: &mut [f32],
        valid: &mut [f32],
        lse: &mut [f32]
    ) => rows_block, ["avx2", "fma"]
}

/// One task of [`rows`]: its index and its pieces of the loss, valid and lse outputs.
type RowsTask<'a> = (usize, ((&'a mut [f32], &'a mut [f32]), &'a mut [f32]));

/// `[loss[n], valid[n], lse[n]]` of the packed logits `x` `[n, c]`; targets are validated
/// (`0..c` or the ignored class) by the caller.
pub(crate) fn rows(x: &[f32], n: usize, c: usize, targets: &[i64], spec: &CeSpec) -> Vec<f32> {
    let mut out = super::alloc::zeros_f32(3 * n);
    let (loss, rest) = out.split_at_mut(n);
    let (valid, lse) = rest.split_at_mut(n);
    let (per, par) = tasks(n, c);
    let run = |(t, ((l, v), s)): RowsTask<'_>| run_rows((x, c, t * per), targets, spec, l, v, s);
    if par {
        loss.par_chunks_mut(per)
            .zip(valid.par_chunks_mut(per))
            .zip(lse.par_chunks_mut(per))
            .enumerate()
            .for_each(run);
    } else {
        loss.chunks_mut(per)
            .zip(valid.chunks_mut(per))
            .zip(lse.chunks_mut(per))
            .enumerate()
            .for_each(run);
    }
    out
}

/// The gradient rows starting at row `first`: `g[i] (exp(x - lse) - ε / c - (1 - ε) onehot)`,
/// zero in ignored rows.
#[inline(always)]
fn grad_block(
    (x, c, first): (&[f32], usize, usize),
    targets: &[i64],
    spec: &CeSpec,
    (lse, g): (&[f32], &[f32]),
    out: &mut [f32],
) {
    let off = spec.smoothing / c as f32;
    for (r, o) in out.chunks_exact_mut(c).enumerate() {
        let i = first + r;
        let t = targets[i];
        if !spec.counts(t) {
            o.fill(0.0);
            continue;
        }
        let (l, gi) = (lse[i], g[i]);
        // `x - lse <= 0`: lse is the row max plus ln Σ >= 0.
        for (d, &v) in o.iter_mut().zip(&x[i * c..(i + 1) * c]) {
            *d = gi * (exp_le0(v - l) - off);
        }
        let d = exp_le0(x[i * c + t as usize] - l) - off - (1.0 - spec.smoothing);
        o[t as usize] = gi * d;
    }
}

multiversion! {
    /// [`grad_block`], compiled for AVX2 and FMA where the CPU has them.
    fn run_grad(
        xc: (&[f32], usize, usize),
        targets: &[i64],
        spec: &CeSpec,
        lg: (&[f32], &[f32]),
        out: &mut [f32]
    ) => grad_block, ["avx2", "fma"]
}

/// The gradient `[n, c]` of the logits: `g[i] (softmax - (1 - ε) onehot - ε / c)`, zero in
/// ignored rows; `stats` is [`rows`]' output and `g` the per-row upstream gradient.
pub(crate) fn backward(
    x: &[f32],
    (n, c): (usize, usize),
    targets: &[i64],
    spec: &CeSpec,
    stats: &[f32],
    g: &[f32],
) -> Vec<f32> {
    if n * c == 0 {
        return Vec::new();
    }
    let lse = &stats[2 * n..3 * n];
    let (per, par) = tasks(n, c);
    let out = super::alloc::take_f32(n * c).unwrap_or_default();
    // Every element of a task's rows is written (ignored rows as zeros).
    super::alloc::fill_chunks(out, n * c, per * c, par, |t, o| {
        run_grad((x, c, t * per), targets, spec, (lse, g), o)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The blocked rows and gradient against a plain libm evaluation, with NaN, +inf, -inf
    /// rows, an ignored target and smoothing, over sizes that cross the thread threshold.
    #[test]
    fn blocked_rows_match_a_plain_evaluation() {
        for (n, c) in [(1usize, 1usize), (3, 7), (5, 65), (600, 65), (40, 1000)] {
            let mut x: Vec<f32> = (0..n * c)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.09)
                .collect();
            x[0] = f32::NAN;
            if n > 2 {
                x[c] = f32::INFINITY;
                x[2 * c..3 * c].fill(f32::NEG_INFINITY);
            }
            let targets: Vec<i64> = (0..n as i64).map(|i| (i * 3) % c as i64).collect();
            for smoothing in [0.0, 0.1] {
                let spec = CeSpec {
                    ignore: Some(1),
                    smoothing,
                };
                let stats = rows(&x, n, c, &targets, &spec);
                let g: Vec<f32> = (0..n).map(|i| 0.5 + i as f32 * 0.01).collect();
                let grad = backward(&x, (n, c), &targets, &spec, &stats, &g);
                for i in 0..n {
                    let row = &x[i * c..(i + 1) * c];
                    let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let bad = row.iter().any(|v| v.is_nan() || *v == f32::INFINITY);
                    let s: f64 = row.iter().map(|&v| ((v - m) as f64).exp()).sum();
                    let lse = if bad {
                        f32::NAN
                    } else if m == f32::NEG_INFINITY {
                        m
                    } else {
                        m + (s as f32).ln()
                    };
                    let got = stats[2 * n + i];
                    let close = |a: f32, b: f32| {
                        (a.is_nan() && b.is_nan())
                            || a == b
                            || (a - b).abs() <= 1e-5 * b.abs().max(1.0)
                    };
                    assert!(close(got, lse), "lse row {i} of [{n}, {c}]: {got} vs {lse}");
                    let t = targets[i];
                    if t == 1 {
                        assert_eq!((stats[i], stats[n + i]), (0.0, 0.0));
                        assert!(grad[i * c..(i + 1) * c].iter().all(|&v| v == 0.0));
                        continue;
                    }
                    assert_eq!(stats[n + i], 1.0);
                    for j in 0..c {
                        let p = ((x[i * c + j] - lse) as f64).exp() as f32;
                        let hot = if j as i64 == t { 1.0 - smoothing } else { 0.0 };
                        let want = g[i] * (p - smoothing / c as f32 - hot);
                        assert!(
                            close(grad[i * c + j], want),
                            "grad ({i}, {j}) of [{n}, {c}]: {} vs {want}",
                            grad[i * c + j]
                        );
                    }
                }
            }
        }
    }
}
