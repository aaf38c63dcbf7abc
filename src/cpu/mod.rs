//! The native CPU backend: the fallback device when no GPU exists and the oracle every GPU kernel
//! is tested against. One file per op family, mirroring `src/gpu/` and `shaders/`.

/// `fn $name(args)` that runs `$body(args)` compiled for the listed x86-64 target features when
/// the CPU has them (`is_x86_feature_detected!` caches its answer), else the portable build.
/// `$body` must be `#[inline(always)]`, so the feature build gets its own vectorised copy; Rust
/// never contracts a multiply and an add into an FMA on its own, so both builds give the same
/// bits.
macro_rules! multiversion {
    ($(#[$m:meta])* $v:vis fn $name:ident($($a:ident: $t:ty),* $(,)?) => $body:ident, [$($f:tt),+]) => {
        multiversion! { $(#[$m])* $v fn $name[]($($a: $t),*) => $body, [$($f),+] }
    };
    // Generic parameters go in square brackets: `fn name[T: Copy, U](..)`.
    ($(#[$m:meta])* $v:vis fn $name:ident[$($g:tt)*]($($a:ident: $t:ty),* $(,)?) => $body:ident, [$($f:tt),+]) => {
        $(#[$m])*
        $v fn $name<$($g)*>($($a: $t),*) {
            #[cfg(target_arch = "x86_64")]
            if $(std::arch::is_x86_feature_detected!($f))&&+ {
                $(#[target_feature(enable = $f)])+
                fn with_features<$($g)*>($($a: $t),*) {
                    $body($($a),*)
                }
                // SAFETY: the CPU supports every feature enabled (checked just above).
                return unsafe { with_features($($a),*) };
            }
            $body($($a),*)
        }
    };
}

/// `a · b` over 8 lanes (element `i` to lane `i % 8`), the lanes added in a fixed tree: the
/// lanes vectorize (in whatever ISA the caller is compiled for), where one running sum is a
/// chain of dependent additions, and the order, hence the bits, is the same everywhere.
/// Used by the decode attention and the float path of quantized products.
#[inline(always)]
pub(crate) fn dot8(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    for (l, (x, y)) in ar.iter().zip(br).enumerate() {
        acc[l] += x * y;
    }
    ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
}

pub(crate) mod adam;
pub(crate) mod alloc;
pub(crate) mod attention;
pub(crate) mod attention_backward;
pub(crate) mod attention_decode;
pub(crate) mod backend;
pub(crate) mod batch_norm;
pub(crate) mod conv;
pub(crate) mod conv_direct;
pub(crate) mod cross_entropy;
pub(crate) mod elementwise;
pub(crate) mod f16_weight;
pub(crate) mod fast_exp;
pub(crate) mod fused;
pub(crate) mod gather;
pub(crate) mod join;
pub(crate) mod matmul;
pub(crate) mod matvec;
pub(crate) mod norm;
pub(crate) mod normal;
pub(crate) mod panels;
pub(crate) mod pool;
pub(crate) mod quant;
pub(crate) mod quant_act;
pub(crate) mod quant_device;
pub(crate) mod quant_dot;
pub(crate) mod quant_k;
pub(crate) mod reduce;
pub(crate) mod softmax;
pub(crate) mod storage;
pub(crate) mod stream;
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
