//! Qwen3: the Llama block with an RMSNorm over each head's q and k before RoPE, and no q/k/v
//! biases (`attention_bias` as configured). Loads from Hugging Face directories and from
//! llama.cpp's `qwen3` GGUF files.

use super::config::{format_err, ConfigSpec, ModelConfig};
use super::family::{Family, Gguf};
use super::layers::Source;
use super::llama::{build_with, GGUF, HF};
use super::model::CausalLM;
use crate::{DType, Device, Result};

pub(crate) const QWEN3: Family = Family {
    model_type: "qwen3",
    config: ConfigSpec {
        handles: &[],
        act_key: "hidden_act",
        acts: &["silu"],
        intermediate_default: None,
        tied_default: false,
        default_sliding: super::llama::qwen2_sliding,
        adjust: |v, _, path| match v.get("head_dim") {
            // transformers' default (128) is not hidden / heads: a config without it is refused
            // rather than guessed.
            Some(h) if h.is_u64() => Ok(()),
            _ => Err(format_err(
                path,
                "qwen3 needs \"head_dim\" (a positive integer)".into(),
            )),
        },
    },
    load: |src, c, device, dtype| {
        build_with(
            src,
            &HF,
            c,
            device,
            dtype,
            Some(["self_attn.q_norm", "self_attn.k_norm"]),
        )
    },
    gguf: Some(Gguf::plain("qwen3", load_gguf)),
};

fn load_gguf(
    src: &mut dyn Source,
    c: &ModelConfig,
    device: &Device,
    dtype: DType,
) -> Result<CausalLM> {
    build_with(
        src,
        &GGUF,
        c,
        device,
        dtype,
        Some(["attn_q_norm", "attn_k_norm"]),
    )
}
