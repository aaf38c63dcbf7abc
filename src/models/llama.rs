//! The Llama family (Llama 2 and 3, Mistral, Qwen2): RMSNorm, RoPE, grouped-query attention,
//! SwiGLU, pre-norm blocks. The families differ only in config defaults (Qwen2's q/k/v
//! biases, Mistral's and Qwen2's sliding windows). The Hugging Face and GGUF loaders differ
//! only in tensor names and in how a tensor is read, so each feeds one [`Source`] and one
//! [`Names`] to [`build`].

use super::config::{no_sliding, ConfigSpec, ModelConfig};
use super::family::{decoder, Family, Gguf, Outer};
use super::layers::{Act, Attention, Mlp, Norm, PreNormBlock, Source};
use super::model::CausalLM;
use crate::{DType, Device, Result};
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

pub(crate) fn qwen2_sliding(v: &Value, layers: usize) -> Vec<bool> {
    let on = v.get("use_sliding_window").and_then(Value::as_bool) == Some(true);
    let from = match v.get("max_window_layers").and_then(Value::as_u64) {
        _ if !on => layers,
        Some(x) => x as usize,
        None => 0,
    };
    (0..layers).map(|l| l >= from).collect()
}

/// A format's tensor names: the outer ones, and block `i`'s `{layer}.{i}.{suffix}`.
pub(super) struct Names {
    pub outer: Outer,
    pub attn_norm: &'static str,
    /// q, k, v and o.
    pub attn: [&'static str; 4],
    pub mlp_norm: &'static str,
    /// gate, up and down.
    pub mlp: [&'static str; 3],
}

/// Llama-family tensor names in a Hugging Face checkpoint.
pub(super) const HF: Names = Names {
    outer: super::family::HF,
    attn_norm: "input_layernorm",
    attn: [
        "self_attn.q_proj",
        "self_attn.k_proj",
        "self_attn.v_proj",
        "self_attn.o_proj",
    ],
    mlp_norm: "post_attention_layernorm",
    mlp: ["mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"],
};

/// Llama-family tensor names in a llama.cpp file.
pub(super) const GGUF: Names = Names {
    outer: super::family::GGUF,
    attn_norm: "attn_norm",
    attn: ["attn_q", "attn_k", "attn_v", "attn_output"],
    mlp_norm: "ffn_norm",
    mlp: ["ffn_gate", "ffn_up", "ffn_down"],
};

/// Reads a Llama-family model in the names `n`, with an RMSNorm over each head's q and k
/// before RoPE when `qk_norm` names their weights (`{layer}.{i}.{name}.weight`; Qwen3).
pub(super) fn build(
    src: &mut dyn Source,
    n: &Names,
    c: &ModelConfig,
    target: (&Device, DType),
    qk_norm: Option<[&str; 2]>,
) -> Result<CausalLM> {
    let (hid, eps) = (c.hidden_size, c.norm_eps);
    decoder(src, &n.outer, c, target, Norm::rms, &mut |src, _, p| {
        let attn_norm = Norm::rms(src, &format!("{p}.{}.weight", n.attn_norm), hid, eps)?;
        let mut attn = Attention::separate(src, p, n.attn, c, (c.qkv_bias, c.o_bias))?;
        if let Some([qn, kn]) = qk_norm {
            let hd = c.head_dim;
            attn.q_norm = Some(Norm::rms(src, &format!("{p}.{qn}.weight"), hd, eps)?);
            attn.k_norm = Some(Norm::rms(src, &format!("{p}.{kn}.weight"), hd, eps)?);
        }
        let mlp_norm = Norm::rms(src, &format!("{p}.{}.weight", n.mlp_norm), hid, eps)?;
        let mlp = Mlp::gated(src, p, n.mlp, c, c.mlp_bias, Act::Silu)?;
        Ok(Box::new(PreNormBlock::new(attn_norm, attn, mlp_norm, mlp)))
    })
}
