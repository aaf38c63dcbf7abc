//! A minimal GGUF v3 writer: metadata and F32/F16/quantized tensors, for tests and for writing
//! random-weight models.

use super::{GgufDType, GgufValue};
use crate::{DType, Error, QTensor, Result, Tensor};
use std::path::Path;

struct Entry {
    name: String,
    /// ggml order (innermost first).
    dims: Vec<u64>,
    ggml_type: u32,
    data: Vec<u8>,
}

/// Builds a GGUF v3 file in memory and writes it (metadata in insertion order, tensors in
/// insertion order, each aligned to `general.alignment`, 32 unless set).
///
/// ```
/// use wgtensor::models::gguf::{GgufFile, GgufValue, GgufWriter};
/// use wgtensor::{Device, Tensor};
/// let mut w = GgufWriter::new();
/// w.add_metadata("llama.block_count", GgufValue::U32(2));
/// w.add_tensor("token_embd.weight", &Tensor::zeros(&[10, 8], wgtensor::DType::F16, &Device::cpu())?)?;
/// let bytes = w.to_bytes();
/// assert_eq!(&bytes[..4], b"GGUF");
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Default)]
pub struct GgufWriter {
    metadata: Vec<(String, GgufValue)>,
    tensors: Vec<Entry>,
    alignment: u64,
}

impl GgufWriter {
    /// An empty file.
    pub fn new() -> GgufWriter {
        GgufWriter {
            alignment: 32,
            ..Default::default()
        }
    }

    /// Adds (or replaces) a metadata key. `general.alignment` (a `U32` power of two) also sets
    /// the alignment the tensors are written with.
    pub fn add_metadata(&mut self, key: &str, value: GgufValue) {
        if key == "general.alignment" {
            if let GgufValue::U32(a) = value {
                if a.is_power_of_two() {
                    self.alignment = a as u64;
                }
            }
        }
        self.metadata.retain(|(k, _)| k != key);
        self.metadata.push((key.to_string(), value));
    }

    /// Adds a dense tensor (F32 written as F32, F16 as F16; it is read back if on a GPU).
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for integer tensors.
    pub fn add_tensor(&mut self, name: &str, t: &Tensor) -> Result<()> {
        let (ty, data) = match t.dtype() {
            DType::F32 => (0, bytemuck::cast_slice(&t.to_vec::<f32>()?).to_vec()),
            DType::F16 => (1, bytemuck::cast_slice(&t.to_vec::<half::f16>()?).to_vec()),
            d => {
                return Err(Error::UnsupportedDType {
                    op: "GgufWriter::add_tensor",
                    dtype: d,
                    device: t.device().to_string(),
                })
            }
        };
        let dims = t.shape().iter().rev().map(|&d| d as u64).collect();
        self.add_raw(name, dims, ty, data);
        Ok(())
    }

    /// Adds a quantized matrix in its ggml block type (`[rows, cols]` is written as dims
    /// `[cols, rows]`).
    pub fn add_qtensor(&mut self, name: &str, q: &QTensor) -> Result<()> {
        let [rows, cols] = q.shape();
        let data = q.to_ggml()?;
        self.add_raw(
            name,
            vec![cols as u64, rows as u64],
            q.qtype().ggml_type(),
            data,
        );
        Ok(())
    }

    /// Adds a tensor as raw bytes of any ggml type id with dims in ggml order (innermost
    /// first). Nothing is checked: tests use this to write files the reader must refuse.
    pub fn add_raw(&mut self, name: &str, dims: Vec<u64>, ggml_type: u32, data: Vec<u8>) {
        self.tensors.push(Entry {
            name: name.to_string(),
            dims,
            ggml_type,
            data,
        });
    }

    /// The dtype a tensor was added with, if wgtensor reads it.
    pub fn tensor_dtype(&self, name: &str) -> Option<GgufDType> {
        let e = self.tensors.iter().find(|e| e.name == name)?;
        GgufDType::from_ggml(e.ggml_type)
    }

    /// The whole file.
    pub fn to_bytes(&self) -> Vec<u8> {
        let a = self.alignment.max(1) as usize;
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            put_str(&mut out, k);
            out.extend_from_slice(&type_id(v).to_le_bytes());
            put_value(&mut out, v);
        }
        let mut offset = 0usize;
        let mut offsets = Vec::with_capacity(self.tensors.len());
        for e in &self.tensors {
            put_str(&mut out, &e.name);
            out.extend_from_slice(&(e.dims.len() as u32).to_le_bytes());
            for d in &e.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&e.ggml_type.to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offsets.push(offset);
            offset = (offset + e.data.len()).div_ceil(a) * a;
        }
        out.resize(out.len().div_ceil(a) * a, 0);
        let start = out.len();
        for (e, off) in self.tensors.iter().zip(offsets) {
            out.resize(start + off, 0);
            out.extend_from_slice(&e.data);
        }
        out
    }

    /// Writes the file.
    ///
    /// # Errors
    /// [`Error::Io`] when it cannot be written.
    pub fn write(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.to_bytes()).map_err(|e| Error::Io {
            op: "GgufWriter::write",
            path: path.display().to_string(),
            message: e.to_string(),
        })
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// GGUF's value type id.
fn type_id(v: &GgufValue) -> u32 {
    match v {
        GgufValue::U8(_) => 0,
        GgufValue::I8(_) => 1,
        GgufValue::U16(_) => 2,
        GgufValue::I16(_) => 3,
        GgufValue::U32(_) => 4,
        GgufValue::I32(_) => 5,
        GgufValue::F32(_) => 6,
        GgufValue::Bool(_) => 7,
        GgufValue::String(_) => 8,
        GgufValue::Array(_) => 9,
        GgufValue::U64(_) => 10,
        GgufValue::I64(_) => 11,
        GgufValue::F64(_) => 12,
    }
}

fn put_value(out: &mut Vec<u8>, v: &GgufValue) {
    match v {
        GgufValue::U8(x) => out.push(*x),
        GgufValue::I8(x) => out.push(*x as u8),
        GgufValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::Bool(x) => out.push(*x as u8),
        GgufValue::String(s) => put_str(out, s),
        GgufValue::Array(items) => {
            // Arrays are homogeneous: the first item's type stands for all (u8 when empty).
            let ty = items.first().map_or(0, type_id);
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for it in items {
                put_value(out, it);
            }
        }
    }
}
