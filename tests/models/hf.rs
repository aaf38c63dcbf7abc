//! Pretrained models from Hugging Face directories, against transformers: tiny random Llama
//! (grouped-query attention, llama3 RoPE scaling), Qwen2 (QKV biases, tied embeddings, bf16
//! shards) and GPT-2 written by `scripts/make_fixtures.py`, which also stored transformers'
//! greedy ids and last-position logits. Every test runs on the CPU and on every adapter.

use crate::common;

use common::{assert_close, devices};
use serde_json::Value;
use std::path::PathBuf;
use wgtensor::models::{AutoModel, GenerateOptions, Tokenizer};
use wgtensor::{DType, Device};

fn dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/models")
        .join(name)
}

fn expected(name: &str, file: &str) -> Value {
    let text = std::fs::read_to_string(dir(name).join(file)).expect("fixture");
    serde_json::from_str(&text).expect("fixture JSON")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("ids")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("floats")
        .iter()
        .map(|x| x.as_f64().expect("float") as f32)
        .collect()
}

/// Greedy ids equal transformers'; last-position logits of the prompt within `rtol`.
fn check_model(name: &str, device: &Device, dtype: DType, rtol: f32, atol: f32) {
    let e = expected(name, "expected.json");
    let prompt = ids(&e["prompt_ids"]);
    let model = AutoModel::load(dir(name), device, dtype).expect("load");
    let mut cache = model.new_cache(64).unwrap();
    let logits = model.forward_last(&prompt, &mut cache).unwrap();
    let ctx = format!("{name} last logits on {device} ({dtype})");
    assert_close(
        &logits.to_vec::<f32>().unwrap(),
        &floats(&e["last_logits"]),
        rtol,
        atol,
        &ctx,
    );
    let opts = GenerateOptions {
        max_new_tokens: ids(&e["greedy_ids"]).len(),
        eos_token_ids: Some(vec![]),
        ..Default::default()
    };
    let got = model.generate(&prompt, &opts).unwrap();
    assert_eq!(
        got,
        ids(&e["greedy_ids"]),
        "{name} greedy ids on {device} ({dtype})"
    );
}

#[test]
fn llama_gqa_matches_transformers() {
    for d in devices() {
        check_model("llama", &d, DType::F32, 1e-4, 1e-4);
    }
}

#[test]
fn qwen2_bf16_shards_tied_bias_match_transformers() {
    for d in devices() {
        check_model("qwen2", &d, DType::F32, 1e-4, 1e-4);
    }
}

/// Mistral with a sliding window of 6 under a prompt longer than it and 30 greedy ids: prefill
/// and every decode step see only the window, as in transformers. The model without its window
/// gives other ids, so the test sees the window applied.
#[test]
fn mistral_sliding_window_matches_transformers() {
    for d in devices() {
        check_model("mistral", &d, DType::F32, 1e-4, 1e-4);
        // Prefill in one step and decode through the cache agree: the logits after all
        // positions at once equal transformers' over the whole sequence.
        let e = expected("mistral", "expected.json");
        let mut full = ids(&e["prompt_ids"]);
        full.extend(ids(&e["greedy_ids"]));
        let model = AutoModel::load(dir("mistral"), &d, DType::F32).unwrap();
        let mut cache = model.new_cache(64).unwrap();
        let last = model.forward_last(&full, &mut cache).unwrap();
        assert_close(
            &last.to_vec::<f32>().unwrap(),
            &floats(&e["full_last_logits"]),
            1e-4,
            1e-4,
            &format!("mistral whole-sequence logits on {d}"),
        );
    }
    let tmp = common::TempDir::new("mistral_unwindowed");
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(dir("mistral").join(f), tmp.path().join(f)).unwrap();
    }
    let cfg_path = tmp.path().join("config.json");
    let mut cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    cfg["sliding_window"] = Value::Null;
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let e = expected("mistral", "expected.json");
    let plain = AutoModel::load(tmp.path(), &Device::cpu(), DType::F32).unwrap();
    let opts = GenerateOptions {
        max_new_tokens: 30,
        eos_token_ids: Some(vec![]),
        ..Default::default()
    };
    assert_ne!(
        plain.generate(&ids(&e["prompt_ids"]), &opts).unwrap(),
        ids(&e["greedy_ids"]),
        "the fixture's window must matter"
    );
}

/// Qwen2 with `use_sliding_window`: layer 0 attends to everything, layer 1 to a window of 5
/// (`layer_types`); the same from `max_window_layers` when the config lists no layer types.
#[test]
fn qwen2_mixed_window_layers_match_transformers() {
    for d in devices() {
        check_model("qwen2-window", &d, DType::F32, 1e-4, 1e-4);
    }
    let tmp = common::TempDir::new("qwen2_no_layer_types");
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(dir("qwen2-window").join(f), tmp.path().join(f)).unwrap();
    }
    let cfg_path = tmp.path().join("config.json");
    let mut cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    cfg.as_object_mut().unwrap().remove("layer_types");
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let model = AutoModel::load(tmp.path(), &Device::cpu(), DType::F32).unwrap();
    assert_eq!(model.config().sliding_layers, Some(vec![false, true]));
    let e = expected("qwen2-window", "expected.json");
    let opts = GenerateOptions {
        max_new_tokens: 30,
        eos_token_ids: Some(vec![]),
        ..Default::default()
    };
    assert_eq!(
        model.generate(&ids(&e["prompt_ids"]), &opts).unwrap(),
        ids(&e["greedy_ids"])
    );
}

#[test]
fn gpt2_matches_transformers() {
    for d in devices() {
        check_model("gpt2", &d, DType::F32, 1e-4, 1e-4);
    }
}

/// f16 weights: logits within 2e-2 absolute of transformers' f32 ones (the weights are rounded
/// to 11 bits; activations stay f32 except at the matmul inputs), same greedy ids (the fixtures'
/// top-2 margins are far above that).
#[test]
fn f16_weights_stay_close() {
    for d in devices() {
        for name in ["llama", "gpt2"] {
            check_model(name, &d, DType::F16, 2e-2, 2e-2);
        }
    }
}

/// Decoding through the cache gives the logits of running the whole sequence at once.
#[test]
fn kv_cache_decoding_equals_recomputing() {
    for d in devices() {
        for name in ["llama", "qwen2", "gpt2"] {
            let e = expected(name, "expected.json");
            let (prompt, new_ids) = (ids(&e["prompt_ids"]), ids(&e["greedy_ids"]));
            let model = AutoModel::load(dir(name), &d, DType::F32).unwrap();
            let mut cache = model.new_cache(64).unwrap();
            model.forward(&prompt, &mut cache).unwrap();
            let mut last = None;
            for &id in &new_ids {
                last = Some(model.forward_last(&[id], &mut cache).unwrap());
            }
            let stepwise = last.unwrap().to_vec::<f32>().unwrap();
            let mut all = prompt.clone();
            all.extend(&new_ids);
            let mut fresh = model.new_cache(64).unwrap();
            let whole = model
                .forward_last(&all, &mut fresh)
                .unwrap()
                .to_vec::<f32>()
                .unwrap();
            let ctx = format!("{name} cached vs whole on {d}");
            assert_close(&stepwise, &whole, 1e-4, 1e-4, &ctx);
            assert_close(&stepwise, &floats(&e["full_last_logits"]), 1e-4, 1e-4, &ctx);
            // Several positions at once after a cached prefix (a chunked prefill).
            let mut chunked = model.new_cache(64).unwrap();
            model.forward(&all[..5], &mut chunked).unwrap();
            let l = model
                .forward_last(&all[5..], &mut chunked)
                .unwrap()
                .to_vec::<f32>()
                .unwrap();
            assert_close(
                &l,
                &whole,
                1e-4,
                1e-4,
                &format!("{name} chunked prefill on {d}"),
            );
        }
    }
}

#[test]
fn tokenizers_match_python() {
    for name in ["llama", "gpt2", "qwen2"] {
        let e = expected(name, "expected.json");
        let tok = Tokenizer::from_file(dir(name).join("tokenizer.json")).unwrap();
        let prompt = e["prompt"].as_str().unwrap();
        assert_eq!(
            tok.encode(prompt, false).unwrap(),
            ids(&e["prompt_ids"]),
            "{name}"
        );
        assert_eq!(
            tok.decode(&ids(&e["prompt_ids"]), false).unwrap(),
            prompt,
            "{name} round trip"
        );
        let new_ids = ids(&e["greedy_ids"]);
        assert_eq!(
            tok.decode(&new_ids, true).unwrap(),
            e["decoded"].as_str().unwrap(),
            "{name}"
        );
    }
}

/// Streaming decode emits whole characters only and adds up to decoding everything at once.
#[test]
fn streaming_decode_emits_whole_characters() {
    for name in ["llama", "gpt2"] {
        let tok = Tokenizer::from_file(dir(name).join("tokenizer.json")).unwrap();
        let text = "caf\u{e9} \u{4e2d}\u{6587} \u{1f600} ok";
        let ids = tok.encode(text, false).unwrap();
        let mut s = tok.stream();
        let mut out = String::new();
        for &id in &ids {
            if let Some(piece) = s.push(id).unwrap() {
                assert!(
                    !piece.contains('\u{FFFD}'),
                    "{name}: a partial character in {piece:?}"
                );
                out.push_str(&piece);
            }
        }
        if let Some(rest) = s.finish().unwrap() {
            out.push_str(&rest);
        }
        assert_eq!(out, tok.decode(&ids, false).unwrap(), "{name}");
        assert_eq!(out, text, "{name}");
    }
}

#[test]
fn sampling_is_seeded_and_bounded() {
    for d in devices() {
        let model = AutoModel::load(dir("llama"), &d, DType::F32).unwrap();
        let prompt = ids(&expected("llama", "expected.json")["prompt_ids"]);
        let opts = GenerateOptions {
            max_new_tokens: 10,
            temperature: 0.8,
            top_k: 20,
            top_p: 0.9,
            repetition_penalty: 1.3,
            seed: Some(7),
            eos_token_ids: Some(vec![]),
        };
        let a = model.generate(&prompt, &opts).unwrap();
        let b = model.generate(&prompt, &opts).unwrap();
        assert_eq!(a, b, "same seed, same ids on {d}");
        assert_eq!(a.len(), 10);
        let vocab = model.config().vocab_size as u32;
        assert!(a.iter().all(|&i| i < vocab));
        // top_k = 1 is greedy whatever the temperature.
        let k1 = GenerateOptions {
            top_k: 1,
            repetition_penalty: 1.0,
            ..opts.clone()
        };
        let greedy = GenerateOptions {
            max_new_tokens: 10,
            eos_token_ids: Some(vec![]),
            ..Default::default()
        };
        assert_eq!(
            model.generate(&prompt, &k1).unwrap(),
            model.generate(&prompt, &greedy).unwrap()
        );
        // An EOS id stops the generation and is included.
        let first = model.generate(&prompt, &greedy).unwrap()[0];
        let stop = GenerateOptions {
            eos_token_ids: Some(vec![first]),
            ..greedy.clone()
        };
        assert_eq!(model.generate(&prompt, &stop).unwrap(), vec![first]);
    }
}

#[test]
fn bad_inputs_are_errors() {
    let d = Device::cpu();
    assert!(AutoModel::load(dir("nonexistent"), &d, DType::F32).is_err());
    let model = AutoModel::load(dir("llama"), &d, DType::F32).unwrap();
    let ctx = model.config().max_position_embeddings;
    let long = vec![5u32; ctx];
    let err = model
        .generate(&long, &GenerateOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("context"), "{err}");
    let mut cache = model.new_cache(4).unwrap();
    assert!(model.forward(&[1, 2, 3, 4, 5], &mut cache).is_err());
    assert!(model.forward(&[100_000], &mut cache).is_err());
    assert!(model.forward(&[], &mut cache).is_err());
    let bad = GenerateOptions {
        top_p: 0.0,
        ..Default::default()
    };
    assert!(model.generate(&[1], &bad).is_err());
    // An unknown architecture names itself.
    let tmp_dir = common::TempDir::new("models_unknown_arch");
    let tmp = tmp_dir.path();
    std::fs::write(
        tmp.join("config.json"),
        r#"{"model_type": "mamba", "vocab_size": 4}"#,
    )
    .unwrap();
    let err = AutoModel::load(tmp, &d, DType::F32)
        .unwrap_err()
        .to_string();
    assert!(err.contains("mamba"), "{err}");
    // A truncated checkpoint is a format error.
    let trunc_dir = common::TempDir::new("models_truncated");
    let trunc = trunc_dir.path();
    std::fs::copy(dir("llama").join("config.json"), trunc.join("config.json")).unwrap();
    let bytes = std::fs::read(dir("llama").join("model.safetensors")).unwrap();
    std::fs::write(trunc.join("model.safetensors"), &bytes[..bytes.len() / 2]).unwrap();
    assert!(AutoModel::load(trunc, &d, DType::F32).is_err());
}
