//! Activation rows quantized to Q8 blocks, the fixed order in which 8 lanes are added, and the
//! switch between the AVX2 kernels and their portable twins: what the integer products of
//! `quant_dot.rs` (Q8_0, Q4_0) and `quant_k.rs` (Q4_K, Q6_K) share. A file of its own so that
//! both import it and neither imports the other.

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
pub(crate) fn tree(a: [f32; 8]) -> f32 {
    ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))
}

/// Whether the AVX2 kernels run (and `WGTENSOR_QUANT_SCALAR=1` does not force the portable
/// loop, which the tests compare with).
pub(crate) fn use_avx2() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| super::avx2_fma_f16c("WGTENSOR_QUANT_SCALAR"))
}
