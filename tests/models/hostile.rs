//! Hostile and unusual model files and arguments (feature `models`): checkpoint options the
//! loader implements or refuses by name, hyper-parameters that would give NaN, sizes that would
//! wrap, ids that do not fit, a cache made for another model, tiny temperatures and ids past
//! the vocabulary. Every case is a typed error or the right answer, never a panic (each call
//! runs under `catch_unwind`, so a panic is reported as a failure of its case).

use crate::common;

use common::{assert_close, devices, TempDir};
use serde_json::Value;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use wgtensor::models::gguf::{GgufFile, GgufValue, GgufWriter};
use wgtensor::models::{AutoModel, CausalLM, GenerateOptions, KvCache, Tokenizer};
use wgtensor::nn::{load_safetensors, save_safetensors};
use wgtensor::{DType, Device, Error, Result, Tensor};

pub(super) fn llama() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/models/llama")
}

fn prompt() -> Vec<u32> {
    let text = std::fs::read_to_string(llama().join("expected.json")).unwrap();
    let e: Value = serde_json::from_str(&text).unwrap();
    e["prompt_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// `f()`, a panic turned into a failure that names `what`.
fn no_panic<T>(what: &str, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| panic!("{what}: panicked"))
}

/// Loads `path` on `d`, a panic reported as a failure.
pub(super) fn load(path: &Path, d: &Device) -> Result<CausalLM> {
    no_panic(&format!("AutoModel::load({})", path.display()), || {
        AutoModel::load(path, d, DType::F32)
    })
}

/// Asserts an `Error::Format` whose message contains every one of `words`.
pub(super) fn assert_format(r: Result<CausalLM>, words: &[&str], ctx: &str) {
    match r {
        Err(e @ Error::Format { .. }) => {
            let m = e.to_string();
            for w in words {
                assert!(m.contains(w), "{ctx}: the message does not name {w:?}: {m}");
            }
        }
        Err(e) => panic!("{ctx}: expected Error::Format, got {e}"),
        Ok(m) => panic!("{ctx}: expected Error::Format, loaded {m:?}"),
    }
}

/// A copy of the Llama fixture directory with `edit` applied to its `config.json` and
/// `tensors` to its weights.
fn llama_dir(
    tmp: &TempDir,
    edit: impl FnOnce(&mut Value),
    tensors: impl FnOnce(&mut Vec<(String, Tensor)>),
) -> PathBuf {
    let dir = tmp.path().to_path_buf();
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(llama().join("config.json")).unwrap())
            .unwrap();
    edit(&mut config);
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let mut ws = load_safetensors(llama().join("model.safetensors"), &Device::cpu(), None).unwrap();
    tensors(&mut ws);
    save_safetensors(dir.join("model.safetensors"), &ws).unwrap();
    dir
}

/// The F32 GGUF fixture rewritten: `md` edits the metadata, `t` each tensor (`None` drops it).
pub(super) fn llama_gguf(
    tmp: &TempDir,
    md: impl FnOnce(&mut Vec<(String, GgufValue)>),
    t: impl Fn(&str, Vec<u64>, u32, Vec<u8>) -> Option<(Vec<u64>, u32, Vec<u8>)>,
) -> PathBuf {
    gguf_from(&llama().join("model-f32.gguf"), tmp, md, t)
}

/// [`llama_gguf`] of the GGUF file `src`.
pub(super) fn gguf_from(
    src: &Path,
    tmp: &TempDir,
    md: impl FnOnce(&mut Vec<(String, GgufValue)>),
    t: impl Fn(&str, Vec<u64>, u32, Vec<u8>) -> Option<(Vec<u64>, u32, Vec<u8>)>,
) -> PathBuf {
    let f = GgufFile::open(src).unwrap();
    let mut meta: Vec<(String, GgufValue)> = f
        .metadata()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    md(&mut meta);
    let mut w = GgufWriter::new();
    for (k, v) in meta {
        w.add_metadata(&k, v);
    }
    for info in f.tensor_infos() {
        let (_, bytes) = f.tensor_bytes(&info.name).unwrap();
        let dtype = info.dtype.ggml_type();
        if let Some((dims, ty, data)) = t(&info.name, info.dims.clone(), dtype, bytes.to_vec()) {
            w.add_raw(&info.name, dims, ty, data);
        }
    }
    let path = tmp.join("model.gguf");
    w.write(&path).unwrap();
    path
}

pub(super) fn set(meta: &mut Vec<(String, GgufValue)>, key: &str, v: GgufValue) {
    meta.retain(|(k, _)| k != key);
    meta.push((key.to_string(), v));
}

/// An edit of a `config.json`.
type Edit = Box<dyn Fn(&mut Value)>;

fn greedy(n: usize) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens: n,
        eos_token_ids: Some(vec![]),
        ..Default::default()
    }
}

/// a GGUF whose `token_embd.weight` is 0-D or 1-D is `Error::Format` naming it.
#[test]
fn gguf_embedding_without_two_dims_is_a_format_error() {
    let cpu = Device::cpu();
    for dims in [vec![], vec![330 * 64]] {
        let tmp = TempDir::new("gguf_embd");
        let one = dims.is_empty();
        let path = llama_gguf(
            &tmp,
            |_| {},
            |name, d, ty, data| {
                if name != "token_embd.weight" {
                    return Some((d, ty, data));
                }
                let data = if one { data[..4].to_vec() } else { data };
                Some((dims.clone(), ty, data))
            },
        );
        assert_format(
            load(&path, &cpu),
            &["token_embd.weight", "matrix"],
            &format!("token_embd.weight of dims {dims:?}"),
        );
    }
}

/// a `KvCache` made for another model (layers, heads, head dim, device) is
/// `InvalidArgument` naming both, never an index panic, on the CPU and every adapter.
#[test]
fn a_cache_for_another_model_is_an_invalid_argument() {
    let devs = devices();
    for d in &devs {
        let model = load(&llama(), d).unwrap();
        let c = model.config().clone();
        assert_eq!((c.num_layers, c.num_kv_heads, c.head_dim), (2, 2, 16));
        let mut caches = vec![
            ("fewer layers", KvCache::new(1, 16, 2, 16, d).unwrap()),
            ("more layers", KvCache::new(3, 16, 2, 16, d).unwrap()),
            ("other heads", KvCache::new(2, 16, 4, 16, d).unwrap()),
            ("other head dim", KvCache::new(2, 16, 2, 8, d).unwrap()),
        ];
        for other in devs.iter().filter(|o| *o != d) {
            caches.push(("another device", KvCache::new(2, 16, 2, 16, other).unwrap()));
        }
        for (what, mut cache) in caches {
            let r = no_panic(&format!("{what} on {d}"), || {
                model.forward(&[1, 2], &mut cache)
            });
            match r {
                Err(Error::InvalidArgument { message, .. }) => {
                    assert!(
                        message.contains("KV cache") && message.contains("2 layers of 2 x 16"),
                        "{what} on {d}: {message}"
                    );
                }
                other => panic!(
                    "{what} on {d}: expected InvalidArgument, got {:?}",
                    other.err()
                ),
            }
            assert_eq!(cache.len(), 0, "{what}: the cache did not grow");
        }
        // The model's own cache still works.
        let mut own = model.new_cache(8).unwrap();
        assert_eq!(model.forward(&[1, 2], &mut own).unwrap().shape(), [2, 330]);
    }
}

/// `prompt.len() + max_new_tokens` saturates and is clamped to the context
/// (the documented rule): `usize::MAX` new tokens give exactly the room left, never `[]`.
#[test]
fn max_new_tokens_past_usize_generates_to_the_end_of_the_context() {
    let tmp = TempDir::new("ctx24");
    let dir = llama_dir(&tmp, |c| c["max_position_embeddings"] = 24.into(), |_| {});
    let p = prompt();
    for d in devices() {
        let model = load(&dir, &d).unwrap();
        assert_eq!(model.config().max_position_embeddings, 24);
        for prompt in [p.clone(), vec![p[0]]] {
            let all = model.generate(&prompt, &greedy(usize::MAX)).unwrap();
            assert_eq!(
                all.len(),
                24 - prompt.len() + 1,
                "{d}: prompt of {}",
                prompt.len()
            );
            let some = model.generate(&prompt, &greedy(3)).unwrap();
            assert_eq!(some[..], all[..3], "{d}: the same ids");
        }
    }
}

/// head counts whose product with head_dim wraps, and token ids past u32 in
/// `config.json` and GGUF metadata, are `Error::Format` naming the key.
#[test]
fn wrapping_head_counts_and_ids_past_u32_are_format_errors() {
    let cpu = Device::cpu();
    let cases: [(&str, Edit, &[&str]); 4] = [
        (
            "heads 2^63",
            Box::new(|c| {
                c["num_attention_heads"] = (1u64 << 63).into();
                c["num_key_value_heads"] = (1u64 << 63).into();
                c["head_dim"] = 2.into();
            }),
            &["num_attention_heads", "9223372036854775808"],
        ),
        (
            "kv heads 2^62",
            Box::new(|c| {
                c["num_attention_heads"] = (1u64 << 62).into();
                c["num_key_value_heads"] = (1u64 << 62).into();
            }),
            &["num_attention_heads"],
        ),
        (
            "eos 2^33+1",
            Box::new(|c| c["eos_token_id"] = ((1u64 << 33) + 1).into()),
            &["eos_token_id", "8589934593"],
        ),
        (
            "bos in a list",
            Box::new(|c| c["eos_token_id"] = serde_json::json!([2, 1u64 << 40])),
            &["eos_token_id", "1099511627776"],
        ),
    ];
    for (what, edit, words) in cases {
        let tmp = TempDir::new("wrap");
        let dir = llama_dir(&tmp, |c| edit(c), |_| {});
        assert_format(load(&dir, &cpu), words, what);
    }
    for key in ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.bos_token_id"] {
        let tmp = TempDir::new("wrap_gguf");
        let path = llama_gguf(
            &tmp,
            |m| set(m, key, GgufValue::U64(1 << 40)),
            |_, d, t, b| Some((d, t, b)),
        );
        assert_format(load(&path, &cpu), &[key, "1099511627776"], key);
    }
}

/// decoding an id past the vocabulary is `InvalidArgument` (as the rustdoc
/// says), in `decode` and in `TextStream::push`, and the stream goes on after it.
#[test]
fn ids_past_the_vocabulary_do_not_decode() {
    let tok = Tokenizer::from_file(llama().join("tokenizer.json")).unwrap();
    let n = tok.vocab_size() as u32;
    let ok = tok.encode("hello", false).unwrap();
    for bad in [n, n + 5, u32::MAX] {
        let mut ids = ok.clone();
        ids.push(bad);
        match no_panic("decode", || tok.decode(&ids, false)) {
            Err(Error::InvalidArgument { message, .. }) => {
                assert!(message.contains(&bad.to_string()), "{message}")
            }
            other => panic!("decode of id {bad}: expected InvalidArgument, got {other:?}"),
        }
        let mut s = tok.stream();
        let mut out = String::new();
        for &id in &ok[..1] {
            out.extend(s.push(id).unwrap());
        }
        match s.push(bad) {
            Err(Error::InvalidArgument { message, .. }) => {
                assert!(message.contains(&bad.to_string()), "{message}")
            }
            other => panic!("push of id {bad}: expected InvalidArgument, got {other:?}"),
        }
        for &id in &ok[1..] {
            out.extend(s.push(id).unwrap());
        }
        out.extend(s.finish().unwrap());
        assert_eq!(out, tok.decode(&ok, false).unwrap(), "the stream went on");
    }
}

/// temperatures below `GenerateOptions::GREEDY_BELOW` give the greedy ids,
/// on the CPU and every adapter (1 / 1e-39 overflowed f32 and sampled garbage).
#[test]
fn tiny_temperatures_are_greedy() {
    let p = prompt();
    for d in devices() {
        let model = load(&llama(), &d).unwrap();
        let want = model.generate(&p, &greedy(6)).unwrap();
        for t in [1e-45f32, 1e-39, 1e-20, GenerateOptions::GREEDY_BELOW / 2.0] {
            let o = GenerateOptions {
                temperature: t,
                seed: Some(3),
                ..greedy(6)
            };
            assert_eq!(
                model.generate(&p, &o).unwrap(),
                want,
                "temperature {t} on {d}"
            );
        }
    }
}

/// hyper-parameters that would make every logit NaN, a GGUF whose
/// `block_count` disagrees with its tensors, and an integer weight are refused at load with
/// `Error::Format` naming the key and value.
#[test]
fn meaningless_hyper_parameters_are_refused_at_load() {
    let cpu = Device::cpu();
    let linear = |f: Value| {
        move |c: &mut Value| {
            c["rope_parameters"] =
                serde_json::json!({"rope_type": "linear", "factor": f, "rope_theta": 10000.0})
        }
    };
    let cases: [(&str, Edit, &[&str]); 5] = [
        (
            "linear factor 0",
            Box::new(linear(0.0.into())),
            &["factor", "0"],
        ),
        (
            "linear factor -2",
            Box::new(linear((-2.0).into())),
            &["factor", "-2"],
        ),
        (
            "rms_norm_eps -1",
            Box::new(|c| c["rms_norm_eps"] = (-1.0).into()),
            &["rms_norm_eps", "-1"],
        ),
        (
            "rms_norm_eps 0",
            Box::new(|c| c["rms_norm_eps"] = 0.0.into()),
            &["rms_norm_eps"],
        ),
        (
            "llama3 factor 0",
            Box::new(|c| c["rope_parameters"]["factor"] = 0.0.into()),
            &["factor"],
        ),
    ];
    for (what, edit, words) in cases {
        let tmp = TempDir::new("nan_hp");
        let dir = llama_dir(&tmp, |c| edit(c), |_| {});
        assert_format(load(&dir, &cpu), words, what);
    }
    // GGUF: rope.freq_base NaN, rope_freqs of zeros, block_count below and above the tensors.
    type Md = Box<dyn FnOnce(&mut Vec<(String, GgufValue)>)>;
    let gguf: [(&str, Md, bool, &[&str]); 4] = [
        (
            "freq_base NaN",
            Box::new(|m| set(m, "llama.rope.freq_base", GgufValue::F32(f32::NAN))),
            false,
            &["freq_base", "NaN"],
        ),
        (
            "rope_freqs zeros",
            Box::new(|_| {}),
            true,
            &["rope_freqs", "0"],
        ),
        (
            "block_count 1",
            Box::new(|m| set(m, "llama.block_count", GgufValue::U32(1))),
            false,
            &["block_count = 1", "2 layers"],
        ),
        (
            "block_count 3",
            Box::new(|m| set(m, "llama.block_count", GgufValue::U32(3))),
            false,
            &["block_count = 3", "2 layers"],
        ),
    ];
    for (what, md, zero_freqs, words) in gguf {
        let tmp = TempDir::new("nan_gguf");
        let path = llama_gguf(&tmp, md, |name, d, t, b| {
            let zero = zero_freqs && name == "rope_freqs.weight";
            Some((d, t, if zero { vec![0; b.len()] } else { b }))
        });
        assert_format(load(&path, &cpu), words, what);
    }
    // A weight stored as I32 is refused at load, not at the first product.
    let tmp = TempDir::new("i32_weight");
    let dir = llama_dir(
        &tmp,
        |_| {},
        |ws| {
            let (_, t) = ws
                .iter_mut()
                .find(|(n, _)| n.ends_with("layers.0.mlp.up_proj.weight"))
                .unwrap();
            *t = t.to_dtype(DType::I32).unwrap();
        },
    );
    assert_format(
        load(&dir, &cpu),
        &["up_proj.weight", "int32"],
        "an I32 weight",
    );
}

/// Llama's `attention_bias` loads q, k, v and o biases, `mlp_bias` gate, up
/// and down biases (transformers' `LlamaAttention` / `LlamaMLP`); zero biases give the
/// fixture's transformers ids, a missing one is named, and the o and down biases are added.
#[test]
fn llama_bias_options_load_every_bias_of_transformers() {
    let p = prompt();
    let names = |o: &str| {
        let attn = ["q_proj", "k_proj", "v_proj", "o_proj"].map(|s| format!("self_attn.{s}"));
        let mlp = ["gate_proj", "up_proj", "down_proj"].map(|s| format!("mlp.{s}"));
        if o == "attention_bias" {
            attn.to_vec()
        } else {
            mlp.to_vec()
        }
    };
    let base = load(&llama(), &Device::cpu()).unwrap();
    let want = base.generate(&p, &greedy(8)).unwrap();
    let c = base.config().clone();
    let rows = |n: &str| match n {
        "self_attn.q_proj" => c.num_heads * c.head_dim,
        "self_attn.k_proj" | "self_attn.v_proj" => c.num_kv_heads * c.head_dim,
        "mlp.gate_proj" | "mlp.up_proj" => c.intermediate_size,
        _ => c.hidden_size,
    };
    for option in ["attention_bias", "mlp_bias"] {
        for (case, value) in [("zeros", 0.0f32), ("missing", 0.0), ("shifted", 0.5)] {
            let tmp = TempDir::new("bias");
            let dir = llama_dir(
                &tmp,
                |c| c[option] = true.into(),
                |ws| {
                    for l in 0..2 {
                        for n in names(option) {
                            let last = n.ends_with("o_proj") || n.ends_with("down_proj");
                            if case == "missing" && last {
                                continue;
                            }
                            let v = if last { value as f64 } else { 0.0 };
                            let b =
                                Tensor::full(&[rows(&n)], v, DType::F32, &Device::cpu()).unwrap();
                            ws.push((format!("model.layers.{l}.{n}.bias"), b));
                        }
                    }
                },
            );
            for d in devices() {
                let r = load(&dir, &d);
                match case {
                    "missing" => {
                        let which = if option == "mlp_bias" {
                            "down_proj.bias"
                        } else {
                            "o_proj.bias"
                        };
                        assert_format(r, &[which], &format!("{option} {case} on {d}"));
                    }
                    "zeros" => assert_eq!(
                        r.unwrap().generate(&p, &greedy(8)).unwrap(),
                        want,
                        "{option} on {d}"
                    ),
                    _ => {
                        // A bias of 0.5 on every output of the last projection of each block
                        // is 0.5 more on the residual stream: the logits move.
                        let m = r.unwrap();
                        let mut c1 = m.new_cache(16).unwrap();
                        let mut c0 = base.new_cache(16).unwrap();
                        let got = m
                            .forward_last(&p, &mut c1)
                            .unwrap()
                            .to_vec::<f32>()
                            .unwrap();
                        let old = base
                            .forward_last(&p, &mut c0)
                            .unwrap()
                            .to_vec::<f32>()
                            .unwrap();
                        let moved = got
                            .iter()
                            .zip(&old)
                            .filter(|(a, b)| (*a - *b).abs() > 1e-3)
                            .count();
                        assert!(moved > 10, "{option} on {d}: the bias was not added");
                    }
                }
            }
        }
    }
}

/// options that change the computation are implemented or refused by name.
/// A linear RoPE scaling in GGUF metadata gives what the same model gives as a directory; a
/// Mistral sliding window shorter than the context becomes the context (exact within it); an
/// activation or key wgtensor does not implement is `Error::Format` naming it.
#[test]
fn checkpoint_options_are_implemented_or_named() {
    let cpu = Device::cpu();
    let p = prompt();
    // Linear scaling, factor 2: directory against GGUF.
    let tmp = TempDir::new("linear_dir");
    let dir = llama_dir(
        &tmp,
        |c| {
            c["rope_parameters"] =
                serde_json::json!({"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0})
        },
        |_| {},
    );
    let tmp2 = TempDir::new("linear_gguf");
    let gguf = llama_gguf(
        &tmp2,
        |m| {
            set(
                m,
                "llama.rope.scaling.type",
                GgufValue::String("linear".into()),
            );
            set(m, "llama.rope.scaling.factor", GgufValue::F32(2.0));
        },
        |name, d, t, b| (name != "rope_freqs.weight").then_some((d, t, b)),
    );
    for d in devices() {
        let a = load(&dir, &d).unwrap();
        let b = load(&gguf, &d).unwrap();
        let (mut ca, mut cb) = (a.new_cache(32).unwrap(), b.new_cache(32).unwrap());
        let la = a
            .forward_last(&p, &mut ca)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        let lb = b
            .forward_last(&p, &mut cb)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        assert_close(
            &lb,
            &la,
            1e-4,
            1e-4,
            &format!("linear scaling, GGUF against directory on {d}"),
        );
        assert_eq!(
            b.generate(&p, &greedy(12)).unwrap(),
            a.generate(&p, &greedy(12)).unwrap()
        );
        // The unscaled model differs: the factor was applied.
        let plain = load(&llama(), &d).unwrap();
        let mut cp = plain.new_cache(32).unwrap();
        let lp = plain
            .forward_last(&p, &mut cp)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        assert!(
            lp.iter().zip(&lb).any(|(x, y)| (x - y).abs() > 1e-3),
            "{d}: scaling ignored"
        );
    }
    // A GGUF scaling type wgtensor does not run is named.
    let tmp3 = TempDir::new("yarn_gguf");
    let yarn = llama_gguf(
        &tmp3,
        |m| {
            set(
                m,
                "llama.rope.scaling.type",
                GgufValue::String("yarn".into()),
            )
        },
        |_, d, t, b| Some((d, t, b)),
    );
    assert_format(load(&yarn, &cpu), &["rope.scaling.type", "yarn"], "yarn");
    // Mistral's sliding window of 16 under a context of 128: the context stays 128 and the
    // window applies past 16 positions (tests/models/hf.rs checks the ids against
    // transformers); within the window the ids are the unwindowed model's.
    let tmp4 = TempDir::new("window");
    let win = llama_dir(
        &tmp4,
        |c| {
            c["model_type"] = "mistral".into();
            c["sliding_window"] = 16.into();
        },
        |_| {},
    );
    let m = load(&win, &cpu).unwrap();
    assert_eq!(m.config().max_position_embeddings, 128);
    assert_eq!(m.config().sliding_window, Some(16));
    let ids = m.generate(&p, &greedy(16 - p.len())).unwrap();
    let plain = load(&llama(), &cpu).unwrap();
    assert_eq!(
        ids,
        plain.generate(&p, &greedy(16 - p.len())).unwrap(),
        "exact within the window"
    );
    assert_eq!(m.generate(&p, &greedy(40)).unwrap().len(), 40);
    // Keys and values that change the computation and are not implemented.
    let refused: [(&str, Value, &str); 4] = [
        ("hidden_act", "gelu".into(), "hidden_act"),
        ("partial_rotary_factor", 0.5.into(), "partial_rotary_factor"),
        (
            "final_logit_softcapping",
            30.0.into(),
            "final_logit_softcapping",
        ),
        ("sliding_window", (-1).into(), "sliding_window"),
    ];
    for (key, value, word) in refused {
        let tmp = TempDir::new("refused");
        let dir = llama_dir(
            &tmp,
            |c| {
                c["model_type"] = "mistral".into();
                c[key] = value.clone();
            },
            |_| {},
        );
        assert_format(load(&dir, &cpu), &[word], &format!("{key} = {value}"));
    }
}

/// The F32 GGUF fixture reshaped into one layer of one head of 256 (about 1.2 MB) with a
/// context of `context` positions.
fn wide_head_gguf(tmp: &TempDir, context: u32) -> PathBuf {
    let fill = |n: usize, norm: bool| -> Vec<u8> {
        (0..n)
            .flat_map(|i| {
                let x = if norm {
                    1.0f32
                } else {
                    ((i * 7919 % 1000) as f32 / 1000.0 - 0.5) * 0.2
                };
                x.to_le_bytes()
            })
            .collect()
    };
    llama_gguf(
        tmp,
        |m| {
            for (k, v) in [
                ("llama.embedding_length", 256),
                ("llama.attention.head_count", 1),
                ("llama.attention.head_count_kv", 1),
                ("llama.attention.key_length", 256),
                ("llama.attention.value_length", 256),
                ("llama.block_count", 1),
                ("llama.context_length", context),
            ] {
                set(m, k, GgufValue::U32(v));
            }
            m.retain(|(k, _)| k != "llama.rope.dimension_count");
        },
        |name, dims, ty, _| {
            if name.starts_with("blk.1.") {
                return None;
            }
            // Hidden (64), q (64) and k/v (32) widths become 256; vocab and FFN widths stay.
            let dims: Vec<u64> = if name == "rope_freqs.weight" {
                vec![128]
            } else {
                dims.iter()
                    .map(|&d| if d == 64 || d == 32 { 256 } else { d })
                    .collect()
            };
            let n = dims.iter().product::<u64>() as usize;
            let ones = name.contains("norm") || name == "rope_freqs.weight";
            Some((dims, ty, fill(n, ones)))
        },
    )
}

/// a GGUF with head_dim 256 and a context of 2^24 positions loads within a 64 MiB budget
/// (RoPE tables are built for the caches that ask, not for the whole context), generates the
/// ids of the same model with a short context, and a cache of the whole context is
/// `OutOfMemory`: never an abort. Runs in a child, so an abort fails this test alone.
#[test]
fn a_huge_context_loads_within_the_budget() {
    let out = common::run_child("hostile::huge_context_child", &[]);
    for line in out.lines().filter(|l| l.contains("within 64 MiB")) {
        println!("{line}");
    }
}

#[test]
fn huge_context_child() {
    if !common::is_child("hostile::huge_context_child") {
        return;
    }
    let (tmp_short, tmp_huge) = (TempDir::new("short_ctx"), TempDir::new("huge_ctx"));
    let short = wide_head_gguf(&tmp_short, 64);
    let huge = wide_head_gguf(&tmp_huge, 1 << 24);
    let p = prompt();
    for d in devices() {
        let want = load(&short, &d).unwrap().generate(&p, &greedy(6)).unwrap();
        wgtensor::set_memory_budget(&d, Some(64 << 20));
        let before = wgtensor::memory_allocated(&d);
        let model = load(&huge, &d).unwrap();
        assert_eq!(model.config().max_position_embeddings, 1 << 24);
        assert_eq!(model.config().head_dim, 256);
        let loaded = wgtensor::memory_allocated(&d).saturating_sub(before);
        assert!(loaded < 4 << 20, "{d}: the load holds {loaded} bytes");
        let got = no_panic("generate", || model.generate(&p, &greedy(6))).unwrap();
        assert_eq!(got, want, "{d}: the ids of the short-context model");
        match no_panic("new_cache", || model.new_cache(1 << 24)) {
            Err(Error::OutOfMemory { .. }) => {}
            Err(e) => panic!("{d}: expected OutOfMemory, got {e}"),
            Ok(_) => panic!("{d}: a cache of 2^24 positions fit in 64 MiB"),
        }
        wgtensor::set_memory_budget(&d, None);
        println!("{d}: 2^24 positions of head_dim 256 within 64 MiB");
    }
    common::child_done("hostile::huge_context_child");
}

/// two threads sampling with the same seed at once, while this thread draws from the global
/// generator, give the ids of a lone run in each of 10 rounds: a seeded generation owns its
/// generator.
#[test]
fn seeded_sampling_is_reproducible_while_other_threads_sample() {
    let options = GenerateOptions {
        max_new_tokens: 12,
        temperature: 1.0,
        seed: Some(11),
        eos_token_ids: Some(vec![]),
        ..Default::default()
    };
    let p = prompt();
    for d in devices() {
        let model = load(&llama(), &d).unwrap();
        let lone = model.generate(&p, &options).unwrap();
        for round in 0..10 {
            let done = std::sync::atomic::AtomicUsize::new(0);
            let [a, b] = std::thread::scope(|s| {
                let run = || {
                    let ids = no_panic("generate", || model.generate(&p, &options));
                    done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    ids.unwrap()
                };
                let (a, b) = (s.spawn(run), s.spawn(run));
                while done.load(std::sync::atomic::Ordering::SeqCst) < 2 {
                    Tensor::rand(&[64], &d).unwrap().to_vec::<f32>().unwrap();
                }
                [a.join().unwrap(), b.join().unwrap()]
            });
            assert_eq!(a, lone, "{d}: round {round}, first thread");
            assert_eq!(b, lone, "{d}: round {round}, second thread");
        }
    }
}
