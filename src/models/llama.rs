//! The Llama family (Llama 2 and 3, Mistral, Qwen2): RMSNorm, RoPE, grouped-query attention,
//! SwiGLU, pre-norm blocks. The families differ only in config defaults (Qwen2's q/k/v
//! biases, Mistral's and Qwen2's sliding windows). The Hugging Face and GGUF loaders differ
//! only in tensor names and in how a tensor is read, so each feeds its source and its names
//! ([`HF`], [`GGUF`]) to the shared Llama-shaped [`build`] (`llama_like.rs`).

use super::config::{no_sliding, ConfigSpec, ModelConfig};
use super::family::{Family, Gguf};
use super::llama_like::{build, qwen2_sliding, GGUF, HF};
use crate::Result;
use serde_json::Value;

/// What a Llama-family `config.json` holds besides the shared fields.
const fn spec(
    default_sliding: fn(&Value, usize) -> Vec<bool>,
    adjust: fn(&Value, &mut ModelConfig, &str) -> Result<()>,
) -> ConfigSpec {
    ConfigSpec::hidden_act(&["silu", "swish"], default_sliding, adjust)
}

/// Llama 2 and 3 (`attention_bias` and `mlp_bias` as configured).
pub(crate) const LLAMA: Family = Family {
    model_type: "llama",
    config: spec(no_sliding, super::config::no_adjust),
    load: |src, c, device, dtype| build(src, &HF, c, (device, dtype), None),
    gguf: Some(Gguf::plain("llama", |src, c, device, dtype| {
        build(src, &GGUF, c, (device, dtype), None)
    })),
};

/// Mistral: every layer slides when `sliding_window` is set.
pub(crate) const MISTRAL: Family = Family {
    model_type: "mistral",
    config: spec(|_, n| vec![true; n], super::config::no_adjust),
    load: LLAMA.load,
    // llama.cpp writes Mistral as `llama`.
    gguf: None,
};

/// Qwen2: biases on q, k and v; `use_sliding_window` from layer `max_window_layers` on.
pub(crate) const QWEN2: Family = Family {
    model_type: "qwen2",
    config: spec(qwen2_sliding, |_, c, _| {
        c.qkv_bias = true;
        Ok(())
    }),
    load: LLAMA.load,
    gguf: Some(Gguf::plain("qwen2", |src, c, device, dtype| {
        build(src, &GGUF, c, (device, dtype), None)
    })),
};
