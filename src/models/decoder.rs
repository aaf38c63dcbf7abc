//! The decoder skeleton the family files share: the embedding, the blocks and the final norm
//! and head read in file order ([`decoder`]), and the tensor names around the blocks ([`HF`],
//! [`GGUF`]). With the parts of `layers.rs` and the builders shared by several families
//! (`llama_like.rs`, `gemma.rs`), a family file imports no other family's file.

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
