//! What Gemma 2 and Gemma 3 share: their tensor names, config, soft-caps and attention scales,
//! and the model (the embedding scaled by `sqrt(hidden)`, RMSNorms that scale by `1 + weight`
//! before and after both attention and MLP, GeGLU, soft-capped attention and logits), which
//! each family file finishes (Gemma 3: q/k norms, local RoPE).

use super::config::{format_err, positive_f32, ConfigSpec, ModelConfig};
use super::decoder::{decoder, NormFn, Outer};
use super::layers::{Act, Attention, Mlp, Norm, PreNormBlock, Source};
use super::model::CausalLM;
use crate::{DType, Device, Result};
use serde_json::Value;

/// Gemma's tensor names in one format: the outer ones, and block `i`'s
/// `{layer}.{i}.{suffix}`.
pub(crate) struct Names {
    pub outer: Outer,
    pub input_norm: &'static str,
    /// q, k, v and o.
    pub attn: [&'static str; 4],
    pub q_norm: &'static str,
    pub k_norm: &'static str,
    pub post_attn_norm: &'static str,
    pub pre_mlp_norm: &'static str,
    pub post_mlp_norm: &'static str,
    /// gate, up and down.
    pub mlp: [&'static str; 3],
    /// Norm weights as transformers keeps them (the model scales by `1 + weight`); llama.cpp's
    /// files hold the sum.
    pub plus_one: bool,
}

impl Names {
    /// How the RMSNorms read, scaling by `1 + weight` whatever the format.
    pub(crate) fn norm(&self) -> NormFn {
        if self.plus_one {
            Norm::rms_plus_one
        } else {
            Norm::rms
        }
    }
}

/// Gemma's names in a Hugging Face checkpoint.
pub(crate) const HF: Names = Names {
    outer: super::decoder::HF,
    input_norm: "input_layernorm",
    attn: [
        "self_attn.q_proj",
        "self_attn.k_proj",
        "self_attn.v_proj",
        "self_attn.o_proj",
    ],
    q_norm: "self_attn.q_norm",
    k_norm: "self_attn.k_norm",
    post_attn_norm: "post_attention_layernorm",
    pre_mlp_norm: "pre_feedforward_layernorm",
    post_mlp_norm: "post_feedforward_layernorm",
    mlp: ["mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"],
    plus_one: true,
};

/// Gemma's names in a llama.cpp file.
pub(crate) const GGUF: Names = Names {
    outer: super::decoder::GGUF,
    input_norm: "attn_norm",
    attn: ["attn_q", "attn_k", "attn_v", "attn_output"],
    q_norm: "attn_q_norm",
    k_norm: "attn_k_norm",
    post_attn_norm: "post_attention_norm",
    pre_mlp_norm: "ffn_norm",
    post_mlp_norm: "post_ffw_norm",
    mlp: ["ffn_gate", "ffn_up", "ffn_down"],
    plus_one: false,
};

/// llama.cpp's attention scale for Gemma, which its files do not store: `1 / sqrt(head_dim)`,
/// or `1 / sqrt(hidden / heads)` for the 27B model (recognised, as llama.cpp does, by its
/// layer count `layers_27b`).
pub(crate) fn llama_cpp_scale(c: &ModelConfig, layers_27b: usize) -> f32 {
    let d = if c.num_layers == layers_27b {
        c.hidden_size / c.num_heads
    } else {
        c.head_dim
    };
    (d as f64).powf(-0.5) as f32
}

/// The config of Gemma 2 and 3 (`default_sliding`: which layers slide without `layer_types`).
pub(crate) const fn spec(default_sliding: fn(&Value, usize) -> Vec<bool>) -> ConfigSpec {
    ConfigSpec {
        handles: &["attn_logit_softcapping", "final_logit_softcapping"],
        act_key: "hidden_activation",
        acts: &["gelu_pytorch_tanh"],
        intermediate_default: None,
        tied_default: true,
        default_sliding,
        adjust: |v, _, path| {
            query_pre_attn_scalar(v, path)?;
            softcap(v, "attn_logit_softcapping", path)?;
            softcap(v, "final_logit_softcapping", path).map(|_| ())
        },
    }
}

/// `query_pre_attn_scalar`, which sets the attention scale (transformers' default, 256, is not
/// head_dim: a config without it is refused rather than guessed).
pub(crate) fn query_pre_attn_scalar(v: &Value, path: &str) -> Result<f32> {
    v.get("query_pre_attn_scalar")
        .and_then(positive_f32)
        .ok_or_else(|| {
            format_err(
                path,
                "gemma needs \"query_pre_attn_scalar\" (a positive number)".into(),
            )
        })
}

/// A soft-cap `key`: absent or null for none, else a positive number.
pub(crate) fn softcap(v: &Value, key: &str, path: &str) -> Result<Option<f32>> {
    match v.get(key).filter(|x| !x.is_null()) {
        None => Ok(None),
        Some(x) => match positive_f32(x) {
            Some(x) => Ok(Some(x)),
            None => Err(format_err(
                path,
                format!("{key} = {x} must be a positive number"),
            )),
        },
    }
}

/// Finishes layer `i`'s attention: `(src, i, layer name prefix, attention)`.
pub(crate) type AttentionFn<'a> =
    dyn FnMut(&mut dyn Source, usize, &str, &mut Attention) -> Result<()> + 'a;

/// A Gemma model in the names `n`, q scaled by `scale`, soft-capped as configured
/// (transformers applies the caps when set, though Gemma 3 checkpoints set none):
/// `attention(src, i, layer, attn)` finishes layer `i`'s attention (`layer` its name prefix;
/// Gemma 3 adds q/k norms and picks a RoPE table), everything else is shared.
pub(crate) fn build(
    src: &mut dyn Source,
    n: &Names,
    scale: f32,
    c: &ModelConfig,
    (device, dtype): (&Device, DType),
    attention: &mut AttentionFn,
) -> Result<CausalLM> {
    let cap = softcap(&c.raw, "attn_logit_softcapping", "the config")?;
    let final_cap = softcap(&c.raw, "final_logit_softcapping", "the config")?;
    let (hid, eps, norm) = (c.hidden_size, c.norm_eps, n.norm());
    let mut m = decoder(src, &n.outer, c, (device, dtype), norm, &mut |src, i, p| {
        let norm = |src: &mut dyn Source, s: &str| norm(src, &format!("{p}.{s}.weight"), hid, eps);
        let attn_norm = norm(src, n.input_norm)?;
        let mut attn = Attention::separate(src, p, n.attn, c, (c.qkv_bias, c.qkv_bias))?;
        attn.scale = scale;
        attn.softcap = cap;
        attention(src, i, p, &mut attn)?;
        let post_attn_norm = Some(norm(src, n.post_attn_norm)?);
        let mlp_norm = norm(src, n.pre_mlp_norm)?;
        let post_mlp_norm = Some(norm(src, n.post_mlp_norm)?);
        Ok(Box::new(PreNormBlock {
            attn_norm,
            attn,
            post_attn_norm,
            mlp_norm,
            mlp: Mlp::gated(src, p, n.mlp, c, false, Act::GeluTanh)?,
            post_mlp_norm,
        }))
    })?;
    m.final_softcap = final_cap;
    // transformers multiplies by sqrt(hidden) rounded to the activations' dtype.
    let s = (hid as f64).sqrt();
    m.embed_scale = Some(match dtype {
        DType::F16 => half::f16::from_f64(s).to_f32(),
        _ => s as f32,
    });
    Ok(m)
}

/// The attention scale of a Hugging Face checkpoint: `query_pre_attn_scalar ^ -0.5`.
pub(crate) fn hf_scale(c: &ModelConfig) -> Result<f32> {
    Ok((query_pre_attn_scalar(&c.raw, "config.json")? as f64).powf(-0.5) as f32)
}
