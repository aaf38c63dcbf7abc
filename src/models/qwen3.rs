//! Qwen3: the Llama block with an RMSNorm over each head's q and k before RoPE, and no q/k/v
//! biases (`attention_bias` as configured).

use super::config::{format_err, ConfigSpec, ModelConfig};
use super::family::Family;
use super::layers::{lm_head, Act, Attention, Block, Mlp, Norm, PreNormBlock, Source};
use super::model::CausalLM;
use crate::{DType, Device, Result};

pub(crate) const QWEN3: Family = Family {
    model_type: "qwen3",
    config: ConfigSpec {
        handles: &[],
        act_key: "hidden_act",
        acts: &["silu"],
        intermediate_default: None,
        tied_default: false,
        default_sliding: super::llama::qwen2_sliding,
        adjust: |v, _, path| match v.get("head_dim") {
            // transformers' default (128) is not hidden / heads: a config without it is refused
            // rather than guessed.
            Some(h) if h.is_u64() => Ok(()),
            _ => Err(format_err(
                path,
                "qwen3 needs \"head_dim\" (a positive integer)".into(),
            )),
        },
    },
    load,
};

fn load(src: &mut dyn Source, c: &ModelConfig, device: &Device, dtype: DType) -> Result<CausalLM> {
    let (hid, eps) = (c.hidden_size, c.norm_eps);
    let embed = src.matrix("model.embed_tokens.weight", c.vocab_size, hid)?;
    let mut blocks: Vec<Box<dyn Block>> = Vec::with_capacity(c.num_layers);
    for i in 0..c.num_layers {
        let p = format!("model.layers.{i}");
        let attn_norm = Norm::rms(src, &format!("{p}.input_layernorm.weight"), hid, eps)?;
        let a = format!("{p}.self_attn");
        let mut attn = Attention::load_separate(src, &a, c, c.qkv_bias, c.o_bias)?;
        attn.q_norm = Some(Norm::rms(
            src,
            &format!("{a}.q_norm.weight"),
            c.head_dim,
            eps,
        )?);
        attn.k_norm = Some(Norm::rms(
            src,
            &format!("{a}.k_norm.weight"),
            c.head_dim,
            eps,
        )?);
        let mlp_norm = Norm::rms(
            src,
            &format!("{p}.post_attention_layernorm.weight"),
            hid,
            eps,
        )?;
        let mlp = Mlp::load_gated(src, &format!("{p}.mlp"), c, c.mlp_bias, Act::Silu)?;
        blocks.push(Box::new(PreNormBlock {
            attn_norm,
            attn,
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
