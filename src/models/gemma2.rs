//! Gemma 2: the embedding scaled by `sqrt(hidden)`, RMSNorms that scale by `1 + weight` before
//! and after both attention and MLP, GeGLU (tanh GELU), q scaled by `query_pre_attn_scalar`,
//! attention and final logits soft-capped, sliding-window layers alternating with global ones.

use super::cache::KvCache;
use super::config::{format_err, ConfigSpec, ModelConfig};
use super::family::Family;
use super::layers::{lm_head, Act, Attention, Block, Linear, Mlp, Norm, Source, Step};
use super::model::CausalLM;
use crate::{DType, Device, Result, Tensor};
use serde_json::Value;

pub(crate) const GEMMA2: Family = Family {
    model_type: "gemma2",
    config: spec(|_, n| (0..n).map(|l| l % 2 == 0).collect()),
    load,
    gguf: None,
};

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
fn softcap(v: &Value, key: &str, path: &str) -> Result<Option<f32>> {
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

/// A Gemma model: `attention(i, prefix)` loads layer `i`'s attention (Gemma 3 adds q/k norms
/// and picks a RoPE table), everything else is shared.
pub(crate) fn build(
    src: &mut dyn Source,
    c: &ModelConfig,
    device: &Device,
    dtype: DType,
    attention: &mut dyn FnMut(&mut dyn Source, usize, &str) -> Result<Attention>,
) -> Result<CausalLM> {
    let (hid, eps) = (c.hidden_size, c.norm_eps);
    let embed = src.matrix("model.embed_tokens.weight", c.vocab_size, hid)?;
    let mut blocks: Vec<Box<dyn Block>> = Vec::with_capacity(c.num_layers);
    for i in 0..c.num_layers {
        let p = format!("model.layers.{i}");
        let norm = |src: &mut dyn Source, n: &str| {
            Norm::rms_plus_one(src, &format!("{p}.{n}.weight"), hid, eps)
        };
        let input_norm = norm(src, "input_layernorm")?;
        let attn = attention(src, i, &format!("{p}.self_attn"))?;
        let post_attn_norm = norm(src, "post_attention_layernorm")?;
        let pre_mlp_norm = norm(src, "pre_feedforward_layernorm")?;
        let post_mlp_norm = norm(src, "post_feedforward_layernorm")?;
        let mlp = Mlp::load_gated(src, &format!("{p}.mlp"), c, false, Act::GeluTanh)?;
        blocks.push(Box::new(SandwichBlock {
            input_norm,
            attn,
            post_attn_norm,
            pre_mlp_norm,
            mlp,
            post_mlp_norm,
        }));
    }
    let final_norm = Norm::rms_plus_one(src, "model.norm.weight", hid, eps)?;
    let head = lm_head(src, "lm_head.weight", c)?;
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
    let path = "config.json";
    let scale = (query_pre_attn_scalar(&c.raw, path)? as f64).powf(-0.5) as f32;
    let cap = softcap(&c.raw, "attn_logit_softcapping", path)?;
    let final_cap = softcap(&c.raw, "final_logit_softcapping", path)?;
    let bias = c.qkv_bias;
    let mut m = build(src, c, device, dtype, &mut |src, _, prefix| {
        let mut a = Attention::load_separate(src, prefix, c, bias, bias)?;
        a.scale = scale;
        a.softcap = cap;
        Ok(a)
    })?;
    m.final_softcap = final_cap;
    Ok(m)
}
