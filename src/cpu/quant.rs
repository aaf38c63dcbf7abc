//! ggml block formats on the host: the plane layout quantized matrices are kept in, ggml's
//! reference quantization (Q8_0, Q4_0) and dequantization (every `QType`). The oracle of
//! `shaders/quant.wgsl` and of the integer dot products in `quant_dot.rs`.
//!
//! # Planes
//!
//! A ggml block is f16 scale(s) plus a body of small integers, and its size (34 bytes for
//! Q8_0, 18 for Q4_0, 210 for Q6_K) is not a multiple of 4, so a GPU cannot index a packed
//! run of blocks as `u32`s. Every block is therefore split on load into two planes, row-major
//! over `[rows, blocks per row]`: the **scales plane** (f16, [`QType::scale_halfs`] per block)
//! and the **body plane** (bytes, [`QType::body_bytes`] per block, a multiple of 4, so every
//! block body starts on a word). The planes hold exactly the file's bytes, rearranged; the CPU
//! uses the same layout, so one representation serves every device.
//!
//! | type | scales per block | body |
//! |---|---|---|
//! | Q8_0 | `d` | `qs[32]` (i8) |
//! | Q4_0 | `d` | `qs[16]` (element `j` in the low nibble of byte `j`, `j + 16` in the high) |
//! | Q4_K | `d`, `dmin` | `scales[12]`, `qs[128]` |
//! | Q6_K | `d` | `ql[128]`, `qh[64]`, `scales[16]` (i8) |

use crate::QType;
use half::f16;

/// Byte offset of the scales inside a ggml block (Q6_K keeps its `d` last).
fn scale_offset(q: QType) -> usize {
    match q {
        QType::Q6_K => 208,
        QType::Q8_0 | QType::Q4_0 | QType::Q4_K => 0,
    }
}

/// Splits whole ggml blocks into the two planes (appending to `scales` and `body`).
pub(crate) fn split_blocks(q: QType, bytes: &[u8], scales: &mut Vec<f16>, body: &mut Vec<u8>) {
    let (so, ns) = (scale_offset(q), q.scale_halfs());
    for block in bytes.chunks_exact(q.block_bytes()) {
        for h in 0..ns {
            let at = so + 2 * h;
            scales.push(f16::from_bits(u16::from_le_bytes([
                block[at],
                block[at + 1],
            ])));
        }
        body.extend_from_slice(&block[..so]);
        body.extend_from_slice(&block[so + 2 * ns..]);
    }
}

/// The inverse of [`split_blocks`]: ggml's bytes of `scales.len() / q.scale_halfs()` blocks.
pub(crate) fn join_blocks(q: QType, scales: &[f16], body: &[u8], out: &mut Vec<u8>) {
    let (so, ns, nb) = (scale_offset(q), q.scale_halfs(), q.body_bytes());
    for (s, b) in scales.chunks_exact(ns).zip(body.chunks_exact(nb)) {
        out.extend_from_slice(&b[..so]);
        for h in s {
            out.extend_from_slice(&h.to_bits().to_le_bytes());
        }
        out.extend_from_slice(&b[so..]);
    }
}

/// ggml's `quantize_row_q8_0_ref` for one block: `d = max|x| / 127`, `q = round(x / d)`
/// (half away from zero), `d` stored as f16.
pub(crate) fn quantize_q8_0(x: &[f32], scales: &mut Vec<f16>, body: &mut Vec<u8>) {
    for block in x.chunks_exact(32) {
        let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        scales.push(f16::from_f32(d));
        body.extend(block.iter().map(|v| (v * id).round() as i8 as u8));
    }
}

/// ggml's `quantize_row_q4_0_ref` for one block: the value of largest magnitude `max` (with
/// its sign) gives `d = max / -8`, `q = min(15, trunc(x / d + 8.5))`.
pub(crate) fn quantize_q4_0(x: &[f32], scales: &mut Vec<f16>, body: &mut Vec<u8>) {
    for block in x.chunks_exact(32) {
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in block {
            if amax < v.abs() {
                amax = v.abs();
                max = v;
            }
        }
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        scales.push(f16::from_f32(d));
        let q = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
        body.extend((0..16).map(|j| q(block[j]) | (q(block[j + 16]) << 4)));
    }
}

/// ggml's `get_scale_min_k4`: the 6-bit scale and min of sub-block `j` of a Q4_K block.
pub(crate) fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Dequantizes one block (`out.len() == q.block_len()`) exactly as ggml's `dequantize_row_*`
/// (same operation order, so the same f32 bits).
#[inline(always)]
pub(crate) fn dequantize_block(q: QType, scales: &[f16], body: &[u8], out: &mut [f32]) {
    let d = scales[0].to_f32();
    match q {
        QType::Q8_0 => {
            for (o, &b) in out.iter_mut().zip(body) {
                *o = (b as i8) as f32 * d;
            }
        }
        QType::Q4_0 => {
            for j in 0..16 {
                out[j] = ((body[j] & 0xF) as i32 - 8) as f32 * d;
                out[j + 16] = ((body[j] >> 4) as i32 - 8) as f32 * d;
            }
        }
        QType::Q4_K => {
            let min = scales[1].to_f32();
            let (sc, qs) = body.split_at(12);
            for (k, chunk) in out.chunks_exact_mut(64).enumerate() {
                let q = &qs[32 * k..32 * k + 32];
                let (s1, m1) = scale_min_k4(2 * k, sc);
                let (s2, m2) = scale_min_k4(2 * k + 1, sc);
                let (d1, m1) = (d * s1 as f32, min * m1 as f32);
                let (d2, m2) = (d * s2 as f32, min * m2 as f32);
                for l in 0..32 {
                    chunk[l] = d1 * (q[l] & 0xF) as f32 - m1;
                    chunk[l + 32] = d2 * (q[l] >> 4) as f32 - m2;
                }
            }
        }
        QType::Q6_K => {
            let (ql, rest) = body.split_at(128);
            let (qh, sc) = rest.split_at(64);
            for (k, y) in out.chunks_exact_mut(128).enumerate() {
                let (ql, qh, sc) = (&ql[64 * k..], &qh[32 * k..], &sc[8 * k..]);
                let s = |i: usize| d * (sc[i] as i8) as f32;
                for l in 0..32 {
                    let is = l / 16;
                    let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                    let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                    let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                    let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                    y[l] = s(is) * q1 as f32;
                    y[l + 32] = s(is + 2) * q2 as f32;
                    y[l + 64] = s(is + 4) * q3 as f32;
                    y[l + 96] = s(is + 6) * q4 as f32;
                }
            }
        }
    }
}

/// Dequantizes whole rows: `scales` and `body` hold `out.len() / block_len` blocks.
/// Always inlined (with its block): the prefill panels call it from a function compiled for
/// AVX2, where its loops vectorize; as a call it ran in the baseline build.
#[inline(always)]
pub(crate) fn dequantize(q: QType, scales: &[f16], body: &[u8], out: &mut [f32]) {
    let (ns, nb, bl) = (q.scale_halfs(), q.body_bytes(), q.block_len());
    for ((o, s), b) in out
        .chunks_exact_mut(bl)
        .zip(scales.chunks_exact(ns))
        .zip(body.chunks_exact(nb))
    {
        dequantize_block(q, s, b, o);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_and_join_are_inverse() {
        for q in QType::ALL {
            let bytes: Vec<u8> = (0..3 * q.block_bytes())
                .map(|i| (i * 7 + 3) as u8)
                .collect();
            let (mut s, mut b, mut back) = (Vec::new(), Vec::new(), Vec::new());
            split_blocks(q, &bytes, &mut s, &mut b);
            assert_eq!(s.len(), 3 * q.scale_halfs());
            assert_eq!(b.len(), 3 * q.body_bytes());
            assert_eq!(q.body_bytes() % 4, 0, "{q}");
            join_blocks(q, &s, &b, &mut back);
            assert_eq!(back, bytes, "{q}");
        }
    }

    #[test]
    fn q8_0_and_q4_0_round_trip_within_their_step() {
        let x: Vec<f32> = (0..64)
            .map(|i| ((i * 37 % 64) as f32 - 31.5) / 9.0)
            .collect();
        for q in [QType::Q8_0, QType::Q4_0] {
            let (mut s, mut b) = (Vec::new(), Vec::new());
            if q == QType::Q8_0 {
                quantize_q8_0(&x, &mut s, &mut b);
            } else {
                quantize_q4_0(&x, &mut s, &mut b);
            }
            let mut y = vec![0f32; 64];
            dequantize(q, &s, &b, &mut y);
            for (blk, (xs, ys)) in x.chunks(32).zip(y.chunks(32)).enumerate() {
                let step = s[blk].to_f32().abs();
                // Q4_0 maps the extreme value to -8, so the opposite extreme clips at +7: one
                // whole step there.
                let tol = if q == QType::Q4_0 { step } else { step * 0.5 } + 1e-3;
                for (a, b) in xs.iter().zip(ys) {
                    assert!((a - b).abs() <= tol, "{q}: {a} vs {b}");
                }
            }
        }
    }
}
