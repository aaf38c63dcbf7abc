//! How Whisper's `generate` decodes, read from `generation_config.json` (and `config.json` where
//! it is silent): the forced prompt, the languages to detect among, the stop ids, the suppressed
//! tokens and the length limits, as transformers' `WhisperGenerationMixin` reads them.

use crate::{Error, Result};
use serde_json::Value;
use std::path::Path;

/// The op Whisper's errors name.
pub(super) const OP: &str = "Whisper::load";

/// A checkpoint that cannot be a Whisper model: `Error::Format` naming the file.
pub(super) fn format_error(path: &Path, message: String) -> Error {
    Error::Format {
        op: OP,
        path: path.display().to_string(),
        message,
    }
}

/// How `generate` decodes, from `generation_config.json` (and `config.json` where the former is
/// silent).
#[derive(Clone, Debug)]
pub(super) struct Generation {
    /// The prompt before detection: `None` at index 1 where the language is to be detected.
    pub(super) prompt: Vec<Option<u32>>,
    pub(super) detect_among: Vec<u32>,
    pub(super) eos: Vec<u32>,
    pub(super) suppress: Vec<u32>,
    pub(super) begin_suppress: Vec<u32>,
    pub(super) max_length: usize,
    pub(super) max_new_tokens: Option<usize>,
}

fn ids_of(path: &Path, k: &str, x: &Value) -> Result<Vec<u32>> {
    let bad = || {
        format_error(
            path,
            format!("{k:?} must be a token id or a list of them, got {x}"),
        )
    };
    let one = |y: &Value| {
        y.as_u64()
            .filter(|&n| n < u32::MAX as u64)
            .map(|n| n as u32)
    };
    match x {
        Value::Array(a) => a.iter().map(|y| one(y).ok_or_else(bad)).collect(),
        y => Ok(vec![one(y).ok_or_else(bad)?]),
    }
}

impl Generation {
    /// Mirrors `WhisperGenerationMixin._retrieve_init_tokens` and `_retrieve_logit_processors`.
    pub(super) fn read(path: &Path, g: &Value, config: &Value) -> Result<Generation> {
        let get = |k: &str| {
            g.get(k)
                .filter(|x| !x.is_null())
                .or_else(|| config.get(k).filter(|x| !x.is_null()))
        };
        let need = |k: &str| {
            get(k).ok_or_else(|| {
                format_error(
                    path,
                    format!("no {k:?} in generation_config.json or config.json"),
                )
            })
        };
        let id = |k: &str| -> Result<u32> {
            let v = ids_of(path, k, need(k)?)?;
            v.first()
                .copied()
                .filter(|_| v.len() == 1)
                .ok_or_else(|| format_error(path, format!("{k:?} must be one token id")))
        };
        let list =
            |k: &str| -> Result<Vec<u32>> { get(k).map_or(Ok(Vec::new()), |x| ids_of(path, k, x)) };
        let table = |k: &str| -> Result<Vec<(String, u32)>> {
            let Some(x) = g.get(k).filter(|x| !x.is_null()) else {
                return Ok(Vec::new());
            };
            let m = x
                .as_object()
                .ok_or_else(|| format_error(path, format!("{k:?} must be a map")))?;
            m.iter()
                .map(|(name, v)| Ok((name.clone(), ids_of(path, k, v)?[0])))
                .collect()
        };
        if g.get("return_timestamps").and_then(Value::as_bool) == Some(true) {
            return Err(format_error(
                path,
                "return_timestamps true is not implemented".into(),
            ));
        }
        let langs = table("lang_to_id")?;
        let tasks = table("task_to_id")?;
        let language = g.get("language").and_then(Value::as_str);
        let task = g.get("task").and_then(Value::as_str);
        let mut prompt: Vec<Option<u32>> = vec![Some(id("decoder_start_token_id")?)];
        if task.is_none() && language.is_none() {
            if let Some(f) = get("forced_decoder_ids") {
                let pairs = f.as_array().ok_or_else(|| {
                    format_error(path, "forced_decoder_ids must be a list".into())
                })?;
                for (i, p) in pairs.iter().enumerate() {
                    let pos = p.get(0).and_then(Value::as_u64);
                    if pos != Some(i as u64 + 1) {
                        let message = format!(
                            "forced_decoder_ids {f} does not follow Whisper's prompt pattern"
                        );
                        return Err(format_error(path, message));
                    }
                    prompt.push(p.get(1).and_then(Value::as_u64).map(|n| n as u32));
                }
            }
        }
        let lang_undefined = prompt.len() <= 1 || prompt[1].is_none();
        let mut detect_among = Vec::new();
        if let Some(l) = language {
            let lower = l.to_lowercase();
            let wrapped = format!("<|{lower}|>");
            let id = langs
                .iter()
                .find(|(n, _)| *n == lower || *n == wrapped)
                .map(|(_, id)| *id)
                .ok_or_else(|| {
                    format_error(path, format!("language {l:?} is not in lang_to_id"))
                })?;
            if prompt.len() > 1 {
                prompt[1] = Some(id);
            } else {
                prompt.push(Some(id));
            }
        } else if !langs.is_empty() && lang_undefined {
            detect_among = langs.iter().map(|(_, id)| *id).collect();
            if prompt.len() == 1 {
                prompt.push(None);
            }
        }
        let task_id = |t: &str| {
            tasks
                .iter()
                .find(|(n, _)| n == t)
                .map(|(_, id)| *id)
                .ok_or_else(|| format_error(path, format!("task {t:?} is not in task_to_id")))
        };
        if let Some(t) = task {
            if t != "transcribe" && t != "translate" {
                return Err(format_error(
                    path,
                    format!("task {t:?} is not transcribe or translate"),
                ));
            }
            prompt.push(Some(task_id(t)?));
        } else if language.is_some() && !tasks.is_empty() {
            let ids: Vec<u32> = tasks.iter().map(|(_, id)| *id).collect();
            if !prompt.iter().any(|p| p.is_some_and(|p| ids.contains(&p))) {
                prompt.push(Some(task_id("transcribe")?));
            }
        }
        if let Some(x) = g.get("no_timestamps_token_id").filter(|x| !x.is_null()) {
            let nt = ids_of(path, "no_timestamps_token_id", x)?[0];
            if prompt.last() != Some(&Some(nt)) {
                prompt.push(Some(nt));
            }
        }
        let uint = |k: &str| get(k).and_then(Value::as_u64).map(|n| n as usize);
        Ok(Generation {
            prompt,
            detect_among,
            eos: list("eos_token_id")?,
            suppress: list("suppress_tokens")?,
            begin_suppress: list("begin_suppress_tokens")?,
            // GenerationConfig's default.
            max_length: uint("max_length").unwrap_or(20),
            max_new_tokens: uint("max_new_tokens"),
        })
    }
}
