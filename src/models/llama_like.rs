//! The Llama-shaped decoder that `llama.rs` (Llama 2 and 3, Mistral, Qwen2) and `qwen3.rs`
//! build: pre-norm blocks of RMSNorm, attention with separate q, k, v and o projections (biases
//! as configured, q/k norms for Qwen3) and a SwiGLU MLP, in Hugging Face's or llama.cpp's names.

use super::config::ModelConfig;
use super::decoder::{decoder, Outer};
use super::layers::{Act, Attention, Mlp, Norm, PreNormBlock, Source};
use super::model::CausalLM;
use crate::{DType, Device, Result};
use serde_json::Value;

/// Qwen2's sliding layers (also Qwen3's): with `use_sliding_window`, those from
/// `max_window_layers` on.
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
pub(crate) struct Names {
    pub outer: Outer,
    pub attn_norm: &'static str,
    /// q, k, v and o.
    pub attn: [&'static str; 4],
    pub mlp_norm: &'static str,
    /// gate, up and down.
    pub mlp: [&'static str; 3],
}

/// Llama-family tensor names in a Hugging Face checkpoint.
pub(crate) const HF: Names = Names {
    outer: super::decoder::HF,
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
pub(crate) const GGUF: Names = Names {
    outer: super::decoder::GGUF,
    attn_norm: "attn_norm",
    attn: ["attn_q", "attn_k", "attn_v", "attn_output"],
    mlp_norm: "ffn_norm",
    mlp: ["ffn_gate", "ffn_up", "ffn_down"],
};

/// Reads a Llama-family model in the names `n`, with an RMSNorm over each head's q and k
/// before RoPE when `qk_norm` names their weights (`{layer}.{i}.{name}.weight`; Qwen3).
pub(crate) fn build(
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
