//! CPU twin of `shaders/attention_decode.wgsl`: attention of one query position per head over
//! the first `len` positions of a KV cache, in one pass over K and V with an online softmax
//! (no score matrix). Tiles of [`TILE`] positions, as the shader's workgroup takes them, so
//! both rescale the running sum at the same points.

use super::dot8;
use super::fast_exp::exp_le0;
pub(crate) use crate::ops::geometry::DecodeDims;
use rayon::prelude::*;

/// Positions scored together before the running max and sum are updated (the shader's
/// workgroup size).
pub(crate) const TILE: usize = 64;

/// Positions between a row's prefetch and its use.
const AHEAD: usize = 4;

/// Asks for the cache lines of `x[at..at + len]` if they exist (a hint: nothing is read).
#[inline(always)]
fn prefetch_row(x: &[f32], at: usize, len: usize) {
    #[cfg(target_arch = "x86_64")]
    if at + len <= x.len() {
        for i in (0..len).step_by(16) {
            // SAFETY: a prefetch never faults, and the address is inside `x`.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    x.as_ptr().add(at + i) as *const i8,
                )
            };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (x, at, len);
}

/// One query head `h` over the cache into `o` (`head_dim`): tiles of [`TILE`] scores, the
/// running max and sum rescaled once per tile. Exponentials are `fast_exp::exp_le0` (their
/// arguments are `<= 0`; within 2 ulp of `f32::exp`, NaN kept): a libm call per position was
/// a tenth of a quantized decode step.
#[inline(always)]
fn head(q: &[f32], k: &[f32], v: &[f32], d: DecodeDims, h: usize, o: &mut [f32]) {
    let (hd, group) = (d.head_dim, d.heads / d.kv_heads);
    let row = d.kv_heads * hd;
    let kvh = h / group;
    let qh = &q[h * hd..(h + 1) * hd];
    let mut scores = [0f32; TILE];
    let (mut m, mut l) = (f32::NEG_INFINITY, 0f32);
    for start in (0..d.len).step_by(TILE) {
        let n = TILE.min(d.len - start);
        let mut tile_max = f32::NEG_INFINITY;
        for (j, s) in scores[..n].iter_mut().enumerate() {
            // A head's rows are `row` floats apart (1 KiB for 4 key-value heads of 64), a
            // stride the hardware prefetcher does not follow across pages: ask for the rows
            // of K and V a few positions ahead.
            prefetch_row(k, (start + j + AHEAD) * row + kvh * hd, hd);
            prefetch_row(v, (start + j + AHEAD) * row + kvh * hd, hd);
            let kr = &k[(start + j) * row + kvh * hd..][..hd];
            *s = dot8(qh, kr) * d.scale;
            tile_max = tile_max.max(*s);
        }
        let m_new = m.max(tile_max);
        // The first tile has nothing to rescale (and exp(-inf - -inf) would be NaN).
        let corr = if m == f32::NEG_INFINITY {
            0.0
        } else {
            exp_le0(m - m_new)
        };
        l *= corr;
        o.iter_mut().for_each(|a| *a *= corr);
        for (j, s) in scores[..n].iter().enumerate() {
            let e = exp_le0(s - m_new);
            l += e;
            let vr = &v[(start + j) * row + kvh * hd..][..hd];
            o.iter_mut().zip(vr).for_each(|(a, b)| *a += e * b);
        }
        m = m_new;
    }
    let inv = 1.0 / l;
    o.iter_mut().for_each(|a| *a *= inv);
}

/// Heads `first..` of `out` (`head_dim` each).
#[inline(always)]
fn heads(q: &[f32], k: &[f32], v: &[f32], d: DecodeDims, first: usize, out: &mut [f32]) {
    for (i, o) in out.chunks_mut(d.head_dim).enumerate() {
        head(q, k, v, d, first + i, o);
    }
}

multiversion! {
    /// [`heads`], compiled for AVX2 and FMA where the CPU has them (the 8-lane dots and the
    /// row updates become one instruction each; no operation changes, so neither do the bits).
    fn run_heads(q: &[f32], k: &[f32], v: &[f32], d: DecodeDims, first: usize, out: &mut [f32])
        => heads, ["avx2", "fma"]
}

/// `q` packed `[heads, head_dim]`; `k`, `v` packed `[capacity, kv_heads, head_dim]` (only the
/// first `len` positions are read). Returns `[heads, head_dim]`.
pub(crate) fn attention_decode(q: &[f32], k: &[f32], v: &[f32], d: DecodeDims) -> Vec<f32> {
    let hd = d.head_dim;
    let mut out = vec![0f32; d.heads * hd];
    if d.heads * d.len * hd >= 1 << 15 && hd > 0 {
        out.par_chunks_mut(hd)
            .enumerate()
            .for_each(|(h, o)| run_heads(q, k, v, d, h, o));
    } else if hd > 0 {
        run_heads(q, k, v, d, 0, &mut out);
    }
    out
}
