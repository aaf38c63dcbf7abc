//! Sentence embeddings as sentence-transformers computes them: the encoder of
//! [`super::bert`], a tokenizer from `tokenizer.json` with the batch padded to its longest
//! text, the pooling of `1_Pooling/config.json` (mean, CLS, max, mean divided by the square
//! root of the length) and `2_Normalize` when `modules.json` lists it.

use super::bert::{Bert, OP};
use crate::{DType, Device, Error, Result, Tensor};
use serde_json::Value;
use std::path::Path;

/// Texts per forward pass, as `SentenceTransformer.encode`'s default `batch_size`: texts are
/// sorted by length first so each pass pads little.
const BATCH: usize = 32;

/// How token states become one vector; several modes are concatenated in this order, as
/// sentence-transformers' `Pooling` does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Pooling {
    cls: bool,
    max: bool,
    mean: bool,
    mean_sqrt_len: bool,
}

/// A sentence-embedding model on a device: an encoder in BERT's shape (`bert`, `roberta`,
/// `xlm-roberta`), its tokenizer and the pooling of a sentence-transformers directory.
///
/// ```no_run
/// use wgtensor::models::Embedder;
/// use wgtensor::{DType, Device};
/// let e = Embedder::load("all-MiniLM-L6-v2", &Device::best(), DType::F32)?;
/// let v = e.embed(&["A cat sits.", "A kitten is sitting."])?; // [2, 384]
/// let sim = v.narrow(0, 0, 1)?.cosine_similarity(&v.narrow(0, 1, 1)?, 1, 1e-8)?;
/// println!("{:.3}", sim.to_vec::<f32>()?[0]);
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub struct Embedder {
    model: Bert,
    tokenizer: tokenizers::Tokenizer,
    pooling: Pooling,
    normalize: bool,
    lower_case: bool,
    device: Device,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.model.config;
        write!(
            f,
            "Embedder({}, {} layers, dim {}, {:?}{} on {})",
            c.model_type,
            c.num_layers,
            self.dim(),
            self.pooling,
            if self.normalize { ", normalized" } else { "" },
            self.device
        )
    }
}

fn format_error(path: &Path, message: String) -> Error {
    Error::Format {
        op: OP,
        path: path.display().to_string(),
        message,
    }
}

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(super::config::io_error(OP, path))?;
    serde_json::from_str(&text).map_err(|e| format_error(path, e.to_string()))
}

/// The pooling of `1_Pooling/config.json` (sentence-transformers' `Pooling`).
fn read_pooling(path: &Path) -> Result<Pooling> {
    let v = read_json(path)?;
    let flag = |k: &str| v.get(k).and_then(Value::as_bool).unwrap_or(false);
    // Recent sentence-transformers may write one `pooling_mode` name instead of the flags.
    let named = v.get("pooling_mode").and_then(Value::as_str);
    let p = Pooling {
        cls: flag("pooling_mode_cls_token") || named == Some("cls"),
        max: flag("pooling_mode_max_tokens") || named == Some("max"),
        mean: flag("pooling_mode_mean_tokens") || named == Some("mean"),
        mean_sqrt_len: flag("pooling_mode_mean_sqrt_len_tokens")
            || named == Some("mean_sqrt_len_tokens"),
    };
    for k in ["pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"] {
        if flag(k) {
            return Err(format_error(path, format!("{k} is not implemented")));
        }
    }
    if let Some(other) =
        named.filter(|n| !["cls", "max", "mean", "mean_sqrt_len_tokens"].contains(n))
    {
        return Err(format_error(
            path,
            format!("pooling_mode {other:?} is not implemented"),
        ));
    }
    if v.get("include_prompt").and_then(Value::as_bool) == Some(false) {
        return Err(format_error(
            path,
            "include_prompt false is not implemented".into(),
        ));
    }
    if p == Pooling::default() {
        return Err(format_error(path, "no pooling mode is set".into()));
    }
    Ok(p)
}

/// What a directory's `modules.json` asks for: (pooling, normalize, max_seq_length,
/// do_lower_case). Without `modules.json`: mean pooling, no normalization.
fn read_modules(dir: &Path) -> Result<(Pooling, bool, Option<usize>, bool)> {
    let mean = Pooling {
        mean: true,
        ..Pooling::default()
    };
    let modules = dir.join("modules.json");
    if !modules.is_file() {
        return Ok((mean, false, None, false));
    }
    let list = read_json(&modules)?;
    let list = list
        .as_array()
        .ok_or_else(|| format_error(&modules, "not a list of modules".into()))?;
    let (mut pooling, mut normalize, mut max_len, mut lower) = (None, false, None, false);
    for m in list {
        let ty = m.get("type").and_then(Value::as_str).unwrap_or("");
        let sub = dir.join(m.get("path").and_then(Value::as_str).unwrap_or(""));
        match ty.rsplit('.').next().unwrap_or("") {
            "Transformer" => {
                let cfg = sub.join("sentence_bert_config.json");
                if cfg.is_file() {
                    let v = read_json(&cfg)?;
                    max_len = v
                        .get("max_seq_length")
                        .and_then(Value::as_u64)
                        .map(|n| n as usize);
                    lower = v
                        .get("do_lower_case")
                        .and_then(Value::as_bool)
                        .unwrap_or(false);
                }
            }
            "Pooling" => pooling = Some(read_pooling(&sub.join("config.json"))?),
            "Normalize" => normalize = true,
            _ => {
                let message =
                    format!("module {ty:?} is not implemented (Transformer, Pooling, Normalize)");
                return Err(format_error(&modules, message));
            }
        }
    }
    Ok((pooling.unwrap_or(mean), normalize, max_len, lower))
}

impl Embedder {
    /// Loads a sentence-transformers (or plain Hugging Face) directory: `config.json` with
    /// `model_type` `bert`, `roberta` or `xlm-roberta`, `model.safetensors`, `tokenizer.json`,
    /// and optionally `modules.json` with its `1_Pooling/config.json` and `2_Normalize`
    /// (without `modules.json`: mean pooling, not normalized). Weight matrices are stored in
    /// `dtype` (F32 or F16); norms, biases and the pooled output are f32.
    ///
    /// ```no_run
    /// let e = wgtensor::models::Embedder::load("bge-small-en-v1.5", &wgtensor::Device::cpu(), wgtensor::DType::F16)?;
    /// assert_eq!(e.dim(), 384);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Io`] for a missing file; [`Error::Format`] for a config lacking a field the
    /// model needs, an unknown `model_type` or pooling, a module other than Transformer,
    /// Pooling and Normalize, a tensor missing or of the wrong shape, a tokenizer the
    /// `tokenizers` crate cannot read; [`Error::InvalidArgument`] for a dtype other than F32
    /// or F16; allocation errors.
    pub fn load(path: impl AsRef<Path>, device: &Device, dtype: DType) -> Result<Embedder> {
        let dir = path.as_ref();
        super::hf_reader::check_dtype(OP, dtype)?;
        if !dir.is_dir() {
            return Err(Error::Io {
                op: OP,
                path: dir.display().to_string(),
                message: if dir.exists() {
                    "not a model directory (config.json, model.safetensors, tokenizer.json)".into()
                } else {
                    "no such file or directory".into()
                },
            });
        }
        let (pooling, normalize, max_len, lower_case) = read_modules(dir)?;
        // Older sentence-transformers write max_seq_length in sentence_bert_config.json; newer
        // ones, and plain transformers directories, keep it as the tokenizer's
        // model_max_length (transformers writes ~1e30 for "no limit", which the cap below
        // turns into the position table's length).
        let max_len = match max_len {
            Some(m) => Some(m),
            None => {
                let p = dir.join("tokenizer_config.json");
                let v = if p.is_file() {
                    read_json(&p)?
                } else {
                    Value::Null
                };
                v.get("model_max_length")
                    .and_then(Value::as_f64)
                    .filter(|m| *m >= 1.0)
                    .map(|m| m.min(usize::MAX as f64) as usize)
            }
        };
        let tok_path = dir.join("tokenizer.json");
        let bytes = std::fs::read(&tok_path).map_err(super::config::io_error(OP, &tok_path))?;
        let mut tokenizer = tokenizers::Tokenizer::from_bytes(&bytes)
            .map_err(|e| format_error(&tok_path, e.to_string()))?;
        let model = Bert::load(dir, device, dtype)?;
        // sentence-transformers truncates to max_seq_length (its tokenizer call overrides the
        // file's own truncation and padding); never past the position table.
        let max_length = max_len.map_or(model.config.max_tokens(), |m| {
            m.min(model.config.max_tokens())
        });
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(tokenizers::TruncationParams {
                max_length,
                ..Default::default()
            }))
            .map_err(|e| format_error(&tok_path, e.to_string()))?;
        Ok(Embedder {
            model,
            tokenizer,
            pooling,
            normalize,
            lower_case,
            device: device.clone(),
        })
    }

    /// The embedding width: the hidden size times the number of pooling modes.
    ///
    /// ```no_run
    /// let e = wgtensor::models::Embedder::load("all-MiniLM-L6-v2", &wgtensor::Device::cpu(), wgtensor::DType::F32)?;
    /// assert_eq!(e.dim(), 384);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn dim(&self) -> usize {
        let p = self.pooling;
        let modes = [p.cls, p.max, p.mean, p.mean_sqrt_len];
        self.model.config.hidden_size * modes.iter().filter(|&&m| m).count()
    }

    /// The device the weights and the embeddings live on.
    ///
    /// ```no_run
    /// let e = wgtensor::models::Embedder::load("all-MiniLM-L6-v2", &wgtensor::Device::cpu(), wgtensor::DType::F32)?;
    /// assert!(e.device().is_cpu());
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The embeddings of `texts`, `[texts.len(), dim]` f32 on the model's device, as
    /// `SentenceTransformer.encode` computes them: each text tokenized with special tokens
    /// and truncated to the model's maximum length, texts run in length-sorted batches of 32
    /// padded to their longest (padding masked out of attention and pooling), token type 0,
    /// then pooled and, with `2_Normalize`, scaled to unit length. No texts give `[0, dim]`.
    ///
    /// ```no_run
    /// let e = wgtensor::models::Embedder::load("all-MiniLM-L6-v2", &wgtensor::Device::best(), wgtensor::DType::F32)?;
    /// let v = e.embed(&["first", "the second text"])?;
    /// assert_eq!(v.shape(), &[2, e.dim()]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the tokenizer fails on a text; device errors.
    pub fn embed(&self, texts: &[&str]) -> Result<Tensor> {
        if self.device.is_cpu() {
            // As in `CausalLM::forward`: from inside rayon's pool each CPU kernel's parallel
            // loop shares its work with this thread instead of sleeping on the workers.
            return rayon::scope(|_| self.embed_here(texts));
        }
        self.embed_here(texts)
    }

    fn embed_here(&self, texts: &[&str]) -> Result<Tensor> {
        let _guard = crate::no_grad();
        if texts.is_empty() {
            return Tensor::zeros(&[0, self.dim()], DType::F32, &self.device);
        }
        let inputs: Vec<String> = texts
            .iter()
            .map(|t| {
                if self.lower_case {
                    t.to_lowercase()
                } else {
                    t.to_string()
                }
            })
            .collect();
        let encodings =
            self.tokenizer
                .encode_batch(inputs, true)
                .map_err(|e| Error::InvalidArgument {
                    op: "Embedder::embed",
                    message: e.to_string(),
                })?;
        let ids: Vec<&[u32]> = encodings.iter().map(|e| e.get_ids()).collect();
        // Longest first, ties in input order, so each batch pads little.
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(ids[i].len()));
        let mut pooled = Vec::with_capacity(order.len().div_ceil(BATCH));
        for chunk in order.chunks(BATCH) {
            pooled.push(self.embed_batch(chunk.iter().map(|&i| ids[i]))?);
        }
        let all = Tensor::cat(&pooled.iter().collect::<Vec<_>>(), 0)?;
        // Row `order[j]` of the output is row j of `all`.
        let mut inverse = vec![0u32; order.len()];
        for (j, &i) in order.iter().enumerate() {
            inverse[i] = j as u32;
        }
        let inverse = Tensor::from_vec(inverse, &[order.len()], &self.device)?;
        all.index_select(0, &inverse)
    }

    /// The pooled (and normalized) embeddings of one batch of token id lists.
    fn embed_batch<'a>(
        &self,
        batch: impl ExactSizeIterator<Item = &'a [u32]> + Clone,
    ) -> Result<Tensor> {
        let n = batch.len();
        let len = batch.clone().map(<[u32]>::len).max().unwrap_or(0).max(1);
        let pad = self.model.config.pad_token_id;
        let mut ids = vec![pad; n * len];
        let mut mask = vec![0u8; n * len];
        for (r, row) in batch.enumerate() {
            ids[r * len..r * len + row.len()].copy_from_slice(row);
            mask[r * len..r * len + row.len()].fill(1);
        }
        let vocab = self.model.config.vocab_size;
        if let Some(&bad) = ids.iter().find(|&&i| i as usize >= vocab) {
            return Err(Error::InvalidArgument {
                op: "Embedder::embed",
                message: format!(
                    "the tokenizer gave id {bad}, past the model's vocabulary of {vocab}"
                ),
            });
        }
        let h = self.model.forward(&ids, &mask, n)?;
        let out = self.pool(&h, &mask, n, len)?;
        if !self.normalize {
            return Ok(out);
        }
        // torch.nn.functional.normalize: x / max(‖x‖, 1e-12).
        let norm = out
            .mul(&out)?
            .sum(1, true)?
            .sqrt()?
            .clamp(1e-12, f32::MAX)?;
        out.div(&norm)
    }

    /// sentence-transformers' `Pooling` of `h` `[n, len, hidden]` under `mask`.
    fn pool(&self, h: &Tensor, mask: &[u8], n: usize, len: usize) -> Result<Tensor> {
        let hid = self.model.config.hidden_size;
        let d = &self.device;
        let maskf: Vec<f32> = mask.iter().map(|&m| f32::from(m)).collect();
        let maskf = Tensor::from_vec(maskf, &[n, len, 1], d)?;
        let mut parts = Vec::new();
        if self.pooling.cls {
            parts.push(h.narrow(1, 0, 1)?.reshape(&[n, hid])?);
        }
        if self.pooling.max {
            // Padding is set to -1e9 before the maximum, as sentence-transformers does.
            let keep = Tensor::from_slice(mask, &[n, len, 1], d)?;
            let low = Tensor::full(&[1], -1e9, DType::F32, d)?;
            parts.push(keep.where_cond(h, &low)?.max(1, false)?);
        }
        if self.pooling.mean || self.pooling.mean_sqrt_len {
            let sum = h.mul(&maskf)?.sum(1, false)?;
            let count = maskf.sum(1, false)?.clamp(1e-9, f32::MAX)?;
            if self.pooling.mean {
                parts.push(sum.div(&count)?);
            }
            if self.pooling.mean_sqrt_len {
                parts.push(sum.div(&count.sqrt()?)?);
            }
        }
        if parts.len() == 1 {
            return Ok(parts.remove(0));
        }
        Tensor::cat(&parts.iter().collect::<Vec<_>>(), 1)
    }
}
