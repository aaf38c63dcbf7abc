//! Phi-3: the Llama block with q, k and v fused in one `qkv_proj` and gate and up in one
//! `gate_up_proj`; a sliding window, when set, on every layer. Phi-3's long-context RoPE
//! (`longrope`, `su`) is refused with a format error naming it.

use super::config::{format_err, ConfigSpec, ModelConfig};
use super::family::Family;
use super::layers::{lm_head, Act, Attention, Block, Mlp, Norm, PreNormBlock, Qkv, Source};
use super::model::CausalLM;
use crate::{DType, Device, Result};
use serde_json::Value;

pub(crate) const PHI3: Family = Family {
    model_type: "phi3",
    config: ConfigSpec {
        handles: &[],
        act_key: "hidden_act",
        acts: &["silu"],
        intermediate_default: None,
        tied_default: false,
        default_sliding: |_, n| vec![true; n],
        adjust: |v, _, path| {
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
    },
    load,
    gguf: None,
};

fn load(src: &mut dyn Source, c: &ModelConfig, device: &Device, dtype: DType) -> Result<CausalLM> {
    let (hid, inter, eps) = (c.hidden_size, c.intermediate_size, c.norm_eps);
    let (qd, kvd) = (c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim);
    let embed = src.matrix("model.embed_tokens.weight", c.vocab_size, hid)?;
    let mut blocks: Vec<Box<dyn Block>> = Vec::with_capacity(c.num_layers);
    for i in 0..c.num_layers {
        let p = format!("model.layers.{i}");
        let attn_norm = Norm::rms(src, &format!("{p}.input_layernorm.weight"), hid, eps)?;
        let qkv = src.linear(&format!("{p}.self_attn.qkv_proj"), qd + 2 * kvd, hid, false)?;
        let o = src.linear(&format!("{p}.self_attn.o_proj"), hid, qd, false)?;
        let mlp_norm = Norm::rms(
            src,
            &format!("{p}.post_attention_layernorm.weight"),
            hid,
            eps,
        )?;
        let mlp = Mlp::FusedGated {
            gate_up: src.linear(&format!("{p}.mlp.gate_up_proj"), 2 * inter, hid, false)?,
            down: src.linear(&format!("{p}.mlp.down_proj"), hid, inter, false)?,
            act: Act::Silu,
        };
        blocks.push(Box::new(PreNormBlock {
            attn_norm,
            attn: Attention::new(Qkv::Fused(qkv), o, c),
            mlp_norm,
            mlp,
        }));
    }
    let final_norm = Norm::rms(src, "model.norm.weight", hid, eps)?;
    let head = lm_head(src, "lm_head.weight", c)?;
    Ok(CausalLM::assemble(
        c, device, dtype, embed, blocks, final_norm, head,
    ))
}
