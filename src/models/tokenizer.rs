//! `tokenizer.json` through Hugging Face's `tokenizers` crate (byte-level BPE as in GPT-2,
//! Llama 3 and Qwen; SentencePiece-style BPE with byte fallback as in Llama 2 and Mistral), and
//! a streaming decoder that emits whole UTF-8 characters only.

use crate::{Error, Result};
use std::path::Path;

/// A tokenizer read from a `tokenizer.json`.
///
/// ```no_run
/// let tok = wgtensor::models::Tokenizer::from_file("model_dir/tokenizer.json")?;
/// let ids = tok.encode("Hello", true)?;
/// assert_eq!(tok.decode(&ids, true)?, "Hello");
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
}

fn err(op: &'static str, e: impl std::fmt::Display) -> Error {
    Error::InvalidArgument {
        op,
        message: e.to_string(),
    }
}

impl Tokenizer {
    /// Reads `tokenizer.json`.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be read; [`Error::Format`] when it is not a
    /// tokenizer the `tokenizers` crate understands.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Tokenizer> {
        let path = path.as_ref();
        let op = "Tokenizer::from_file";
        let bytes = std::fs::read(path).map_err(super::config::io_error(op, path))?;
        let inner = tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| Error::Format {
            op,
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Ok(Tokenizer { inner })
    }

    /// The ids of `text`; `add_special_tokens` adds what the tokenizer's post-processor adds
    /// (a BOS token for Llama).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the tokenizer fails on the text.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, add_special_tokens)
            .map_err(|e| err("Tokenizer::encode", e))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The text of `ids`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for ids the vocabulary lacks.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| err("Tokenizer::decode", e))
    }

    /// Entries of the vocabulary, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The id of a token, e.g. `"</s>"`.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// A streaming decoder over this tokenizer.
    pub fn stream(&self) -> TextStream<'_> {
        TextStream {
            tok: self,
            ids: Vec::new(),
            prev: 0,
            current: 0,
        }
    }
}

/// Turns generated ids into text as they come, emitting only whole UTF-8 characters: a
/// character split across byte tokens waits for its last byte.
///
/// It decodes the ids since the last emitted text and emits what extends the text already
/// emitted, so decoders that treat the first token specially (stripping a leading space)
/// give the same text as decoding everything at once.
pub struct TextStream<'a> {
    tok: &'a Tokenizer,
    ids: Vec<u32>,
    prev: usize,
    current: usize,
}

impl TextStream<'_> {
    /// Adds one id; returns the text it completes, if any.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an id the vocabulary lacks.
    pub fn push(&mut self, id: u32) -> Result<Option<String>> {
        let before = self.tok.decode(&self.ids[self.prev..self.current], false)?;
        self.ids.push(id);
        let text = self.tok.decode(&self.ids[self.prev..], false)?;
        if text.len() > before.len() && !text.ends_with('\u{FFFD}') {
            if let Some(new) = text.get(before.len()..) {
                let new = new.to_string();
                self.prev = self.current;
                self.current = self.ids.len();
                return Ok(Some(new));
            }
        }
        Ok(None)
    }

    /// The text still held back (an incomplete character at the end shows as U+FFFD).
    ///
    /// # Errors
    /// See [`TextStream::push`].
    pub fn finish(&mut self) -> Result<Option<String>> {
        let before = self.tok.decode(&self.ids[self.prev..self.current], false)?;
        let text = self.tok.decode(&self.ids[self.prev..], false)?;
        self.prev = self.ids.len();
        self.current = self.ids.len();
        Ok(text
            .get(before.len()..)
            .filter(|s| !s.is_empty())
            .map(str::to_string))
    }
}
