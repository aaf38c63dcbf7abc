//! What a decoder family file declares: its `model_type`, its config and its loader. Apart
//! from the registry (`families.rs`) that lists the families, so a family file and the
//! registry do not import each other.

use super::config::{format_error, ConfigSpec, ModelConfig};
use super::layers::Source;
use super::model::CausalLM;
use crate::{DType, Device, Result};
use serde_json::Value;

/// One family: the `model_type` it runs, what its config holds, how its weights load.
pub(crate) struct Family {
    pub model_type: &'static str,
    pub config: ConfigSpec,
    /// Builds the model from a Hugging Face checkpoint (tensor names as transformers writes
    /// them), reading tensors in file order so progress advances as the loader walks the file.
    pub load: Loader,
    /// How llama.cpp's GGUF files of the family load; `None`: such files are refused.
    pub gguf: Option<Gguf>,
}

/// A family's llama.cpp GGUF files: their architecture, the metadata the family reads itself
/// and the loader (llama.cpp's tensor names).
pub(crate) struct Gguf {
    /// `general.architecture` as llama.cpp writes it (`gemma3` for `gemma3_text`).
    pub arch: &'static str,
    /// Metadata keys (without the `{arch}.` prefix) the family implements among those the
    /// shared reader refuses otherwise (`attention.sliding_window`).
    pub handles: &'static [&'static str],
    /// Sets the family's own fields from the file's `{arch}.*` metadata, which
    /// [`ModelConfig`]'s raw JSON holds without the prefix (`attention.sliding_window`,
    /// `attn_logit_softcapping`, ...); a value it cannot run is a format error.
    pub adjust: fn(&Value, &mut ModelConfig, &str) -> Result<()>,
    pub load: Loader,
}

impl Gguf {
    /// Files of architecture `arch` whose metadata the shared reader covers.
    pub(crate) const fn plain(arch: &'static str, load: Loader) -> Gguf {
        Gguf {
            arch,
            handles: &[],
            adjust: super::config::no_adjust,
            load,
        }
    }
}

/// Builds a model from the tensors a [`Source`] reads.
pub(crate) type Loader = fn(&mut dyn Source, &ModelConfig, &Device, DType) -> Result<CausalLM>;

/// The window of llama.cpp's `attention.sliding_window` on the layers `sliding` marks, into
/// `c` (0 or a window as long as the context: none). For a family's
/// [`super::family::Gguf::adjust`].
pub(crate) fn set_window(c: &mut ModelConfig, sliding: Vec<bool>, path: &str) -> Result<()> {
    let Some(w) = c.raw.get("attention.sliding_window") else {
        return Ok(());
    };
    let w = w.as_u64().ok_or_else(|| {
        format_error(
            path,
            format!("attention.sliding_window = {w} is not a non-negative integer"),
        )
    })?;
    c.sliding_window = usize::try_from(w)
        .ok()
        .filter(|&w| w > 0 && w < c.max_position_embeddings);
    c.sliding_layers = c.sliding_window.map(|_| sliding);
    Ok(())
}

/// Which layers slide: `attention.sliding_window_pattern` (a period `p`, layer `i` sliding
/// unless `i % p == p - 1`, or one boolean per layer) or the family's period `default`.
pub(crate) fn sliding_pattern(c: &ModelConfig, default: usize, path: &str) -> Result<Vec<bool>> {
    let n = c.num_layers;
    let period = |p: usize| (0..n).map(|i| i % p < p - 1).collect();
    match c.raw.get("attention.sliding_window_pattern") {
        None => Ok(period(default)),
        Some(Value::Array(a)) if a.len() == n && a.iter().all(Value::is_boolean) => {
            Ok(a.iter().map(|b| b.as_bool() == Some(true)).collect())
        }
        Some(p) => match p.as_u64().filter(|&p| p > 0) {
            Some(p) => Ok(period(p as usize)),
            None => Err(format_error(
                path,
                format!(
                    "attention.sliding_window_pattern = {p} is neither a positive period nor \
                     {n} booleans"
                ),
            )),
        },
    }
}
