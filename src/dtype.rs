//! Element types.

use half::f16;
use std::fmt;

/// The element type of a tensor.
///
/// Every dtype can be created, moved between devices, read back and converted with
/// [`crate::Tensor::to_dtype`]. What computes, on the CPU and on every GPU alike:
///
/// - [`DType::F32`]: every op.
/// - [`DType::F16`]: every op. Stored two per 32-bit word on GPUs (half the memory and transfer
///   bytes of f32, on every adapter). Elementwise math runs in f32 and rounds once to f16 (so
///   `+ - * /` are exactly the correctly rounded f16 results), natively in f16 where the adapter
///   has `SHADER_F16`; matmul, reductions and softmax convert to f32, accumulate in f32 and
///   convert the result back.
/// - [`DType::I32`] / [`DType::U32`]: arithmetic with WGSL semantics on every device: `+ - *`
///   and `neg` wrap; `x / 0 == x`, `i32::MIN / -1 == i32::MIN`, `x % 0 == 0`,
///   `i32::MIN % -1 == 0`; `%` truncates (the sign of the dividend, like C's `fmod`). Sums and
///   products wrap in the same dtype (there is no i64); `mean` is an error (as PyTorch).
///   Float-only ops (exp, log, sqrt, sigmoid, tanh, gelu, softplus, silu, sin, cos, pow) and
///   matmul return [`crate::Error::UnsupportedDType`], naming `to_dtype` as the fix.
/// - [`DType::U8`]: storage and masks (comparison results, `where_cond` conditions),
///   comparisons, `where_cond` values, cat/stack and conversion; no arithmetic.
///
/// **Mixed dtypes are an error, never a silent promotion**: `f32 + i32` returns
/// [`crate::Error::DTypeMismatch`] naming both dtypes and suggesting `.to_dtype()`. Scalar
/// arguments are `f32`; on integer tensors a scalar (or clamp bound) must be an integer in the
/// dtype's range, else [`crate::Error::InvalidArgument`] (`±inf` clamp bounds mean "no bound").
///
/// ```
/// use wgtensor::{DType, Device, Tensor};
/// let t = Tensor::zeros(&[2, 3], DType::F32, &Device::cpu())?;
/// assert_eq!(t.dtype(), DType::F32);
/// assert_eq!(DType::F16.size_in_bytes(), 2);
/// let i = Tensor::from_vec(vec![7i32, -7], &[2], &Device::cpu())?;
/// let f = Tensor::zeros(&[2], DType::F32, &Device::cpu())?;
/// assert!(i.add(&f).is_err()); // i32 + f32: DTypeMismatch
/// assert_eq!(i.add(&f.to_dtype(DType::I32)?)?.to_vec::<i32>()?, vec![7, -7]);
/// assert_eq!(i.div_scalar(0.0)?.to_vec::<i32>()?, vec![7, -7]); // WGSL: x / 0 == x
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 16-bit IEEE float, stored two per 32-bit word on GPUs.
    F16,
    /// 32-bit signed integer.
    I32,
    /// 32-bit unsigned integer.
    U32,
    /// 8-bit unsigned integer (masks).
    U8,
}

impl DType {
    /// Bytes per element.
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 => 2,
            DType::U8 => 1,
        }
    }

    /// Whether the dtype is a floating-point type.
    pub fn is_float(self) -> bool {
        match self {
            DType::F32 | DType::F16 => true,
            DType::I32 | DType::U32 | DType::U8 => false,
        }
    }

    /// PyTorch-style name (`float32`, `float16`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F16 => "float16",
            DType::I32 => "int32",
            DType::U32 => "uint32",
            DType::U8 => "uint8",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A Rust type that is the element type of some [`DType`].
///
/// Implemented for `f32`, `half::f16`, `i32`, `u32` and `u8`; used by
/// [`crate::Tensor::from_vec`] and [`crate::Tensor::to_vec`].
pub trait WithDType:
    bytemuck::Pod + Copy + Send + Sync + PartialEq + fmt::Debug + fmt::Display + 'static
{
    /// The matching dtype.
    const DTYPE: DType;
    /// Lossy conversion from `f64` (used by `full`, `arange`).
    fn from_f64(v: f64) -> Self;
    /// Conversion to `f64` (used for printing).
    fn to_f64(self) -> f64;
}

macro_rules! with_dtype {
    ($t:ty, $d:ident, $from:expr, $to:expr) => {
        impl WithDType for $t {
            const DTYPE: DType = DType::$d;
            fn from_f64(v: f64) -> Self {
                $from(v)
            }
            fn to_f64(self) -> f64 {
                $to(self)
            }
        }
    };
}

with_dtype!(f32, F32, |v| v as f32, |v: f32| v as f64);
with_dtype!(f16, F16, f16::from_f64, |v: f16| v.to_f64());
with_dtype!(i32, I32, |v| v as i32, |v: i32| v as f64);
with_dtype!(u32, U32, |v| v as u32, |v: u32| v as f64);
with_dtype!(u8, U8, |v| v as u8, |v: u8| v as f64);

/// A ggml block-quantized weight format, the element type of a [`crate::QTensor`].
///
/// Each row of a quantized matrix is cut into blocks of [`QType::block_len`] values along its
/// columns; a block stores f16 scale(s) and small integers. The byte layout of a block is
/// exactly ggml's (what GGUF files hold), so weights load without conversion.
///
/// | type | values per block | bytes per block | value |
/// |---|---|---|---|
/// | `Q8_0` | 32 | 34 | `d * q`, `q` in -128..=127 |
/// | `Q4_0` | 32 | 18 | `d * (q - 8)`, `q` in 0..=15 |
/// | `Q4_K` | 256 | 144 | `d * sc * q - dmin * m`, 8 sub-blocks of 32 with 6-bit `sc`, `m` |
/// | `Q6_K` | 256 | 210 | `d * sc * (q - 32)`, 16 sub-blocks of 16 with 8-bit `sc` |
///
/// ```
/// use wgtensor::QType;
/// assert_eq!(QType::Q8_0.block_len(), 32);
/// assert_eq!(QType::Q4_0.block_bytes(), 18);
/// assert_eq!(QType::Q6_K.to_string(), "Q6_K");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum QType {
    /// 32 values: one f16 scale and 32 signed bytes.
    Q8_0,
    /// 32 values: one f16 scale and 32 nibbles (offset by 8).
    Q4_0,
    /// 256 values: f16 super-scales `d`, `dmin`, 6-bit sub-block scales and mins, 4-bit values.
    Q4_K,
    /// 256 values: 6-bit values, 8-bit sub-block scales, one f16 super-scale.
    Q6_K,
}

impl QType {
    /// Every quantized type, in ggml's order.
    pub const ALL: [QType; 4] = [QType::Q8_0, QType::Q4_0, QType::Q4_K, QType::Q6_K];

    /// Values per block (the column count of a quantized matrix is a multiple of it).
    pub fn block_len(self) -> usize {
        match self {
            QType::Q8_0 | QType::Q4_0 => 32,
            QType::Q4_K | QType::Q6_K => 256,
        }
    }

    /// Bytes per block in ggml's layout.
    pub fn block_bytes(self) -> usize {
        match self {
            QType::Q8_0 => 34,
            QType::Q4_0 => 18,
            QType::Q4_K => 144,
            QType::Q6_K => 210,
        }
    }

    /// f16 scales per block in the scales plane a quantized matrix is kept in (the block's
    /// other bytes form its body plane; `cpu/quant.rs` describes both planes).
    pub(crate) fn scale_halfs(self) -> usize {
        match self {
            QType::Q4_K => 2,
            QType::Q8_0 | QType::Q4_0 | QType::Q6_K => 1,
        }
    }

    /// Bytes per block in the body plane: a multiple of 4, so a GPU reads every block's body
    /// as whole `u32` words.
    pub(crate) fn body_bytes(self) -> usize {
        self.block_bytes() - 2 * self.scale_halfs()
    }

    /// ggml's name (`Q8_0`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            QType::Q8_0 => "Q8_0",
            QType::Q4_0 => "Q4_0",
            QType::Q4_K => "Q4_K",
            QType::Q6_K => "Q6_K",
        }
    }

    /// ggml's type id (`ggml_type`), as GGUF tensor infos store it.
    pub fn ggml_type(self) -> u32 {
        match self {
            QType::Q8_0 => 8,
            QType::Q4_0 => 2,
            QType::Q4_K => 12,
            QType::Q6_K => 14,
        }
    }
}

impl fmt::Display for QType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
