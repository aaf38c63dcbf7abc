//! Gemma 2: the embedding scaled by `sqrt(hidden)`, RMSNorms that scale by `1 + weight` before
//! and after both attention and MLP, GeGLU (tanh GELU), q scaled by `query_pre_attn_scalar`,
//! attention and final logits soft-capped, sliding-window layers alternating with global ones.
//! Loads from Hugging Face directories and from llama.cpp's `gemma2` GGUF files, whose norm
//! weights hold `1 + weight` (convert_hf_to_gguf.py adds the 1) and which keep no
//! `query_pre_attn_scalar`: the scale is llama.cpp's (see [`llama_cpp_scale`]).

use super::config::ModelConfig;
use super::family::{Family, Gguf};
use super::gemma::{build, hf_scale, llama_cpp_scale, softcap, spec, GGUF, HF};
use crate::Result;
use serde_json::Value;

pub(crate) const GEMMA2: Family = Family {
    model_type: "gemma2",
    config: spec(|_, n| (0..n).map(|l| l % 2 == 0).collect()),
    load: |src, c, device, dtype| {
        build(
            src,
            &HF,
            hf_scale(c)?,
            c,
            (device, dtype),
            &mut |_, _, _, _| Ok(()),
        )
    },
    gguf: Some(Gguf {
        arch: "gemma2",
        handles: &["attention.sliding_window"],
        adjust: gguf_adjust,
        load: |src, c, device, dtype| {
            let scale = llama_cpp_scale(c, 46);
            build(src, &GGUF, scale, c, (device, dtype), &mut |_, _, _, _| {
                Ok(())
            })
        },
    }),
};

/// A `gemma2` file's window (llama.cpp's default 4096 when absent) on even layers, and its
/// soft-caps checked.
fn gguf_adjust(v: &Value, c: &mut ModelConfig, path: &str) -> Result<()> {
    softcap(v, "attn_logit_softcapping", path)?;
    softcap(v, "final_logit_softcapping", path)?;
    if let Value::Object(m) = &mut c.raw {
        m.entry("attention.sliding_window").or_insert(4096.into());
    }
    let sliding = super::family::sliding_pattern(c, 2, path)?;
    super::family::set_window(c, sliding, path)
}
