//! Sentence embeddings against sentence-transformers: tiny random `bert` (WordPiece) and
//! `xlm-roberta` (Unigram, positions after the padding index) directories written by
//! `scripts/make_embed_fixtures.py`, with `SentenceTransformer.encode`'s output for a batch of
//! texts of different lengths (one truncated, one empty) under every pooling (mean, CLS, max;
//! normalized or not). Variant directories share the committed weights and differ only in
//! their `modules.json` and `1_Pooling/config.json`. Every test runs on the CPU and on every
//! adapter; `cosine_similarity` is checked against a hand computation.

use crate::common;

use common::{assert_close, devices, TempDir};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use wgtensor::models::Embedder;
use wgtensor::{DType, Device, Error, Tensor};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/models")
        .join(name)
}

fn expected(name: &str) -> Value {
    let text = std::fs::read_to_string(fixture(name).join("expected.json")).expect("fixture");
    serde_json::from_str(&text).expect("fixture JSON")
}

fn texts(e: &Value) -> Vec<String> {
    e["texts"]
        .as_array()
        .expect("texts")
        .iter()
        .map(|t| t.as_str().expect("text").to_string())
        .collect()
}

fn rows(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("rows")
        .iter()
        .flat_map(|r| r.as_array().expect("row").iter())
        .map(|x| x.as_f64().expect("float") as f32)
        .collect()
}

/// Copies the fixture (files and module folders) into `dst`.
fn copy_model(name: &str, dst: &Path) {
    fn copy(src: &Path, dst: &Path) {
        std::fs::create_dir_all(dst).unwrap();
        for entry in std::fs::read_dir(src).unwrap() {
            let p = entry.unwrap().path();
            let to = dst.join(p.file_name().unwrap());
            if p.is_dir() {
                copy(&p, &to);
            } else {
                std::fs::copy(&p, to).unwrap();
            }
        }
    }
    copy(&fixture(name), dst);
}

fn write_json(path: &Path, v: &Value) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, serde_json::to_string_pretty(v).unwrap()).unwrap();
}

/// A sentence-transformers directory over the fixture's weights with pooling `mode` and,
/// with `normalize`, a Normalize module. `old_style`: the layout sentence-transformers 2-5
/// wrote (one flag per pooling mode, `max_seq_length` in `sentence_bert_config.json`).
fn variant(name: &str, mode: &str, normalize: bool, old_style: bool, root: &TempDir) -> PathBuf {
    let dir = root.join(format!(
        "{name}-{mode}-{normalize}-{}",
        if old_style { "old" } else { "new" }
    ));
    std::fs::create_dir_all(&dir).unwrap();
    copy_model(name, &dir);
    let mut modules = vec![
        json!({"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}),
        json!({"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}),
    ];
    if normalize {
        modules.push(json!({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}));
    }
    write_json(&dir.join("modules.json"), &Value::Array(modules));
    let pooling = if old_style {
        let max_len = expected(name)["max_seq_length"].clone();
        write_json(
            &dir.join("sentence_bert_config.json"),
            &json!({"max_seq_length": max_len, "do_lower_case": false}),
        );
        // The tokenizer's own limit is larger: sentence_bert_config.json must win.
        let tc = dir.join("tokenizer_config.json");
        let mut t: Value = serde_json::from_str(&std::fs::read_to_string(&tc).unwrap()).unwrap();
        t["model_max_length"] = json!(512);
        write_json(&tc, &t);
        json!({
            "word_embedding_dimension": 32,
            "pooling_mode_cls_token": mode == "cls",
            "pooling_mode_mean_tokens": mode == "mean",
            "pooling_mode_max_tokens": mode == "max",
            "pooling_mode_mean_sqrt_len_tokens": false
        })
    } else {
        json!({"embedding_dimension": 32, "pooling_mode": mode, "include_prompt": true})
    };
    write_json(&dir.join("1_Pooling/config.json"), &pooling);
    dir
}

fn embed(dir: &Path, device: &Device, dtype: DType, texts: &[String]) -> (Vec<f32>, Vec<usize>) {
    let e = Embedder::load(dir, device, dtype).expect("load");
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let out = e.embed(&refs).expect("embed");
    assert_eq!(
        out.device(),
        device,
        "embeddings stay on the model's device"
    );
    (out.to_vec::<f32>().unwrap(), out.shape().to_vec())
}

/// Every pooling variant of `name`, on every device, in `dtype`, within `rtol`/`atol`.
fn check_variants(name: &str, dtype: DType, rtol: f32, atol: f32) {
    let e = expected(name);
    let t = texts(&e);
    let root = TempDir::new(&format!("embed-{name}"));
    let mut dirs = Vec::new();
    for (i, mode) in ["mean", "cls", "max"].into_iter().enumerate() {
        for normalize in [false, true] {
            // Alternate the two layouts so each is read for some pooling.
            let old_style = (i + normalize as usize) % 2 == 1;
            let key = format!("{mode}{}", if normalize { "_norm" } else { "" });
            dirs.push((key, variant(name, mode, normalize, old_style, &root)));
        }
    }
    for d in devices() {
        for (key, dir) in &dirs {
            let (got, shape) = embed(dir, &d, dtype, &t);
            assert_eq!(shape, vec![t.len(), 32]);
            let ctx = format!("{name} {key} on {d} ({dtype})");
            assert_close(&got, &rows(&e["embeddings"][key]), rtol, atol, &ctx);
        }
    }
}

#[test]
fn bert_matches_sentence_transformers_every_pooling() {
    check_variants("bert", DType::F32, 1e-4, 1e-5);
}

#[test]
fn xlm_roberta_matches_sentence_transformers_every_pooling() {
    check_variants("xlm-roberta", DType::F32, 1e-4, 1e-5);
}

/// f16 weight matrices (activations, norms and pooling in f32): a looser, explicit tolerance.
#[test]
fn f16_weights_match_within_f16_tolerance() {
    // Measured: 3.5e-4 at most on unit-length embeddings.
    check_variants("bert", DType::F16, 1e-2, 2e-3);
    check_variants("xlm-roberta", DType::F16, 1e-2, 2e-3);
}

/// The committed directories as sentence-transformers saved them (mean pooling, Normalize)
/// load as they are; without `modules.json` the pooling is mean, not normalized.
#[test]
fn committed_layout_and_default_mean_pooling() {
    let root = TempDir::new("embed-default");
    for name in ["bert", "xlm-roberta"] {
        let e = expected(name);
        let t = texts(&e);
        let bare = root.join(name);
        std::fs::create_dir_all(&bare).unwrap();
        copy_model(name, &bare);
        std::fs::remove_file(bare.join("modules.json")).unwrap();
        for d in devices() {
            let (got, _) = embed(&fixture(name), &d, DType::F32, &t);
            assert_close(&got, &rows(&e["embeddings"]["mean_norm"]), 1e-4, 1e-5, name);
            let (got, _) = embed(&bare, &d, DType::F32, &t);
            let ctx = format!("{name} without modules.json on {d}");
            assert_close(&got, &rows(&e["embeddings"]["mean"]), 1e-4, 1e-5, &ctx);
        }
    }
}

/// More texts than one batch of 32, in an order unlike their lengths: each row is still the
/// embedding of its own text; no texts give `[0, dim]`.
#[test]
fn many_texts_keep_their_order() {
    let e = expected("xlm-roberta");
    let t = texts(&e);
    let want = rows(&e["embeddings"]["mean_norm"]);
    let picks: Vec<usize> = (0..41).map(|i| (i * 7 + i / 3) % t.len()).collect();
    let many: Vec<String> = picks.iter().map(|&i| t[i].clone()).collect();
    for d in devices() {
        let (got, shape) = embed(&fixture("xlm-roberta"), &d, DType::F32, &many);
        assert_eq!(shape, vec![41, 32]);
        for (row, &i) in picks.iter().enumerate() {
            let ctx = format!("row {row} (text {i}) on {d}");
            assert_close(
                &got[row * 32..][..32],
                &want[i * 32..][..32],
                1e-4,
                1e-5,
                &ctx,
            );
        }
        let none = Embedder::load(fixture("bert"), &d, DType::F32)
            .unwrap()
            .embed(&[])
            .unwrap();
        assert_eq!(none.shape(), &[0, 32]);
    }
}

fn format_message(r: wgtensor::Result<Embedder>) -> String {
    match r {
        Err(Error::Format { message, .. }) => message,
        Err(e) => panic!("expected Error::Format, got {e}"),
        Ok(e) => panic!("expected Error::Format, got {e:?}"),
    }
}

/// A config lacking a field the model needs, an unknown model type, an unknown module or
/// pooling: `Error::Format` naming it, never a panic.
#[test]
fn bad_configs_are_format_errors_naming_the_field() {
    let root = TempDir::new("embed-bad");
    let cpu = Device::cpu();
    let config = |dir: &Path| -> Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap()
    };
    for (i, field) in [
        "hidden_size",
        "num_attention_heads",
        "layer_norm_eps",
        "model_type",
    ]
    .into_iter()
    .enumerate()
    {
        let dir = root.join(format!("missing-{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        copy_model("bert", &dir);
        let mut c = config(&dir);
        c.as_object_mut().unwrap().remove(field);
        write_json(&dir.join("config.json"), &c);
        let m = format_message(Embedder::load(&dir, &cpu, DType::F32));
        assert!(m.contains(field), "{field}: {m}");
    }
    // RoBERTa needs its padding index for the positions.
    let dir = root.join("xlmr-pad");
    std::fs::create_dir_all(&dir).unwrap();
    copy_model("xlm-roberta", &dir);
    let mut c = config(&dir);
    c.as_object_mut().unwrap().remove("pad_token_id");
    write_json(&dir.join("config.json"), &c);
    let m = format_message(Embedder::load(&dir, &cpu, DType::F32));
    assert!(m.contains("pad_token_id"), "{m}");

    let dir = root.join("unknown");
    std::fs::create_dir_all(&dir).unwrap();
    copy_model("bert", &dir);
    let mut c = config(&dir);
    c["model_type"] = json!("deberta-v2");
    write_json(&dir.join("config.json"), &c);
    let m = format_message(Embedder::load(&dir, &cpu, DType::F32));
    assert!(m.contains("deberta-v2"), "{m}");

    let dir = root.join("dense");
    std::fs::create_dir_all(&dir).unwrap();
    copy_model("bert", &dir);
    let modules = json!([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}
    ]);
    write_json(&dir.join("modules.json"), &modules);
    let m = format_message(Embedder::load(&dir, &cpu, DType::F32));
    assert!(m.contains("Dense"), "{m}");

    let dir = root.join("lasttoken");
    std::fs::create_dir_all(&dir).unwrap();
    copy_model("bert", &dir);
    write_json(
        &dir.join("1_Pooling/config.json"),
        &json!({"embedding_dimension": 32, "pooling_mode": "lasttoken"}),
    );
    let m = format_message(Embedder::load(&dir, &cpu, DType::F32));
    assert!(m.contains("lasttoken"), "{m}");

    assert!(matches!(
        Embedder::load(fixture("bert"), &cpu, DType::U8),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        Embedder::load(root.join("nothing-here"), &cpu, DType::F32),
        Err(Error::Io { .. })
    ));
}

/// `F.cosine_similarity` by hand, in f64.
fn cosine(a: &[f64], b: &[f64], eps: f64) -> f64 {
    let n = |x: &[f64]| x.iter().map(|v| v * v).sum::<f64>().sqrt().max(eps);
    let (na, nb) = (n(a), n(b));
    a.iter().zip(b).map(|(x, y)| (x / na) * (y / nb)).sum()
}

#[test]
fn cosine_similarity_matches_hand_computation_with_broadcasting_and_eps() {
    let a: Vec<f32> = (0..6).map(|i| (i as f32 * 0.7 - 1.3).sin()).collect(); // [2, 1, 3]
    let b: Vec<f32> = (0..12).map(|i| (i as f32 * 1.1 + 0.4).cos()).collect(); // [4, 3]
    let f = |x: &[f32]| x.iter().map(|&v| f64::from(v)).collect::<Vec<_>>();
    let mut want = Vec::new();
    for i in 0..2 {
        for j in 0..4 {
            want.push(cosine(&f(&a[i * 3..][..3]), &f(&b[j * 3..][..3]), 1e-8) as f32);
        }
    }
    // Along dim 0 of [3, 2] tensors: columns are the vectors.
    let (c, e) = (
        [1f32, 0.0, 2.0, 0.0, -1.0, 3.0],
        [2f32, 1.0, 0.0, 1.0, 1.0, 1.0],
    );
    let col = |x: &[f32], k: usize| vec![f64::from(x[k]), f64::from(x[2 + k]), f64::from(x[4 + k])];
    let want_cols: Vec<f32> = (0..2)
        .map(|k| cosine(&col(&c, k), &col(&e, k), 1e-8) as f32)
        .collect();
    for d in devices() {
        let ta = Tensor::from_vec(a.clone(), &[2, 1, 3], &d).unwrap();
        let tb = Tensor::from_vec(b.clone(), &[4, 3], &d).unwrap();
        let s = ta.cosine_similarity(&tb, -1, 1e-8).unwrap();
        assert_eq!(s.shape(), &[2, 4], "broadcast shape on {d}");
        assert_close(
            &s.to_vec::<f32>().unwrap(),
            &want,
            1e-5,
            1e-6,
            &format!("{d}"),
        );

        let tc = Tensor::from_vec(c.to_vec(), &[3, 2], &d).unwrap();
        let te = Tensor::from_vec(e.to_vec(), &[3, 2], &d).unwrap();
        let s = tc.cosine_similarity(&te, 0, 1e-8).unwrap();
        assert_close(&s.to_vec::<f32>().unwrap(), &want_cols, 1e-5, 1e-6, "dim 0");

        // eps clamps each norm on its own: |x| = 0.1 and |y| = 0.2 both become 1.
        let x = Tensor::from_vec(vec![0.1f32, 0.0], &[1, 2], &d).unwrap();
        let y = Tensor::from_vec(vec![0.2f32, 0.0, 0.0, 0.0], &[2, 2], &d).unwrap();
        let s = x
            .cosine_similarity(&y, 1, 1.0)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        assert_close(&s, &[0.02, 0.0], 1e-6, 1e-7, &format!("eps clamp on {d}"));
        // Only the norm below eps is clamped: 0.1 -> 0.5, 2 stays.
        let z = Tensor::from_vec(vec![2f32, 0.0], &[2], &d).unwrap();
        let s = x
            .cosine_similarity(&z, -1, 0.5)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        assert_close(&s, &[0.2], 1e-6, 1e-7, &format!("one-sided clamp on {d}"));

        assert!(
            ta.cosine_similarity(&tb, 3, 1e-8).is_err(),
            "dim out of range"
        );
        let wrong = Tensor::from_vec(vec![1f32; 4], &[4], &d).unwrap();
        assert!(matches!(
            ta.cosine_similarity(&wrong, -1, 1e-8),
            Err(Error::ShapeMismatch { .. })
        ));
    }
}

/// Gradients of the composed op: d/da cos(a, b) = b / (|a||b|) - cos(a, b) a / |a|².
#[test]
fn cosine_similarity_has_gradients() {
    let (av, bv) = ([0.5f32, -1.0, 2.0], [1.5f32, 0.3, -0.7]);
    let na = av.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb = bv.iter().map(|x| x * x).sum::<f32>().sqrt();
    let cos = av.iter().zip(&bv).map(|(x, y)| x * y).sum::<f32>() / (na * nb);
    let want: Vec<f32> = (0..3)
        .map(|i| bv[i] / (na * nb) - cos * av[i] / (na * na))
        .collect();
    for d in devices() {
        let a = Tensor::from_vec(av.to_vec(), &[3], &d)
            .unwrap()
            .requires_grad_(true);
        let b = Tensor::from_vec(bv.to_vec(), &[3], &d).unwrap();
        a.cosine_similarity(&b, 0, 1e-8)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let g = a.grad().expect("gradient").to_vec::<f32>().unwrap();
        assert_close(&g, &want, 1e-4, 1e-6, &format!("gradient on {d}"));
    }
}
