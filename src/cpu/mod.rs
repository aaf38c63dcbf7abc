//! The native CPU backend: the fallback device when no GPU exists and the oracle every GPU kernel
//! is tested against. One file per op family, mirroring `src/gpu/` and `shaders/`.

pub(crate) mod alloc;
pub(crate) mod attention;
pub(crate) mod attention_backward;
pub(crate) mod attention_decode;
pub(crate) mod conv;
pub(crate) mod cross_entropy;
pub(crate) mod elementwise;
pub(crate) mod fast_exp;
pub(crate) mod gather;
pub(crate) mod join;
pub(crate) mod matmul;
pub(crate) mod matvec;
pub(crate) mod norm;
pub(crate) mod normal;
pub(crate) mod pool;
pub(crate) mod quant;
pub(crate) mod quant_dot;
pub(crate) mod reduce;
pub(crate) mod softmax;
pub(crate) mod storage;
pub(crate) mod strided;
pub(crate) mod typed;

/// Whether the AVX2 kernels may run: the CPU has AVX2, FMA and F16C, and the environment
/// variable `scalar_var` is not `1` (which forces the portable loops the tests compare with).
/// Callers cache the answer once per process.
pub(crate) fn avx2_fma_f16c(scalar_var: &str) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::env::var(scalar_var).as_deref() != Ok("1")
            && is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = scalar_var;
        false
    }
}
