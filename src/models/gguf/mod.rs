//! GGUF files (version 3, llama.cpp's model format): metadata, tensor infos and memory-mapped
//! tensor data, read into [`Tensor`]s (F32, F16, BF16) and [`QTensor`]s (Q8_0, Q4_0, Q4_K, Q6_K)
//! on any device; [`GgufWriter`] writes them.
//!
//! The reader trusts nothing in the file: every count, length, dimension and offset is checked
//! against the file's size before anything is allocated, so a corrupt or hostile header is an
//! [`Error::Format`] naming the problem, never a panic or a huge allocation.
//!
//! ```
//! use wgtensor::models::gguf::{GgufFile, GgufValue, GgufWriter};
//! use wgtensor::{DType, Device, QTensor, QType, Tensor};
//! let dir = std::env::temp_dir().join(format!("gguf_doc_{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let path = dir.join("tiny.gguf");
//! let w = Tensor::randn(&[4, 64], &Device::cpu())?;
//! let mut file = GgufWriter::new();
//! file.add_metadata("general.architecture", GgufValue::String("llama".into()));
//! file.add_tensor("output_norm.weight", &Tensor::ones(&[64], DType::F32, &Device::cpu())?)?;
//! file.add_qtensor("output.weight", &QTensor::quantize(&w, QType::Q8_0)?)?;
//! file.write(&path)?;
//!
//! let f = GgufFile::open(&path)?;
//! assert_eq!(f.architecture(), Some("llama"));
//! let out = f.load("output.weight", &Device::cpu(), DType::F32)?;
//! assert_eq!(out.shape(), vec![4, 64]);
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod file;
mod read;
mod writer;

pub use writer::GgufWriter;

use crate::{Device, Error, QTensor, QType, Result, Tensor};
use std::collections::BTreeMap;

/// The ggml tensor types wgtensor reads: dense floats and the block-quantized [`QType`]s.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgufDType {
    /// ggml type 0.
    F32,
    /// ggml type 1.
    F16,
    /// ggml type 30 (bfloat16).
    BF16,
    /// Block-quantized (Q8_0 = 8, Q4_0 = 2, Q4_K = 12, Q6_K = 14).
    Quantized(QType),
}

impl GgufDType {
    /// From ggml's type id, or `None` for a type wgtensor does not read.
    pub fn from_ggml(id: u32) -> Option<GgufDType> {
        Some(match id {
            0 => GgufDType::F32,
            1 => GgufDType::F16,
            30 => GgufDType::BF16,
            _ => GgufDType::Quantized(QType::ALL.into_iter().find(|q| q.ggml_type() == id)?),
        })
    }

    /// ggml's type id.
    pub fn ggml_type(self) -> u32 {
        match self {
            GgufDType::F32 => 0,
            GgufDType::F16 => 1,
            GgufDType::BF16 => 30,
            GgufDType::Quantized(q) => q.ggml_type(),
        }
    }

    /// Values per block (1 for the dense types).
    pub fn block_len(self) -> usize {
        match self {
            GgufDType::Quantized(q) => q.block_len(),
            _ => 1,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            GgufDType::F32 => 4,
            GgufDType::F16 | GgufDType::BF16 => 2,
            GgufDType::Quantized(q) => q.block_bytes(),
        }
    }

    /// ggml's name.
    pub fn as_str(self) -> &'static str {
        match self {
            GgufDType::F32 => "F32",
            GgufDType::F16 => "F16",
            GgufDType::BF16 => "BF16",
            GgufDType::Quantized(q) => q.as_str(),
        }
    }
}

/// ggml's name of a type id, known to wgtensor or not (for error messages).
pub(crate) fn ggml_type_name(id: u32) -> String {
    const NAMES: [&str; 31] = [
        "F32", "F16", "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K",
        "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL",
        "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16",
    ];
    NAMES.get(id as usize).map_or_else(
        || format!("unknown type {id}"),
        |n| format!("{n} (ggml type {id})"),
    )
}

/// A typed metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    /// Values of one type.
    Array(Vec<GgufValue>),
}

impl GgufValue {
    /// An integer value (any width, non-negative) as `u64`; `None` otherwise.
    ///
    /// ```
    /// use wgtensor::models::gguf::GgufValue;
    /// assert_eq!(GgufValue::U32(7).as_u64(), Some(7));
    /// assert_eq!(GgufValue::I32(-1).as_u64(), None);
    /// ```
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            GgufValue::U8(v) => Some(v.into()),
            GgufValue::U16(v) => Some(v.into()),
            GgufValue::U32(v) => Some(v.into()),
            GgufValue::U64(v) => Some(v),
            GgufValue::I8(v) => u64::try_from(v).ok(),
            GgufValue::I16(v) => u64::try_from(v).ok(),
            GgufValue::I32(v) => u64::try_from(v).ok(),
            GgufValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// A number (integer or float) as `f64`; `None` otherwise.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(v.into()),
            GgufValue::F64(v) => Some(v),
            GgufValue::I8(v) => Some(v.into()),
            GgufValue::I16(v) => Some(v.into()),
            GgufValue::I32(v) => Some(v.into()),
            GgufValue::I64(v) => Some(v as f64),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    /// The string of a `String` value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// The values of an `Array`.
    pub fn as_array(&self) -> Option<&[GgufValue]> {
        match self {
            GgufValue::Array(v) => Some(v),
            _ => None,
        }
    }

    /// A `Bool` value.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            GgufValue::Bool(b) => Some(b),
            _ => None,
        }
    }
}

/// Where one tensor lives in the file and what it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufTensorInfo {
    /// llama.cpp's name (`blk.0.attn_q.weight`, ...).
    pub name: String,
    /// Dims as the file lists them: innermost (contiguous) first, ggml's `ne`.
    pub dims: Vec<u64>,
    /// The element type.
    pub dtype: GgufDType,
    /// Byte offset inside the data section (a multiple of the file's alignment).
    pub offset: u64,
}

impl GgufTensorInfo {
    /// The shape outermost first, as wgtensor and PyTorch write it (`dims` reversed): a
    /// `[rows, cols]` matrix has `dims == [cols, rows]`.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }

    /// Number of values.
    pub fn numel(&self) -> usize {
        self.dims.iter().map(|&d| d as usize).product()
    }

    /// Bytes of tensor data (checked against the file when it was opened).
    pub fn size_in_bytes(&self) -> usize {
        self.numel() / self.dtype.block_len() * self.dtype.block_bytes()
    }
}

/// A tensor loaded from a GGUF file.
#[derive(Clone, Debug)]
pub enum GgufTensor {
    /// F32, F16 and BF16 tensors, in the dtype asked for.
    Dense(Tensor),
    /// Block-quantized matrices, still quantized (`[rows, cols]`; tensors of more dims are
    /// flattened to `[product of outer dims, innermost dim]`).
    Quantized(QTensor),
}

impl GgufTensor {
    /// The shape, outermost first.
    pub fn shape(&self) -> Vec<usize> {
        match self {
            GgufTensor::Dense(t) => t.shape().to_vec(),
            GgufTensor::Quantized(q) => q.shape().to_vec(),
        }
    }

    /// The device holding it.
    pub fn device(&self) -> Device {
        match self {
            GgufTensor::Dense(t) => t.device().clone(),
            GgufTensor::Quantized(q) => q.device(),
        }
    }
}

/// A memory-mapped GGUF file with its parsed header. Tensor data is read only when a tensor
/// is loaded (the OS pages in just its bytes).
pub struct GgufFile {
    path: String,
    map: memmap2::Mmap,
    version: u32,
    alignment: u64,
    data_offset: usize,
    metadata: BTreeMap<String, GgufValue>,
    tensors: Vec<GgufTensorInfo>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GgufFile({}, v{}, {} metadata keys, {} tensors)",
            self.path,
            self.version,
            self.metadata.len(),
            self.tensors.len()
        )
    }
}

/// For each row of the Hugging Face layout, the row of llama.cpp's permuted q/k projection it
/// comes from (`rows` = `n_head` heads of `rows / n_head` rows). llama.cpp's converter stores
/// head `h` row `j * half + i` (j in 0..2, i in 0..half) at row `2 * i + j`.
///
/// ```
/// use wgtensor::models::gguf::unpermute_order;
/// assert_eq!(unpermute_order(4, 1)?, vec![0, 2, 1, 3]);
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub fn unpermute_order(rows: usize, n_head: usize) -> Result<Vec<usize>> {
    if n_head == 0 || !rows.is_multiple_of(n_head) || !(rows / n_head).is_multiple_of(2) {
        return Err(Error::InvalidArgument {
            op: "unpermute_qk",
            message: format!(
                "{rows} rows are not {n_head} heads of an even size; pass the number of heads \
                 (key-value heads for attn_k)"
            ),
        });
    }
    let hd = rows / n_head;
    let half = hd / 2;
    Ok((0..rows)
        .map(|r| {
            let (h, k) = (r / hd, r % hd);
            let (j, i) = (k / half, k % half);
            h * hd + 2 * i + j
        })
        .collect())
}

/// Undoes llama.cpp's q/k row permutation on a loaded tensor (dense: along dim 0, by an
/// `index_select` on its device; quantized: whole block rows). See
/// [`GgufFile::load_unpermuted`], which does it while loading instead.
///
/// ```
/// use wgtensor::models::gguf::{unpermute_qk, GgufTensor};
/// use wgtensor::{Device, Tensor};
/// let t = Tensor::from_vec(vec![0f32, 1.0, 2.0, 3.0], &[4, 1], &Device::cpu())?;
/// let GgufTensor::Dense(u) = unpermute_qk(&GgufTensor::Dense(t), 1)? else { unreachable!() };
/// assert_eq!(u.to_vec::<f32>()?, vec![0.0, 2.0, 1.0, 3.0]);
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub fn unpermute_qk(t: &GgufTensor, n_head: usize) -> Result<GgufTensor> {
    match t {
        GgufTensor::Dense(t) => {
            let rows = t.shape().first().copied().unwrap_or(1);
            let order: Vec<u32> = unpermute_order(rows, n_head)?
                .into_iter()
                .map(|r| r as u32)
                .collect();
            let ids = Tensor::from_vec(order, &[rows], t.device())?;
            Ok(GgufTensor::Dense(t.index_select(0, &ids)?))
        }
        GgufTensor::Quantized(q) => {
            let [rows, _] = q.shape();
            let order = unpermute_order(rows, n_head)?;
            let bytes = q.to_ggml()?;
            let row_bytes = bytes.len() / rows;
            let mut v = Vec::with_capacity(bytes.len());
            for &src in &order {
                v.extend_from_slice(&bytes[src * row_bytes..(src + 1) * row_bytes]);
            }
            Ok(GgufTensor::Quantized(QTensor::from_ggml(
                q.qtype(),
                q.shape(),
                &v,
                &q.device(),
            )?))
        }
    }
}
