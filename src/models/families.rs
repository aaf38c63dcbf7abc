//! The registry of decoder families: `model_type` to the family file that reads its config and
//! builds its blocks. Adding a family is one file (a [`Family`] constant: its config spec and
//! its loader) and one line in [`FAMILIES`].

use super::config::{format_err, io_error, ModelConfig};
use super::family::Family;
use super::{gpt2, llama};
use crate::Result;
use serde_json::Value;
use std::path::Path;

/// Every family wgtensor runs, by `model_type`.
pub(crate) const FAMILIES: &[&Family] = &[
    // One line per family file's constant; the order is only that of error messages.
    &llama::LLAMA,
    &llama::MISTRAL,
    &llama::QWEN2,
    &gpt2::GPT2,
    &super::qwen3::QWEN3,
    &super::gemma2::GEMMA2,
    &super::gemma3::GEMMA3,
    &super::phi3::PHI3,
];

/// The family of `model_type`, or a format error listing the ones wgtensor runs.
pub(crate) fn family(model_type: &str, path: &str) -> Result<&'static Family> {
    FAMILIES
        .iter()
        .copied()
        .find(|f| f.model_type == model_type)
        .ok_or_else(|| {
            let known: Vec<_> = FAMILIES.iter().map(|f| f.model_type).collect();
            format_err(
                path,
                format!(
                    "unknown architecture model_type = {model_type:?}; wgtensor runs {}",
                    known.join(", ")
                ),
            )
        })
}

impl ModelConfig {
    /// Reads `config.json`.
    ///
    /// # Errors
    /// [`crate::Error::Io`] when it cannot be read; [`crate::Error::Format`] when it is not
    /// JSON, lacks a field its family needs, or names an architecture (`model_type`) or RoPE
    /// scaling wgtensor does not run.
    pub fn from_file(path: impl AsRef<Path>) -> Result<ModelConfig> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(io_error("ModelConfig", path))?;
        Self::from_json_str(&text, &path.display().to_string())
    }

    /// Parses the text of a `config.json`; `path` names it in errors.
    ///
    /// ```
    /// let json = r#"{"model_type": "falcon"}"#;
    /// let err = wgtensor::models::ModelConfig::from_json_str(json, "config.json").unwrap_err();
    /// assert!(err.to_string().contains("falcon"));
    /// ```
    ///
    /// # Errors
    /// See [`ModelConfig::from_file`].
    pub fn from_json_str(text: &str, path: &str) -> Result<ModelConfig> {
        let v: Value =
            serde_json::from_str(text).map_err(|e| format_err(path, format!("not JSON: {e}")))?;
        let model_type = v
            .get("model_type")
            .and_then(Value::as_str)
            .ok_or_else(|| format_err(path, "no \"model_type\"".into()))?;
        let f = family(model_type, path)?;
        ModelConfig::from_value(&v, model_type, &f.config, path)
    }
}
