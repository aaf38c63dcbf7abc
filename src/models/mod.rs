//! Pretrained language models on any device (feature `models`).
//!
//! The top layer of wgtensor: it builds on tensors, `nn` and the checkpoint loaders, and nothing
//! below imports it. [`AutoModel::load`] reads a Hugging Face model directory (`config.json`,
//! `model.safetensors` or a sharded index; f32, f16 or bf16 weights) of a decoder family (Llama
//! 2 and 3, Mistral, Qwen2, Qwen3, Gemma 2, Gemma 3, Phi-3, GPT-2; one file each, registered in
//! `families.rs`) onto a device in f32 or f16; [`CausalLM::forward`] runs new
//! positions through a [`KvCache`]; [`CausalLM::generate`] samples on the device; [`Tokenizer`]
//! reads `tokenizer.json` and renders chat templates ([`ChatMessage`]); [`Embedder`] computes
//! sentence embeddings with BERT-shaped encoders (`bert`, `roberta`, `xlm-roberta`) as
//! sentence-transformers does. See `docs/pretrained.md`.

mod bert;
mod cache;
mod chat;
mod config;
mod decoder;
mod embed;
mod families;
mod family;
mod fit;
mod gemma;
mod gemma2;
mod gemma3;
mod generate;
pub mod gguf;
mod gguf_load;
mod gpt2;
mod hf_reader;
mod layers;
mod llama;
mod llama_like;
mod load;
mod model;
mod phi3;
mod qwen3;
mod rope;
mod tokenizer;
mod weight;
mod whisper;
mod whisper_audio;
mod whisper_generation;

pub use cache::KvCache;
pub use chat::ChatMessage;
pub use config::{ModelConfig, RopeScaling};
pub use embed::Embedder;
pub use generate::{GenerateOptions, TokenStream};
pub use load::Progress;
pub use model::CausalLM;
pub use tokenizer::{TextStream, Tokenizer};
pub use weight::Weight;
pub use {
    whisper::{Transcript, Whisper},
    whisper_audio::{read_wav, resample, LogMel},
};

use crate::{DType, Device, Error, Result};
use std::path::Path;

/// Loads pretrained models, as transformers' `AutoModelForCausalLM.from_pretrained` does.
pub struct AutoModel;

impl AutoModel {
    /// Loads a model directory (`config.json` + `model.safetensors` or
    /// `model.safetensors.index.json`) or a llama.cpp `.gguf` file (architectures `llama`,
    /// `qwen2`, `qwen3`, `phi3`, `gemma2` and `gemma3`) onto `device`, dense weights in `dtype` (F32 or F16; norms and biases stay f32;
    /// quantized GGUF matrices stay quantized). The files are memory-mapped and read one tensor
    /// at a time.
    ///
    /// ```no_run
    /// use wgtensor::models::AutoModel;
    /// use wgtensor::{DType, Device};
    /// let model = AutoModel::load("path/to/llama", &Device::best(), DType::F16)?;
    /// println!("{} layers", model.config().num_layers);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Io`] for a missing file; [`Error::Format`] for a corrupt file, an unknown
    /// architecture, a missing tensor or one whose shape disagrees with `config.json`;
    /// [`Error::InvalidArgument`] for a dtype other than F32 or F16; allocation errors.
    pub fn load(path: impl AsRef<Path>, device: &Device, dtype: DType) -> Result<CausalLM> {
        Self::load_with_progress(path, device, dtype, &mut |_, _| {})
    }

    /// [`AutoModel::load`], calling `progress(bytes loaded, total bytes)` after each tensor.
    ///
    /// # Errors
    /// See [`AutoModel::load`].
    pub fn load_with_progress(
        path: impl AsRef<Path>,
        device: &Device,
        dtype: DType,
        progress: Progress<'_>,
    ) -> Result<CausalLM> {
        let path = path.as_ref();
        hf_reader::check_dtype("AutoModel::load", dtype)?;
        let to = load::Target {
            device,
            dtype,
            progress,
        };
        if path.is_dir() {
            return load::load_hf(path, to);
        }
        if path.is_file()
            && path
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
        {
            return gguf_load::load_gguf(path, to);
        }
        Err(Error::Io {
            op: "AutoModel::load",
            path: path.display().to_string(),
            message: if path.exists() {
                "neither a model directory (config.json + model.safetensors) nor a .gguf file"
                    .into()
            } else {
                "no such file or directory".into()
            },
        })
    }
}
