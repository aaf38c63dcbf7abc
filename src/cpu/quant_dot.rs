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
//!   mode (dequantizing once per panel beats a dot product per output at that size).
//!
//! Every output element is computed by one thread in one order, so results do not depend on
//! the thread count.

use super::quant::{body_bytes, dequantize, scale_halfs};
use crate::QType;
use half::f16;
use rayon::prelude::*;

/// Activation rows as Q8 blocks.
pub(crate) struct Q8Rows {
    /// One scale per block, `[m, cols / 32]`.
    pub d: Vec<f32>,
    /// `[m, cols]`.
    pub q: Vec<i8>,
}

/// Quantizes `x` (rows of `cols`, a multiple of 32) to Q8 blocks: `d = max|x| / 127`,
/// `q = round_ties_even(x / d)`.
pub(crate) fn quantize_rows(x: &[f32]) -> Q8Rows {
    #[cfg(target_arch = "x86_64")]
    if use_avx2() {
        // SAFETY: `use_avx2` checked the CPU.
        return unsafe { quantize_rows_avx2(x) };
    }
    quantize_rows_body(x)
}

/// `quantize_rows` compiled for AVX2: `round_ties_even` becomes one `vroundss` instead of a
/// call into libm (the same IEEE operation, so the same bits).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn quantize_rows_avx2(x: &[f32]) -> Q8Rows {
    quantize_rows_body(x)
}

#[inline(always)]
fn quantize_rows_body(x: &[f32]) -> Q8Rows {
    let nb = x.len() / 32;
    let mut d = Vec::with_capacity(nb);
    let mut q = Vec::with_capacity(x.len());
    for block in x.chunks_exact(32) {
        // A NaN in the block makes its scale NaN (f32::max would drop it), so it reaches the
        // output as the f32 product would.
        let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
        let s = if block.iter().any(|v| v.is_nan()) {
            f32::NAN
        } else {
            amax / 127.0
        };
        let id = if s != 0.0 { 1.0 / s } else { 0.0 };
        d.push(s);
        q.extend(block.iter().map(|v| (v * id).round_ties_even() as i8));
    }
    Q8Rows { d, q }
}

/// The fixed final order of the 8 lanes.
#[inline(always)]
fn tree(a: [f32; 8]) -> f32 {
    ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))
}

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
    let bb = body_bytes(q);
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
        let mut h = [0u16; 8];
        for (d, v) in h.iter_mut().zip(s) {
            *d = v.to_bits();
        }
        let mut out = [0f32; 8];
        // SAFETY: `h` is 16 bytes (one __m128i), `out` 32 bytes (one __m256).
        unsafe {
            let v = _mm256_cvtph_ps(_mm_loadu_si128(h.as_ptr() as *const __m128i));
            _mm256_storeu_ps(out.as_mut_ptr(), v);
        }
        out
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
        let low = _mm_set1_epi8(0xF);
        let eight = _mm256_set1_epi8(8);
        let mut sc = [0f32; 8];
        for b in 0..nb {
            if b % 8 == 0 {
                sc = scales8(&ws[b..nb.min(b + 8)]);
            }
            // SAFETY (whole block): b < nb, so every load below stays inside the block's body
            // (32 or 16 bytes at b * body) and activation row (32 bytes at 32 * (i * nb + b)).
            let w = unsafe {
                if q == QType::Q8_0 {
                    _mm256_loadu_si256(wb.as_ptr().add(32 * b) as *const __m256i)
                } else {
                    let raw = _mm_loadu_si128(wb.as_ptr().add(16 * b) as *const __m128i);
                    let lo = _mm_and_si128(raw, low);
                    let hi = _mm_and_si128(_mm_srli_epi16(raw, 4), low);
                    _mm256_sub_epi8(_mm256_set_m128i(hi, lo), eight)
                }
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
        for i in 0..ROWS {
            let mut a = [0f32; 8];
            // SAFETY: `a` is 8 f32s, the size of one __m256.
            unsafe { _mm256_storeu_ps(a.as_mut_ptr(), acc[i]) };
            out[i] = tree(a);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2_rows {
    use super::tree;
    use crate::QType;
    use half::f16;
    use std::arch::x86_64::*;

    /// `W` weight rows against one activation row: the activation block is loaded once for
    /// all of them and the `W` accumulator chains run side by side (the decode shape). Each
    /// row's arithmetic is exactly `dot_int`'s, so the bits are the same.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C; `ws[k]`/`wb[k]` hold `xd.len()` blocks, `xq` 32
    /// values per block.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_rows<const W: usize>(
        q: QType,
        ws: [&[f16]; W],
        wb: [&[u8]; W],
        xd: &[f32],
        xq: &[i8],
        out: &mut [f32],
    ) {
        let nb = xd.len();
        let mut acc = [_mm256_setzero_ps(); W];
        let ones = _mm256_set1_epi16(1);
        let low = _mm_set1_epi8(0xF);
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
                let pairs = unsafe {
                    if q == QType::Q8_0 {
                        let w = _mm256_loadu_si256(wb[k].as_ptr().add(32 * b) as *const __m256i);
                        _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w))
                    } else {
                        let raw = _mm_loadu_si128(wb[k].as_ptr().add(16 * b) as *const __m128i);
                        let lo = _mm_and_si128(raw, low);
                        let hi = _mm_and_si128(_mm_srli_epi16(raw, 4), low);
                        let u = _mm256_set_m128i(hi, lo);
                        _mm256_sub_epi16(_mm256_maddubs_epi16(u, x), x8)
                    }
                };
                let lanes = _mm256_madd_epi16(pairs, ones);
                let dw = sc[k][b % 8];
                let d = _mm256_set1_ps(dw * dx);
                acc[k] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes), acc[k]);
            }
        }
        for k in 0..W {
            let mut a = [0f32; 8];
            // SAFETY: `a` is 8 f32s, the size of one __m256.
            unsafe { _mm256_storeu_ps(a.as_mut_ptr(), acc[k]) };
            out[k] = tree(a);
        }
    }
}

/// Whether the AVX2 kernels run (and `WGTENSOR_QUANT_SCALAR=1` does not force the portable
/// loop, which the tests compare with).
fn use_avx2() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| super::avx2_fma_f16c("WGTENSOR_QUANT_SCALAR"))
}

/// The float dot product over 8 lanes in a fixed order.
#[inline]
fn dot_f32(w: &[f32], x: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (wc, xc) = (w.chunks_exact(8), x.chunks_exact(8));
    let (wr, xr) = (wc.remainder(), xc.remainder());
    for (a, b) in wc.zip(xc) {
        for l in 0..8 {
            acc[l] += a[l] * b[l];
        }
    }
    for (l, (a, b)) in wr.iter().zip(xr).enumerate() {
        acc[l] += a * b;
    }
    tree(acc)
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
    if m >= GEMM_MIN_ROWS {
        return matmul_t_panels(q, rows, cols, scales, body, x, m);
    }
    let nb = cols / q.block_len();
    let (ns, bb) = (scale_halfs(q) * nb, body_bytes(q) * nb);
    let mut out_t = super::alloc::try_vec::<f32>("QTensor::matmul_t", rows * m)?;
    out_t.resize(rows * m, 0.0);
    let per = rows_per_task(rows, cols, m);
    let integer = integer && matches!(q, QType::Q8_0 | QType::Q4_0);
    if integer {
        let act = quantize_rows(x);
        let avx2 = use_avx2();
        let plane = |r: usize| (&scales[r * ns..(r + 1) * ns], &body[r * bb..(r + 1) * bb]);
        out_t
            .par_chunks_mut(per * m)
            .enumerate()
            .for_each(|(t, chunk)| {
                let mut k = 0;
                #[cfg(target_arch = "x86_64")]
                if avx2 && m == 1 {
                    // One activation row (decode): weight rows four at a time.
                    while k + 4 <= chunk.len() {
                        let r = t * per + k;
                        let p = [plane(r), plane(r + 1), plane(r + 2), plane(r + 3)];
                        // SAFETY: `use_avx2` checked the CPU; each plane holds `nb` blocks
                        // and `act` one row of `nb` blocks.
                        unsafe {
                            avx2_rows::dot_rows::<4>(
                                q,
                                p.map(|p| p.0),
                                p.map(|p| p.1),
                                &act.d,
                                &act.q,
                                &mut chunk[k..k + 4],
                            )
                        };
                        k += 4;
                    }
                }
                for (j, o) in chunk[k * m..].chunks_exact_mut(m).enumerate() {
                    let (ws, wb) = plane(t * per + k + j);
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
                    dequantize(
                        q,
                        &scales[r * ns..(r + 1) * ns],
                        &body[r * bb..(r + 1) * bb],
                        &mut w,
                    );
                    for (i, v) in o.iter_mut().enumerate() {
                        *v = dot_f32(&w, &x[i * cols..(i + 1) * cols]);
                    }
                }
            });
    }
    Ok(transpose(out_t, rows, m))
}

/// Activation rows from which `matmul_t` multiplies in f32 through gemm (prefill): with this
/// many rows, dequantizing a weight panel once and running a cache-blocked product beats a
/// dot product per output, integer or not.
const GEMM_MIN_ROWS: usize = 16;

/// Weight rows per dequantized panel: a fixed count (not derived from the thread count), so
/// every output comes from the same gemm call at any thread count; 64 rows of 4096 f32 stay
/// within a core's L2.
const PANEL_ROWS: usize = 64;

/// `x @ W^T` for many activation rows: each rayon task dequantizes `PANEL_ROWS` weight rows
/// (as `quant::dequantize` does, into a buffer reused by the task) and multiplies them with
/// all of `x` on one thread with gemm, writing its own `[panel, m]` slice of `W x^T`.
#[allow(clippy::too_many_arguments)]
fn matmul_t_panels(
    q: QType,
    rows: usize,
    cols: usize,
    scales: &[f16],
    body: &[u8],
    x: &[f32],
    m: usize,
) -> crate::Result<Vec<f32>> {
    let nb = cols / q.block_len();
    let (ns, bb) = (scale_halfs(q) * nb, body_bytes(q) * nb);
    let mut out_t = super::alloc::try_vec::<f32>("QTensor::matmul_t", rows * m)?;
    out_t.resize(rows * m, 0.0);
    if cols == 0 {
        return Ok(transpose(out_t, rows, m));
    }
    assert!(x.len() >= m * cols && scales.len() >= rows * ns && body.len() >= rows * bb);
    out_t
        .par_chunks_mut(PANEL_ROWS * m)
        .enumerate()
        .for_each_init(Vec::new, |w: &mut Vec<f32>, (t, chunk)| {
            let (r0, np) = (t * PANEL_ROWS, chunk.len() / m);
            w.resize(np * cols, 0.0);
            dequantize_panel(
                q,
                &scales[r0 * ns..(r0 + np) * ns],
                &body[r0 * bb..(r0 + np) * bb],
                w,
            );
            // SAFETY: `w` is `np x cols` (row stride cols), `x` `m x cols` read as the
            // `cols x m` matrix x^T (row stride 1, column stride cols), `chunk` `np x m`
            // (row stride m); all in bounds (asserted above), `chunk` exclusively borrowed.
            // With `read_dst = false` gemm only stores to `chunk`.
            unsafe {
                gemm::gemm(
                    np,
                    m,
                    cols,
                    chunk.as_mut_ptr(),
                    1,
                    m as isize,
                    false,
                    w.as_ptr(),
                    1,
                    cols as isize,
                    x.as_ptr(),
                    cols as isize,
                    1,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
            }
        });
    Ok(transpose(out_t, rows, m))
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

/// `[rows, m]` to `[m, rows]` (nothing to move for one activation row).
fn transpose(t: Vec<f32>, rows: usize, m: usize) -> Vec<f32> {
    if m == 1 {
        return t;
    }
    let mut out = vec![0f32; rows * m];
    for r in 0..rows {
        for i in 0..m {
            out[i * rows + r] = t[r * m + i];
        }
    }
    out
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
            let wb: Vec<u8> = (0..nb * body_bytes(q))
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
                // SAFETY: AVX2 was detected; four rows of `nb` blocks.
                unsafe {
                    avx2_rows::dot_rows::<4>(
                        q,
                        [&ws[..]; 4],
                        [&wb[..]; 4],
                        &one.d,
                        &one.q,
                        &mut four,
                    )
                };
                assert!(
                    four.iter().all(|v| v.to_bits() == scalar[0].to_bits()),
                    "{q}"
                );
            }
            assert_eq!(
                simd.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                scalar.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{q}"
            );
        }
    }
}
