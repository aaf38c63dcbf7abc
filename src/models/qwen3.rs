//! Qwen3: the Llama block with an RMSNorm over each head's q and k before RoPE, and no q/k/v
//! biases (`attention_bias` as configured). Loads from Hugging Face directories and from
//! llama.cpp's `qwen3` GGUF files.

use super::config::{format_err, ConfigSpec, ModelConfig};
use super::family::{Family, Gguf};
use super::llama_like::{build, qwen2_sliding, GGUF, HF};
use crate::Result;
use serde_json::Value;

pub(crate) const QWEN3: Family = Family {
    model_type: "qwen3",
    config: ConfigSpec::hidden_act(&["silu"], qwen2_sliding, require_head_dim),
    load: |src, c, device, dtype| {
        let qk_norm = ["self_attn.q_norm", "self_attn.k_norm"];
        build(src, &HF, c, (device, dtype), Some(qk_norm))
    },
    gguf: Some(Gguf::plain("qwen3", |src, c, device, dtype| {
        build(
            src,
            &GGUF,
            c,
            (device, dtype),
            Some(["attn_q_norm", "attn_k_norm"]),
        )
    })),
};

/// transformers' default `head_dim` (128) is not hidden / heads: a config without it is refused
/// rather than guessed.
fn require_head_dim(v: &Value, _: &mut ModelConfig, path: &str) -> Result<()> {
    match v.get("head_dim") {
        Some(h) if h.is_u64() => Ok(()),
        _ => Err(format_err(
            path,
            "qwen3 needs \"head_dim\" (a positive integer)".into(),
        )),
    }
}
