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
    let (ns, bb) = (q.scale_halfs(), q.body_bytes());
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
    use super::tree;
    use crate::QType;
    use half::f16;
    use std::arch::x86_64::*;

    /// `W` weight rows against one activation row, each row's arithmetic exactly
    /// [`super::dot_scalar`]'s. The activation block is loaded once for the `W` rows, and
    /// `next` (the rows the caller takes next; empty slices at the end) is prefetched as these
    /// rows stream, as `quant_dot`'s `dot_rows` does.
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
        let (ns, bb) = (q.scale_halfs(), q.body_bytes());
        let nb = xd.len() / 8;
        assert!(
            xq.len() >= 256 * nb
                && sx.len() >= 8 * nb
                && out.len() >= W
                && (0..W).all(|k| ws[k].len() >= ns * nb && wb[k].len() >= bb * nb)
        );
        let mut acc = [_mm256_setzero_ps(); W];
        let mut mn = [_mm256_setzero_ps(); W];
        // SAFETY: the loads below read block 8b + j < 8 nb of `xq` (32 bytes), 8 values
        // from 8b of `xd`/`sx`, and bytes inside super-block b (`bb` bytes) of each weight
        // row: all inside the slices, as asserted above; the CPU has the features.
        unsafe {
            for b in 0..nb {
                for nx in next {
                    prefetch(nx, b * bb, bb);
                }
                let x = Block {
                    q: xq.as_ptr().add(256 * b),
                    dx: _mm256_loadu_ps(xd[8 * b..].as_ptr()),
                };
                let rows = SuperRows {
                    body: wb.map(|w| w.as_ptr().add(b * bb)),
                    d: ws.map(|w| w[ns * b].to_f32()),
                };
                if q == QType::Q4_K {
                    let dmin = ws.map(|w| w[ns * b + 1].to_f32());
                    let sxv = _mm256_loadu_ps(sx[8 * b..].as_ptr());
                    q4k(&x, &rows, dmin, sxv, &mut acc, &mut mn);
                } else {
                    q6k(&x, &rows, &mut acc);
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

    /// One super-block of the activation row: its 256 integers and 8 block scales.
    struct Block {
        q: *const i8,
        dx: __m256,
    }

    /// One super-block of each of `W` weight rows: where its body starts, and its scale `d`.
    struct SuperRows<const W: usize> {
        body: [*const u8; W],
        d: [f32; W],
    }

    /// Prefetches the lines of `nx[off..off + len]` (nothing when `nx` ends before `off`).
    /// Straight-line: five hints cover any `len <= 256` bytes, wherever the lines fall.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn prefetch(nx: &[u8], off: usize, len: usize) {
        if off + len > nx.len() {
            return;
        }
        let p = nx[off..].as_ptr();
        for o in [0, 64, 128, 192, len - 1] {
            if o < len {
                // SAFETY: `o < len` and `off + len <= nx.len()`: the address is inside the
                // slice (and a prefetch is a hint that never faults).
                unsafe { _mm_prefetch::<_MM_HINT_T0>(p.add(o) as *const i8) };
            }
        }
    }

    /// `d * dx_j` of the 8 blocks for each row, as an array to broadcast from. An array
    /// written as one vector and read as single floats forwards from the store; the old
    /// layout's byte stores read back as one 8-byte vector did not, and stalled every row.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn factors<const W: usize>(d: [f32; W], dx: __m256) -> [[f32; 8]; W] {
        let mut f = [[0f32; 8]; W];
        for k in 0..W {
            // SAFETY: `f[k]` is 8 f32s, one __m256.
            unsafe { _mm256_storeu_ps(f[k].as_mut_ptr(), _mm256_mul_ps(_mm256_set1_ps(d[k]), dx)) };
        }
        f
    }

    /// Q4_K's 8 scales and 8 mins of one super-block as two u64s of bytes, computed in
    /// registers from the 12 packed bytes at `p` ([`super::q4k_scales`]'s words).
    ///
    /// # Safety
    /// `p` points at 12 readable bytes.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q4k_words(p: *const u8) -> (u64, u64) {
        // SAFETY: the caller's 12 bytes, read unaligned as three u32s.
        let [u0, u1, u2] = [0, 4, 8].map(|o| unsafe { (p.add(o) as *const u32).read_unaligned() });
        let [u0, u1, u2] = [u0, u1, u2].map(u32::from_le);
        const K1: u32 = 0x3f3f_3f3f;
        const K2: u32 = 0x0f0f_0f0f;
        const K3: u32 = 0x0303_0303;
        let w0 = u0 & K1;
        let w1 = (u2 & K2) | (((u0 >> 6) & K3) << 4);
        let w2 = u1 & K1;
        let w3 = ((u2 >> 4) & K2) | (((u1 >> 6) & K3) << 4);
        (w0 as u64 | (w1 as u64) << 32, w2 as u64 | (w3 as u64) << 32)
    }

    /// The i16 pairs' shuffle that spreads byte `j` (zero-extended) over all 16 lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn byte_j(j: usize) -> __m256i {
        _mm256_set1_epi16((0x8000 | j as u16) as i16)
    }

    /// One Q4_K super-block of `W` rows (bodies at `w.body`: 12 scale bytes, 128 nibble bytes).
    ///
    /// # Safety
    /// `x.q` points at 256 bytes, each `body[k]` at 140; the CPU has the features.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q4k<const W: usize>(
        x: &Block,
        w: &SuperRows<W>,
        dmin: [f32; W],
        sxv: __m256,
        acc: &mut [__m256; W],
        mn: &mut [__m256; W],
    ) {
        let low = _mm256_set1_epi8(0xF);
        let SuperRows { body, d } = *w;
        let f = factors(d, x.dx);
        let mut sc = [_mm256_setzero_si256(); W];
        for k in 0..W {
            // SAFETY: the first 12 bytes of the body.
            let (scales, mins) = unsafe { q4k_words(body[k]) };
            sc[k] = _mm256_set1_epi64x(scales as i64);
            let m8 = _mm_cvtsi64_si128(mins as i64);
            let dm = _mm256_mul_ps(
                _mm256_set1_ps(dmin[k]),
                _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m8)),
            );
            mn[k] = _mm256_fmadd_ps(dm, sxv, mn[k]);
        }
        for kk in 0..4 {
            let (j0, j1) = (2 * kk, 2 * kk + 1);
            // SAFETY: blocks j0, j1 of the super-block: 32 bytes each inside `x.q`'s 256.
            let (x0, x1) = unsafe {
                (
                    _mm256_loadu_si256(x.q.add(32 * j0) as *const __m256i),
                    _mm256_loadu_si256(x.q.add(32 * j1) as *const __m256i),
                )
            };
            for k in 0..W {
                // SAFETY: bytes 12 + 32 kk .. + 32 of the body's 140.
                let v = unsafe { _mm256_loadu_si256(body[k].add(12 + 32 * kk) as *const __m256i) };
                let u0 = _mm256_and_si256(v, low);
                let u1 = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
                // Each i32 lane: 4 products times the block's scale, exact (|lane| <= 2^19).
                let s0 = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(u0, x0),
                    _mm256_shuffle_epi8(sc[k], byte_j(j0)),
                );
                let s1 = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(u1, x1),
                    _mm256_shuffle_epi8(sc[k], byte_j(j1)),
                );
                acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(f[k][j0]), _mm256_cvtepi32_ps(s0), acc[k]);
                acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(f[k][j1]), _mm256_cvtepi32_ps(s1), acc[k]);
            }
        }
    }

    /// One Q6_K super-block of `W` rows (bodies at `w.body`: 128 low-nibble bytes, 64 bytes of
    /// high bit pairs, 16 signed scales).
    ///
    /// # Safety
    /// `x.q` points at 256 bytes, each `body[k]` at 208; the CPU has the features.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q6k<const W: usize>(x: &Block, w: &SuperRows<W>, acc: &mut [__m256; W]) {
        let SuperRows { body, d } = *w;
        let f = factors(d, x.dx);
        // The 16 scales widened to i16 once: scales 0..8 in both 128-bit lanes of `lo`,
        // 8..16 in both lanes of `hi`, so one in-lane shuffle picks a block's two.
        let mut lo = [_mm256_setzero_si256(); W];
        let mut hi = [_mm256_setzero_si256(); W];
        for k in 0..W {
            // SAFETY: bytes 192..208 of the body.
            let s = unsafe { _mm_loadu_si128(body[k].add(192) as *const __m128i) };
            lo[k] = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(s));
            hi[k] = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_srli_si128::<8>(s)));
        }
        for kk in 0..2 {
            // SAFETY (every `q6_block`): block 4 kk + g of `x.q`, and bytes inside each
            // body's 208 (ql at 64 kk + 32 (g & 1), qh at 128 + 32 kk, both 32 bytes).
            unsafe {
                q6_block::<W, 0, 0>(x, &body, &f, &lo, &hi, 4 * kk, acc);
                q6_block::<W, 0, 2>(x, &body, &f, &lo, &hi, 4 * kk + 1, acc);
                q6_block::<W, 4, 4>(x, &body, &f, &lo, &hi, 4 * kk + 2, acc);
                q6_block::<W, 4, 6>(x, &body, &f, &lo, &hi, 4 * kk + 3, acc);
            }
        }
    }

    /// Q6_K's activation block `j` (`g = j % 4` of half `j / 4`) for `W` rows: the low nibble
    /// from `ql` shifted by `SL`, the high pair from `qh` shifted by `SH`.
    ///
    /// # Safety
    /// As [`q6k`].
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn q6_block<const W: usize, const SL: i32, const SH: i32>(
        x: &Block,
        body: &[*const u8; W],
        f: &[[f32; 8]; W],
        lo: &[__m256i; W],
        hi: &[__m256i; W],
        j: usize,
        acc: &mut [__m256; W],
    ) {
        let (kk, g) = (j / 4, j % 4);
        let low = _mm256_set1_epi8(0xF);
        let three = _mm256_set1_epi8(3);
        // In-lane shuffle: the low lane takes scale 2j's i16, the high lane scale 2j + 1's.
        let b = 4 * (j % 4) as i16;
        // (Each i16 lane takes the byte pair that makes scale word 2j or 2j + 1.)
        let word = |w: i16| _mm_set1_epi16(w | (w + 1) << 8);
        let pick = _mm256_set_m128i(word(b + 2), word(b));
        // SAFETY: block j of the super-block, 32 bytes inside `x.q`'s 256.
        let xv = unsafe { _mm256_loadu_si256(x.q.add(32 * j) as *const __m256i) };
        let x32 = _mm256_maddubs_epi16(_mm256_set1_epi8(32), xv);
        for k in 0..W {
            // SAFETY: the caller's offsets, inside the body's 208 bytes.
            let (ql, qh) = unsafe {
                (
                    _mm256_loadu_si256(body[k].add(64 * kk + 32 * (g & 1)) as *const __m256i),
                    _mm256_loadu_si256(body[k].add(128 + 32 * kk) as *const __m256i),
                )
            };
            let l = _mm256_and_si256(_mm256_srli_epi16::<SL>(ql), low);
            let h = _mm256_and_si256(_mm256_srli_epi16::<SH>(qh), three);
            let w = _mm256_or_si256(l, _mm256_slli_epi16::<4>(h));
            let sc16 = _mm256_shuffle_epi8(if j < 4 { lo[k] } else { hi[k] }, pick);
            // (w - 32) x per pair: w (0..=63) as maddubs' unsigned operand, minus 32 x once
            // per block; every pair stays inside i16 (|2 * 63 * 128|).
            let pairs = _mm256_sub_epi16(_mm256_maddubs_epi16(w, xv), x32);
            // Each i32 lane: its 4 products times their half's scale (pair `i` of the 16
            // takes scale 2j + i / 8), exact: |lanes| <= 2 * 8192 * 128.
            let scaled = _mm256_madd_epi16(pairs, sc16);
            acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(f[k][j]), _mm256_cvtepi32_ps(scaled), acc[k]);
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
        // 9 rows: two 4-row AVX2 calls (the first prefetching the second), then one row
        // alone; two activation rows; row 8 all ones bits (the largest scales and weights)
        // against activations at +-127.
        let (cols, n, m) = (768, 9, 2);
        let x: Vec<f32> = (0..m * cols)
            .map(|i| match i % 7 {
                0 => 1e3,
                1 => -1e3,
                _ => ((i * 131 % 97) as f32 - 48.0) / 17.0,
            })
            .collect();
        let act = crate::cpu::quant_act::quantize_rows(&x);
        let sx = block_sums(&act);
        for q in [QType::Q4_K, QType::Q6_K] {
            let nb = cols / 256;
            let (ns, bb) = (q.scale_halfs(), q.body_bytes());
            let wb: Vec<u8> = (0..n * nb * bb)
                .map(|i| {
                    if i >= (n - 1) * nb * bb {
                        0xFF
                    } else {
                        (i * 89 + 7 + i / 251) as u8
                    }
                })
                .collect();
            let ws: Vec<f16> = (0..n * nb * ns)
                .map(|i| f16::from_f32(0.01 * (i as f32 - 3.5)))
                .collect();
            let plane = |r: usize| {
                (
                    &ws[r * nb * ns..(r + 1) * nb * ns],
                    &wb[r * nb * bb..(r + 1) * nb * bb],
                )
            };
            let (mut simd, mut scalar) = (vec![0f32; n * m], vec![0f32; n * m]);
            rows(q, cols / 32, &plane, &act, &sx, m, 0, &mut simd, true);
            rows(q, cols / 32, &plane, &act, &sx, m, 0, &mut scalar, false);
            // Finite and not degenerate (row 8 against activation row 1 is 0 exactly: equal
            // weights times activations whose quantized sum is 0).
            let nonzero = scalar.iter().filter(|v| **v != 0.0).count();
            assert!(
                scalar.iter().all(|v| v.is_finite()) && nonzero > n * m / 2,
                "{q}: {scalar:?}"
            );
            assert_eq!(
                simd.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                scalar.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{q}"
            );
        }
    }
}
