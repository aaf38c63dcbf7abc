//! `config.json` of a Hugging Face model directory: the hyper-parameters every family shares,
//! in one struct; what a family adds is described by its [`ConfigSpec`] (in its own file) and
//! read from [`ModelConfig`]'s raw JSON when the family loads.

use crate::{Error, Result};
use serde_json::Value;
use std::path::Path;

/// RoPE frequency scaling (`rope_scaling` in `config.json`).
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    /// Llama 3's: low frequencies divided by `factor`, high ones kept, a smooth ramp between.
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_max_position_embeddings: usize,
    },
    /// Every frequency divided by `factor` (position interpolation).
    Linear { factor: f32 },
    /// Frequency `i` divided by `factors[i]` (llama.cpp's `rope_freqs.weight`, how GGUF files
    /// carry Llama 3's scaling).
    Factors(Vec<f32>),
}

/// The hyper-parameters of a model, read from `config.json` (or a GGUF file's metadata).
///
/// ```
/// let json = r#"{"model_type": "llama", "vocab_size": 100, "hidden_size": 32,
///   "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
///   "max_position_embeddings": 64}"#;
/// let c = wgtensor::models::ModelConfig::from_json_str(json, "config.json")?;
/// assert_eq!((c.num_kv_heads, c.head_dim), (4, 8));
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    /// `model_type` as written (`llama`, `mistral`, `qwen2`, `qwen3`, `gpt2`, ...): the
    /// family that runs the model.
    pub model_type: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    /// The context length: the KV cache holds this many positions at most.
    pub max_position_embeddings: usize,
    /// The sliding attention window (`sliding_window` of Mistral, of Qwen2 with
    /// `use_sliding_window`), when it is shorter than the context: position `i` attends to
    /// positions `i - window + 1 ..= i` only, as in transformers. `None`: every earlier
    /// position.
    pub sliding_window: Option<usize>,
    /// With a sliding window, which layers use it (`layer_types` of the config:
    /// `"sliding_attention"` or `"full_attention"`); the others attend to every earlier
    /// position. `None` without a window.
    pub sliding_layers: Option<Vec<bool>>,
    pub norm_eps: f32,
    pub rope_theta: f32,
    pub rope_scaling: Option<RopeScaling>,
    pub tie_word_embeddings: bool,
    /// Biases on the q, k and v projections (Qwen2; `attention_bias` of Llama).
    pub qkv_bias: bool,
    /// A bias on the attention output projection (`attention_bias` of Llama; Qwen2 has none).
    pub o_bias: bool,
    /// Biases on the gate, up and down projections (`mlp_bias` of Llama).
    pub mlp_bias: bool,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
    /// The whole `config.json` (for a GGUF file: its `{arch}.*` metadata, keys without the
    /// prefix), where a family reads its own keys.
    pub(crate) raw: Value,
}

/// What a family's `config.json` holds beyond the shared fields.
pub(crate) struct ConfigSpec {
    /// Keys of [`UNSUPPORTED`] the family implements.
    pub handles: &'static [&'static str],
    /// The key naming the MLP's activation and the values the family runs.
    pub act_key: &'static str,
    pub acts: &'static [&'static str],
    /// `intermediate_size` when absent, as a multiple of `hidden_size` (GPT-2's `n_inner`);
    /// `None`: required.
    pub intermediate_default: Option<usize>,
    /// `tie_word_embeddings` when absent.
    pub tied_default: bool,
    /// Which layers slide when the config lists no `layer_types`.
    pub default_sliding: fn(&Value, usize) -> Vec<bool>,
    /// Sets and checks the family's own fields (a missing key it needs is a format error).
    pub adjust: fn(&Value, &mut ModelConfig, &str) -> Result<()>,
}

impl ConfigSpec {
    /// The spec of a family in Llama's shape: activation `hidden_act` among `acts`, untied
    /// embeddings by default, no keys of its own beyond what `adjust` reads.
    pub(crate) const fn hidden_act(
        acts: &'static [&'static str],
        default_sliding: fn(&Value, usize) -> Vec<bool>,
        adjust: fn(&Value, &mut ModelConfig, &str) -> Result<()>,
    ) -> ConfigSpec {
        ConfigSpec {
            handles: &[],
            act_key: "hidden_act",
            acts,
            intermediate_default: None,
            tied_default: false,
            default_sliding,
            adjust,
        }
    }
}

/// The RoPE scaling that `rope_scaling` (or transformers 5's `rope_parameters`) `s` describes.
pub(crate) fn rope_scaling_of(s: Option<&Value>, path: &str) -> Result<Option<RopeScaling>> {
    Ok(match s {
        None => None,
        Some(s) => {
            let kind = s
                .get("rope_type")
                .or_else(|| s.get("type"))
                .and_then(Value::as_str)
                .unwrap_or("default");
            let f = |k: &str, d: f64| s.get(k).and_then(Value::as_f64).unwrap_or(d) as f32;
            match kind {
                "default" => None,
                "llama3" => Some(RopeScaling::Llama3 {
                    factor: f("factor", 8.0),
                    low_freq_factor: f("low_freq_factor", 1.0),
                    high_freq_factor: f("high_freq_factor", 4.0),
                    original_max_position_embeddings: s
                        .get("original_max_position_embeddings")
                        .and_then(Value::as_u64)
                        .unwrap_or(8192) as usize,
                }),
                "linear" => Some(RopeScaling::Linear {
                    factor: f("factor", 1.0),
                }),
                other => {
                    return Err(format_err(
                        path,
                        format!("rope scaling type {other:?} is not supported (default, linear and llama3 are)"),
                    ))
                }
            }
        }
    })
}

/// No layer slides (the default of most families).
pub(crate) fn no_sliding(_: &Value, layers: usize) -> Vec<bool> {
    vec![false; layers]
}

/// A family without fields of its own.
pub(crate) fn no_adjust(_: &Value, _: &mut ModelConfig, _: &str) -> Result<()> {
    Ok(())
}

/// A checkpoint that cannot be a model: `Error::Format` of `AutoModel::load` naming `path`.
pub(crate) fn format_error(path: &str, message: String) -> Error {
    Error::Format {
        op: "AutoModel::load",
        path: path.to_string(),
        message,
    }
}

/// The integer `v[key]` of a `config.json` when it is in `1..=max`, as the encoder and Whisper
/// configs read their sizes; else the message saying why not (the field is missing or null, or
/// not such an integer), for the caller to wrap in its own error.
pub(crate) fn positive_uint(v: &Value, key: &str, max: u64) -> std::result::Result<usize, String> {
    let x = v
        .get(key)
        .filter(|x| !x.is_null())
        .ok_or_else(|| format!("config.json has no {key:?}"))?;
    x.as_u64()
        .filter(|&n| n > 0 && n <= max)
        .map(|n| n as usize)
        .ok_or_else(|| format!("{key:?} must be a positive integer, got {x}"))
}

/// `x` as a positive finite f32 (a scale, a RoPE base, a soft-cap); `None` for anything else.
pub(crate) fn positive_f32(x: &Value) -> Option<f32> {
    x.as_f64()
        .filter(|&x| x > 0.0 && x.is_finite())
        .map(|x| x as f32)
}

pub(crate) fn format_err(path: &str, message: String) -> Error {
    Error::Format {
        op: "ModelConfig",
        path: path.to_string(),
        message,
    }
}

/// The token id(s) under `key` (one number or an array); an id past u32 is refused rather than
/// truncated to another id.
fn ids(v: &Value, key: &str, path: &str) -> Result<Vec<u32>> {
    let one = |x: &Value| -> Result<Option<u32>> {
        match x.as_u64() {
            None => Ok(None),
            Some(id) => u32::try_from(id).map(Some).map_err(|_| {
                format_err(
                    path,
                    format!(
                        "{key} = {id} does not fit a 32-bit token id (at most {})",
                        u32::MAX
                    ),
                )
            }),
        }
    };
    match v.get(key) {
        Some(x @ Value::Number(_)) => Ok(one(x)?.into_iter().collect()),
        Some(Value::Array(a)) => {
            let mut out = Vec::new();
            for x in a {
                out.extend(one(x)?);
            }
            Ok(out)
        }
        _ => Ok(Vec::new()),
    }
}

/// `config.json` keys that change what a model computes, with the values wgtensor runs
/// (`None`: only absent or null); any other value is refused, so a different model never
/// loads silently.
const UNSUPPORTED: &[(&str, &[&str])] = &[
    ("partial_rotary_factor", &["1", "1.0"]),
    ("attn_logit_softcapping", &[]),
    ("final_logit_softcapping", &[]),
    ("scale_attn_by_inverse_layer_idx", &["false"]),
    ("scale_attn_weights", &["true"]),
    ("qk_layernorm", &["false"]),
    ("use_qk_norm", &["false"]),
];

/// The [`Error::Io`] of `op` failing to read the file at `path`, for `map_err` (every file
/// the models module opens).
pub(crate) fn io_error(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.display().to_string();
    move |e| Error::Io {
        op,
        path,
        message: e.to_string(),
    }
}

impl ModelConfig {
    /// The shared fields of `config.json` `v` of a model of `model_type`, whose family is
    /// described by `spec`; then the family's own fields (`spec.adjust`) and the checks.
    pub(crate) fn from_value(
        v: &Value,
        model_type: &str,
        spec: &ConfigSpec,
        path: &str,
    ) -> Result<ModelConfig> {
        let get = |keys: &[&str]| keys.iter().find_map(|k| v.get(*k).and_then(Value::as_u64));
        let need = |keys: &[&str]| -> Result<usize> {
            get(keys)
                .map(|x| x as usize)
                .ok_or_else(|| format_err(path, format!("no {:?} (a positive integer)", keys[0])))
        };
        let float = |keys: &[&str], default: f64| {
            keys.iter()
                .find_map(|k| v.get(*k).and_then(Value::as_f64))
                .unwrap_or(default) as f32
        };
        for (key, ok) in UNSUPPORTED {
            if spec.handles.contains(key) {
                continue;
            }
            if let Some(x) = v.get(*key).filter(|x| !x.is_null()) {
                if !ok.contains(&x.to_string().as_str()) {
                    return Err(format_err(
                        path,
                        format!("{key} = {x} is not implemented by wgtensor (it changes what the model computes)"),
                    ));
                }
            }
        }
        let (act_key, act_ok) = (spec.act_key, spec.acts);
        if let Some(act) = v.get(act_key).and_then(Value::as_str) {
            if !act_ok.contains(&act) {
                return Err(format_err(
                    path,
                    format!("{act_key} = {act:?} is not implemented (wgtensor runs {act_ok:?})"),
                ));
            }
        }
        let hidden_size = need(&["hidden_size", "n_embd"])?;
        let num_heads = need(&["num_attention_heads", "n_head"])?;
        let num_kv_heads = get(&["num_key_value_heads"]).map_or(num_heads, |x| x as usize);
        let intermediate_size = match spec.intermediate_default {
            Some(times) => {
                get(&["intermediate_size", "n_inner"]).map_or(times * hidden_size, |x| x as usize)
            }
            None => need(&["intermediate_size"])?,
        };
        if num_heads == 0 || num_kv_heads == 0 || num_heads % num_kv_heads != 0 {
            return Err(format_err(
                path,
                format!("{num_heads} attention heads are not a multiple of {num_kv_heads} key-value heads"),
            ));
        }
        let head_dim = get(&["head_dim"]).map_or(hidden_size / num_heads, |x| x as usize);
        // transformers 5 moved rope_theta and rope_scaling into rope_parameters.
        let rope = v.get("rope_parameters");
        let rope_theta = v
            .get("rope_theta")
            .or_else(|| rope.and_then(|r| r.get("rope_theta")))
            .and_then(Value::as_f64)
            .unwrap_or(10000.0) as f32;
        let scaling = v
            .get("rope_scaling")
            .filter(|s| !s.is_null())
            .or(rope)
            .filter(|s| !s.is_null());
        let rope_scaling = rope_scaling_of(scaling, path)?;
        let bool_key = |k: &str| v.get(k).and_then(Value::as_bool).unwrap_or(false);
        let attention_bias = bool_key("attention_bias");
        let mlp_bias = bool_key("mlp_bias");
        let max_position_embeddings = need(&["max_position_embeddings", "n_positions", "n_ctx"])?;
        // transformers lets position i attend to i - window + 1 ..= i; a window as long as the
        // context changes nothing and is dropped.
        let mut sliding_window = None;
        let num_layers = need(&["num_hidden_layers", "n_layer"])?;
        // Which layers slide: `layer_types` where the config lists them (transformers 5 writes
        // them), else Qwen2's `use_sliding_window` from `max_window_layers` on, else every
        // layer of Mistral; Llama and GPT-2 have no window (transformers ignores the key).
        let sliding_layers = match v.get("layer_types").filter(|l| !l.is_null()) {
            Some(l) => {
                let l = l
                    .as_array()
                    .filter(|l| l.len() == num_layers)
                    .ok_or_else(|| {
                        format_err(
                            path,
                            format!("layer_types = {l} is not a list of {num_layers} layer types"),
                        )
                    })?;
                let mut out = Vec::with_capacity(num_layers);
                for t in l {
                    out.push(match t.as_str() {
                        Some("sliding_attention") => true,
                        Some("full_attention") => false,
                        _ => {
                            return Err(format_err(
                                path,
                                format!("layer_types holds {t}, which wgtensor does not run"),
                            ));
                        }
                    });
                }
                out
            }
            None => (spec.default_sliding)(v, num_layers),
        };
        if sliding_layers.iter().any(|&s| s) {
            if let Some(w) = v.get("sliding_window").filter(|w| !w.is_null()) {
                let w = w.as_u64().filter(|&w| w > 0).ok_or_else(|| {
                    format_err(
                        path,
                        format!("sliding_window = {w} is not a positive integer"),
                    )
                })?;
                sliding_window = usize::try_from(w)
                    .ok()
                    .filter(|&w| w < max_position_embeddings);
            }
        }
        let mut c = ModelConfig {
            vocab_size: need(&["vocab_size"])?,
            hidden_size,
            intermediate_size,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
            max_position_embeddings,
            sliding_window,
            sliding_layers: sliding_window.map(|_| sliding_layers),
            norm_eps: float(&["rms_norm_eps", "layer_norm_epsilon"], 1e-5),
            rope_theta,
            rope_scaling,
            tie_word_embeddings: v
                .get("tie_word_embeddings")
                .and_then(Value::as_bool)
                .unwrap_or(spec.tied_default),
            qkv_bias: attention_bias,
            o_bias: attention_bias,
            mlp_bias,
            bos_token_id: ids(v, "bos_token_id", path)?.first().copied(),
            eos_token_ids: ids(v, "eos_token_id", path)?,
            model_type: model_type.to_string(),
            raw: v.clone(),
        };
        (spec.adjust)(v, &mut c, path)?;
        c.validate(path)?;
        Ok(c)
    }

    /// The sliding window of layer `layer`, if it has one.
    pub(crate) fn window(&self, layer: usize) -> Option<usize> {
        let slides = self.sliding_layers.as_ref()?.get(layer).copied()?;
        self.sliding_window.filter(|_| slides)
    }

    /// Sizes that would make a kernel or the cache meaningless are refused up front.
    pub(crate) fn validate(&self, path: &str) -> Result<()> {
        let dims = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("num_layers", self.num_layers),
            ("head_dim", self.head_dim),
            ("max_position_embeddings", self.max_position_embeddings),
            ("intermediate_size", self.intermediate_size),
        ];
        if let Some((name, x)) = dims.iter().find(|(_, x)| *x == 0 || *x > 1 << 24) {
            return Err(format_err(
                path,
                format!("{name} = {x} must be in 1..=16,777,216"),
            ));
        }
        // Head counts bounded, and their products checked: `heads x head_dim` must not wrap.
        for (name, heads) in [
            ("num_attention_heads", self.num_heads),
            ("num_key_value_heads", self.num_kv_heads),
        ] {
            let width = heads.checked_mul(self.head_dim);
            if heads == 0 || heads > 1 << 24 || width.is_none_or(|w| w > 1 << 24) {
                return Err(format_err(
                    path,
                    format!(
                        "{name} = {heads} heads of head_dim {} give a width past 16,777,216",
                        self.head_dim
                    ),
                ));
            }
        }
        if !self.num_heads.is_multiple_of(self.num_kv_heads) {
            return Err(format_err(
                path,
                format!(
                    "{} attention heads are not a multiple of {} key-value heads",
                    self.num_heads, self.num_kv_heads
                ),
            ));
        }
        // Hyper-parameters that would make every logit NaN.
        let positive = |x: f32| x > 0.0 && x.is_finite();
        for (name, x) in [
            ("the norm epsilon (rms_norm_eps)", self.norm_eps),
            ("rope_theta (rope.freq_base)", self.rope_theta),
        ] {
            if !positive(x) {
                return Err(format_err(
                    path,
                    format!("{name} = {x} must be finite and > 0"),
                ));
            }
        }
        match &self.rope_scaling {
            None => {}
            Some(RopeScaling::Linear { factor }) if !positive(*factor) => {
                return Err(format_err(
                    path,
                    format!("rope_scaling factor = {factor} must be finite and > 0"),
                ));
            }
            Some(RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            }) if !(positive(*factor)
                && positive(*low_freq_factor)
                && positive(*high_freq_factor)
                && high_freq_factor > low_freq_factor
                && *original_max_position_embeddings > 0) =>
            {
                return Err(format_err(
                    path,
                    format!(
                        "llama3 rope_scaling needs finite factor > 0 (got {factor}), \
                         0 < low_freq_factor < high_freq_factor (got {low_freq_factor}, \
                         {high_freq_factor}) and original_max_position_embeddings > 0 (got \
                         {original_max_position_embeddings})"
                    ),
                ));
            }
            Some(RopeScaling::Factors(f)) => {
                if f.len() != self.head_dim / 2 {
                    return Err(format_err(
                        path,
                        format!(
                            "rope_freqs has {} factors, head_dim / 2 = {}",
                            f.len(),
                            self.head_dim / 2
                        ),
                    ));
                }
                if let Some((i, x)) = f.iter().enumerate().find(|(_, x)| !positive(**x)) {
                    return Err(format_err(
                        path,
                        format!("rope_freqs factor {i} = {x} must be finite and > 0 (it divides a frequency)"),
                    ));
                }
            }
            Some(_) => {}
        }
        if !self.head_dim.is_multiple_of(2) || self.head_dim > 256 {
            return Err(format_err(
                path,
                format!("head_dim = {} must be even and at most 256", self.head_dim),
            ));
        }
        Ok(())
    }

    /// RoPE inverse frequencies (`head_dim / 2` of them), with the configured scaling applied,
    /// computed in f32 as transformers does (so the angles agree to the last bit or two).
    pub(crate) fn inv_freq(&self) -> Vec<f32> {
        let dim = self.head_dim as f32;
        let base: Vec<f32> = (0..self.head_dim / 2)
            .map(|i| 1.0 / self.rope_theta.powf((2 * i) as f32 / dim))
            .collect();
        match &self.rope_scaling {
            None => base,
            Some(RopeScaling::Factors(f)) => base.iter().zip(f).map(|(b, f)| b / f).collect(),
            Some(RopeScaling::Linear { factor }) => base.iter().map(|&f| f / factor).collect(),
            &Some(RopeScaling::Llama3 {
                factor,
                low_freq_factor: low,
                high_freq_factor: high,
                original_max_position_embeddings,
            }) => {
                let old = original_max_position_embeddings as f32;
                let (low_wl, high_wl) = (old / low, old / high);
                base.iter()
                    .map(|&f| {
                        let wl = 2.0 * std::f32::consts::PI / f;
                        if wl > low_wl {
                            f / factor
                        } else if wl < high_wl {
                            f
                        } else {
                            let smooth = (old / wl - low) / (high - low);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect()
            }
        }
    }
}
