//! The Llama fixture as llama.cpp GGUF files (written by the `gguf` Python package: q/k rows
//! permuted, Llama 3 scaling as `rope_freqs.weight`): F32 gives transformers' ids; Q8_0 and
//! Q4_0 match transformers run on the dequantized weights. CPU and every adapter.

use crate::common;

use common::{assert_close, devices};
use serde_json::Value;
use std::path::PathBuf;
use wgtensor::models::{AutoModel, GenerateOptions, Weight};
use wgtensor::DType;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/models/llama")
}

fn expected(file: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir().join(file)).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// Greedy ids and last logits of `file` against `expected`, within `tol`.
fn check(file: &str, expected_file: &str, tol: f32, exact_activations: bool) {
    wgtensor::set_quantized_activations(!exact_activations);
    let e = expected(expected_file);
    let prompt = ids(&e["prompt_ids"]);
    for d in devices() {
        let model = AutoModel::load(dir().join(file), &d, DType::F32).unwrap();
        let mut cache = model.new_cache(64).unwrap();
        let logits = model
            .forward_last(&prompt, &mut cache)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        let ctx = format!("{file} on {d} (exact activations: {exact_activations})");
        assert_close(&logits, &floats(&e["last_logits"]), tol, tol, &ctx);
        let opts = GenerateOptions {
            max_new_tokens: ids(&e["greedy_ids"]).len(),
            eos_token_ids: Some(vec![]),
            ..Default::default()
        };
        let got = model.generate(&prompt, &opts).unwrap();
        // Rounded activations drift after a few greedy steps: they must agree on the first ones.
        let n = if exact_activations { got.len() } else { 5 };
        assert_eq!(got[..n], ids(&e["greedy_ids"])[..n], "{ctx}");
    }
    wgtensor::set_quantized_activations(true);
}

#[test]
fn gguf_f32_gives_transformers_ids() {
    check("model-f32.gguf", "expected.json", 1e-4, true);
}

/// Quantized files, dequantized inside the matmul: transformers on the dequantized weights,
/// within 1e-3 (f32 sums in another order). Then the CPU's default Q8-activation path (the
/// activations rounded to 8 bits, llama.cpp's decode path; GPUs always run the exact path):
/// logits within 0.3 (this fixture's weights are 10x wider than trained ones, so rounding the
/// activations moves its logits far more than it moves a real model's), the same first five
/// greedy ids.
#[test]
fn gguf_q8_0_and_q4_0_match_dequantized_transformers() {
    for (file, exp) in [
        ("model-q8_0.gguf", "expected-q8_0.json"),
        ("model-q4_0.gguf", "expected-q4_0.json"),
    ] {
        check(file, exp, 1e-3, true);
        check(file, exp, 0.3, false);
    }
}

/// Quantized weights stay quantized on the device, within 1.1x of the file's tensor bytes.
#[test]
fn quantized_weights_stay_compact() {
    for d in devices() {
        for file in ["model-q8_0.gguf", "model-q4_0.gguf"] {
            let path = dir().join(file);
            let model = AutoModel::load(&path, &d, DType::F32).unwrap();
            let g = wgtensor::models::gguf::GgufFile::open(&path).unwrap();
            let file_bytes: usize = g.tensor_infos().iter().map(|i| i.size_in_bytes()).sum();
            let on_device = model.size_in_bytes();
            assert!(
                on_device as f64 <= 1.1 * file_bytes as f64,
                "{file} on {d}: {on_device} bytes on the device for {file_bytes} in the file"
            );
        }
    }
    // The weight type is visible to users.
    let w = Weight::Dense(
        wgtensor::Tensor::zeros(&[2, 2], DType::F32, &wgtensor::Device::cpu()).unwrap(),
    );
    assert_eq!(w.shape(), [2, 2]);
}

#[test]
fn corrupt_or_foreign_gguf_is_an_error() {
    let tmp_dir = common::TempDir::new("models_gguf_bad");
    let tmp = tmp_dir.join("bad.gguf");
    let bytes = std::fs::read(dir().join("model-q8_0.gguf")).unwrap();
    std::fs::write(&tmp, &bytes[..bytes.len() / 3]).unwrap();
    let err = AutoModel::load(&tmp, &wgtensor::Device::cpu(), DType::F32).unwrap_err();
    assert!(!err.to_string().is_empty());
    std::fs::write(&tmp, b"not a gguf file at all").unwrap();
    assert!(AutoModel::load(&tmp, &wgtensor::Device::cpu(), DType::F32).is_err());
}
