//! The Llama-family assembly (Llama, Mistral, Qwen2) shared by both file formats: the Hugging
//! Face and GGUF loaders differ only in tensor names and in how a tensor is read, so each feeds
//! one [`Source`] and one [`Names`] to [`build`].

use super::config::ModelConfig;
use super::model::{Block, CausalLM, Linear, LlamaBlock, Norm};
use super::rope::Rope;
use super::weight::Weight;
use crate::{DType, Device, Result, Tensor};

/// How a loader reads one tensor by name, checks its shape against the config and puts it on
/// the device.
pub(super) trait Source {
    /// Whether the file holds a tensor of this name.
    fn has(&self, name: &str) -> bool;
    /// An f32 vector (norm weight, bias) of `len` elements.
    fn vector(&mut self, name: &str, len: usize) -> Result<Tensor>;
    /// A `[rows, cols]` matrix in the model's dtype.
    fn matrix(&mut self, name: &str, rows: usize, cols: usize) -> Result<Weight>;
    /// `{name}.weight` (`[rows, cols]`) and, with `bias`, `{name}.bias`.
    fn linear(&mut self, name: &str, rows: usize, cols: usize, bias: bool) -> Result<Linear>;
    /// A q or k projection, read as [`Source::linear`]. Its rows are the RoPE pairs of
    /// `rows / head_dim` heads, which a file may store in its own order (llama.cpp's `llama`
    /// files do); they load in Hugging Face's, the order [`build`] and the model use.
    fn rope_linear(&mut self, name: &str, rows: usize, cols: usize, bias: bool) -> Result<Linear> {
        self.linear(name, rows, cols, bias)
    }
}

/// A format's tensor names: `{layer}.{i}.{suffix}` within block `i`.
pub(super) struct Names {
    pub embed: &'static str,
    pub layer: &'static str,
    pub attn_norm: &'static str,
    pub q: &'static str,
    pub k: &'static str,
    pub v: &'static str,
    pub o: &'static str,
    pub mlp_norm: &'static str,
    pub gate: &'static str,
    pub up: &'static str,
    pub down: &'static str,
    pub final_norm: &'static str,
    pub lm_head: &'static str,
}

/// Reads a Llama-family model in file order (embedding, blocks, final norm, head) so progress
/// advances as the loader walks the file. `permuted`: q and k rows are stored in llama.cpp's
/// RoPE order and are restored to Hugging Face's as they load.
pub(super) fn build(
    src: &mut impl Source,
    n: &Names,
    config: &ModelConfig,
    device: &Device,
    dtype: DType,
) -> Result<CausalLM> {
    let c = config;
    let (hid, inter, voc) = (c.hidden_size, c.intermediate_size, c.vocab_size);
    let (qd, kvd) = (c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim);
    let embed = src.matrix(n.embed, voc, hid)?;
    let mut blocks = Vec::with_capacity(c.num_layers);
    for i in 0..c.num_layers {
        let p = format!("{}.{i}", n.layer);
        let b = c.qkv_bias;
        blocks.push(Block::Llama(LlamaBlock {
            attn_norm: norm(src, &format!("{p}.{}.weight", n.attn_norm), hid)?,
            q: src.rope_linear(&format!("{p}.{}", n.q), qd, hid, b)?,
            k: src.rope_linear(&format!("{p}.{}", n.k), kvd, hid, b)?,
            v: src.linear(&format!("{p}.{}", n.v), kvd, hid, b)?,
            o: src.linear(&format!("{p}.{}", n.o), hid, qd, c.o_bias)?,
            mlp_norm: norm(src, &format!("{p}.{}.weight", n.mlp_norm), hid)?,
            gate: src.linear(&format!("{p}.{}", n.gate), inter, hid, c.mlp_bias)?,
            up: src.linear(&format!("{p}.{}", n.up), inter, hid, c.mlp_bias)?,
            down: src.linear(&format!("{p}.{}", n.down), hid, inter, c.mlp_bias)?,
        }));
    }
    let final_norm = norm(src, n.final_norm, hid)?;
    // Tied embeddings serve as the head unless the file still carries its own copy.
    let lm_head = if c.tie_word_embeddings && !src.has(n.lm_head) {
        None
    } else {
        Some(src.matrix(n.lm_head, voc, hid)?)
    };
    let rope = Some(Rope::new(c));
    Ok(CausalLM {
        config: config.clone(),
        device: device.clone(),
        dtype,
        embed,
        positions: None,
        blocks,
        final_norm,
        lm_head,
        rope,
    })
}

/// An RMS norm: a weight and no bias.
fn norm(src: &mut impl Source, name: &str, len: usize) -> Result<Norm> {
    Ok(Norm {
        w: src.vector(name, len)?,
        b: None,
    })
}
