//! Batched generation (`CausalLM::generate_batch`, `CausalLM::forward_batch`): several
//! sequences of different lengths decoded together, each over its own KV cache, give each
//! sequence the ids it gets alone. Every family of the tiny transformers-made fixtures in
//! tests/data/models (learned positions, fused projections, q/k norms, sliding windows,
//! soft-caps, two RoPE tables), f32 and f16 weights and quantized GGUF files, on the CPU and
//! every adapter.

use crate::common;

use common::{assert_close, devices};
use std::path::PathBuf;
use wgtensor::models::{AutoModel, CausalLM, GenerateOptions};
use wgtensor::{DType, Device, Error};

fn dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/models")
        .join(name)
}

/// Four prompts of 1 to 9 ids (every fixture's vocabulary has 320 ids at least): ragged
/// lengths, and with 8 new ids each sequence passes the fixtures' sliding windows (5-6).
fn prompts() -> Vec<Vec<u32>> {
    vec![
        vec![1, 45, 9],
        vec![1, 20, 31, 44, 57, 68, 79, 101, 250],
        vec![1],
        vec![1, 100, 200, 7, 8],
    ]
}

/// The models under test: (what, path, dtype).
fn models() -> Vec<(&'static str, PathBuf, DType)> {
    let mut v = vec![
        ("llama f32", dir("llama"), DType::F32),
        ("llama f16", dir("llama"), DType::F16),
        (
            "llama Q8_0",
            dir("llama").join("model-q8_0.gguf"),
            DType::F32,
        ),
        (
            "llama Q4_0",
            dir("llama").join("model-q4_0.gguf"),
            DType::F32,
        ),
    ];
    for name in [
        "gpt2",
        "qwen3",
        "mistral",
        "qwen2-window",
        "phi3",
        "gemma2",
        "gemma3",
    ] {
        v.push((name, dir(name), DType::F32));
    }
    v
}

fn alone(model: &CausalLM, prompts: &[Vec<u32>], o: &GenerateOptions) -> Vec<Vec<u32>> {
    prompts
        .iter()
        .map(|p| model.generate(p, o).unwrap())
        .collect()
}

/// Greedy ids of each sequence in a batch equal its ids generated alone; with an EOS id that
/// one sequence reaches early, that sequence stops there while the others go on.
#[test]
fn batched_greedy_ids_equal_each_sequence_alone() {
    let prompts = prompts();
    for d in devices() {
        for (what, path, dtype) in models() {
            let model = AutoModel::load(&path, &d, dtype).unwrap();
            let ctx = format!("{what} on {d}");
            let o = GenerateOptions {
                max_new_tokens: 8,
                eos_token_ids: Some(vec![]),
                ..Default::default()
            };
            let want = alone(&model, &prompts, &o);
            assert!(want.iter().all(|w| w.len() == 8), "{ctx}: {want:?}");
            assert_eq!(model.generate_batch(&prompts, &o).unwrap(), want, "{ctx}");

            // Each sequence stops on its own: an EOS id that the second sequence produces
            // early (and another sequence later or never) ends it there.
            let eos = want[1][2];
            let stop = want[1].iter().position(|&id| id == eos).unwrap() + 1;
            let o = GenerateOptions {
                eos_token_ids: Some(vec![eos]),
                ..o
            };
            let want = alone(&model, &prompts, &o);
            assert_eq!(want[1].len(), stop, "{ctx}");
            let got = model.generate_batch(&prompts, &o).unwrap();
            assert_eq!(got, want, "{ctx}, EOS {eos}");
            if what == "llama f32" {
                // This fixture's sequences are ragged in output length too.
                assert!(got.iter().any(|g| g.len() == 8), "{ctx}: {got:?}");
            }
        }
    }
}

/// One decode step of the batch gives each row the logits of that sequence's own step, at
/// ragged positions, and grows each cache by one.
#[test]
fn forward_batch_rows_equal_single_steps() {
    let prompts = prompts();
    for d in devices() {
        for name in ["llama", "gpt2", "gemma3"] {
            let model = AutoModel::load(dir(name), &d, DType::F32).unwrap();
            let mut caches = Vec::new();
            let mut single = Vec::new();
            for p in &prompts {
                let mut c = model.new_cache(32).unwrap();
                model.forward(p, &mut c).unwrap();
                caches.push(c);
                let mut c = model.new_cache(32).unwrap();
                model.forward(p, &mut c).unwrap();
                single.push(c);
            }
            let next = [3u32, 17, 250, 42];
            let batch = model.forward_batch(&next, &mut caches).unwrap();
            assert_eq!(batch.shape(), [4, model.config().vocab_size]);
            for (i, (id, c)) in next.iter().zip(&mut single).enumerate() {
                let want = model.forward_last(&[*id], c).unwrap();
                let got = batch
                    .narrow(0, i, 1)
                    .unwrap()
                    .reshape(&[want.numel()])
                    .unwrap();
                assert_close(
                    &got.to_vec::<f32>().unwrap(),
                    &want.to_vec::<f32>().unwrap(),
                    1e-4,
                    1e-4,
                    &format!("{name} row {i} on {d}"),
                );
                assert_eq!(caches[i].len(), prompts[i].len() + 1);
            }
        }
    }
}

/// Seeded sampling gives each sequence a generator of that seed: the ids it gets alone.
#[test]
fn seeded_sampling_in_a_batch_equals_alone() {
    let prompts = prompts();
    for d in devices() {
        let model = AutoModel::load(dir("llama"), &d, DType::F32).unwrap();
        let o = GenerateOptions {
            max_new_tokens: 6,
            temperature: 0.8,
            top_k: 50,
            top_p: 0.95,
            repetition_penalty: 1.1,
            seed: Some(7),
            eos_token_ids: Some(vec![]),
        };
        let want = alone(&model, &prompts, &o);
        assert_eq!(model.generate_batch(&prompts, &o).unwrap(), want, "on {d}");
    }
}

fn invalid(e: Error, op: &str, says: &str) {
    match &e {
        Error::InvalidArgument { op: got, message } => {
            assert_eq!(*got, op, "{e}");
            assert!(message.contains(says), "{e}");
        }
        _ => panic!("expected InvalidArgument from {op}, got {e}"),
    }
}

/// Empty batches and prompts, mismatched ids and caches, a full cache: typed errors naming
/// the op and the sequence, with the caches left as they were.
#[test]
fn bad_batches_are_errors() {
    let model = AutoModel::load(dir("llama"), &Device::cpu(), DType::F32).unwrap();
    let o = GenerateOptions::default();
    let none: &[Vec<u32>] = &[];
    invalid(
        model.generate_batch(none, &o).unwrap_err(),
        "generate_batch",
        "no prompts",
    );
    let with_empty: &[&[u32]] = &[&[1, 2], &[]];
    invalid(
        model.generate_batch(with_empty, &o).unwrap_err(),
        "generate_batch",
        "prompt 1",
    );
    let too_long = vec![vec![1u32], vec![1; 200]];
    invalid(
        model.generate_batch(&too_long, &o).unwrap_err(),
        "generate_batch",
        "prompt 1",
    );
    let bad = GenerateOptions {
        top_p: 0.0,
        ..Default::default()
    };
    invalid(
        model.generate_batch(&[vec![1u32]], &bad).unwrap_err(),
        "generate_batch",
        "top_p",
    );
    // Nothing to generate: empty outputs, one per prompt.
    let zero = GenerateOptions {
        max_new_tokens: 0,
        ..Default::default()
    };
    assert_eq!(
        model
            .generate_batch(&[vec![1u32], vec![1, 2]], &zero)
            .unwrap(),
        vec![Vec::<u32>::new(), Vec::new()]
    );

    let mut caches = vec![model.new_cache(4).unwrap(), model.new_cache(8).unwrap()];
    invalid(
        model.forward_batch(&[], &mut []).unwrap_err(),
        "forward_batch",
        "at least one",
    );
    invalid(
        model.forward_batch(&[1], &mut caches).unwrap_err(),
        "forward_batch",
        "1 ids for 2 caches",
    );
    invalid(
        model.forward_batch(&[1, 1000], &mut caches).unwrap_err(),
        "forward_batch",
        "sequence 1",
    );
    model.forward(&[1, 2, 3, 4], &mut caches[0]).unwrap();
    invalid(
        model.forward_batch(&[1, 1], &mut caches).unwrap_err(),
        "forward_batch",
        "sequence 0",
    );
    assert_eq!((caches[0].len(), caches[1].len()), (4, 0));
    // A cache of another model.
    let gpt2 = AutoModel::load(dir("gpt2"), &Device::cpu(), DType::F32).unwrap();
    let mut other = vec![model.new_cache(8).unwrap(), gpt2.new_cache(8).unwrap()];
    invalid(
        model.forward_batch(&[1, 1], &mut other).unwrap_err(),
        "forward_batch",
        "sequence 1",
    );
    assert_eq!((other[0].len(), other[1].len()), (0, 0));
}
