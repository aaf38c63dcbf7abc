//! Encoders in BERT's shape (`bert`, `roberta`, `xlm-roberta`) from a Hugging Face directory:
//! the config read from `config.json`, the weights, and the forward pass over a padded batch,
//! as transformers' `BertModel` / `XLMRobertaModel` compute it (post-norm blocks, exact GELU,
//! padded keys masked). RoBERTa and XLM-R differ only in their position ids, which start after
//! the padding index.

use super::weight::Weight;
use crate::nn::load::Checkpoint;
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
        let uint = |k: &str| -> Result<usize> {
            let x = field(k).ok_or_else(|| missing(k))?;
            x.as_u64()
                .filter(|&n| n > 0)
                .map(|n| n as usize)
                .ok_or_else(|| {
                    format_error_op(&p, format!("{k:?} must be a positive integer, got {x}"))
                })
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

/// A linear layer `x @ Wᵀ + b`.
struct Linear {
    w: Weight,
    b: Tensor,
}

impl Linear {
    fn apply(&self, x: &Tensor) -> Result<Tensor> {
        match &self.w {
            // `linear` adds the bias inside the CPU matmul instead of in a second pass.
            Weight::Dense(w) if w.dtype() == DType::F32 => x.linear(w, Some(&self.b)),
            w => w.matmul_t(x)?.add(&self.b),
        }
    }
}

/// A LayerNorm's weight and bias (f32).
struct Norm {
    w: Tensor,
    b: Tensor,
}

impl Norm {
    fn apply(&self, x: &Tensor, eps: f32) -> Result<Tensor> {
        x.layer_norm(Some(&self.w), Some(&self.b), eps)
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

/// Reads tensors by name, checks shapes against the config, converts and uploads each.
struct Reader<'a> {
    ckpt: &'a Checkpoint,
    path: String,
    prefix: &'static str,
    device: &'a Device,
    dtype: DType,
}

impl Reader<'_> {
    fn host(&self, name: &str, shape: &[usize], dtype: DType) -> Result<Tensor> {
        let full = format!("{}{name}", self.prefix);
        let missing =
            || format_error_op(&self.path, format!("the checkpoint has no tensor {full:?}"));
        let t = self.ckpt.load(&full, Some(dtype))?.ok_or_else(missing)?;
        if !t.dtype().is_float() {
            let message = format!(
                "tensor {full:?} is stored as {}, not a float type",
                t.dtype()
            );
            return Err(format_error_op(&self.path, message));
        }
        if t.shape() != shape {
            let message = format!(
                "tensor {full:?} has shape {:?}, but config.json implies {shape:?}",
                t.shape()
            );
            return Err(format_error_op(&self.path, message));
        }
        Ok(t)
    }

    fn vector(&self, name: &str, len: usize) -> Result<Tensor> {
        self.host(name, &[len], DType::F32)?.to(self.device)
    }

    fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Weight> {
        let t = self.host(name, &[rows, cols], self.dtype)?;
        Ok(Weight::Dense(t.to(self.device)?))
    }

    fn linear(&self, name: &str, rows: usize, cols: usize) -> Result<Linear> {
        Ok(Linear {
            w: self.matrix(&format!("{name}.weight"), rows, cols)?,
            b: self.vector(&format!("{name}.bias"), rows)?,
        })
    }

    fn norm(&self, name: &str, len: usize) -> Result<Norm> {
        Ok(Norm {
            w: self.vector(&format!("{name}.weight"), len)?,
            b: self.vector(&format!("{name}.bias"), len)?,
        })
    }
}

/// The checkpoint of a model directory.
fn checkpoint_path(dir: &Path) -> Result<std::path::PathBuf> {
    for name in ["model.safetensors", "model.safetensors.index.json"] {
        let p = dir.join(name);
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(Error::Io {
        op: OP,
        path: dir.display().to_string(),
        message: "no model.safetensors or model.safetensors.index.json in this directory".into(),
    })
}

impl Bert {
    /// Loads `config.json` and the safetensors weights of `dir`, matrices in `dtype`.
    pub(super) fn load(dir: &Path, device: &Device, dtype: DType) -> Result<Bert> {
        let config = BertConfig::from_file(&dir.join("config.json"))?;
        let file = checkpoint_path(dir)?;
        let ckpt = Checkpoint::open(&file)?;
        super::fit::check(OP, device, super::fit::hf_bytes(&ckpt, dtype))?;
        // Saved as the bare encoder (sentence-transformers) or inside a task model.
        let prefix = ["", "bert.", "roberta.", "model."]
            .into_iter()
            .find(|p| {
                ckpt.shape(&format!("{p}embeddings.word_embeddings.weight"))
                    .is_some()
            })
            .unwrap_or("");
        let r = Reader {
            ckpt: &ckpt,
            path: file.display().to_string(),
            prefix,
            device,
            dtype,
        };
        let c = &config;
        let (h, inter) = (c.hidden_size, c.intermediate_size);
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
        let embed_norm = r.norm("embeddings.LayerNorm", h)?;
        let mut layers = Vec::with_capacity(c.num_layers);
        for i in 0..c.num_layers {
            let p = format!("encoder.layer.{i}");
            layers.push(Layer {
                q: r.linear(&format!("{p}.attention.self.query"), h, h)?,
                k: r.linear(&format!("{p}.attention.self.key"), h, h)?,
                v: r.linear(&format!("{p}.attention.self.value"), h, h)?,
                attn_out: r.linear(&format!("{p}.attention.output.dense"), h, h)?,
                attn_norm: r.norm(&format!("{p}.attention.output.LayerNorm"), h)?,
                up: r.linear(&format!("{p}.intermediate.dense"), inter, h)?,
                down: r.linear(&format!("{p}.output.dense"), h, inter)?,
                out_norm: r.norm(&format!("{p}.output.LayerNorm"), h)?,
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
        let eps = c.layer_norm_eps;
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
        let mut x = self.embed_norm.apply(&x, eps)?;
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
            x = l.attn_norm.apply(&x.add(&l.attn_out.apply(&a)?)?, eps)?;
            let u = l.up.apply(&x)?;
            let u = match c.act {
                Act::Gelu => u.gelu()?,
                Act::GeluTanh => gelu_tanh(&u)?,
                Act::Relu => u.relu()?,
            };
            x = l.out_norm.apply(&x.add(&l.down.apply(&u)?)?, eps)?;
        }
        x.reshape(&[batch, len, h])
    }
}

/// GELU's tanh form: `0.5 x (1 + tanh(sqrt(2 / π) (x + 0.044715 x³)))`.
fn gelu_tanh(x: &Tensor) -> Result<Tensor> {
    let c = (2.0f32 / std::f32::consts::PI).sqrt();
    let x3 = x.mul(x)?.mul(x)?;
    let inner = x.add(&x3.mul_scalar(0.044715)?)?.mul_scalar(c)?;
    x.mul(&inner.tanh()?.add_scalar(1.0)?)?.mul_scalar(0.5)
}
