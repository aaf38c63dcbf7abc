//! Softmax over contiguous rows with vectorisable inner loops: a row max, `exp(x - max)` and its
//! sum, then a scale (or `x - max - ln Σ` for log_softmax), each an 8-lane chunked loop with no
//! libm call, so LLVM turns it into SIMD. On x86-64 the same code is also compiled for AVX2+FMA
//! and picked at run time (the crate is built for the SSE2 baseline).

use super::reduce::Rows;
use super::strided::PAR_THRESHOLD;
use std::mem::MaybeUninit;

/// Lanes per chunk: two SSE or one AVX register.
const LANES: usize = 8;
/// Elements per rayon task (enough work to amortise the task).
const PAR_CHUNK: usize = 1 << 14;

pub(crate) use crate::ops::exp_neg;

/// The larger of a lane's running maximum `m` and `x`, NaN ignored (`m` never becomes NaN):
/// one `maxps` lane. `f32::max`'s own NaN rule kept these row-max loops scalar (8 `maxss` and
/// blends a chunk, a third of a softmax row); callers that care flag NaN apart.
#[inline(always)]
pub(crate) fn lane_max(m: f32, x: f32) -> f32 {
    if x > m {
        x
    } else {
        m
    }
}

/// One row: `out = softmax(x)` (or log_softmax), every element of `out` written. A NaN or
/// +inf in the row, or a row of -inf only, gives a NaN row (as the strided path and PyTorch).
#[inline(always)]
fn row(x: &[f32], out: &mut [MaybeUninit<f32>], log: bool) {
    let mut mx = [f32::NEG_INFINITY; LANES];
    let mut nan = [false; LANES];
    let mut xs = x.chunks_exact(LANES);
    for c in &mut xs {
        for j in 0..LANES {
            // `max` ignores NaN: NaN lanes are flagged apart.
            mx[j] = lane_max(mx[j], c[j]);
            nan[j] |= c[j].is_nan();
        }
    }
    for (j, &v) in xs.remainder().iter().enumerate() {
        mx[j] = lane_max(mx[j], v);
        nan[j] |= v.is_nan();
    }
    let m = mx.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if nan.iter().any(|&b| b) || m.is_infinite() {
        out.iter_mut().for_each(|o| {
            o.write(f32::NAN);
        });
        return;
    }
    if log {
        let mut acc = [0f32; LANES];
        let mut xs = x.chunks_exact(LANES);
        for c in &mut xs {
            for j in 0..LANES {
                acc[j] += exp_neg(c[j] - m);
            }
        }
        let mut sum = acc.iter().sum::<f32>();
        for &v in xs.remainder() {
            sum += exp_neg(v - m);
        }
        // (x - m) - ln Σ, not x - (m + ln Σ): m + ln Σ would round away small differences.
        let ls = sum.ln();
        for (o, &v) in out.iter_mut().zip(x) {
            o.write((v - m) - ls);
        }
        return;
    }
    let mut acc = [0f32; LANES];
    let mut os = out.chunks_exact_mut(LANES);
    let mut xs = x.chunks_exact(LANES);
    for (o, c) in (&mut os).zip(&mut xs) {
        for j in 0..LANES {
            let e = exp_neg(c[j] - m);
            o[j].write(e);
            acc[j] += e;
        }
    }
    let mut sum = acc.iter().sum::<f32>();
    for (o, &v) in os.into_remainder().iter_mut().zip(xs.remainder()) {
        sum += *o.write(exp_neg(v - m));
    }
    let inv = 1.0 / sum;
    for o in out.iter_mut() {
        // SAFETY: the loops above wrote every element of `out`.
        let v = unsafe { o.assume_init_read() };
        o.write(v * inv);
    }
}

/// `rows` of length `len` in `out[r * len..]`, row `r` read at `src[rows.base(r)..]`.
#[inline(always)]
fn block(src: &[f32], rows: &Rows, first: usize, out: &mut [MaybeUninit<f32>], log: bool) {
    for (k, o) in out.chunks_exact_mut(rows.len).enumerate() {
        let b = rows.base(first + k);
        row(&src[b..b + rows.len], o, log);
    }
}

multiversion! {
    /// [`block`], compiled for AVX2 and FMA where the CPU has them.
    fn run_block(src: &[f32], rows: &Rows, first: usize, out: &mut [MaybeUninit<f32>], log: bool)
        => block, ["avx2", "fma"]
}

/// Softmax of every row of `rows` (contiguous: `rows.stride == 1`), packed into `n` outputs.
/// Each task writes its own rows whole (`alloc::fill_chunks_uninit`): no zero-fill first.
pub(crate) fn softmax_rows(src: &[f32], rows: &Rows, n: usize, log: bool) -> Vec<f32> {
    let len = rows.len;
    debug_assert!(len > 0 && rows.stride == 1 && n.is_multiple_of(len));
    let out = super::alloc::take_f32(n).unwrap_or_default();
    let per_task = (PAR_CHUNK / len).max(1);
    super::alloc::fill_chunks_uninit(out, n, per_task * len, n >= PAR_THRESHOLD, |t, o| {
        run_block(src, rows, t * per_task, o, log)
    })
}

/// `exp(x)` for the `x = s - lse <= 0` of a recomputed softmax (`exp_neg`), NaN kept NaN so a
/// NaN score or log-sum-exp reaches the gradients as with `f32::exp`.
#[inline(always)]
pub(crate) fn exp_le0(x: f32) -> f32 {
    let v = exp_neg(x);
    if x.is_nan() {
        x
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::exp_neg;

    #[test]
    fn exp_neg_matches_libm() {
        let mut x = 0f32;
        while x > -100.0 {
            let (got, want) = (exp_neg(x), x.exp());
            if x >= -87.0 {
                assert!(
                    ((got - want) / want).abs() < 4e-7,
                    "exp({x}) = {got}, libm {want}"
                );
            } else {
                assert!(got == 0.0 && want < 2e-38, "exp({x}) = {got}");
            }
            x -= 0.013_7;
        }
        assert_eq!(exp_neg(0.0), 1.0);
        assert_eq!(exp_neg(f32::NEG_INFINITY), 0.0);
    }
}
