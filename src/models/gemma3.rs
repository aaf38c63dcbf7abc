//! Gemma 3 (text): Gemma 2's block without soft-caps, with (1 + weight) RMSNorms over each
//! head's q and k, and two RoPE tables: global layers use `rope_theta` and the configured
//! scaling, local (sliding-window) layers their own base (`rope_local_base_freq`, or the
//! `sliding_attention` entry of transformers 5's `rope_parameters`) unscaled. Loads from
//! Hugging Face directories and from llama.cpp's `gemma3` GGUF files: norms holding `1 +
//! weight`, `rope.freq_base` (and `rope.scaling.*`) for the global layers, `rope.freq_base_swa`
//! or llama.cpp's 10^4 for the local ones, `attention.sliding_window` on llama.cpp's pattern
//! (every sixth layer global, or `attention.sliding_window_pattern`), llama.cpp's scale.

use super::config::{format_err, positive_f32, rope_scaling_of, ModelConfig};
use super::family::{set_window, sliding_pattern};
use super::family::{Family, Gguf};
use super::gemma::{
    build, hf_scale, llama_cpp_scale, query_pre_attn_scalar, softcap, spec, Names, GGUF, HF,
};
use super::layers::Source;
use super::model::CausalLM;
use super::rope::Rope;
use crate::{DType, Device, Result};
use serde_json::Value;

pub(crate) const GEMMA3: Family = Family {
    model_type: "gemma3_text",
    config: spec_with_rope(),
    load: |src, c, device, dtype| {
        let local = local_layers(&c.raw, c.num_layers);
        let theta = local_theta(&c.raw, "config.json")?;
        let scale = hf_scale(c)?;
        build_local(src, (&HF, scale), (&local, theta), c, (device, dtype))
    },
    gguf: Some(Gguf {
        arch: "gemma3",
        handles: &["attention.sliding_window"],
        adjust: gguf_adjust,
        load: |src, c, device, dtype| {
            let path = "the GGUF metadata";
            let local = sliding_pattern(c, 6, path)?;
            let theta = gguf_local_theta(c, path)?;
            let scale = llama_cpp_scale(c, 62);
            build_local(src, (&GGUF, scale), (&local, theta), c, (device, dtype))
        },
    }),
};

/// A `gemma3` file's window (which llama.cpp requires) on its pattern, its soft-caps and local
/// RoPE base checked.
fn gguf_adjust(v: &Value, c: &mut ModelConfig, path: &str) -> Result<()> {
    if v.get("attention.sliding_window").is_none() {
        return Err(format_err(
            path,
            "no gemma3.attention.sliding_window in the metadata".into(),
        ));
    }
    softcap(v, "attn_logit_softcapping", path)?;
    softcap(v, "final_logit_softcapping", path)?;
    gguf_local_theta(c, path)?;
    let sliding = sliding_pattern(c, 6, path)?;
    set_window(c, sliding, path)
}

/// The local layers' base: `rope.freq_base_swa`, else llama.cpp's 10^4.
fn gguf_local_theta(c: &ModelConfig, path: &str) -> Result<f32> {
    match c.raw.get("rope.freq_base_swa") {
        None => Ok(10000.0),
        Some(x) => positive_f32(x).ok_or_else(|| {
            format_err(
                path,
                format!("gemma3.rope.freq_base_swa = {x} must be a positive number"),
            )
        }),
    }
}

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
        .and_then(positive_f32)
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

/// The model in names `n`; `local[i]`: layer `i` rotates by the local base `local_theta`
/// (unscaled), the others by the config's RoPE.
fn build_local(
    src: &mut dyn Source,
    (n, scale): (&Names, f32),
    (local, local_theta): (&[bool], f32),
    c: &ModelConfig,
    target: (&Device, DType),
) -> Result<CausalLM> {
    let (hd, eps, norm) = (c.head_dim, c.norm_eps, n.norm());
    let mut m = build(src, n, scale, c, target, &mut |src, i, p, a| {
        a.q_norm = Some(norm(src, &format!("{p}.{}.weight", n.q_norm), hd, eps)?);
        a.k_norm = Some(norm(src, &format!("{p}.{}.weight", n.k_norm), hd, eps)?);
        a.rope = Some(if local.get(i).copied().unwrap_or(false) {
            1
        } else {
            0
        });
        Ok(())
    })?;
    let mut lc = c.clone();
    lc.rope_theta = local_theta;
    lc.rope_scaling = None;
    m.ropes.push(Rope::from_inv_freq(lc.inv_freq()));
    Ok(m)
}
