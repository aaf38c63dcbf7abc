//! Gemma 3 (text): Gemma 2's block without soft-caps, with (1 + weight) RMSNorms over each
//! head's q and k, and two RoPE tables: global layers use `rope_theta` and the configured
//! scaling, local (sliding-window) layers their own base (`rope_local_base_freq`, or the
//! `sliding_attention` entry of transformers 5's `rope_parameters`) unscaled.

use super::config::{format_err, rope_scaling_of, ModelConfig};
use super::family::Family;
use super::gemma2::{build, query_pre_attn_scalar, spec};
use super::layers::{Attention, Norm, Source};
use super::model::CausalLM;
use super::rope::Rope;
use crate::{DType, Device, Result};
use serde_json::Value;

pub(crate) const GEMMA3: Family = Family {
    model_type: "gemma3_text",
    config: spec_with_rope(),
    load,
    gguf: None,
};

const fn spec_with_rope() -> super::config::ConfigSpec {
    let mut s = spec(pattern);
    s.adjust = adjust;
    s
}

/// Without `layer_types`: every `sliding_window_pattern`-th layer is global, the rest local.
fn pattern(v: &Value, layers: usize) -> Vec<bool> {
    let p = v
        .get("sliding_window_pattern")
        .or_else(|| v.get("_sliding_window_pattern"))
        .and_then(Value::as_u64)
        .unwrap_or(6)
        .max(1) as usize;
    (0..layers).map(|l| (l + 1) % p != 0).collect()
}

/// Which layers are local, whether or not the window is shorter than the context.
fn local_layers(v: &Value, layers: usize) -> Vec<bool> {
    match v.get("layer_types").and_then(Value::as_array) {
        Some(t) => t
            .iter()
            .map(|t| t.as_str() == Some("sliding_attention"))
            .collect(),
        None => pattern(v, layers),
    }
}

/// The global RoPE (`rope_theta`, scaling) into the shared fields; the local base checked.
fn adjust(v: &Value, c: &mut ModelConfig, path: &str) -> Result<()> {
    query_pre_attn_scalar(v, path)?;
    if let Some(global) = v
        .get("rope_parameters")
        .and_then(|r| r.get("full_attention"))
    {
        c.rope_theta = theta(Some(global), path, "full_attention")?;
        c.rope_scaling = rope_scaling_of(Some(global), path)?;
    }
    local_theta(v, path).map(|_| ())
}

fn theta(p: Option<&Value>, path: &str, which: &str) -> Result<f32> {
    p.and_then(|p| p.get("rope_theta"))
        .and_then(Value::as_f64)
        .filter(|&x| x > 0.0 && x.is_finite())
        .map(|x| x as f32)
        .ok_or_else(|| {
            format_err(
                path,
                format!("gemma3_text needs rope_parameters.{which}.rope_theta (a positive number)"),
            )
        })
}

/// The local layers' RoPE base.
fn local_theta(v: &Value, path: &str) -> Result<f32> {
    match v
        .get("rope_parameters")
        .and_then(|r| r.get("sliding_attention"))
    {
        Some(local) => theta(Some(local), path, "sliding_attention"),
        None => Ok(v
            .get("rope_local_base_freq")
            .and_then(Value::as_f64)
            .unwrap_or(10000.0) as f32),
    }
}

fn load(src: &mut dyn Source, c: &ModelConfig, device: &Device, dtype: DType) -> Result<CausalLM> {
    let path = "config.json";
    let scale = (query_pre_attn_scalar(&c.raw, path)? as f64).powf(-0.5) as f32;
    let local = local_layers(&c.raw, c.num_layers);
    let (hd, eps, bias) = (c.head_dim, c.norm_eps, c.qkv_bias);
    let mut m = build(src, c, device, dtype, &mut |src, i, prefix| {
        let mut a = Attention::load_separate(src, prefix, c, bias, bias)?;
        a.scale = scale;
        a.q_norm = Some(Norm::rms_plus_one(
            src,
            &format!("{prefix}.q_norm.weight"),
            hd,
            eps,
        )?);
        a.k_norm = Some(Norm::rms_plus_one(
            src,
            &format!("{prefix}.k_norm.weight"),
            hd,
            eps,
        )?);
        a.rope = Some(if local.get(i).copied().unwrap_or(false) {
            1
        } else {
            0
        });
        Ok(a)
    })?;
    let mut lc = c.clone();
    lc.rope_theta = local_theta(&c.raw, path)?;
    lc.rope_scaling = None;
    m.ropes.push(Rope::from_inv_freq(lc.inv_freq()));
    Ok(m)
}
