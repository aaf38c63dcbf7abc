//! Phi-3: the Llama block with q, k and v fused in one `qkv_proj` and gate and up in one
//! `gate_up_proj`; a sliding window, when set, on every layer. Phi-3's long-context RoPE
//! (`longrope`, `su`) is refused with a format error naming it. Loads from Hugging Face
//! directories and from llama.cpp's `phi3` GGUF files (`attn_qkv`, `ffn_up` holding gate and
//! up, `attention.sliding_window`; 0 there means none, as for Phi-4).

use super::config::{format_err, ConfigSpec, ModelConfig};
use super::decoder::{decoder, Outer};
use super::family::{Family, Gguf};
use super::layers::{Act, Attention, Mlp, Norm, PreNormBlock, Qkv, Source};
use super::model::CausalLM;
use crate::{DType, Device, Result};
use serde_json::Value;

pub(crate) const PHI3: Family = Family {
    model_type: "phi3",
    config: ConfigSpec::hidden_act(
        &["silu"],
        |_, n| vec![true; n],
        |v, _, path| {
            // transformers 5 keeps partial_rotary_factor in rope_parameters (Phi-4-mini's 0.75).
            let partial = v
                .get("rope_parameters")
                .and_then(|r| r.get("partial_rotary_factor"))
                .and_then(Value::as_f64);
            match partial {
                Some(f) if f != 1.0 => Err(format_err(
                    path,
                    format!("partial_rotary_factor = {f} (partial RoPE) is not implemented"),
                )),
                _ => Ok(()),
            }
        },
    ),
    load: |src, c, device, dtype| build(src, &HF, c, (device, dtype)),
    gguf: Some(Gguf {
        arch: "phi3",
        handles: &["attention.sliding_window"],
        adjust: |_, c, path| super::family::set_window(c, vec![true; c.num_layers], path),
        load: |src, c, device, dtype| {
            refuse_longrope(src)?;
            build(src, &GGUF, c, (device, dtype))
        },
    }),
};

/// Phi-3's tensor names in one format: the outer ones, and block `i`'s `{layer}.{i}.{suffix}`.
struct Names {
    outer: Outer,
    attn_norm: &'static str,
    qkv: &'static str,
    o: &'static str,
    mlp_norm: &'static str,
    gate_up: &'static str,
    down: &'static str,
}

const HF: Names = Names {
    outer: super::decoder::HF,
    attn_norm: "input_layernorm",
    qkv: "self_attn.qkv_proj",
    o: "self_attn.o_proj",
    mlp_norm: "post_attention_layernorm",
    gate_up: "mlp.gate_up_proj",
    down: "mlp.down_proj",
};

/// llama.cpp's names (convert_hf_to_gguf.py keeps the fused layers fused).
const GGUF: Names = Names {
    outer: super::decoder::GGUF,
    attn_norm: "attn_norm",
    qkv: "attn_qkv",
    o: "attn_output",
    mlp_norm: "ffn_norm",
    gate_up: "ffn_up",
    down: "ffn_down",
};

/// Refuses llama.cpp's long-context RoPE (Phi-3 128k: longrope/su) as the converter stores it.
fn refuse_longrope(src: &dyn Source) -> Result<()> {
    for t in ["rope_factors_long.weight", "rope_factors_short.weight"] {
        if src.has(t) {
            return Err(format_err(
                "the GGUF file",
                format!("{t}: Phi-3's long-context RoPE (longrope) is not implemented"),
            ));
        }
    }
    Ok(())
}

fn build(
    src: &mut dyn Source,
    n: &Names,
    c: &ModelConfig,
    target: (&Device, DType),
) -> Result<CausalLM> {
    let (hid, inter, eps) = (c.hidden_size, c.intermediate_size, c.norm_eps);
    let (qd, kvd) = (c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim);
    decoder(src, &n.outer, c, target, Norm::rms, &mut |src, _, p| {
        let attn_norm = Norm::rms(src, &format!("{p}.{}.weight", n.attn_norm), hid, eps)?;
        let qkv = src.linear(&format!("{p}.{}", n.qkv), qd + 2 * kvd, hid, false)?;
        let o = src.linear(&format!("{p}.{}", n.o), hid, qd, false)?;
        let mlp_norm = Norm::rms(src, &format!("{p}.{}.weight", n.mlp_norm), hid, eps)?;
        let mlp = Mlp::FusedGated {
            gate_up: src.linear(&format!("{p}.{}", n.gate_up), 2 * inter, hid, false)?,
            down: src.linear(&format!("{p}.{}", n.down), hid, inter, false)?,
            act: Act::Silu,
        };
        let attn = Attention::new(Qkv::Fused(qkv), o, c);
        Ok(Box::new(PreNormBlock::new(attn_norm, attn, mlp_norm, mlp)))
    })
}
