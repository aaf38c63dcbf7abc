//! Integer dot products of Q4_K and Q6_K weight rows with Q8 activation rows: the decode
//! path of the K-quants (llama.cpp's `ggml_vec_dot_q4_K_q8_K` / `..._q6_K_q8_K` approach).
//!
//! The activations are the same Q8 blocks as for Q8_0 and Q4_0 (`quant_act::quantize_rows`,
//! one f32 scale per 32 values, finer than ggml's per-256 Q8_K), so one quantization of `x`
//! serves every weight type of a group. Per 32-value activation block `j` of a 256-value
//! super-block the weight integers (Q4_K's nibbles `u`, Q6_K's 6-bit `w - 32`) times the
//! activation integers are summed in 4-product lanes (8 lanes), each lane times its 6- or
//! 8-bit sub-block scale, all exact in i32. Lane `l` then accumulates
//! `fma(d * dx_j, lane, acc_l)`. Q4_K's mins enter once per super-block through the per-block
//! sums of `x` (`sx_j = dx_j * sum q_j`): `mn_j = fma(dmin * min_j, sx_j, mn_j)`. The result
//! is `tree(acc) - tree(mn)` (Q6_K: `mn` is zero). The AVX2 kernel and the portable loop do
//! exactly this, so both give the same bits.

use super::quant::{body_bytes, scale_halfs};
use super::quant_act::{tree, Q8Rows};
use crate::QType;
use half::f16;

/// `dx_j * sum(q_j)` of every activation block (Q4_K's min terms; one pass over `x`).
pub(crate) fn block_sums(act: &Q8Rows) -> Vec<f32> {
    act.d
        .iter()
        .zip(act.q.chunks_exact(32))
        .map(|(&d, q)| d * q.iter().map(|&v| v as i32).sum::<i32>() as f32)
        .collect()
}

/// Q4_K's 12 bytes of packed 6-bit scales and mins as 8 scales then 8 mins (ggml's `utmp`
/// word trick: four masks and shifts instead of 16 `get_scale_min_k4` byte extractions).
#[inline(always)]
pub(crate) fn q4k_scales(sc: &[u8]) -> [u8; 16] {
    let u = |i: usize| u32::from_le_bytes([sc[4 * i], sc[4 * i + 1], sc[4 * i + 2], sc[4 * i + 3]]);
    let (u0, u1, u2) = (u(0), u(1), u(2));
    const K1: u32 = 0x3f3f_3f3f;
    const K2: u32 = 0x0f0f_0f0f;
    const K3: u32 = 0x0303_0303;
    let words = [
        u0 & K1,
        (u2 & K2) | (((u0 >> 6) & K3) << 4),
        u1 & K1,
        ((u2 >> 4) & K2) | (((u1 >> 6) & K3) << 4),
    ];
    let mut out = [0u8; 16];
    for (o, w) in out.chunks_exact_mut(4).zip(words) {
        o.copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// Activation block `j` (0..8) of a super-block: its 32 weight integers (signed) and the
/// scales of its two 16-value halves.
#[inline(always)]
fn weights(q: QType, body: &[u8], sm: &[u8; 16], j: usize) -> ([i32; 32], [i32; 2]) {
    let mut w = [0i32; 32];
    if q == QType::Q4_K {
        let (k, h) = (j / 2, j % 2);
        for (l, o) in w.iter_mut().enumerate() {
            *o = ((body[12 + 32 * k + l] >> (4 * h)) & 0xF) as i32;
        }
        (w, [sm[j] as i32; 2])
    } else {
        let (k, g) = (j / 4, j % 4);
        let (ql, qh, sc) = (
            &body[64 * k + 32 * (g & 1)..],
            &body[128 + 32 * k..],
            &body[192..],
        );
        for (l, o) in w.iter_mut().enumerate() {
            let lo = (ql[l] >> (4 * (g >> 1))) & 0xF;
            let hi = (qh[l] >> (2 * g)) & 3;
            *o = (lo | (hi << 4)) as i32 - 32;
        }
        (w, [sc[2 * j] as i8 as i32, sc[2 * j + 1] as i8 as i32])
    }
}

/// The portable dot product of one weight row (`ws`/`wb`, `xd.len() / 8` super-blocks) with
/// one Q8 activation row (`xd`, `xq`, `sx` of [`block_sums`]).
pub(crate) fn dot_scalar(
    q: QType,
    ws: &[f16],
    wb: &[u8],
    xd: &[f32],
    xq: &[i8],
    sx: &[f32],
) -> f32 {
    let (ns, bb) = (scale_halfs(q), body_bytes(q));
    let (mut acc, mut mn) = ([0f32; 8], [0f32; 8]);
    for b in 0..xd.len() / 8 {
        let body = &wb[b * bb..(b + 1) * bb];
        let d = ws[ns * b].to_f32();
        let sm = if q == QType::Q4_K {
            q4k_scales(&body[..12])
        } else {
            [0; 16]
        };
        for j in 0..8 {
            let x = &xq[32 * (8 * b + j)..32 * (8 * b + j + 1)];
            let (w, sc) = weights(q, body, &sm, j);
            let f = d * xd[8 * b + j];
            for (l, a) in acc.iter_mut().enumerate() {
                let lane: i32 = (4 * l..4 * l + 4).map(|e| w[e] * x[e] as i32).sum();
                *a = f.mul_add((sc[l / 4] * lane) as f32, *a);
            }
        }
        if q == QType::Q4_K {
            let dmin = ws[ns * b + 1].to_f32();
            for (j, m) in mn.iter_mut().enumerate() {
                *m = (dmin * sm[8 + j] as f32).mul_add(sx[8 * b + j], *m);
            }
        }
    }
    tree(acc) - tree(mn)
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use super::{q4k_scales, tree};
    use crate::QType;
    use half::f16;
    use std::arch::x86_64::*;

    /// `W` weight rows against one activation row, each row's arithmetic exactly
    /// [`super::dot_scalar`]'s. The activation block is loaded once for the `W` rows, and
    /// `next` (the rows the caller takes next; empty slices at the end) is prefetched line by
    /// line as these rows stream, as `quant_dot`'s `dot_rows` does.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C; `xd`, `sx` hold `8 * nb` values and `xq`
    /// `256 * nb`; `ws[k]`/`wb[k]` hold `nb` super-blocks of `q` (Q4_K or Q6_K).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn dot_rows<const W: usize>(
        q: QType,
        ws: [&[f16]; W],
        wb: [&[u8]; W],
        next: [&[u8]; W],
        xd: &[f32],
        xq: &[i8],
        sx: &[f32],
        out: &mut [f32],
    ) {
        let (ns, bb) = (super::scale_halfs(q), super::body_bytes(q));
        let nb = xd.len() / 8;
        assert!(
            xq.len() >= 256 * nb
                && sx.len() >= 8 * nb
                && out.len() >= W
                && (0..W).all(|k| ws[k].len() >= ns * nb && wb[k].len() >= bb * nb)
        );
        let mut acc = [_mm256_setzero_ps(); W];
        let mut mn = [_mm256_setzero_ps(); W];
        let low = _mm256_set1_epi8(0xF);
        let three = _mm256_set1_epi8(3);
        let k32 = _mm256_set1_epi8(32);
        // Byte `i` of the shuffle picks Q6_K scale `2j + i / 8` for block `j` (add 2j).
        let halves = _mm_set_epi64x(0x0101_0101_0101_0101, 0);
        // SAFETY: the loads below read block 8b + j < 8 nb of `xq` (32 bytes), 8 values
        // from 8b of `xd`/`sx`, and bytes inside super-block b (`bb` bytes) of each weight
        // row: all inside the slices, as asserted above; the CPU has the features.
        unsafe {
            for b in 0..nb {
                for nx in next {
                    let mut off = b * bb;
                    while off < ((b + 1) * bb).min(nx.len()) {
                        // A hint: it never faults, and the address is inside the slice.
                        _mm_prefetch::<_MM_HINT_T0>(nx[off..].as_ptr() as *const i8);
                        off += 64;
                    }
                }
                // d * dx_j for the 8 blocks, per row.
                let dxv = _mm256_loadu_ps(xd[8 * b..].as_ptr());
                let mut f = [[0f32; 8]; W];
                let mut sm = [[0u8; 16]; W];
                for k in 0..W {
                    let d = ws[k][ns * b].to_f32();
                    _mm256_storeu_ps(f[k].as_mut_ptr(), _mm256_mul_ps(_mm256_set1_ps(d), dxv));
                    if q == QType::Q4_K {
                        sm[k] = q4k_scales(&wb[k][b * bb..b * bb + 12]);
                        let dmin = ws[k][ns * b + 1].to_f32();
                        // SAFETY: `sm[k][8..]` holds 8 bytes.
                        let m8 = _mm_loadl_epi64(sm[k][8..].as_ptr() as *const __m128i);
                        let dm = _mm256_mul_ps(
                            _mm256_set1_ps(dmin),
                            _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m8)),
                        );
                        let sxv = _mm256_loadu_ps(sx[8 * b..].as_ptr());
                        mn[k] = _mm256_fmadd_ps(dm, sxv, mn[k]);
                    }
                }
                for j in 0..8 {
                    // SAFETY: block 8b + j < 8 nb: 32 bytes inside `xq` (asserted above).
                    let x = _mm256_loadu_si256(xq.as_ptr().add(32 * (8 * b + j)) as *const __m256i);
                    let x32 = _mm256_maddubs_epi16(k32, x);
                    for k in 0..W {
                        let body = wb[k].as_ptr().add(b * bb);
                        // SAFETY (loads): every offset below is inside this super-block's `bb`
                        // bytes (Q4_K: 12 + 128; Q6_K: 128 ql, 64 qh, 16 scales).
                        let (pairs, sc16) = if q == QType::Q4_K {
                            let (kk, h) = (j / 2, j % 2);
                            let v = _mm256_loadu_si256(body.add(12 + 32 * kk) as *const __m256i);
                            let u = if h == 0 {
                                _mm256_and_si256(v, low)
                            } else {
                                _mm256_and_si256(_mm256_srli_epi16(v, 4), low)
                            };
                            (
                                _mm256_maddubs_epi16(u, x),
                                _mm256_set1_epi16(sm[k][j] as i16),
                            )
                        } else {
                            let (kk, g) = (j / 4, j % 4);
                            let ql = _mm256_loadu_si256(
                                body.add(64 * kk + 32 * (g & 1)) as *const __m256i
                            );
                            let qh = _mm256_loadu_si256(body.add(128 + 32 * kk) as *const __m256i);
                            let lo = if g < 2 {
                                _mm256_and_si256(ql, low)
                            } else {
                                _mm256_and_si256(_mm256_srli_epi16(ql, 4), low)
                            };
                            let hi = match g {
                                0 => _mm256_and_si256(qh, three),
                                1 => _mm256_and_si256(_mm256_srli_epi16(qh, 2), three),
                                2 => _mm256_and_si256(_mm256_srli_epi16(qh, 4), three),
                                _ => _mm256_and_si256(_mm256_srli_epi16(qh, 6), three),
                            };
                            let w = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
                            let sc = _mm_loadu_si128(body.add(192) as *const __m128i);
                            let pick = _mm_add_epi8(halves, _mm_set1_epi8(2 * j as i8));
                            let sc16 = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, pick));
                            // (w - 32) x per pair: w (0..=63) as maddubs' unsigned operand, minus
                            // 32 x once per block; every pair stays inside i16 (|2 * 63 * 128|).
                            (_mm256_sub_epi16(_mm256_maddubs_epi16(w, x), x32), sc16)
                        };
                        // Each i32 lane: its 4 products times their sub-block's scale (pair `i` of
                        // the 16 takes scale `i / 8`), exact: |lanes| <= 2 * 8192 * 128.
                        let scaled = _mm256_madd_epi16(pairs, sc16);
                        let fj = _mm256_set1_ps(f[k][j]);
                        acc[k] = _mm256_fmadd_ps(fj, _mm256_cvtepi32_ps(scaled), acc[k]);
                    }
                }
            }
        }
        for k in 0..W {
            let (mut a, mut m) = ([0f32; 8], [0f32; 8]);
            // SAFETY: `a` and `m` are 8 f32s each, one __m256.
            unsafe {
                _mm256_storeu_ps(a.as_mut_ptr(), acc[k]);
                _mm256_storeu_ps(m.as_mut_ptr(), mn[k]);
            }
            out[k] = tree(a) - tree(m);
        }
    }
}

/// One weight row against one activation row, AVX2 where `avx2` says the CPU has it.
#[allow(clippy::too_many_arguments)]
fn dot_one(q: QType, ws: &[f16], wb: &[u8], xd: &[f32], xq: &[i8], sx: &[f32], avx2: bool) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        let mut o = [0f32];
        // SAFETY: `avx2` is `use_avx2()`, which checked the CPU; the caller passes one row
        // of `xd.len() / 8` super-blocks and the activation row of as many.
        unsafe { avx2::dot_rows::<1>(q, [ws], [wb], [&[]], xd, xq, sx, &mut o) };
        return o[0];
    }
    let _ = avx2;
    dot_scalar(q, ws, wb, xd, xq, sx)
}

/// Weight rows `r0..r0 + out.len() / m` (`plane(r)` gives row `r`'s planes) against the `m`
/// activation rows of `act` (`nb` Q8 blocks each; `sx` their [`block_sums`]), into `out` as
/// `[rows, m]`. Four weight rows per AVX2 call, then one at a time; each output is one
/// row's fixed arithmetic, so the bits do not depend on how the caller splits the rows.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rows<'a>(
    q: QType,
    nb: usize,
    plane: &(dyn Fn(usize) -> (&'a [f16], &'a [u8]) + Sync),
    act: &Q8Rows,
    sx: &[f32],
    m: usize,
    r0: usize,
    out: &mut [f32],
    avx2: bool,
) {
    let n = out.len() / m.max(1);
    let x = |i: usize| {
        (
            &act.d[i * nb..(i + 1) * nb],
            &act.q[i * nb * 32..(i + 1) * nb * 32],
            &sx[i * nb..(i + 1) * nb],
        )
    };
    let mut k = 0;
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        while k + 4 <= n {
            let p = [0, 1, 2, 3].map(|j| plane(r0 + k + j));
            let next = if k + 8 <= n {
                [4, 5, 6, 7].map(|j| plane(r0 + k + j).1)
            } else {
                [&[][..]; 4]
            };
            for i in 0..m {
                let (xd, xq, s) = x(i);
                let mut o = [0f32; 4];
                // SAFETY: `avx2` is `use_avx2()`, which checked the CPU; each plane holds
                // `nb / 8` super-blocks and activation row `i` as many.
                unsafe {
                    avx2::dot_rows::<4>(q, p.map(|p| p.0), p.map(|p| p.1), next, xd, xq, s, &mut o)
                };
                for (j, v) in o.into_iter().enumerate() {
                    out[(k + j) * m + i] = v;
                }
            }
            k += 4;
        }
    }
    for r in k..n {
        let (ws, wb) = plane(r0 + r);
        for i in 0..m {
            let (xd, xq, s) = x(i);
            out[r * m + i] = dot_one(q, ws, wb, xd, xq, s, avx2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::quant::scale_min_k4;

    #[test]
    fn q4k_scales_are_get_scale_min_k4() {
        for seed in 0..64u32 {
            let sc: Vec<u8> = (0..12u32)
                .map(|i| (i.wrapping_mul(151).wrapping_add(seed * 97) ^ (seed << 3)) as u8)
                .collect();
            let got = q4k_scales(&sc);
            for j in 0..8 {
                assert_eq!(
                    scale_min_k4(j, &sc),
                    (got[j], got[8 + j]),
                    "seed {seed} j {j}"
                );
            }
        }
    }

    #[test]
    fn avx2_and_scalar_give_the_same_bits() {
        if !crate::cpu::quant_act::use_avx2() {
            return;
        }
        let cols = 512;
        let x: Vec<f32> = (0..cols)
            .map(|i| ((i * 131 % 97) as f32 - 48.0) / 17.0)
            .collect();
        let act = crate::cpu::quant_act::quantize_rows(&x);
        let sx = block_sums(&act);
        for q in [QType::Q4_K, QType::Q6_K] {
            let nb = cols / 256;
            let ns = scale_halfs(q);
            let wb: Vec<u8> = (0..5 * nb * body_bytes(q))
                .map(|i| (i * 89 + 7 + i / 251) as u8)
                .collect();
            let ws: Vec<f16> = (0..5 * nb * ns)
                .map(|i| f16::from_f32(0.01 * (i as f32 - 3.5)))
                .collect();
            let plane = |r: usize| {
                (
                    &ws[r * nb * ns..(r + 1) * nb * ns],
                    &wb[r * nb * body_bytes(q)..(r + 1) * nb * body_bytes(q)],
                )
            };
            let (mut simd, mut scalar) = (vec![0f32; 5], vec![0f32; 5]);
            rows(q, cols / 32, &plane, &act, &sx, 1, 0, &mut simd, true);
            rows(q, cols / 32, &plane, &act, &sx, 1, 0, &mut scalar, false);
            assert_eq!(
                simd.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                scalar.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{q}"
            );
        }
    }
}
