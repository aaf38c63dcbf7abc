//! Loading a llama.cpp GGUF file (the architectures whose family has a GGUF loader: `llama`,
//! `qwen2`, `qwen3`, `phi3`, `gemma2`, `gemma3`): the shared hyper-parameters from its metadata,
//! the family's own from its `{arch}.*` keys (the family file reads them), llama.cpp's tensor
//! names, q/k rows un-permuted, quantized matrices kept quantized.

use super::config::{ModelConfig, RopeScaling};
use super::families::FAMILIES;
use super::family::Family;
use super::gguf::{GgufFile, GgufTensor, GgufValue};
use super::layers::{Linear, Source};
use super::load::{check_shape, format_error, Meter, Target};
use super::model::CausalLM;
use super::weight::Weight;
use crate::{DType, Device, Result, Tensor};
use serde_json::Value;
use std::path::Path;

struct Loader<'a> {
    file: &'a GgufFile,
    device: &'a Device,
    dtype: DType,
    meter: Meter<'a>,
    /// The head dim when the file stores q and k rows in llama.cpp's RoPE order.
    permuted_head_dim: Option<usize>,
}

impl Loader<'_> {
    fn tensor(&mut self, name: &str, dtype: DType, unpermute: Option<usize>) -> Result<GgufTensor> {
        let path = self.file.path();
        let info = self
            .file
            .tensor_info(name)
            .ok_or_else(|| format_error(path, format!("no tensor {name:?}")))?;
        let bytes = info.size_in_bytes() as u64;
        let t = match unpermute {
            Some(heads) => self.file.load_unpermuted(name, self.device, dtype, heads)?,
            None => self.file.load(name, self.device, dtype)?,
        };
        self.meter.advance(bytes);
        Ok(t)
    }

    fn check(&self, name: &str, got: &[usize], want: &[usize]) -> Result<()> {
        check_shape(self.file.path(), name, got, want, "the metadata")
    }

    /// `{name}.weight` and, with `bias`, `{name}.bias`, rows restored as in [`Loader::weight`].
    fn linear_in(
        &mut self,
        name: &str,
        (rows, cols): (usize, usize),
        bias: bool,
        unpermute: Option<usize>,
    ) -> Result<Linear> {
        let w = self.weight(&format!("{name}.weight"), rows, cols, unpermute)?;
        let b = if bias {
            let b = self.tensor(&format!("{name}.bias"), DType::F32, unpermute)?;
            match b {
                GgufTensor::Dense(t) => Some(t),
                GgufTensor::Quantized(q) => Some(q.dequantize()?.reshape(&[rows])?),
            }
        } else {
            None
        };
        Ok(Linear { w, b })
    }

    /// A `[rows, cols]` matrix, its rows restored from llama.cpp's RoPE order over `unpermute`
    /// heads when set; quantized matrices stay quantized.
    fn weight(
        &mut self,
        name: &str,
        rows: usize,
        cols: usize,
        unpermute: Option<usize>,
    ) -> Result<Weight> {
        let t = self.tensor(name, self.dtype, unpermute)?;
        self.check(name, &t.shape(), &[rows, cols])?;
        Ok(match t {
            GgufTensor::Dense(t) => Weight::Dense(t),
            GgufTensor::Quantized(q) => Weight::Quantized(q),
        })
    }
}

impl Source for Loader<'_> {
    fn has(&self, name: &str) -> bool {
        self.file.tensor_info(name).is_some()
    }

    fn vector(&mut self, name: &str, len: usize) -> Result<Tensor> {
        match self.tensor(name, DType::F32, None)? {
            GgufTensor::Dense(t) => {
                self.check(name, t.shape(), &[len])?;
                Ok(t)
            }
            GgufTensor::Quantized(q) => q.dequantize()?.reshape(&[len]),
        }
    }

    fn matrix(&mut self, name: &str, rows: usize, cols: usize) -> Result<Weight> {
        self.weight(name, rows, cols, None)
    }

    fn linear(&mut self, name: &str, rows: usize, cols: usize, bias: bool) -> Result<Linear> {
        self.linear_in(name, (rows, cols), bias, None)
    }

    fn rope_linear(&mut self, name: &str, rows: usize, cols: usize, bias: bool) -> Result<Linear> {
        let heads = self.permuted_head_dim.map(|hd| rows / hd);
        self.linear_in(name, (rows, cols), bias, heads)
    }

    /// llama.cpp stores GPT-2's layers as plain `[out, in]` matrices: no Conv1D to transpose.
    fn conv1d(&mut self, name: &str, rows: usize, cols: usize) -> Result<Linear> {
        self.linear(name, rows, cols, true)
    }

    fn table(&mut self, name: &str, rows: usize, cols: usize) -> Result<Tensor> {
        match self.tensor(name, DType::F32, None)? {
            GgufTensor::Dense(t) => {
                self.check(name, t.shape(), &[rows, cols])?;
                Ok(t)
            }
            GgufTensor::Quantized(q) => q.dequantize()?.reshape(&[rows, cols]),
        }
    }
}

/// The family that loads GGUF files of architecture `arch`.
fn gguf_family(arch: &str) -> Option<&'static Family> {
    FAMILIES
        .iter()
        .copied()
        .find(|f| f.gguf.as_ref().is_some_and(|g| g.arch == arch))
}

/// A metadata value as JSON (numbers, strings, booleans, arrays of them).
fn json(v: &GgufValue) -> Value {
    match v {
        GgufValue::Bool(b) => Value::Bool(*b),
        GgufValue::String(s) => Value::String(s.clone()),
        GgufValue::Array(a) => Value::Array(a.iter().map(json).collect()),
        GgufValue::F32(_) | GgufValue::F64(_) => v
            .as_f64()
            .and_then(serde_json::Number::from_f64)
            .map_or(Value::Null, Value::Number),
        _ => match (v.as_u64(), v.as_f64()) {
            (Some(u), _) => u.into(),
            (None, Some(f)) => (f as i64).into(),
            _ => Value::Null,
        },
    }
}

/// The file's `{arch}.*` metadata as a JSON object, keys without the prefix: what a family's
/// [`super::family::Gguf::adjust`] and loader read (as the config.json of a directory).
fn arch_metadata(file: &GgufFile, arch: &str) -> Value {
    let prefix = format!("{arch}.");
    Value::Object(
        file.metadata()
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix(&prefix)?.to_string(), json(v))))
            .collect(),
    )
}

/// The hyper-parameters of a llama.cpp file and the family that loads it.
fn config(file: &GgufFile) -> Result<(ModelConfig, &'static Family)> {
    let fmt = |message: String| format_error(file.path(), message);
    let arch = file
        .architecture()
        .ok_or_else(|| fmt("no general.architecture in the metadata".into()))?
        .to_string();
    let family = gguf_family(&arch).ok_or_else(|| {
        let known: Vec<_> = FAMILIES
            .iter()
            .filter_map(|f| Some(f.gguf.as_ref()?.arch))
            .collect();
        fmt(format!(
            "unknown architecture general.architecture = {arch:?}; wgtensor runs GGUF files of \
             {} (llama covers Mistral)",
            known.join(", ")
        ))
    })?;
    let md = file.metadata();
    let int = |k: &str| {
        md.get(&format!("{arch}.{k}"))
            .and_then(|v| v.as_u64())
            .map(|x| x as usize)
    };
    let need = |k: &str| int(k).ok_or_else(|| fmt(format!("no {arch}.{k} in the metadata")));
    let float = |k: &str, d: f64| {
        md.get(&format!("{arch}.{k}"))
            .and_then(|v| v.as_f64())
            .unwrap_or(d) as f32
    };
    let hidden = need("embedding_length")?;
    let heads = need("attention.head_count")?;
    let kv_heads = int("attention.head_count_kv").unwrap_or(heads);
    if heads == 0 || kv_heads == 0 || heads % kv_heads != 0 {
        return Err(fmt(format!(
            "{heads} heads are not a multiple of {kv_heads} key-value heads"
        )));
    }
    let embd = file
        .tensor_info("token_embd.weight")
        .ok_or_else(|| fmt("no tensor \"token_embd.weight\"".into()))?
        .shape();
    let vocab = match embd[..] {
        [rows, _] => rows,
        _ => {
            return Err(fmt(format!(
                "tensor \"token_embd.weight\" has shape {embd:?}; the embedding must be a \
                 [vocab, embedding_length] matrix"
            )))
        }
    };
    // Token ids are u32: a larger one is refused rather than truncated to another id.
    let id = |k: &str| -> Result<Option<u32>> {
        match md.get(k).and_then(|v| v.as_u64()) {
            None => Ok(None),
            Some(x) => u32::try_from(x).map(Some).map_err(|_| {
                fmt(format!(
                    "{k} = {x} does not fit a 32-bit token id (at most {})",
                    u32::MAX
                ))
            }),
        }
    };
    let head_dim = int("attention.key_length").unwrap_or(hidden / heads);
    // Metadata that changes the computation and that wgtensor does not implement.
    if let Some(v) = int("attention.value_length").filter(|&v| v != head_dim) {
        return Err(fmt(format!(
            "{arch}.attention.value_length = {v} differs from the key length {head_dim}; not \
             implemented"
        )));
    }
    if let Some(v) = int("rope.dimension_count").filter(|&v| v != head_dim) {
        return Err(fmt(format!(
            "{arch}.rope.dimension_count = {v} rotates part of a head of {head_dim}; partial \
             RoPE is not implemented"
        )));
    }
    let gguf = family
        .gguf
        .as_ref()
        .ok_or_else(|| fmt("no GGUF loader (a wgtensor bug)".into()))?;
    // A window only where the family runs it (llama.cpp's llama and qwen2 graphs run none).
    let handles = |k: &str| gguf.handles.contains(&k);
    if let Some(w) = md.get(&format!("{arch}.attention.sliding_window")) {
        if !handles("attention.sliding_window") {
            return Err(fmt(format!(
                "{arch}.attention.sliding_window = {} is not implemented for GGUF files of \
                 {arch}",
                json(w)
            )));
        }
    }
    // Linear RoPE scaling as llama.cpp writes it (`rope.scaling.type` and `.factor`).
    let scaling_key = format!("{arch}.rope.scaling.type");
    let rope_scaling = match md.get(&scaling_key).map(|v| v.as_str()) {
        None | Some(Some("none")) => None,
        Some(Some("linear")) => {
            let key = format!("{arch}.rope.scaling.factor");
            let factor = md.get(&key).and_then(|v| v.as_f64()).ok_or_else(|| {
                fmt(format!(
                    "{scaling_key} = \"linear\" without a numeric {key}"
                ))
            })? as f32;
            Some(RopeScaling::Linear { factor })
        }
        Some(other) => {
            return Err(fmt(format!(
                "{scaling_key} = {:?} is not implemented (none and linear are)",
                other.unwrap_or("<not a string>")
            )))
        }
    };
    // llama.cpp counts the layers from the tensors: a block_count that disagrees is refused.
    let block_count = need("block_count")?;
    let tensor_blocks = file
        .tensor_infos()
        .iter()
        .filter_map(|i| {
            i.name
                .strip_prefix("blk.")?
                .split('.')
                .next()?
                .parse::<usize>()
                .ok()
        })
        .max()
        .map_or(0, |b| b + 1);
    if tensor_blocks != block_count {
        return Err(fmt(format!(
            "{arch}.block_count = {block_count}, but the file holds tensors of {tensor_blocks} \
             layers (blk.0..blk.{})",
            tensor_blocks.saturating_sub(1)
        )));
    }
    let mut c = ModelConfig {
        model_type: family.model_type.to_string(),
        vocab_size: vocab,
        hidden_size: hidden,
        intermediate_size: need("feed_forward_length")?,
        num_layers: block_count,
        num_heads: heads,
        num_kv_heads: kv_heads,
        head_dim,
        max_position_embeddings: need("context_length")?,
        // The family's adjust sets a window it runs (refused above otherwise).
        sliding_window: None,
        sliding_layers: None,
        norm_eps: float("attention.layer_norm_rms_epsilon", 1e-5),
        rope_theta: float("rope.freq_base", 10000.0),
        rope_scaling,
        tie_word_embeddings: file.tensor_info("output.weight").is_none(),
        qkv_bias: file.tensor_info("blk.0.attn_q.bias").is_some(),
        o_bias: file.tensor_info("blk.0.attn_output.bias").is_some(),
        mlp_bias: file.tensor_info("blk.0.ffn_gate.bias").is_some(),
        bos_token_id: id("tokenizer.ggml.bos_token_id")?,
        eos_token_ids: id("tokenizer.ggml.eos_token_id")?.into_iter().collect(),
        raw: arch_metadata(file, &arch),
    };
    (gguf.adjust)(&c.raw.clone(), &mut c, file.path())?;
    c.validate(file.path())?;
    Ok((c, family))
}

/// Loads a GGUF file (see [`super::AutoModel::load`]).
pub(crate) fn load_gguf(path: &Path, to: Target<'_>) -> Result<CausalLM> {
    let (device, dtype) = (to.device, to.dtype);
    let file = GgufFile::open(path)?;
    let (mut config, family) = config(&file)?;
    super::fit::check(
        "AutoModel::load",
        device,
        super::fit::gguf_bytes(&file, dtype),
    )?;
    let total = file
        .tensor_infos()
        .iter()
        .map(|i| i.size_in_bytes() as u64)
        .sum();
    // llama.cpp permutes q and k rows for its RoPE layout in `llama` files only (qwen2 files
    // keep Hugging Face's order).
    let permuted = config.model_type == "llama";
    let mut ld = Loader {
        file: &file,
        device,
        dtype,
        meter: Meter::new(total, to.progress),
        permuted_head_dim: permuted.then_some(config.head_dim),
    };
    if file.tensor_info("rope_freqs.weight").is_some() {
        // Llama 3's scaling as llama.cpp stores it: one divisor per frequency.
        if config.rope_scaling.is_some() {
            return Err(format_error(
                file.path(),
                "both rope.scaling metadata and rope_freqs.weight: which scaling applies is \
                 ambiguous"
                    .into(),
            ));
        }
        let f = ld
            .vector("rope_freqs.weight", config.head_dim / 2)?
            .to_vec::<f32>()?;
        config.rope_scaling = Some(RopeScaling::Factors(f));
        config.validate(file.path())?;
    }
    let load = family
        .gguf
        .as_ref()
        .ok_or_else(|| format_error(file.path(), "no GGUF loader (a wgtensor bug)".into()))?
        .load;
    load(&mut ld, &config, device, dtype)
}
