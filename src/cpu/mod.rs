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
