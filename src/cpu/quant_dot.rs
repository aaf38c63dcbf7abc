//! CPU `x @ W^T` for quantized `W` (planes of `quant.rs`), rayon over output rows.
//!
//! Two paths, chosen by the caller:
//!
//! - **Integer** (Q8_0 and Q4_0, llama.cpp's decode path): each activation row is quantized to
//!   Q8 blocks (an f32 scale, 32 i8 rounded half to even), and every block product is an exact
//!   integer dot product. The sums of four adjacent products form 8 lanes per block; lane `l`
//!   accumulates `fma(d_w * d_x, lane, acc_l)` block after block, and the 8 lanes are added in
//!   a fixed tree. AVX2 (`maddubs`/`madd`/`fmadd`, detected at run time) computes exactly this;
//!   the portable scalar loop computes the same, so both give the same bits.
//! - **Float** (every type; the exact mode of the integer types): each weight row is
//!   dequantized as `quant::dequantize` does and dotted with the f32 activations over 8 lanes
//!   in the same fixed order.
//!
//! - **Panels** (any type, from 16 activation rows on: prefill): weight rows are dequantized
//!   64 at a time into a reused buffer and multiplied with all of `x` by gemm in f32, in either
//!   mode (`panels.rs`; dequantizing once per panel beats a dot product per output there).
//!
//! One activation row (decode) may run against several matrices at once ([`matvec_group`]):
//! one quantization of `x` and one parallel loop for a layer's q, k and v projections.
//!
//! Every output element is computed by one thread in one order, so results do not depend on
//! the thread count.

use super::panels::transpose;
use super::quant::dequantize;
use super::quant_act::{quantize_rows, tree, use_avx2, Q8Rows};
use crate::QType;
use half::f16;
use rayon::prelude::*;

/// One weight block as 32 signed values in element order.
#[inline(always)]
fn unpack(q: QType, body: &[u8]) -> [i8; 32] {
    let mut w = [0i8; 32];
    if q == QType::Q8_0 {
        for (o, &b) in w.iter_mut().zip(body) {
            *o = b as i8;
        }
    } else {
        for j in 0..16 {
            w[j] = (body[j] & 0xF) as i8 - 8;
            w[j + 16] = (body[j] >> 4) as i8 - 8;
        }
    }
    w
}

/// The portable integer dot product of one weight row with one Q8 activation row.
fn dot_int_scalar(q: QType, ws: &[f16], wb: &[u8], xd: &[f32], xq: &[i8]) -> f32 {
    let bb = q.body_bytes();
    let mut acc = [0f32; 8];
    for (b, (&s, &dx)) in ws.iter().zip(xd).enumerate() {
        let w = unpack(q, &wb[b * bb..(b + 1) * bb]);
        let x = &xq[32 * b..32 * b + 32];
        let d = s.to_f32() * dx;
        for (l, a) in acc.iter_mut().enumerate() {
            let lane: i32 = (4 * l..4 * l + 4).map(|k| w[k] as i32 * x[k] as i32).sum();
            *a = d.mul_add(lane as f32, *a);
        }
    }
    tree(acc)
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::tree;
    use crate::QType;
    use half::f16;
    use std::arch::x86_64::*;

    /// Up to 8 f16 scales to f32 in one F16C conversion. Converting one scale at a time
    /// compiled to a `vpinsrw` merging into whatever register was free (an accumulator),
    /// chaining every block's scale on the previous block's sum: 15 cycles a block, not 5.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn scales8(s: &[f16]) -> [f32; 8] {
        let mut out = [0f32; 8];
        // A whole group of 8 loads in place. Copying a variable-length tail into a stack
        // array compiled to a `memcpy` call, which spilled every accumulator around it: 8% of
        // a decode step. Only a row's last group may be short.
        let h = if s.len() >= 8 {
            // SAFETY: `s` holds at least 8 f16s (16 bytes, one __m128i).
            unsafe { _mm_loadu_si128(s.as_ptr() as *const __m128i) }
        } else {
            let mut h = [0u16; 8];
            for (d, v) in h.iter_mut().zip(s) {
                *d = v.to_bits();
            }
            // SAFETY: `h` is 16 bytes.
            unsafe { _mm_loadu_si128(h.as_ptr() as *const __m128i) }
        };
        // SAFETY: `out` is 32 bytes (one __m256).
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), _mm256_cvtph_ps(h)) };
        out
    }

    /// Block `b` of a Q8_0 or Q4_0 weight row as 32 bytes in element order: Q8_0's signed
    /// values, or Q4_0's unsigned nibbles (0..=15, the 8 not yet subtracted).
    ///
    /// # Safety
    /// The CPU must have AVX2; `wb` holds at least `b + 1` blocks' bodies.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn block(q: QType, wb: &[u8], b: usize) -> __m256i {
        // SAFETY: the caller guarantees block b is inside `wb` (32 or 16 bytes at b * body).
        unsafe {
            if q == QType::Q8_0 {
                _mm256_loadu_si256(wb.as_ptr().add(32 * b) as *const __m256i)
            } else {
                let low = _mm_set1_epi8(0xF);
                let raw = _mm_loadu_si128(wb.as_ptr().add(16 * b) as *const __m128i);
                let lo = _mm_and_si128(raw, low);
                let hi = _mm_and_si128(_mm_srli_epi16(raw, 4), low);
                _mm256_set_m128i(hi, lo)
            }
        }
    }

    /// AVX2 twin of `dot_int_scalar` for `ROWS` activation rows at once (the weight block is
    /// loaded and unpacked once for all of them).
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C; `xd`/`xq` hold `ROWS` rows of `ws.len()` blocks.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_int<const ROWS: usize>(
        q: QType,
        ws: &[f16],
        wb: &[u8],
        xd: &[f32],
        xq: &[i8],
        out: &mut [f32],
    ) {
        let nb = ws.len();
        let mut acc = [_mm256_setzero_ps(); ROWS];
        let ones = _mm256_set1_epi16(1);
        let eight = _mm256_set1_epi8(8);
        let mut sc = [0f32; 8];
        for b in 0..nb {
            if b % 8 == 0 {
                sc = scales8(&ws[b..nb.min(b + 8)]);
            }
            // SAFETY (whole block): b < nb, so every load below stays inside the block's body
            // (32 or 16 bytes at b * body) and activation row (32 bytes at 32 * (i * nb + b)).
            let w = unsafe { block(q, wb, b) };
            let w = if q == QType::Q8_0 {
                w
            } else {
                _mm256_sub_epi8(w, eight)
            };
            let aw = _mm256_sign_epi8(w, w);
            let dw = sc[b % 8];
            for i in 0..ROWS {
                let x = unsafe {
                    _mm256_loadu_si256(xq.as_ptr().add(32 * (i * nb + b)) as *const __m256i)
                };
                let sx = _mm256_sign_epi8(x, w);
                let lanes = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), ones);
                let d = _mm256_set1_ps(dw * xd[i * nb + b]);
                acc[i] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes), acc[i]);
            }
        }
        finish(acc, out);
    }

    /// Each accumulator's 8 lanes added in `tree`'s order, into `out`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn finish<const N: usize>(acc: [__m256; N], out: &mut [f32]) {
        for (o, v) in out.iter_mut().zip(acc) {
            let mut a = [0f32; 8];
            // SAFETY: `a` is 8 f32s, the size of one __m256.
            unsafe { _mm256_storeu_ps(a.as_mut_ptr(), v) };
            *o = tree(a);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2_rows {
    use crate::QType;
    use half::f16;
    use std::arch::x86_64::*;

    /// `W` weight rows against one activation row: the activation block is loaded once for
    /// all of them and the `W` accumulator chains run side by side (the decode shape). Each
    /// row's arithmetic is exactly `dot_int`'s, so the bits are the same.
    ///
    /// `next` is the planes of the weight rows the caller takes next (empty slices at the
    /// end): they are prefetched while these rows compute. A row is a short stream (384
    /// bytes for 768 Q4_0 columns), too short for the hardware prefetcher to ramp up, and the
    /// loads of a new row group otherwise stall the kernel.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C; `act` is one row; `ws[k]`/`wb[k]` hold as many
    /// blocks as it.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_rows<const W: usize>(
        q: QType,
        ws: [&[f16]; W],
        wb: [&[u8]; W],
        next: [(&[f16], &[u8]); W],
        act: &super::Q8Rows,
        out: &mut [f32],
    ) {
        let bb = q.body_bytes();
        // Blocks per 64-byte line of the body plane, a power of two (16- or 32-byte bodies):
        // one prefetch per line, picked by a mask (a `%` by a run-time value is a division).
        let line_mask = (64 / bb).max(1) - 1;
        for (s, _) in next {
            if !s.is_empty() {
                _mm_prefetch::<_MM_HINT_T0>(s.as_ptr() as *const i8);
            }
        }
        let (xd, xq) = (&act.d, &act.q);
        let nb = xd.len();
        let mut acc = [_mm256_setzero_ps(); W];
        let ones = _mm256_set1_epi16(1);
        let eight = _mm256_set1_epi8(8);
        let mut sc = [[0f32; 8]; W];
        for b in 0..nb {
            if b % 8 == 0 {
                for k in 0..W {
                    sc[k] = super::avx2::scales8(&ws[k][b..nb.min(b + 8)]);
                }
            }
            // SAFETY (whole block): b < nb, so the loads stay inside block b of each weight
            // row's body (32 or 16 bytes) and of the activation row (32 bytes).
            let x = unsafe { _mm256_loadu_si256(xq.as_ptr().add(32 * b) as *const __m256i) };
            let dx = xd[b];
            if b & line_mask == 0 {
                for (_, nb_) in next {
                    if b * bb < nb_.len() {
                        // A hint: it never faults, and the address is inside the slice.
                        _mm_prefetch::<_MM_HINT_T0>(nb_[b * bb..].as_ptr() as *const i8);
                    }
                }
            }
            // Q4_0: sum (u - 8) x = sum u x - 8 sum x over each pair, with the nibbles u
            // (0..=15) as maddubs' unsigned operand: no sign fix-ups per weight row, and the
            // pair sums of 8 x are computed once for all W rows. Every term stays far inside
            // i16 (|u x| <= 15 * 127), so the integers, hence the bits, are those of the
            // signed form.
            let x8 = if q == QType::Q4_0 {
                _mm256_maddubs_epi16(eight, x)
            } else {
                _mm256_setzero_si256()
            };
            for k in 0..W {
                let w = unsafe { super::avx2::block(q, wb[k], b) };
                let pairs = if q == QType::Q8_0 {
                    _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w))
                } else {
                    _mm256_sub_epi16(_mm256_maddubs_epi16(w, x), x8)
                };
                let lanes = _mm256_madd_epi16(pairs, ones);
                let dw = sc[k][b % 8];
                let d = _mm256_set1_ps(dw * dx);
                acc[k] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes), acc[k]);
            }
        }
        super::avx2::finish(acc, out);
    }
}

/// Weight rows per rayon task: enough work to pay for the hand-off, enough tasks to balance.
fn rows_per_task(rows: usize, cols: usize, m: usize) -> usize {
    let per_row = (cols * m.max(1)).max(1);
    (65_536 / per_row)
        .clamp(1, 256)
        .min(rows.div_ceil(4 * rayon::current_num_threads()).max(1))
}

/// `x @ W^T`: `x` is `[m, cols]` f32, `W` the `[rows, cols]` planes; returns `[m, rows]`.
/// `integer` picks the Q8-activation path (Q8_0 and Q4_0 only; others always run in f32).
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul_t(
    q: QType,
    rows: usize,
    cols: usize,
    scales: &[f16],
    body: &[u8],
    x: &[f32],
    m: usize,
    integer: bool,
) -> crate::Result<Vec<f32>> {
    let one = Planes { rows, scales, body };
    if m >= GEMM_MIN_ROWS {
        return matmul_t_panels(q, cols, one, x, m);
    }
    let kq = matches!(q, QType::Q4_K | QType::Q6_K);
    let integer = integer && (kq || matches!(q, QType::Q8_0 | QType::Q4_0));
    if integer && m == 1 {
        return matvec_group(q, cols, &[one], x);
    }
    let nb = cols / q.block_len();
    let (ns, bb) = (q.scale_halfs() * nb, q.body_bytes() * nb);
    let mut out_t = super::alloc::try_vec::<f32>("QTensor::matmul_t", rows * m)?;
    out_t.resize(rows * m, 0.0);
    let per = rows_per_task(rows, cols, m);
    if integer && kq {
        let act = quantize_rows(x);
        let sx = super::quant_k::block_sums(&act);
        let avx2 = use_avx2();
        // Multiples of 4 rows per task, so the 4-row kernel covers all but the last rows.
        let per = per.next_multiple_of(4);
        let plane = |r: usize| (&scales[r * ns..(r + 1) * ns], &body[r * bb..(r + 1) * bb]);
        out_t
            .par_chunks_mut(per * m)
            .enumerate()
            .for_each(|(t, chunk)| {
                super::quant_k::rows(q, cols / 32, &plane, &act, &sx, m, t * per, chunk, avx2)
            });
    } else if integer {
        let act = quantize_rows(x);
        let avx2 = use_avx2();
        out_t
            .par_chunks_mut(per * m)
            .enumerate()
            .for_each(|(t, chunk)| {
                for (j, o) in chunk.chunks_exact_mut(m).enumerate() {
                    let r = t * per + j;
                    let (ws, wb) = (&scales[r * ns..(r + 1) * ns], &body[r * bb..(r + 1) * bb]);
                    int_row(q, ws, wb, &act, nb, o, avx2);
                }
            });
    } else {
        out_t
            .par_chunks_mut(per * m)
            .enumerate()
            .for_each(|(t, chunk)| {
                let mut w = vec![0f32; cols];
                for (k, o) in chunk.chunks_exact_mut(m).enumerate() {
                    let r = t * per + k;
                    // The AVX2 build of `dequantize` where the CPU has it: same values, its
                    // block loops vectorized (the K-quants' decode otherwise bounds decode).
                    dequantize_panel(
                        q,
                        &scales[r * ns..(r + 1) * ns],
                        &body[r * bb..(r + 1) * bb],
                        &mut w,
                    );
                    for (i, v) in o.iter_mut().enumerate() {
                        *v = super::dot8(&w, &x[i * cols..(i + 1) * cols]);
                    }
                }
            });
    }
    Ok(transpose(out_t, rows, m))
}

/// The planes of one `[rows, cols]` matrix of a [`matvec_group`].
pub(crate) struct Planes<'a> {
    pub rows: usize,
    pub scales: &'a [f16],
    pub body: &'a [u8],
}

/// `W x` for one activation row `x` (`cols`) against several Q8_0 or Q4_0 matrices of the same
/// `cols` at once (a layer's q, k and v projections; its gate and up projections): `x` is
/// quantized once and one rayon fan-out covers the rows of all of them, 4 weight rows per
/// kernel call (the 4 may come from two matrices). Returns the outputs one after another
/// (`sum(rows)` values). Each output is `dot_rows`' arithmetic on its own row, so the bits are
/// those of one `matmul_t` per matrix, at any thread count.
pub(crate) fn matvec_group(
    q: QType,
    cols: usize,
    mats: &[Planes<'_>],
    x: &[f32],
) -> crate::Result<Vec<f32>> {
    let nb = cols / q.block_len();
    let (ns, bb) = (q.scale_halfs() * nb, q.body_bytes() * nb);
    let total: usize = mats.iter().map(|p| p.rows).sum();
    let mut out = super::alloc::try_vec::<f32>("QTensor::matmul_t", total)?;
    out.resize(total, 0.0);
    assert!(
        matches!(q, QType::Q8_0 | QType::Q4_0 | QType::Q4_K | QType::Q6_K)
            && x.len() >= cols
            && mats
                .iter()
                .all(|p| p.scales.len() >= p.rows * ns && p.body.len() >= p.rows * bb)
    );
    let act = quantize_rows(&x[..cols]);
    let avx2 = use_avx2();
    // Global row `r` of the concatenation: its matrix's planes for that row.
    let plane = |mut r: usize| {
        let mut i = 0;
        while r >= mats[i].rows {
            r -= mats[i].rows;
            i += 1;
        }
        let p = &mats[i];
        (
            &p.scales[r * ns..(r + 1) * ns],
            &p.body[r * bb..(r + 1) * bb],
        )
    };
    let per = rows_per_task(total, cols, 1).next_multiple_of(4);
    if matches!(q, QType::Q4_K | QType::Q6_K) {
        let sx = super::quant_k::block_sums(&act);
        out.par_chunks_mut(per).enumerate().for_each(|(t, chunk)| {
            super::quant_k::rows(q, cols / 32, &plane, &act, &sx, 1, t * per, chunk, avx2)
        });
        return Ok(out);
    }
    out.par_chunks_mut(per).enumerate().for_each(|(t, chunk)| {
        let mut k = 0;
        #[cfg(target_arch = "x86_64")]
        if avx2 {
            let empty: (&[f16], &[u8]) = (&[], &[]);
            while k + 4 <= chunk.len() {
                let r = t * per + k;
                let p = [plane(r), plane(r + 1), plane(r + 2), plane(r + 3)];
                let next = if k + 8 <= chunk.len() {
                    [plane(r + 4), plane(r + 5), plane(r + 6), plane(r + 7)]
                } else {
                    [empty; 4]
                };
                // SAFETY: `use_avx2` checked the CPU; each plane holds `nb` blocks and
                // `act` one row of `nb` blocks.
                unsafe {
                    avx2_rows::dot_rows::<4>(
                        q,
                        p.map(|p| p.0),
                        p.map(|p| p.1),
                        next,
                        &act,
                        &mut chunk[k..k + 4],
                    )
                };
                k += 4;
            }
        }
        for (j, o) in chunk[k..].chunks_exact_mut(1).enumerate() {
            let (ws, wb) = plane(t * per + k + j);
            int_row(q, ws, wb, &act, nb, o, avx2);
        }
    });
    Ok(out)
}

/// Activation rows from which `matmul_t` multiplies in f32 through gemm (prefill): with this
/// many rows, dequantizing a weight panel once and running a cache-blocked product beats a
/// dot product per output, integer or not.
const GEMM_MIN_ROWS: usize = 16;

/// `x @ W^T` for many activation rows: each panel of weight rows is dequantized as
/// `quant::dequantize` does and multiplied with all of `x` by gemm (see `panels`).
fn matmul_t_panels(
    q: QType,
    cols: usize,
    w: Planes<'_>,
    x: &[f32],
    m: usize,
) -> crate::Result<Vec<f32>> {
    let Planes { rows, scales, body } = w;
    let nb = cols / q.block_len();
    let (ns, bb) = (q.scale_halfs() * nb, q.body_bytes() * nb);
    assert!(scales.len() >= rows * ns && body.len() >= rows * bb);
    super::panels::matmul_t_panels("QTensor::matmul_t", rows, cols, x, m, |r0, np, w| {
        dequantize_panel(
            q,
            &scales[r0 * ns..(r0 + np) * ns],
            &body[r0 * bb..(r0 + np) * bb],
            w,
        )
    })
}

/// `quant::dequantize` over a panel of rows, compiled for AVX2 where the CPU has it (the
/// block loops vectorize; the values are the same).
fn dequantize_panel(q: QType, scales: &[f16], body: &[u8], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if use_avx2() {
        #[target_feature(enable = "avx2,fma,f16c")]
        fn avx2(q: QType, scales: &[f16], body: &[u8], out: &mut [f32]) {
            dequantize(q, scales, body, out)
        }
        // SAFETY: `use_avx2` checked the CPU.
        return unsafe { avx2(q, scales, body, out) };
    }
    dequantize(q, scales, body, out)
}

/// One weight row against every activation row (`o[i]` for row `i`).
fn int_row(q: QType, ws: &[f16], wb: &[u8], act: &Q8Rows, nb: usize, o: &mut [f32], avx2: bool) {
    let m = o.len();
    if !avx2 {
        for (i, v) in o.iter_mut().enumerate() {
            let (xd, xq) = (
                &act.d[i * nb..(i + 1) * nb],
                &act.q[i * nb * 32..(i + 1) * nb * 32],
            );
            *v = dot_int_scalar(q, ws, wb, xd, xq);
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let mut i = 0;
        while i < m {
            let take = if m - i >= 4 { 4 } else { 1 };
            let (xd, xq) = (
                &act.d[i * nb..(i + take) * nb],
                &act.q[i * nb * 32..(i + take) * nb * 32],
            );
            // SAFETY: `use_avx2` checked the CPU features; the slices hold `take` rows of `nb`
            // blocks, as `dot_int` reads.
            unsafe {
                if take == 4 {
                    avx2::dot_int::<4>(q, ws, wb, xd, xq, &mut o[i..i + 4]);
                } else {
                    avx2::dot_int::<1>(q, ws, wb, xd, xq, &mut o[i..i + 1]);
                }
            }
            i += take;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn avx2_and_scalar_give_the_same_bits() {
        if !use_avx2() {
            return;
        }
        let cols = 96;
        let x: Vec<f32> = (0..5 * cols)
            .map(|i| ((i * 131 % 97) as f32 - 48.0) / 17.0)
            .collect();
        let act = quantize_rows(&x);
        for q in [QType::Q8_0, QType::Q4_0] {
            let nb = cols / 32;
            let wb: Vec<u8> = (0..nb * q.body_bytes())
                .map(|i| (i * 89 + 7) as u8)
                .collect();
            let ws: Vec<f16> = (0..nb)
                .map(|i| f16::from_f32(0.01 * (i as f32 + 1.0)))
                .collect();
            let mut simd = vec![0f32; 5];
            int_row(q, &ws, &wb, &act, nb, &mut simd, true);
            let mut scalar = vec![0f32; 5];
            int_row(q, &ws, &wb, &act, nb, &mut scalar, false);
            #[cfg(target_arch = "x86_64")]
            {
                let one = Q8Rows {
                    d: act.d[..nb].to_vec(),
                    q: act.q[..32 * nb].to_vec(),
                };
                let mut four = [0f32; 4];
                // Rows to prefetch (any planes: a hint changes no value), and none.
                let nexts: [[(&[f16], &[u8]); 4]; 2] =
                    [[(&ws[..], &wb[..]); 4], [(&[][..], &[][..]); 4]];
                for next in nexts {
                    // SAFETY: AVX2 was detected; four rows of `nb` blocks.
                    unsafe {
                        avx2_rows::dot_rows::<4>(
                            q,
                            [&ws[..]; 4],
                            [&wb[..]; 4],
                            next,
                            &one,
                            &mut four,
                        )
                    };
                    assert!(
                        four.iter().all(|v| v.to_bits() == scalar[0].to_bits()),
                        "{q}"
                    );
                }
            }
            assert_eq!(
                simd.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                scalar.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{q}"
            );
        }
    }
}
