//! The Llama family (Llama 2 and 3, Mistral, Qwen2): RMSNorm, RoPE, grouped-query attention,
//! SwiGLU, pre-norm blocks. The families differ only in config defaults (Qwen2's q/k/v
//! biases, Mistral's and Qwen2's sliding windows). The Hugging Face and GGUF loaders differ
//! only in tensor names and in how a tensor is read, so each feeds one [`Source`] and one
//! [`Names`] to [`build`].

use super::config::{no_sliding, ConfigSpec, ModelConfig};
use super::family::{Family, Gguf};
use super::layers::{lm_head, Act, Attention, Block, Mlp, Norm, PreNormBlock, Qkv, Source};
use super::model::CausalLM;
use crate::{DType, Device, Result};
use serde_json::Value;

/// What a Llama-family `config.json` holds besides the shared fields.
const fn spec(
    default_sliding: fn(&Value, usize) -> Vec<bool>,
    adjust: fn(&Value, &mut ModelConfig, &str) -> Result<()>,
) -> ConfigSpec {
    ConfigSpec {
        handles: &[],
        act_key: "hidden_act",
        acts: &["silu", "swish"],
        intermediate_default: None,
        tied_default: false,
        default_sliding,
        adjust,
    }
}

/// Llama 2 and 3 (`attention_bias` and `mlp_bias` as configured).
pub(crate) const LLAMA: Family = Family {
    model_type: "llama",
    config: spec(no_sliding, super::config::no_adjust),
    load: load_hf,
    gguf: Some(Gguf::plain("llama", load_gguf)),
};

/// Mistral: every layer slides when `sliding_window` is set.
pub(crate) const MISTRAL: Family = Family {
    model_type: "mistral",
    config: spec(|_, n| vec![true; n], super::config::no_adjust),
    load: load_hf,
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
    load: load_hf,
    gguf: Some(Gguf::plain("qwen2", load_gguf)),
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

/// A format's tensor names: `{layer}.{i}.{suffix}` within block `i`.
pub(super) struct Names {
    pub embed: &'static str,
    pub layer: &'static str,
    pub attn_norm: &'static str,
    pub q: &'static str,
    pub k: &'static str,
    pub v: &'static str,
    pub o: &'static str,
    pub mlp_norm: &'static str,
    pub gate: &'static str,
    pub up: &'static str,
    pub down: &'static str,
    pub final_norm: &'static str,
    pub lm_head: &'static str,
}

/// Llama-family tensor names in a Hugging Face checkpoint.
pub(super) const HF: Names = Names {
    embed: "model.embed_tokens.weight",
    layer: "model.layers",
    attn_norm: "input_layernorm",
    q: "self_attn.q_proj",
    k: "self_attn.k_proj",
    v: "self_attn.v_proj",
    o: "self_attn.o_proj",
    mlp_norm: "post_attention_layernorm",
    gate: "mlp.gate_proj",
    up: "mlp.up_proj",
    down: "mlp.down_proj",
    final_norm: "model.norm.weight",
    lm_head: "lm_head.weight",
};

/// Llama-family tensor names in a llama.cpp file.
pub(super) const GGUF: Names = Names {
    embed: "token_embd.weight",
    layer: "blk",
    attn_norm: "attn_norm",
    q: "attn_q",
    k: "attn_k",
    v: "attn_v",
    o: "attn_output",
    mlp_norm: "ffn_norm",
    gate: "ffn_gate",
    up: "ffn_up",
    down: "ffn_down",
    final_norm: "output_norm.weight",
    lm_head: "output.weight",
};

fn load_gguf(
    src: &mut dyn Source,
    c: &ModelConfig,
    device: &Device,
    dtype: DType,
) -> Result<CausalLM> {
    build(src, &GGUF, c, device, dtype)
}

fn load_hf(
    src: &mut dyn Source,
    c: &ModelConfig,
    device: &Device,
    dtype: DType,
) -> Result<CausalLM> {
    build(src, &HF, c, device, dtype)
}

/// Reads a Llama-family model in file order (embedding, blocks, final norm, head) so progress
/// advances as the loader walks the file.
pub(super) fn build(
    src: &mut dyn Source,
    n: &Names,
    c: &ModelConfig,
    device: &Device,
    dtype: DType,
) -> Result<CausalLM> {
    build_with(src, n, c, device, dtype, None)
}

/// [`build`], with an RMSNorm over each head's q and k before RoPE when `qk_norm` names their
/// weights (`{layer}.{i}.{name}.weight`; Qwen3).
pub(super) fn build_with(
    src: &mut dyn Source,
    n: &Names,
    c: &ModelConfig,
    device: &Device,
    dtype: DType,
    qk_norm: Option<[&str; 2]>,
) -> Result<CausalLM> {
    let (hid, inter, voc) = (c.hidden_size, c.intermediate_size, c.vocab_size);
    let (qd, kvd) = (c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim);
    let eps = c.norm_eps;
    let embed = src.matrix(n.embed, voc, hid)?;
    let mut blocks: Vec<Box<dyn Block>> = Vec::with_capacity(c.num_layers);
    for i in 0..c.num_layers {
        let p = format!("{}.{i}", n.layer);
        let b = c.qkv_bias;
        let attn_norm = Norm::rms(src, &format!("{p}.{}.weight", n.attn_norm), hid, eps)?;
        let q = src.rope_linear(&format!("{p}.{}", n.q), qd, hid, b)?;
        let k = src.rope_linear(&format!("{p}.{}", n.k), kvd, hid, b)?;
        let v = src.linear(&format!("{p}.{}", n.v), kvd, hid, b)?;
        let o = src.linear(&format!("{p}.{}", n.o), hid, qd, c.o_bias)?;
        let mut attn = Attention::new(Qkv::Separate(q, k, v), o, c);
        if let Some([qn, kn]) = qk_norm {
            let hd = c.head_dim;
            attn.q_norm = Some(Norm::rms(src, &format!("{p}.{qn}.weight"), hd, eps)?);
            attn.k_norm = Some(Norm::rms(src, &format!("{p}.{kn}.weight"), hd, eps)?);
        }
        let mlp_norm = Norm::rms(src, &format!("{p}.{}.weight", n.mlp_norm), hid, eps)?;
        let mb = c.mlp_bias;
        let mlp = Mlp::Gated {
            gate: src.linear(&format!("{p}.{}", n.gate), inter, hid, mb)?,
            up: src.linear(&format!("{p}.{}", n.up), inter, hid, mb)?,
            down: src.linear(&format!("{p}.{}", n.down), hid, inter, mb)?,
            act: Act::Silu,
        };
        blocks.push(Box::new(PreNormBlock {
            attn_norm,
            attn,
            mlp_norm,
            mlp,
        }));
    }
    let final_norm = Norm::rms(src, n.final_norm, hid, eps)?;
    let head = lm_head(src, n.lm_head, c)?;
    Ok(CausalLM::assemble(
        c, device, dtype, embed, blocks, final_norm, head,
    ))
}
