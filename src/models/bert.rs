//! Encoders in BERT's shape (`bert`, `roberta`, `xlm-roberta`) from a Hugging Face directory:
//! the config read from `config.json`, the weights, and the forward pass over a padded batch,
//! as transformers' `BertModel` / `XLMRobertaModel` compute it (post-norm blocks, exact GELU,
//! padded keys masked). RoBERTa and XLM-R differ only in their position ids, which start after
//! the padding index.

use super::hf_reader::{checkpoint_path, Linear, Norm, Reader};
use super::weight::Weight;
use crate::{DType, Device, Error, Result, Tensor};
use serde_json::Value;
use std::path::Path;

/// The operation named in errors of the embedding models.
pub(super) const OP: &str = "Embedder::load";

/// Which encoder family: they differ only in how position ids are numbered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Family {
    /// Positions 0, 1, 2, ...
    Bert,
    /// `roberta` and `xlm-roberta`: positions `pad + 1, pad + 2, ...` (transformers'
    /// `create_position_ids_from_input_ids`).
    Roberta,
}

/// The feed-forward activation (`hidden_act`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Act {
    /// `gelu`: exact, with erf.
    Gelu,
    /// `gelu_new` / `gelu_pytorch_tanh`: the tanh approximation.
    GeluTanh,
    Relu,
}

/// The hyper-parameters of an encoder, from `config.json`.
#[derive(Clone, Debug)]
pub(super) struct BertConfig {
    pub family: Family,
    pub model_type: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    pub layer_norm_eps: f32,
    pub pad_token_id: u32,
    act: Act,
}

impl BertConfig {
    /// Reads `config.json`; a missing field or an unsupported value is `Error::Format` naming it.
    pub(super) fn from_file(path: &Path) -> Result<BertConfig> {
        let text = std::fs::read_to_string(path).map_err(super::config::io_error(OP, path))?;
        let p = path.display().to_string();
        let v: Value =
            serde_json::from_str(&text).map_err(|e| format_error_op(&p, format!("{e}")))?;
        let field = |k: &str| v.get(k).filter(|x| !x.is_null());
        let missing = |k: &str| format_error_op(&p, format!("config.json has no {k:?}"));
        let uint = |k: &str| {
            super::config::positive_uint(&v, k, u64::MAX).map_err(|m| format_error_op(&p, m))
        };
        let model_type = field("model_type")
            .and_then(Value::as_str)
            .ok_or_else(|| missing("model_type"))?
            .to_string();
        let family = match model_type.as_str() {
            "bert" => Family::Bert,
            "roberta" | "xlm-roberta" => Family::Roberta,
            other => {
                let message = format!(
                    "model_type {other:?} is not an encoder wgtensor implements (bert, roberta, \
                     xlm-roberta)"
                );
                return Err(format_error_op(&p, message));
            }
        };
        let act = match field("hidden_act")
            .and_then(Value::as_str)
            .unwrap_or("gelu")
        {
            "gelu" => Act::Gelu,
            "gelu_new" | "gelu_pytorch_tanh" => Act::GeluTanh,
            "relu" => Act::Relu,
            other => {
                let message =
                    format!("hidden_act {other:?} is not implemented (gelu, gelu_new, relu)");
                return Err(format_error_op(&p, message));
            }
        };
        if let Some(kind) = field("position_embedding_type").and_then(Value::as_str) {
            if kind != "absolute" {
                let message =
                    format!("position_embedding_type {kind:?} is not implemented (absolute)");
                return Err(format_error_op(&p, message));
            }
        }
        let eps = match field("layer_norm_eps") {
            Some(x) => x
                .as_f64()
                .filter(|e| *e > 0.0 && e.is_finite())
                .ok_or_else(|| {
                    format_error_op(&p, format!("layer_norm_eps must be > 0, got {x}"))
                })? as f32,
            None => return Err(missing("layer_norm_eps")),
        };
        // transformers' defaults: BERT pads with 0, RoBERTa's configs always carry it (1).
        let pad = match field("pad_token_id") {
            Some(x) => x
                .as_u64()
                .filter(|&n| n <= u32::MAX as u64)
                .ok_or_else(|| {
                    format_error_op(&p, format!("pad_token_id must be a token id, got {x}"))
                })? as u32,
            None if family == Family::Bert => 0,
            None => return Err(missing("pad_token_id")),
        };
        let c = BertConfig {
            family,
            model_type,
            vocab_size: uint("vocab_size")?,
            hidden_size: uint("hidden_size")?,
            num_layers: uint("num_hidden_layers")?,
            num_heads: uint("num_attention_heads")?,
            intermediate_size: uint("intermediate_size")?,
            max_position_embeddings: uint("max_position_embeddings")?,
            type_vocab_size: uint("type_vocab_size")?,
            layer_norm_eps: eps,
            pad_token_id: pad,
            act,
        };
        if !c.hidden_size.is_multiple_of(c.num_heads) {
            let message = format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                c.hidden_size, c.num_heads
            );
            return Err(format_error_op(&p, message));
        }
        if c.family == Family::Roberta && c.pad_token_id as usize + 1 >= c.max_position_embeddings {
            let message = format!(
                "pad_token_id {} leaves no positions of max_position_embeddings {}",
                c.pad_token_id, c.max_position_embeddings
            );
            return Err(format_error_op(&p, message));
        }
        Ok(c)
    }

    /// The longest input in tokens: RoBERTa's positions start after the padding index.
    pub(super) fn max_tokens(&self) -> usize {
        match self.family {
            Family::Bert => self.max_position_embeddings,
            Family::Roberta => self.max_position_embeddings - self.pad_token_id as usize - 1,
        }
    }

    /// The first position id.
    fn position_offset(&self) -> usize {
        match self.family {
            Family::Bert => 0,
            Family::Roberta => self.pad_token_id as usize + 1,
        }
    }
}

fn format_error_op(path: &str, message: String) -> Error {
    Error::Format {
        op: OP,
        path: path.to_string(),
        message,
    }
}

/// One post-norm encoder block.
struct Layer {
    q: Linear,
    k: Linear,
    v: Linear,
    attn_out: Linear,
    attn_norm: Norm,
    up: Linear,
    down: Linear,
    out_norm: Norm,
}

/// An encoder on a device: embeddings, blocks; `forward` gives the last hidden states.
pub(super) struct Bert {
    pub config: BertConfig,
    word: Weight,
    position: Weight,
    /// Row 0 of the token-type table: every token's type is 0, as transformers defaults it.
    token_type: Tensor,
    embed_norm: Norm,
    layers: Vec<Layer>,
}

impl Bert {
    /// Loads `config.json` and the safetensors weights of `dir`, matrices in `dtype`.
    pub(super) fn load(dir: &Path, device: &Device, dtype: DType) -> Result<Bert> {
        let config = BertConfig::from_file(&dir.join("config.json"))?;
        let file = checkpoint_path(OP, dir)?;
        let ckpt = super::hf_reader::open(OP, &file, device, dtype)?;
        // Saved as the bare encoder (sentence-transformers) or inside a task model.
        let prefixes = ["", "bert.", "roberta.", "model."];
        let r = Reader {
            ckpt: &ckpt,
            op: OP,
            path: &file,
            prefix: Reader::find_prefix(&ckpt, &prefixes, "embeddings.word_embeddings.weight"),
            device,
            dtype,
        };
        let c = &config;
        let (h, inter, eps) = (c.hidden_size, c.intermediate_size, c.layer_norm_eps);
        let word = r.matrix("embeddings.word_embeddings.weight", c.vocab_size, h)?;
        let position = r.matrix(
            "embeddings.position_embeddings.weight",
            c.max_position_embeddings,
            h,
        )?;
        let types = r.host(
            "embeddings.token_type_embeddings.weight",
            &[c.type_vocab_size, h],
            DType::F32,
        )?;
        let token_type = types.narrow(0, 0, 1)?.contiguous()?.to(device)?;
        let embed_norm = r.norm("embeddings.LayerNorm", h, eps)?;
        let mut layers = Vec::with_capacity(c.num_layers);
        for i in 0..c.num_layers {
            let p = format!("encoder.layer.{i}");
            layers.push(Layer {
                q: r.linear(&format!("{p}.attention.self.query"), h, h, true)?,
                k: r.linear(&format!("{p}.attention.self.key"), h, h, true)?,
                v: r.linear(&format!("{p}.attention.self.value"), h, h, true)?,
                attn_out: r.linear(&format!("{p}.attention.output.dense"), h, h, true)?,
                attn_norm: r.norm(&format!("{p}.attention.output.LayerNorm"), h, eps)?,
                up: r.linear(&format!("{p}.intermediate.dense"), inter, h, true)?,
                down: r.linear(&format!("{p}.output.dense"), h, inter, true)?,
                out_norm: r.norm(&format!("{p}.output.LayerNorm"), h, eps)?,
            });
        }
        Ok(Bert {
            config,
            word,
            position,
            token_type,
            embed_norm,
            layers,
        })
    }

    /// The last hidden states `[batch, len, hidden]` (f32) of `ids` (`batch * len`, row-major,
    /// padded) where `mask` (`[batch, len]`, 1 for a token, 0 for padding) marks the real
    /// tokens; padded keys take no part in attention.
    pub(super) fn forward(&self, ids: &[u32], mask: &[u8], batch: usize) -> Result<Tensor> {
        let c = &self.config;
        let len = ids.len() / batch;
        let (h, heads) = (c.hidden_size, c.num_heads);
        let hd = h / heads;
        let device = self.token_type.device();
        // Padded positions get the padding index as transformers numbers them; their values
        // never reach a real token (masked keys) nor the pooled output (masked rows).
        let off = c.position_offset();
        let positions: Vec<u32> = mask
            .iter()
            .enumerate()
            .map(|(i, &m)| match (c.family, m) {
                (Family::Roberta, 0) => c.pad_token_id,
                _ => (off + i % len) as u32,
            })
            .collect();
        let x = self.word.rows(ids)?;
        let x = x
            .add(&self.position.rows(&positions)?)?
            .add(&self.token_type)?;
        let mut x = self.embed_norm.apply(&x)?;
        let keys = Tensor::from_slice(mask, &[batch, 1, 1, len], device)?;
        // [batch * len, hidden] -> [batch, heads, len, hd]
        let split = |t: Tensor| t.reshape(&[batch, len, heads, hd])?.permute(&[0, 2, 1, 3]);
        for l in &self.layers {
            let q = split(l.q.apply(&x)?)?;
            let k = split(l.k.apply(&x)?)?;
            let v = split(l.v.apply(&x)?)?;
            let a =
                Tensor::scaled_dot_product_attention(&q, &k, &v, Some(&keys), false, 0.0, None)?;
            let a = a.permute(&[0, 2, 1, 3])?.reshape(&[batch * len, h])?;
            x = l.attn_norm.apply(&x.add(&l.attn_out.apply(&a)?)?)?;
            let u = l.up.apply(&x)?;
            let u = match c.act {
                Act::Gelu => u.gelu()?,
                Act::GeluTanh => super::layers::gelu_tanh(&u)?,
                Act::Relu => u.relu()?,
            };
            x = l.out_norm.apply(&x.add(&l.down.apply(&u)?)?)?;
        }
        x.reshape(&[batch, len, h])
    }
}
