//! Standard normal samples from two Philox words in integer fixed point: the CPU twin of
//! `shaders/normal.wgsl` (same tables, same steps), so `randn` gives the same bits on the CPU
//! and every adapter. See the shader for the method; absolute error below 1e-6.
//!
//! Also the counter-based generator those words come from (Philox4x32-10) and the host sampler
//! of `rand`/`randn`: the backend's side of `src/random.rs`, which keeps only the global state.

const LN2_Q26: i32 = 46516320;
const TWO_PI_Q29: u32 = 3373259426;
const SIXTH_Q32: u32 = 715827883;

// The three tables are read from `shaders/normal.wgsl` at compile time, so the CPU and the
// kernels cannot drift apart: one copy of the numbers, in the shader.
const SHADER: &str = include_str!("../../shaders/normal.wgsl");
const LN_M0: [u32; 256] = shader_table(SHADER, "LN_M0");
const RECIP_M0: [u32; 256] = shader_table(SHADER, "RECIP_M0");
/// Signed Q30 values, kept as their two's-complement words (`as i32` where read).
const COS_TURN: [u32; 256] = shader_table(SHADER, "COS_TURN");

/// The 256 integer literals (`12u`, `-34i`, as 32-bit words) of the WGSL array
/// `var<private> {name}: ... = array<..>(...)` in `src`. Runs at compile time: a missing table
/// or a wrong count stops the build.
const fn shader_table(src: &str, name: &str) -> [u32; 256] {
    let (s, n) = (src.as_bytes(), name.as_bytes());
    let decl = b"var<private> ";
    // Find `var<private> {name}:`.
    let mut i = 0;
    let mut at = usize::MAX;
    while at == usize::MAX && i + decl.len() + n.len() < s.len() {
        let mut k = 0;
        while k < decl.len() && s[i + k] == decl[k] {
            k += 1;
        }
        let mut m = 0;
        while k == decl.len() && m < n.len() && s[i + k + m] == n[m] {
            m += 1;
        }
        if k == decl.len() && m == n.len() && s[i + k + m] == b':' {
            at = i + k + m;
        }
        i += 1;
    }
    assert!(at != usize::MAX, "normal.wgsl lacks a table");
    // The values start after the `(` that follows the `=`.
    while s[at] != b'=' {
        at += 1;
    }
    while s[at] != b'(' {
        at += 1;
    }
    at += 1;
    let mut out = [0u32; 256];
    let mut count = 0;
    while s[at] != b')' {
        let c = s[at];
        if c == b'-' || c.is_ascii_digit() {
            let neg = c == b'-';
            if neg {
                at += 1;
            }
            let mut v: i64 = 0;
            while s[at].is_ascii_digit() {
                v = v * 10 + (s[at] - b'0') as i64;
                at += 1;
            }
            assert!(count < 256, "a normal.wgsl table has more than 256 entries");
            let v = if neg { -v } else { v };
            out[count] = v as u32;
            count += 1;
        } else {
            // Separators and the literal suffixes `u` / `i`.
            at += 1;
        }
    }
    assert!(
        count == 256,
        "a normal.wgsl table has fewer than 256 entries"
    );
    out
}

#[inline]
fn mulhi(a: u32, b: u32) -> u32 {
    ((u64::from(a) * u64::from(b)) >> 32) as u32
}

/// `(a * b) >> 32` for a signed `a` (`|a| <= 2^30`), rounded toward zero.
#[inline]
fn smulhi(a: i32, b: u32) -> i32 {
    let p = mulhi(a.unsigned_abs(), b) as i32;
    if a < 0 {
        -p
    } else {
        p
    }
}

/// `sqrt(-2 ln(a / 2^24))` in Q29 for `a` in `1..=2^24`.
#[inline]
fn radius(a: u32) -> u32 {
    let x = 16_777_216 - a;
    if x < 16_384 {
        // Near u1 = 1: -ln(1 - x) = x + x^2 / 2 + x^3 / 3 in Q40, so a tiny L keeps its bits.
        let x2 = x * x;
        let l = 2 * ((x << 16) + (x2 >> 9) + mulhi(mulhi(x2, x), 1_431_655_765));
        return (u64::from(l) << 18).isqrt() as u32;
    }
    let e = 31 - a.leading_zeros();
    let m = a << (31 - e);
    let idx = ((m >> 23) & 255) as usize;
    let d = mulhi((m & 0x7F_FFFF) << 8, RECIP_M0[idx]);
    let sq = mulhi(d << 2, d << 2);
    let lnf = d - (sq >> 11);
    let lnm = ((LN_M0[idx] >> 6) + (lnf >> 12)) as i32;
    let half = ((24 - e) as i32 * LN2_Q26 - lnm).max(0);
    ((u64::from(half as u32 * 2)) << 32).isqrt() as u32
}

/// Two words as a standard normal f32.
#[inline]
pub(crate) fn normal(w0: u32, w1: u32) -> f32 {
    let r = radius(16_777_216 - (w0 & 0xFF_FFFF));
    // cos(2 pi B / 2^24), Q29.
    let b = w1 & 0xFF_FFFF;
    let k = (b >> 16) as usize;
    let phi = mulhi((b & 0xFFFF) << 16, TWO_PI_Q29);
    let phi2 = mulhi(phi, phi);
    let cos_phi = 2_147_483_648 - (phi2 >> 12);
    let sin_phi = (phi >> 6) - (mulhi(mulhi(phi2, phi), SIXTH_Q32) >> 16);
    let (cos_k, sin_k) = (COS_TURN[k] as i32, COS_TURN[(k + 192) & 255] as i32);
    let c = smulhi(cos_k, cos_phi) - smulhi(sin_k, sin_phi);
    // z = r c: Q29 x Q29 -> Q26, then toward zero to Q21 (exact in f32).
    let mag = mulhi(r, c.unsigned_abs()) >> 5;
    let z = mag as f32 * (1.0 / 2_097_152.0);
    if c < 0 {
        -z
    } else {
        z
    }
}

// ---- Philox4x32-10 and the host sampler (the CPU twin of `shaders/common.wgsl::philox`) ----

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// Philox4x32-10 (Salmon et al., Random123): 10 rounds of multiply-xor over a 128-bit counter.
/// `shaders/common.wgsl::philox` is the same function.
pub(crate) fn philox(mut c: [u32; 4], mut k: [u32; 2]) -> [u32; 4] {
    for round in 0..10 {
        if round > 0 {
            k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
        }
        let p0 = M0 as u64 * c[0] as u64;
        let p1 = M1 as u64 * c[2] as u64;
        let (hi0, lo0) = ((p0 >> 32) as u32, p0 as u32);
        let (hi1, lo1) = ((p1 >> 32) as u32, p1 as u32);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
    }
    c
}

/// The four words of element `e` of an op that took offsets from `offset` with `seed`.
#[inline]
pub(crate) fn words(seed: u64, offset: u64, e: u64) -> [u32; 4] {
    let c = offset.wrapping_add(e);
    philox(
        [c as u32, (c >> 32) as u32, 0, 0],
        [seed as u32, (seed >> 32) as u32],
    )
}

/// A word as a uniform f32 in `[0, 1)`: its low 24 bits times 2^-24 (exact; PyTorch's recipe).
#[inline]
pub(crate) fn uniform(w: u32) -> f32 {
    (w & 0xFF_FFFF) as f32 * (1.0 / 16_777_216.0)
}

pub(crate) use crate::ops::program::Dist;

/// `n` samples of `dist` on the host, element `e` from offset `offset + e`.
pub(crate) fn sample_host(dist: Dist, seed: u64, offset: u64, n: usize) -> crate::Result<Vec<f32>> {
    use rayon::prelude::*;
    let mut v = super::alloc::try_vec::<f32>("rand", n)?;
    v.resize(n, 0.0);
    let draw = |e: usize| {
        let w = words(seed, offset, e as u64);
        match dist {
            Dist::Uniform => uniform(w[0]),
            Dist::Normal => normal(w[0], w[1]),
        }
    };
    if n >= super::strided::PAR_THRESHOLD {
        v.par_iter_mut().enumerate().for_each(|(e, o)| *o = draw(e));
    } else {
        v.iter_mut().enumerate().for_each(|(e, o)| *o = draw(e));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::{normal, philox, uniform, COS_TURN, LN_M0, RECIP_M0};

    #[test]
    fn matches_box_muller_in_f64_within_1e6() {
        let mut worst = 0f64;
        for i in 0..200_000u32 {
            let w0 = i.wrapping_mul(2_654_435_761);
            let w1 = i.wrapping_mul(2_246_822_519) ^ 0x9E37_79B9;
            let u1 = 1.0 - f64::from(w0 & 0xFF_FFFF) / 16_777_216.0;
            let u2 = f64::from(w1 & 0xFF_FFFF) / 16_777_216.0;
            let exact = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
            worst = worst.max((f64::from(normal(w0, w1)) - exact).abs());
        }
        assert!(worst < 1e-6, "worst error {worst}");
        // The extremes: u1 = 1 (A = 2^24) gives 0, the smallest u1 the largest magnitude.
        assert_eq!(normal(0, 0), 0.0);
        let big = f64::from(normal(0xFF_FFFF, 0));
        assert!(
            (big - (2.0 * 24.0 * std::f64::consts::LN_2).sqrt()).abs() < 1e-5,
            "{big}"
        );
    }

    #[test]
    fn philox_matches_the_random123_known_answers() {
        // Known-answer vectors of Random123's kat_vectors for philox4x32_10.
        assert_eq!(
            philox([0, 0, 0, 0], [0, 0]),
            [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
        );
        assert_eq!(
            philox([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
        );
        assert_eq!(
            philox(
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0]
            ),
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
        );
    }

    #[test]
    fn tables_are_read_from_the_shader() {
        // First, last and sign-crossing entries of the three tables of `normal.wgsl`.
        assert_eq!((LN_M0[0], LN_M0[1], LN_M0[255]), (0, 16744533, 2968647661));
        assert_eq!((RECIP_M0[0], RECIP_M0[255]), (2147483648, 1075843080));
        let cos = |i: usize| COS_TURN[i] as i32;
        assert_eq!((cos(0), cos(64), cos(65)), (1073741824, 0, -26350943));
        assert_eq!((cos(128), cos(255)), (-1073741824, 1073418433));
    }

    #[test]
    fn uniform_is_in_the_unit_interval() {
        assert_eq!(uniform(0), 0.0);
        assert!(uniform(u32::MAX) < 1.0);
        assert!(normal(u32::MAX, 0).is_finite());
    }
}
