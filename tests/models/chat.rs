//! Chat: templates of real instruction models rendered exactly as transformers'
//! `apply_chat_template` renders them (`scripts/make_chat_fixtures.py` wrote the expected text
//! under `tests/data/chat/`), template errors as typed errors, GGUF templates,
//! `generation_config.json`'s EOS list ending a generation, a generation continued in its
//! cache, and the `generate` example's `--chat` and stdin conversation.

use crate::common;

use common::TempDir;
use serde_json::Value;
use std::path::{Path, PathBuf};
use wgtensor::models::gguf::{GgufValue, GgufWriter};
use wgtensor::models::{AutoModel, ChatMessage, GenerateOptions, Tokenizer};
use wgtensor::{DType, Device, Error};

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

fn llama_tokenizer() -> PathBuf {
    data("models/llama/tokenizer.json")
}

fn expected(model: &str) -> Value {
    let text = std::fs::read_to_string(data(&format!("chat/{model}/expected.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn messages(e: &Value) -> Vec<ChatMessage> {
    e["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| ChatMessage::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect()
}

/// A tokenizer.json with `model`'s tokenizer_config.json beside it, as in a model directory.
fn model_dir(tmp: &TempDir, model: &str) -> PathBuf {
    std::fs::copy(llama_tokenizer(), tmp.join("tokenizer.json")).unwrap();
    std::fs::copy(
        data(&format!("chat/{model}/tokenizer_config.json")),
        tmp.join("tokenizer_config.json"),
    )
    .unwrap();
    tmp.join("tokenizer.json")
}

/// Qwen2.5, Llama 3.1, Phi-3.5 and DeepSeek-R1's templates give transformers' text byte for
/// byte, with and without the generation prompt: found beside tokenizer.json by `from_file`,
/// and loaded explicitly into a tokenizer without one. DeepSeek's file holds its special
/// tokens as `{"content": ...}` objects and calls Python's `str.split`; Llama 3.1's slices
/// `messages[1:]` and trims; Qwen's tests `tools`, which transformers passes as none.
#[test]
fn real_templates_render_as_transformers() {
    for model in [
        "qwen2.5-instruct",
        "llama-3.1-instruct",
        "phi-3.5-mini-instruct",
        "deepseek-r1-distill-qwen",
    ] {
        let e = expected(model);
        let chat = messages(&e);
        let tmp = TempDir::new("chat_render");
        let beside = Tokenizer::from_file(model_dir(&tmp, model)).unwrap();
        let mut loaded = Tokenizer::from_file(llama_tokenizer()).unwrap();
        assert!(loaded.chat_template().is_none());
        loaded
            .load_chat_template(data(&format!("chat/{model}/tokenizer_config.json")))
            .unwrap();
        for tok in [&beside, &loaded] {
            for (key, add) in [
                ("without_generation_prompt", false),
                ("with_generation_prompt", true),
            ] {
                let want = e[key]["text"].as_str().unwrap();
                let got = tok.apply_chat_template(&chat, add).unwrap();
                assert_eq!(got, want, "{model} {key}");
            }
        }
    }
}

/// A template's `raise_exception` (Gemma has no system role) is `InvalidArgument` with the
/// template's message, as transformers raises it; the same template renders a conversation it
/// accepts. A template that does not compile is `InvalidArgument` from `set_chat_template`
/// (the previous template stays) and, from the model's files, `Format` naming the file when
/// used, the tokenizer itself still loading; no template at all names the fix.
#[test]
fn template_errors_are_typed() {
    let tmp = TempDir::new("chat_errors");
    let mut tok = Tokenizer::from_file(model_dir(&tmp, "gemma-it")).unwrap();
    let e = expected("gemma-it");
    let refused = e["with_generation_prompt"]["error"].as_str().unwrap();
    match tok.apply_chat_template(&messages(&e), true) {
        Err(Error::InvalidArgument { message, .. }) => {
            assert!(message.contains(refused), "{message}")
        }
        other => panic!("gemma with a system message: {other:?}"),
    }
    let ok = tok
        .apply_chat_template(&[ChatMessage::user("Hi")], true)
        .unwrap();
    assert_eq!(
        ok,
        "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
    );

    match tok.set_chat_template("{% for m in messages %}{{ m.content }") {
        Err(Error::InvalidArgument { op, message }) => {
            assert_eq!(op, "Tokenizer::set_chat_template");
            assert!(message.contains("does not compile"), "{message}");
        }
        other => panic!("a template syntax error: {other:?}"),
    }
    assert_eq!(
        tok.apply_chat_template(&[ChatMessage::user("Hi")], true)
            .unwrap(),
        ok,
        "a refused template replaced the working one"
    );

    let broken = TempDir::new("chat_broken");
    std::fs::copy(llama_tokenizer(), broken.join("tokenizer.json")).unwrap();
    std::fs::write(
        broken.join("tokenizer_config.json"),
        r#"{"chat_template": "{% if messages %}never closed", "eos_token": "</s>"}"#,
    )
    .unwrap();
    let tok = Tokenizer::from_file(broken.join("tokenizer.json")).unwrap();
    assert_eq!(tok.special_token("eos_token"), Some("</s>"));
    match tok.apply_chat_template(&[ChatMessage::user("Hi")], false) {
        Err(Error::Format { path, message, .. }) => {
            assert!(path.ends_with("tokenizer_config.json"), "{path}");
            assert!(message.contains("does not compile"), "{message}");
        }
        other => panic!("a broken template in tokenizer_config.json: {other:?}"),
    }

    let plain = Tokenizer::from_file(llama_tokenizer()).unwrap();
    match plain.apply_chat_template(&[ChatMessage::user("Hi")], false) {
        Err(Error::InvalidArgument { message, .. }) => assert!(
            message.contains("no chat template") && message.contains("load_chat_template"),
            "{message}"
        ),
        other => panic!("no template: {other:?}"),
    }
    let mut plain = plain;
    assert!(matches!(
        plain.load_chat_template(data("models/llama/config.json")),
        Err(Error::Format { .. })
    ));
}

/// A GGUF file's `tokenizer.chat_template`, with BOS and EOS read from its vocabulary.
#[test]
fn gguf_metadata_gives_the_template() {
    let tmp = TempDir::new("chat_gguf");
    let mut w = GgufWriter::new();
    let tokens = ["<unk>", "<s>", "</s>", "hi"];
    w.add_metadata(
        "tokenizer.ggml.tokens",
        GgufValue::Array(
            tokens
                .iter()
                .map(|t| GgufValue::String(t.to_string()))
                .collect(),
        ),
    );
    w.add_metadata("tokenizer.ggml.bos_token_id", GgufValue::U32(1));
    w.add_metadata("tokenizer.ggml.eos_token_id", GgufValue::U32(2));
    w.add_metadata(
        "tokenizer.chat_template",
        GgufValue::String(
            "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content.strip() }}{{ eos_token }}{% endfor %}"
                .into(),
        ),
    );
    let path = tmp.join("model.gguf");
    w.write(&path).unwrap();
    let mut tok = Tokenizer::from_file(llama_tokenizer()).unwrap();
    tok.load_chat_template(&path).unwrap();
    let text = tok
        .apply_chat_template(&[ChatMessage::user(" hello ")], false)
        .unwrap();
    assert_eq!(text, "<s>[user] hello</s>");
    // The template writes BOS itself: encoding without special tokens gives one BOS.
    let ids = tok.encode(&text, false).unwrap();
    let bos = tok.token_to_id("<s>").unwrap();
    assert_eq!(ids.iter().filter(|&&i| i == bos).count(), 1, "{ids:?}");
}

/// The tiny Llama copied with a generation_config.json whose `eos_token_id` is a list: loading
/// takes the list, and a default generation stops at the first id of it that it produces.
#[test]
fn generation_config_eos_list_stops_generation() {
    let src = data("models/llama");
    let tmp = TempDir::new("chat_eos");
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(src.join(f), tmp.join(f)).unwrap();
    }
    let dev = Device::cpu();
    let prompt = [1, 40, 41, 42];
    let free = GenerateOptions {
        max_new_tokens: 12,
        eos_token_ids: Some(vec![]),
        ..Default::default()
    };
    let model = AutoModel::load(tmp.path(), &dev, DType::F32).unwrap();
    let ids = model.generate(&prompt, &free).unwrap();
    assert_eq!(ids.len(), 12);
    let stop = ids[5];
    let first = ids.iter().position(|&i| i == stop || i == 329).unwrap();
    std::fs::write(
        tmp.join("generation_config.json"),
        format!(r#"{{"bos_token_id": 1, "eos_token_id": [329, {stop}]}}"#),
    )
    .unwrap();
    let model = AutoModel::load(tmp.path(), &dev, DType::F32).unwrap();
    assert_eq!(model.config().eos_token_ids, vec![329, stop]);
    let opts = GenerateOptions {
        max_new_tokens: 12,
        ..Default::default()
    };
    assert_eq!(
        model.generate(&prompt, &opts).unwrap(),
        ids[..=first].to_vec()
    );
    // A single id is read the same way.
    std::fs::write(
        tmp.join("generation_config.json"),
        format!(r#"{{"eos_token_id": {stop}}}"#),
    )
    .unwrap();
    let model = AutoModel::load(tmp.path(), &dev, DType::F32).unwrap();
    assert_eq!(model.config().eos_token_ids, vec![stop]);
}

/// A greedy generation continued in its own cache gives the ids of a fresh generation over
/// the whole sequence (what the chat example's later turns rely on).
#[test]
fn stream_with_cache_continues_a_sequence() {
    let dev = Device::cpu();
    let model = AutoModel::load(data("models/llama"), &dev, DType::F32).unwrap();
    let opts = GenerateOptions {
        max_new_tokens: 4,
        eos_token_ids: Some(vec![]),
        ..Default::default()
    };
    let prompt = vec![1, 40, 41, 42];
    let mut s = model
        .stream_with_cache(model.new_cache(64).unwrap(), &prompt, &opts)
        .unwrap();
    let first: Vec<u32> = s.by_ref().collect::<Result<_, _>>().unwrap();
    let cache = s.into_cache();
    assert_eq!(cache.len(), prompt.len() + first.len() - 1);
    let next = [first[3], 50, 51];
    let cont: Vec<u32> = model
        .stream_with_cache(cache, &next, &opts)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut whole = prompt.clone();
    whole.extend(&first[..3]);
    whole.extend(next);
    assert_eq!(cont, model.generate(&whole, &opts).unwrap());
    let full = model.new_cache(8).unwrap();
    assert!(matches!(
        model.stream_with_cache(full, &[1; 8], &opts),
        Err(Error::InvalidArgument { .. })
    ));
}
