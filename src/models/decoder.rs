//! The decoder skeleton the family files share: the embedding, the blocks and the final norm
//! and head read in file order ([`decoder`]), the tensor names around the blocks ([`HF`],
//! [`GGUF`]), and the Llama-shaped model ([`llama`]: RMSNorm, RoPE, grouped-query attention,
//! SwiGLU) that the Llama family and Qwen3 build. A family file picks these parts, so no
//! family file imports another's.

use super::config::ModelConfig;
use super::layers::{lm_head, Block, Norm, Source};
use super::model::CausalLM;
use crate::{DType, Device, Result};

/// The tensors around a decoder's blocks in one format; block `i`'s names start `{layer}.{i}`.
pub(crate) struct Outer {
    pub embed: &'static str,
    pub layer: &'static str,
    pub final_norm: &'static str,
    pub lm_head: &'static str,
}

/// Their names in a Hugging Face checkpoint (every family but GPT-2).
pub(crate) const HF: Outer = Outer {
    embed: "model.embed_tokens.weight",
    layer: "model.layers",
    final_norm: "model.norm.weight",
    lm_head: "lm_head.weight",
};

/// Their names in a llama.cpp file.
pub(crate) const GGUF: Outer = Outer {
    embed: "token_embd.weight",
    layer: "blk",
    final_norm: "output_norm.weight",
    lm_head: "output.weight",
};

/// How a family reads an RMSNorm: `(src, name, len, eps)` ([`Norm::rms`], Gemma's
/// [`Norm::rms_plus_one`]).
pub(crate) type NormFn = fn(&mut dyn Source, &str, usize, f32) -> Result<Norm>;

/// Builds block `i` from `(src, i, its name prefix)`.
pub(crate) type BlockFn<'a> =
    dyn FnMut(&mut dyn Source, usize, &str) -> Result<Box<dyn Block>> + 'a;

/// A decoder read in file order (embedding, blocks, final norm, head) so progress advances as
/// the loader walks the file: the names `o`, each block from `block`, the final RMSNorm read by
/// `norm`.
pub(crate) fn decoder(
    src: &mut dyn Source,
    o: &Outer,
    c: &ModelConfig,
    (device, dtype): (&Device, DType),
    norm: NormFn,
    block: &mut BlockFn,
) -> Result<CausalLM> {
    let embed = src.matrix(o.embed, c.vocab_size, c.hidden_size)?;
    let blocks = (0..c.num_layers)
        .map(|i| block(src, i, &format!("{}.{i}", o.layer)))
        .collect::<Result<Vec<_>>>()?;
    let final_norm = norm(src, o.final_norm, c.hidden_size, c.norm_eps)?;
    let head = lm_head(src, o.lm_head, c)?;
    Ok(CausalLM::assemble(
        c, device, dtype, embed, blocks, final_norm, head,
    ))
}

/// The Llama-shaped decoder: pre-norm blocks of RMSNorm, attention with separate q, k, v and o
/// (biases as configured) and a SwiGLU MLP.
pub(crate) mod llama {
    use super::{decoder, Outer};
    use crate::models::config::ModelConfig;
    use crate::models::layers::{Act, Attention, Mlp, Norm, PreNormBlock, Source};
    use crate::models::model::CausalLM;
    use crate::{DType, Device, Result};
    use serde_json::Value;

    /// Qwen2's sliding layers (also Qwen3's): with `use_sliding_window`, those from
    /// `max_window_layers` on.
    pub(crate) fn qwen2_sliding(v: &Value, layers: usize) -> Vec<bool> {
        let on = v.get("use_sliding_window").and_then(Value::as_bool) == Some(true);
        let from = match v.get("max_window_layers").and_then(Value::as_u64) {
            _ if !on => layers,
            Some(x) => x as usize,
            None => 0,
        };
        (0..layers).map(|l| l >= from).collect()
    }

    /// A format's tensor names: the outer ones, and block `i`'s `{layer}.{i}.{suffix}`.
    pub(crate) struct Names {
        pub outer: Outer,
        pub attn_norm: &'static str,
        /// q, k, v and o.
        pub attn: [&'static str; 4],
        pub mlp_norm: &'static str,
        /// gate, up and down.
        pub mlp: [&'static str; 3],
    }

    /// Llama-family tensor names in a Hugging Face checkpoint.
    pub(crate) const HF: Names = Names {
        outer: super::HF,
        attn_norm: "input_layernorm",
        attn: [
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
        ],
        mlp_norm: "post_attention_layernorm",
        mlp: ["mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"],
    };

    /// Llama-family tensor names in a llama.cpp file.
    pub(crate) const GGUF: Names = Names {
        outer: super::GGUF,
        attn_norm: "attn_norm",
        attn: ["attn_q", "attn_k", "attn_v", "attn_output"],
        mlp_norm: "ffn_norm",
        mlp: ["ffn_gate", "ffn_up", "ffn_down"],
    };

    /// Reads a Llama-family model in the names `n`, with an RMSNorm over each head's q and k
    /// before RoPE when `qk_norm` names their weights (`{layer}.{i}.{name}.weight`; Qwen3).
    pub(crate) fn build(
        src: &mut dyn Source,
        n: &Names,
        c: &ModelConfig,
        target: (&Device, DType),
        qk_norm: Option<[&str; 2]>,
    ) -> Result<CausalLM> {
        let (hid, eps) = (c.hidden_size, c.norm_eps);
        decoder(src, &n.outer, c, target, Norm::rms, &mut |src, _, p| {
            let attn_norm = Norm::rms(src, &format!("{p}.{}.weight", n.attn_norm), hid, eps)?;
            let mut attn = Attention::separate(src, p, n.attn, c, (c.qkv_bias, c.o_bias))?;
            if let Some([qn, kn]) = qk_norm {
                let hd = c.head_dim;
                attn.q_norm = Some(Norm::rms(src, &format!("{p}.{qn}.weight"), hd, eps)?);
                attn.k_norm = Some(Norm::rms(src, &format!("{p}.{kn}.weight"), hd, eps)?);
            }
            let mlp_norm = Norm::rms(src, &format!("{p}.{}.weight", n.mlp_norm), hid, eps)?;
            let mlp = Mlp::gated(src, p, n.mlp, c, c.mlp_bias, Act::Silu)?;
            Ok(Box::new(PreNormBlock::new(attn_norm, attn, mlp_norm, mlp)))
        })
    }
}
