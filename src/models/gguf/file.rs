//! `GgufFile`'s methods: opening a file and loading its tensors. Apart from `mod.rs` (which
//! defines the types) so that the reader, which builds those types, is only ever imported
//! from here: the files of `models/gguf/` import one way.

use super::read;
use super::{unpermute_order, GgufDType, GgufFile, GgufTensor, GgufTensorInfo, GgufValue};
use crate::{DType, Device, Error, QTensor, Result};
use std::collections::BTreeMap;
use std::path::Path;

impl GgufFile {
    /// Maps and parses `path`.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be opened; [`Error::Format`] for anything that is
    /// not a well-formed GGUF v2/v3 file wgtensor can read (the message names the field, the
    /// numbers and, for an unknown tensor type, the type).
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        read::open(path.as_ref())
    }

    /// Every metadata key and value (`general.architecture`, `llama.block_count`, ...).
    pub fn metadata(&self) -> &BTreeMap<String, GgufValue> {
        &self.metadata
    }

    /// The tensors, in file order.
    pub fn tensor_infos(&self) -> &[GgufTensorInfo] {
        &self.tensors
    }

    /// One tensor's info by name.
    pub fn tensor_info(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// `general.architecture` (`llama`, `qwen2`, `gpt2`, ...).
    pub fn architecture(&self) -> Option<&str> {
        self.metadata.get("general.architecture")?.as_str()
    }

    /// The format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The data section's alignment (`general.alignment`, 32 by default).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// The path it was opened from.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The raw bytes of tensor `name` inside the mapped file.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the file has no such tensor.
    pub fn tensor_bytes(&self, name: &str) -> Result<(&GgufTensorInfo, &[u8])> {
        let info = self
            .tensor_info(name)
            .ok_or_else(|| Error::InvalidArgument {
                op: "GgufFile::load",
                message: format!("{} has no tensor named {name:?}", self.path),
            })?;
        // In range: checked against the file length by `open`.
        let start = self.data_offset + info.offset as usize;
        Ok((info, &self.map[start..start + info.size_in_bytes()]))
    }

    /// Loads tensor `name` onto `device`: F32/F16/BF16 tensors as a dense [`Tensor`] in
    /// `dense_dtype` (F32 or F16), quantized ones as a [`QTensor`] that stays quantized.
    /// Host memory beyond the mapped file is at most one copy of this tensor.
    ///
    /// Rows come as the file stores them: llama.cpp's `attn_q`/`attn_k` rows are permuted for
    /// its RoPE layout; [`GgufFile::load_unpermuted`] (or [`unpermute_qk`]) undoes that.
    ///
    /// [`Tensor`]: crate::Tensor
    /// [`unpermute_qk`]: super::unpermute_qk
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an unknown name or a `dense_dtype` other than F32/F16;
    /// allocation errors of the device.
    pub fn load(&self, name: &str, device: &Device, dense_dtype: DType) -> Result<GgufTensor> {
        self.load_rows(name, device, dense_dtype, None)
    }

    /// [`GgufFile::load`] with llama.cpp's q/k row permutation undone for `n_head` heads (pass
    /// the number of key-value heads for `attn_k`): rows come back in Hugging Face's order.
    /// Works for dense and quantized tensors and for biases (1-D).
    ///
    /// # Errors
    /// As [`GgufFile::load`], and [`Error::InvalidArgument`] when the rows are not `n_head`
    /// heads of an even size.
    pub fn load_unpermuted(
        &self,
        name: &str,
        device: &Device,
        dense_dtype: DType,
        n_head: usize,
    ) -> Result<GgufTensor> {
        self.load_rows(name, device, dense_dtype, Some(n_head))
    }

    fn load_rows(
        &self,
        name: &str,
        device: &Device,
        dense_dtype: DType,
        n_head: Option<usize>,
    ) -> Result<GgufTensor> {
        const OP: &str = "GgufFile::load";
        if !matches!(dense_dtype, DType::F32 | DType::F16) {
            return Err(Error::InvalidArgument {
                op: OP,
                message: format!("dense_dtype must be F32 or F16, got {dense_dtype}"),
            });
        }
        let (info, file_bytes) = self.tensor_bytes(name)?;
        let bytes = file_bytes;
        let shape = info.shape();
        // Rows are the outermost dims; a row is the innermost dim (a 1-D tensor: one value).
        let quantized = matches!(info.dtype, GgufDType::Quantized(_));
        let (rows, row_len) = match shape.len() {
            0 => (1, 1),
            1 if quantized => (1, shape[0]),
            1 => (shape[0], 1),
            _ => (
                shape[..shape.len() - 1].iter().product(),
                shape[shape.len() - 1],
            ),
        };
        let permuted;
        let bytes = match n_head {
            None => bytes,
            Some(h) => {
                let order = unpermute_order(rows, h)?;
                let row_bytes = bytes.len() / rows.max(1);
                let mut v = crate::storage::try_vec(OP, bytes.len())?;
                for &src in &order {
                    v.extend_from_slice(&bytes[src * row_bytes..(src + 1) * row_bytes]);
                }
                permuted = v;
                &permuted[..]
            }
        };
        let tensor = match info.dtype {
            GgufDType::Quantized(q) => {
                GgufTensor::Quantized(QTensor::from_ggml(q, [rows, row_len], bytes, device)?)
            }
            dense => {
                let release = |run: &[u8]| crate::nn::load::release_pages(&self.map, run);
                let t = read::dense(OP, dense, bytes, &shape, device, dense_dtype, &release)?;
                GgufTensor::Dense(t)
            }
        };
        // The tensor holds its own copy now: the file's pages need not stay resident.
        crate::nn::load::release_pages(&self.map, file_bytes);
        Ok(tensor)
    }
}
