//! Hostile checkpoints of the families added last (qwen3, gemma2, gemma3, phi3), from a
//! directory or a GGUF file: a missing field or key, or an architecture wgtensor does not run,
//! is `Error::Format` naming it. The helpers are `hostile.rs`'s (every call under
//! `catch_unwind`).

use super::hostile::{assert_format, gguf_from, llama, llama_gguf, load, set};
use crate::common::TempDir;
use serde_json::Value;
use wgtensor::models::gguf::GgufValue;
use wgtensor::Device;

/// The families added last (qwen3, gemma2, gemma3, phi3), from a directory or a GGUF file,
/// missing a field they need or naming an architecture wgtensor does not run: `Error::Format`
/// naming the field or architecture, never a panic.
#[test]
fn newer_families_missing_fields_are_format_errors_naming_them() {
    let models = llama().parent().unwrap().to_path_buf();
    for (name, field) in [
        ("phi3", "intermediate_size"),
        ("gemma2", "num_attention_heads"),
        ("qwen3", "num_hidden_layers"),
        ("gemma3", "query_pre_attn_scalar"),
    ] {
        let tmp = TempDir::new("family_field");
        for f in ["config.json", "model.safetensors"] {
            std::fs::copy(models.join(name).join(f), tmp.join(f)).unwrap();
        }
        let path = tmp.join("config.json");
        let mut c: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        c.as_object_mut().unwrap().remove(field);
        std::fs::write(&path, c.to_string()).unwrap();
        assert_format(load(tmp.path(), &Device::cpu()), &[field], name);
    }
    let keep = |_: &str, d, t, b| Some((d, t, b));
    for (name, key, words) in [
        (
            "gemma3-gguf",
            "gemma3.attention.sliding_window",
            &["gemma3.attention.sliding_window"][..],
        ),
        (
            "gemma2-gguf",
            "gemma2.embedding_length",
            &["gemma2.embedding_length"],
        ),
        (
            "phi3",
            "phi3.feed_forward_length",
            &["phi3.feed_forward_length"],
        ),
        ("phi3", "general.architecture", &["general.architecture"]),
    ] {
        let tmp = TempDir::new("family_gguf_field");
        let src = models.join(name).join("model-f32.gguf");
        let path = gguf_from(&src, &tmp, |m| m.retain(|(k, _)| k != key), keep);
        assert_format(load(&path, &Device::cpu()), words, key);
    }
    // An architecture llama.cpp writes that wgtensor does not run, named with those it runs.
    let tmp = TempDir::new("family_gguf_arch");
    let src = models.join("phi3/model-f32.gguf");
    let arch = GgufValue::String("phi2".into());
    let path = gguf_from(&src, &tmp, |m| set(m, "general.architecture", arch), keep);
    assert_format(
        load(&path, &Device::cpu()),
        &["phi2", "gemma3", "phi3"],
        "phi2",
    );
    // A window is honoured where the architecture has one, refused where llama.cpp runs none.
    let tmp = TempDir::new("llama_gguf_window");
    let key = "llama.attention.sliding_window";
    let path = llama_gguf(&tmp, |m| set(m, key, GgufValue::U32(4)), keep);
    assert_format(load(&path, &Device::cpu()), &[key], key);
}
