//! Gemma 2: the embedding scaled by `sqrt(hidden)`, RMSNorms that scale by `1 + weight` before
//! and after both attention and MLP, GeGLU (tanh GELU), q scaled by `query_pre_attn_scalar`,
//! attention and final logits soft-capped, sliding-window layers alternating with global ones.
//! Loads from Hugging Face directories and from llama.cpp's `gemma2` GGUF files, whose norm
//! weights hold `1 + weight` (convert_hf_to_gguf.py adds the 1) and which keep no
//! `query_pre_attn_scalar`: the scale is llama.cpp's (see [`llama_cpp_scale`]).

use super::cache::KvCache;
use super::config::{format_err, ConfigSpec, ModelConfig};
use super::family::{Family, Gguf};
use super::layers::{lm_head, Act, Attention, Block, Linear, Mlp, Norm, Qkv, Source, Step};
use super::model::CausalLM;
use crate::{DType, Device, Result, Tensor};
use serde_json::Value;

pub(crate) const GEMMA2: Family = Family {
    model_type: "gemma2",
    config: spec(|_, n| (0..n).map(|l| l % 2 == 0).collect()),
    load,
    gguf: Some(Gguf {
        arch: "gemma2",
        handles: &["attention.sliding_window"],
        adjust: gguf_adjust,
        load: load_gguf,
    }),
};

/// Gemma's tensor names in one format: `{layer}.{i}.{suffix}` within block `i`.
pub(crate) struct Names {
    pub embed: &'static str,
    pub layer: &'static str,
    pub input_norm: &'static str,
    pub q: &'static str,
    pub k: &'static str,
    pub v: &'static str,
    pub o: &'static str,
    pub q_norm: &'static str,
    pub k_norm: &'static str,
    pub post_attn_norm: &'static str,
    pub pre_mlp_norm: &'static str,
    pub post_mlp_norm: &'static str,
    pub gate: &'static str,
    pub up: &'static str,
    pub down: &'static str,
    pub final_norm: &'static str,
    pub lm_head: &'static str,
    /// Norm weights as transformers keeps them (the model scales by `1 + weight`); llama.cpp's
    /// files hold the sum.
    pub plus_one: bool,
}

impl Names {
    /// The RMSNorm `name`, scaling by `1 + weight` whatever the format.
    pub(crate) fn norm(
        &self,
        src: &mut dyn Source,
        name: &str,
        len: usize,
        eps: f32,
    ) -> Result<Norm> {
        if self.plus_one {
            Norm::rms_plus_one(src, name, len, eps)
        } else {
            Norm::rms(src, name, len, eps)
        }
    }
}

/// Gemma's names in a Hugging Face checkpoint.
pub(crate) const HF: Names = Names {
    embed: "model.embed_tokens.weight",
    layer: "model.layers",
    input_norm: "input_layernorm",
    q: "self_attn.q_proj",
    k: "self_attn.k_proj",
    v: "self_attn.v_proj",
    o: "self_attn.o_proj",
    q_norm: "self_attn.q_norm",
    k_norm: "self_attn.k_norm",
    post_attn_norm: "post_attention_layernorm",
    pre_mlp_norm: "pre_feedforward_layernorm",
    post_mlp_norm: "post_feedforward_layernorm",
    gate: "mlp.gate_proj",
    up: "mlp.up_proj",
    down: "mlp.down_proj",
    final_norm: "model.norm.weight",
    lm_head: "lm_head.weight",
    plus_one: true,
};

/// Gemma's names in a llama.cpp file.
pub(crate) const GGUF: Names = Names {
    embed: "token_embd.weight",
    layer: "blk",
    input_norm: "attn_norm",
    q: "attn_q",
    k: "attn_k",
    v: "attn_v",
    o: "attn_output",
    q_norm: "attn_q_norm",
    k_norm: "attn_k_norm",
    post_attn_norm: "post_attention_norm",
    pre_mlp_norm: "ffn_norm",
    post_mlp_norm: "post_ffw_norm",
    gate: "ffn_gate",
    up: "ffn_up",
    down: "ffn_down",
    final_norm: "output_norm.weight",
    lm_head: "output.weight",
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

/// A `gemma2` file's window (llama.cpp's default 4096 when absent) on even layers, and its
/// soft-caps checked.
fn gguf_adjust(v: &Value, c: &mut ModelConfig, path: &str) -> Result<()> {
    softcap(v, "attn_logit_softcapping", path)?;
    softcap(v, "final_logit_softcapping", path)?;
    if let Value::Object(m) = &mut c.raw {
        m.entry("attention.sliding_window").or_insert(4096.into());
    }
    let sliding = super::family::sliding_pattern(c, 2, path)?;
    super::family::set_window(c, sliding, path)
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
        .and_then(Value::as_f64)
        .filter(|&x| x > 0.0 && x.is_finite())
        .map(|x| x as f32)
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
        Some(x) => match x.as_f64().filter(|&x| x > 0.0 && x.is_finite()) {
            Some(x) => Ok(Some(x as f32)),
            None => Err(format_err(
                path,
                format!("{key} = {x} must be a positive number"),
            )),
        },
    }
}

/// Gemma's block: each sub-layer's output is normed again before it joins the residual.
pub(crate) struct SandwichBlock {
    pub input_norm: Norm,
    pub attn: Attention,
    pub post_attn_norm: Norm,
    pub pre_mlp_norm: Norm,
    pub mlp: Mlp,
    pub post_mlp_norm: Norm,
}

impl Block for SandwichBlock {
    fn forward(&self, l: usize, x: &Tensor, cache: &mut KvCache, step: &Step) -> Result<Tensor> {
        let a = self
            .attn
            .forward(l, &self.input_norm.apply(x)?, cache, step)?;
        let x = x.add(&self.post_attn_norm.apply(&a)?)?;
        let m = self.mlp.forward(&self.pre_mlp_norm.apply(&x)?)?;
        x.add(&self.post_mlp_norm.apply(&m)?)
    }

    fn linears(&self) -> Vec<&Linear> {
        let mut v = self.attn.linears();
        v.extend(self.mlp.linears());
        v
    }

    fn norms(&self) -> Vec<&Norm> {
        let mut v = vec![
            &self.input_norm,
            &self.post_attn_norm,
            &self.pre_mlp_norm,
            &self.post_mlp_norm,
        ];
        v.extend(self.attn.norms());
        v
    }
}

/// Finishes layer `i`'s attention: `(src, i, layer name prefix, attention)`.
pub(crate) type AttentionFn<'a> =
    dyn FnMut(&mut dyn Source, usize, &str, &mut Attention) -> Result<()> + 'a;

/// A Gemma model in the names `n`: `attention(src, i, layer, attn)` finishes layer `i`'s
/// attention (`layer` its name prefix; Gemma 3 adds q/k norms and picks a RoPE table),
/// everything else is shared.
pub(crate) fn build(
    src: &mut dyn Source,
    n: &Names,
    c: &ModelConfig,
    device: &Device,
    dtype: DType,
    attention: &mut AttentionFn,
) -> Result<CausalLM> {
    let (hid, inter, eps) = (c.hidden_size, c.intermediate_size, c.norm_eps);
    let (qd, kvd, b) = (
        c.num_heads * c.head_dim,
        c.num_kv_heads * c.head_dim,
        c.qkv_bias,
    );
    let embed = src.matrix(n.embed, c.vocab_size, hid)?;
    let mut blocks: Vec<Box<dyn Block>> = Vec::with_capacity(c.num_layers);
    for i in 0..c.num_layers {
        let p = format!("{}.{i}", n.layer);
        let norm =
            |src: &mut dyn Source, s: &str| n.norm(src, &format!("{p}.{s}.weight"), hid, eps);
        let input_norm = norm(src, n.input_norm)?;
        let q = src.rope_linear(&format!("{p}.{}", n.q), qd, hid, b)?;
        let k = src.rope_linear(&format!("{p}.{}", n.k), kvd, hid, b)?;
        let v = src.linear(&format!("{p}.{}", n.v), kvd, hid, b)?;
        let o = src.linear(&format!("{p}.{}", n.o), hid, qd, b)?;
        let mut attn = Attention::new(Qkv::Separate(q, k, v), o, c);
        attention(src, i, &p, &mut attn)?;
        let post_attn_norm = norm(src, n.post_attn_norm)?;
        let pre_mlp_norm = norm(src, n.pre_mlp_norm)?;
        let post_mlp_norm = norm(src, n.post_mlp_norm)?;
        let mlp = Mlp::Gated {
            gate: src.linear(&format!("{p}.{}", n.gate), inter, hid, false)?,
            up: src.linear(&format!("{p}.{}", n.up), inter, hid, false)?,
            down: src.linear(&format!("{p}.{}", n.down), hid, inter, false)?,
            act: Act::GeluTanh,
        };
        blocks.push(Box::new(SandwichBlock {
            input_norm,
            attn,
            post_attn_norm,
            pre_mlp_norm,
            mlp,
            post_mlp_norm,
        }));
    }
    let final_norm = n.norm(src, n.final_norm, hid, eps)?;
    let head = lm_head(src, n.lm_head, c)?;
    let mut m = CausalLM::assemble(c, device, dtype, embed, blocks, final_norm, head);
    // transformers multiplies by sqrt(hidden) rounded to the activations' dtype.
    let s = (hid as f64).sqrt();
    m.embed_scale = Some(match dtype {
        DType::F16 => half::f16::from_f64(s).to_f32(),
        _ => s as f32,
    });
    Ok(m)
}

fn load(src: &mut dyn Source, c: &ModelConfig, device: &Device, dtype: DType) -> Result<CausalLM> {
    let scale = (query_pre_attn_scalar(&c.raw, "config.json")? as f64).powf(-0.5) as f32;
    load_with(src, &HF, scale, c, device, dtype)
}

fn load_gguf(
    src: &mut dyn Source,
    c: &ModelConfig,
    device: &Device,
    dtype: DType,
) -> Result<CausalLM> {
    load_with(src, &GGUF, llama_cpp_scale(c, 46), c, device, dtype)
}

fn load_with(
    src: &mut dyn Source,
    n: &Names,
    scale: f32,
    c: &ModelConfig,
    device: &Device,
    dtype: DType,
) -> Result<CausalLM> {
    let path = "the config";
    let cap = softcap(&c.raw, "attn_logit_softcapping", path)?;
    let final_cap = softcap(&c.raw, "final_logit_softcapping", path)?;
    let mut m = build(src, n, c, device, dtype, &mut |_, _, _, a| {
        a.scale = scale;
        a.softcap = cap;
        Ok(())
    })?;
    m.final_softcap = final_cap;
    Ok(m)
}
