//! GPT-2: learned positions, LayerNorm, a fused QKV projection and a GELU (tanh form) MLP, all
//! stored as Conv1D (`[in, out]`) layers with biases; the head is tied to the embedding.

use super::config::{format_err, no_sliding, ConfigSpec, ModelConfig};
use super::family::Family;
use super::layers::{Act, Attention, Block, Mlp, Norm, PreNormBlock, Qkv, Source};
use super::model::CausalLM;
use crate::{DType, Device, Result};

pub(crate) const GPT2: Family = Family {
    model_type: "gpt2",
    config: ConfigSpec {
        handles: &[],
        act_key: "activation_function",
        acts: &["gelu_new", "gelu_pytorch_tanh"],
        intermediate_default: Some(4),
        tied_default: true,
        default_sliding: no_sliding,
        adjust: |_, c, path| {
            if c.qkv_bias || c.mlp_bias {
                return Err(format_err(
                    path,
                    "attention_bias / mlp_bias are Llama options; GPT-2 always has biases".into(),
                ));
            }
            Ok(())
        },
    },
    load,
    gguf: None,
};

fn load(src: &mut dyn Source, c: &ModelConfig, device: &Device, dtype: DType) -> Result<CausalLM> {
    let (hid, inter, voc) = (c.hidden_size, c.intermediate_size, c.vocab_size);
    let qd = c.num_heads * c.head_dim;
    let eps = c.norm_eps;
    // Hub checkpoints of GPT-2 name tensors with or without the `transformer.` prefix.
    let pre = if src.has("transformer.wte.weight") {
        "transformer."
    } else {
        ""
    };
    let embed = src.matrix(&format!("{pre}wte.weight"), voc, hid)?;
    let positions = src.table(&format!("{pre}wpe.weight"), c.max_position_embeddings, hid)?;
    let mut blocks: Vec<Box<dyn Block>> = Vec::with_capacity(c.num_layers);
    for i in 0..c.num_layers {
        let p = format!("{pre}h.{i}");
        let attn_norm = Norm::layer(src, &format!("{p}.ln_1"), hid, eps)?;
        let mlp_norm = Norm::layer(src, &format!("{p}.ln_2"), hid, eps)?;
        let qkv = src.conv1d(&format!("{p}.attn.c_attn"), 3 * qd, hid)?;
        let o = src.conv1d(&format!("{p}.attn.c_proj"), hid, qd)?;
        let mut attn = Attention::new(Qkv::Fused(qkv), o, c);
        attn.rope = None;
        let mlp = Mlp::Plain {
            up: src.conv1d(&format!("{p}.mlp.c_fc"), inter, hid)?,
            down: src.conv1d(&format!("{p}.mlp.c_proj"), hid, inter)?,
            act: Act::GeluTanh,
        };
        blocks.push(Box::new(PreNormBlock::new(attn_norm, attn, mlp_norm, mlp)));
    }
    let final_norm = Norm::layer(src, &format!("{pre}ln_f"), hid, eps)?;
    let lm_head = if src.has("lm_head.weight") && !c.tie_word_embeddings {
        Some(src.matrix("lm_head.weight", voc, hid)?)
    } else {
        None
    };
    let mut m = CausalLM::assemble(c, device, dtype, embed, blocks, final_norm, lm_head);
    m.ropes.clear();
    m.positions = Some(positions);
    Ok(m)
}
