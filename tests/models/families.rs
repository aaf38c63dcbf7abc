//! Every decoder family beside Llama and GPT-2 against transformers: tiny seeded models written
//! by `scripts/make_fixtures.py` (30 greedy ids, decoding past every sliding window), on the
//! CPU and every adapter. Each check: the prompt's last-position logits within 1e-4, greedy
//! ids equal, and decoding through the KV cache equal to the whole sequence run at once.

use crate::common;

use common::{assert_close, devices};
use serde_json::Value;
use std::path::PathBuf;
use wgtensor::models::{AutoModel, CausalLM, GenerateOptions};
use wgtensor::{DType, Device, Error};

fn dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/models")
        .join(name)
}

fn expected(name: &str) -> Value {
    let text = std::fs::read_to_string(dir(name).join("expected.json")).expect("fixture");
    serde_json::from_str(&text).expect("fixture JSON")
}

fn ids(v: &Value) -> Vec<u32> {
    let a = v.as_array().expect("ids");
    a.iter().map(|x| x.as_u64().expect("id") as u32).collect()
}

fn floats(v: &Value) -> Vec<f32> {
    let a = v.as_array().expect("floats");
    a.iter()
        .map(|x| x.as_f64().expect("float") as f32)
        .collect()
}

/// Transformers' logits and greedy ids from the fixture `name` on `device`, and the cache's
/// decode equal to a full recompute of prompt + generated ids.
fn check_family(name: &str, device: &Device) {
    check_file(name, None, device)
}

/// [`check_family`] of the fixture's `file` (a GGUF file beside the directory's weights) when
/// given.
fn check_file(name: &str, file: Option<&str>, device: &Device) {
    let e = expected(name);
    let (prompt, greedy) = (ids(&e["prompt_ids"]), ids(&e["greedy_ids"]));
    let path = file.map_or_else(|| dir(name), |f| dir(name).join(f));
    let model = AutoModel::load(path, device, DType::F32).expect("load");
    let mut cache = model.new_cache(64).unwrap();
    let logits = model.forward_last(&prompt, &mut cache).unwrap();
    let ctx = format!("{name} {file:?} on {device}");
    let want = floats(&e["last_logits"]);
    assert_close(&logits.to_vec::<f32>().unwrap(), &want, 1e-4, 1e-4, &ctx);
    let opts = GenerateOptions {
        max_new_tokens: greedy.len(),
        eos_token_ids: Some(vec![]),
        ..Default::default()
    };
    assert_eq!(
        model.generate(&prompt, &opts).unwrap(),
        greedy,
        "{ctx} greedy ids"
    );
    // Decode step by step through the cache, then the whole sequence at once: both equal
    // transformers' logits after the last id.
    let mut all = prompt.clone();
    all.extend(&greedy);
    let want = floats(&e["full_last_logits"]);
    let mut step_cache = model.new_cache(64).unwrap();
    model.forward(&prompt, &mut step_cache).unwrap();
    let mut last = None;
    for &id in &greedy[..greedy.len() - 1] {
        last = Some(model.forward_last(&[id], &mut step_cache).unwrap());
    }
    let _ = last;
    let stepped = model
        .forward_last(&all[all.len() - 1..], &mut step_cache)
        .unwrap();
    let stepped = stepped.to_vec::<f32>().unwrap();
    assert_close(&stepped, &want, 1e-4, 1e-4, &format!("{ctx} decoded"));
    let mut fresh = model.new_cache(64).unwrap();
    let whole = model.forward_last(&all, &mut fresh).unwrap();
    let whole = whole.to_vec::<f32>().unwrap();
    assert_close(&whole, &want, 1e-4, 1e-4, &format!("{ctx} whole"));
}

/// A copy of fixture `name` whose config.json is changed by `edit`, then loaded on the CPU.
fn load_edited(name: &str, edit: impl FnOnce(&mut Value)) -> Result<CausalLM, Error> {
    let tmp = common::TempDir::new(&format!("{name}_edited"));
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(dir(name).join(f), tmp.path().join(f)).unwrap();
    }
    let path = tmp.path().join("config.json");
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut cfg);
    std::fs::write(&path, cfg.to_string()).unwrap();
    AutoModel::load(tmp.path(), &Device::cpu(), DType::F32)
}

/// The fixture's prompt logits with its config edited differ from transformers' (the feature
/// the edit removes is what the fixture measures).
fn assert_edit_matters(name: &str, what: &str, edit: impl FnOnce(&mut Value)) {
    let e = expected(name);
    let model = load_edited(name, edit).expect("load");
    let mut cache = model.new_cache(64).unwrap();
    let got = model
        .forward_last(&ids(&e["prompt_ids"]), &mut cache)
        .unwrap();
    let want = floats(&e["last_logits"]);
    let diff = got
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(
        diff > 1e-2,
        "{name} without {what}: logits moved only {diff}"
    );
}

/// A format error whose message names `what`.
fn assert_format_error<T: std::fmt::Debug>(r: Result<T, Error>, what: &str) {
    match r {
        Err(e @ Error::Format { .. }) => {
            assert!(e.to_string().contains(what), "{e} should name {what}")
        }
        other => panic!("expected a format error naming {what}, got {other:?}"),
    }
}

/// Qwen3: per-head q/k RMSNorm before RoPE, head_dim 16 of hidden 32 and 4 heads, tied
/// embeddings.
#[test]
fn qwen3_qk_norm_tied_matches_transformers() {
    for d in devices() {
        check_family("qwen3", &d);
        // llama.cpp's qwen3 GGUF of the same weights (F32): the same logits and ids.
        check_file("qwen3", Some("model-f32.gguf"), &d);
    }
    assert_format_error(
        load_edited("qwen3", |c| {
            c.as_object_mut().unwrap().remove("head_dim");
        }),
        "head_dim",
    );
}

/// Gemma 2: scaled embedding, (1 + w) sandwich norms, GeGLU, query_pre_attn_scalar, attention
/// soft-cap 5 (scores composed from tensor ops) and final soft-cap 10, window 5 on alternate
/// layers.
#[test]
fn gemma2_softcaps_and_alternating_windows_match_transformers() {
    for d in devices() {
        check_family("gemma2", &d);
    }
    assert_format_error(
        load_edited("gemma2", |c| {
            c.as_object_mut().unwrap().remove("query_pre_attn_scalar");
        }),
        "query_pre_attn_scalar",
    );
    assert_edit_matters("gemma2", "the attention soft-cap", |c| {
        c["attn_logit_softcapping"] = Value::Null;
    });
    assert_edit_matters("gemma2", "the window", |c| {
        c["sliding_window"] = Value::Null;
    });
}

/// Gemma 3 text: q/k norms, local layers (window 5, RoPE base 10^4) and a global one (base
/// 10^6, linear scaling 2).
#[test]
fn gemma3_local_global_rope_matches_transformers() {
    for d in devices() {
        check_family("gemma3", &d);
    }
    assert_edit_matters("gemma3", "the local RoPE base", |c| {
        c["rope_parameters"]["sliding_attention"]["rope_theta"] = 1e6.into();
    });
}

/// Phi-3: fused qkv_proj and gate_up_proj, a window of 6 on every layer. Its long-context
/// RoPE (longrope) is refused, naming it.
#[test]
fn phi3_fused_projections_match_transformers() {
    for d in devices() {
        check_family("phi3", &d);
        // llama.cpp's phi3 GGUF of the same weights (F32): fused attn_qkv, gate and up in
        // ffn_up, attention.sliding_window 6.
        check_file("phi3", Some("model-f32.gguf"), &d);
    }
    assert_gguf_window("phi3", 6, &[true, true]);
    assert_format_error(
        load_edited("phi3", |c| {
            c["rope_parameters"]["rope_type"] = "longrope".into();
        }),
        "longrope",
    );
}

/// Gemma 2 from llama.cpp's `gemma2` GGUF (F32, norms holding 1 + weight, soft-caps and window
/// from the metadata, llama.cpp's 1/sqrt(head_dim) scale) and from its directory: transformers'
/// logits and ids both ways.
#[test]
fn gemma2_gguf_matches_transformers() {
    for d in devices() {
        check_family("gemma2-gguf", &d);
        check_file("gemma2-gguf", Some("model-f32.gguf"), &d);
    }
    assert_gguf_window("gemma2-gguf", 5, &[true, false, true, false]);
}

/// The window and sliding layers the fixture's GGUF metadata describes, as loaded.
fn assert_gguf_window(name: &str, window: usize, layers: &[bool]) {
    let path = dir(name).join("model-f32.gguf");
    let model = AutoModel::load(path, &Device::cpu(), DType::F32).expect("load");
    let c = model.config();
    assert_eq!(c.sliding_window, Some(window), "{name}");
    assert_eq!(c.sliding_layers.as_deref(), Some(layers), "{name}");
}

/// Gemma 3 from llama.cpp's `gemma3` GGUF (F32): q/k norms, five local layers (window 5, base
/// 10^4) and a global one (rope.freq_base 10^6, linear scaling 2), as from its directory.
#[test]
fn gemma3_gguf_matches_transformers() {
    for d in devices() {
        check_family("gemma3-gguf", &d);
        check_file("gemma3-gguf", Some("model-f32.gguf"), &d);
    }
    let mut local = vec![true; 5];
    local.push(false);
    assert_gguf_window("gemma3-gguf", 5, &local);
}

/// Llama 3.2's shape: tied embeddings (the file has no lm_head.weight), llama3 RoPE scaling.
#[test]
fn llama32_tied_embeddings_match_transformers() {
    for d in devices() {
        check_family("llama32-tied", &d);
    }
}

/// An architecture wgtensor does not run is a format error naming it.
#[test]
fn unknown_family_is_a_format_error() {
    assert_format_error(
        load_edited("llama32-tied", |c| c["model_type"] = "falcon".into()),
        "falcon",
    );
}

/// f16 weights: every family's prompt logits within 2e-2 of transformers' f32 ones (weights
/// rounded to 11 bits, activations f32 except at the matmul inputs).
#[test]
fn families_in_f16_stay_close() {
    for d in devices() {
        for name in ["qwen3", "gemma2", "gemma3", "phi3"] {
            let e = expected(name);
            let model = AutoModel::load(dir(name), &d, DType::F16).unwrap();
            let mut cache = model.new_cache(64).unwrap();
            let got = model
                .forward_last(&ids(&e["prompt_ids"]), &mut cache)
                .unwrap();
            let want = floats(&e["last_logits"]);
            let ctx = format!("{name} f16 on {d}");
            assert_close(&got.to_vec::<f32>().unwrap(), &want, 2e-2, 2e-2, &ctx);
        }
    }
}
