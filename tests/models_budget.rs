//! A model larger than its device's memory budget is refused before any weight is allocated,
//! with an `OutOfMemory` naming the model's size and the budget; tensors already on the device
//! are untouched, and the same model loads once the budget allows it. The tests take turns, since
//! the budget is per device for the whole process.

mod common;
#[path = "../examples/common/random_llama.rs"]
mod random_llama;

use common::devices;
use std::path::PathBuf;
use wgtensor::models::AutoModel;
use wgtensor::{memory_allocated, memory_budget, set_memory_budget, DType, Error, Tensor};

fn model(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// The budget and the allocation counts are per device for the whole process: the tests of this
/// file take turns.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn models_over_budget_are_refused_up_front() {
    let _turn = one_at_a_time();
    for device in devices() {
        for (path, dtype) in [
            (model("models/llama"), DType::F32),
            (model("models/llama"), DType::F16),
            (model("models/llama/model-f32.gguf"), DType::F32),
            (model("models/llama/model-q4_0.gguf"), DType::F32),
        ] {
            let sentinel = Tensor::from_slice(&[1.5f32, -2.0, 3.25], &[3], &device).unwrap();
            let held = memory_allocated(&device);
            // Room for what is held plus 1 KiB: every fixture model is larger.
            set_memory_budget(&device, Some(held + 1024));
            let err = AutoModel::load(&path, &device, dtype).err();
            let ctx = format!("{} on {device} ({dtype})", path.display());
            match &err {
                Some(Error::OutOfMemory {
                    op,
                    requested,
                    limit,
                    device: d,
                    ..
                }) => {
                    assert_eq!(*op, "AutoModel::load", "{ctx}");
                    assert_eq!(*limit, held + 1024, "{ctx}");
                    assert!(*requested > 1024, "{ctx}: model bytes {requested}");
                    assert_eq!(*d, device.to_string(), "{ctx}");
                    let msg = err.as_ref().unwrap().to_string();
                    assert!(
                        msg.contains("MiB") && msg.contains("budget") && msg.contains("quantized"),
                        "{ctx}: {msg}"
                    );
                }
                other => panic!("{ctx}: expected OutOfMemory, got {other:?}"),
            }
            // Nothing was allocated by the refused load; the sentinel reads back intact.
            assert_eq!(memory_allocated(&device), held, "{ctx}");
            assert_eq!(
                sentinel.to_vec::<f32>().unwrap(),
                [1.5, -2.0, 3.25],
                "{ctx}"
            );
            // With the budget cleared the same model loads, and its size is what was refused.
            set_memory_budget(&device, None);
            let requested = match err {
                Some(Error::OutOfMemory { requested, .. }) => requested,
                _ => unreachable!(),
            };
            let before = memory_allocated(&device);
            let loaded = AutoModel::load(&path, &device, dtype).unwrap();
            let grown = memory_allocated(&device) - before;
            // The estimate is the weights' size: what loading holds afterwards, within rounding
            // and the small tables (RoPE) a model adds.
            assert!(
                grown as f64 >= requested as f64 * 0.9 && grown as f64 <= requested as f64 * 1.5,
                "{ctx}: estimated {requested} bytes, loading held {grown}"
            );
            drop(loaded);
        }
        // The CPU and adapters sharing host memory have a budget without being told one.
        if device.is_cpu() {
            assert!(memory_budget(&device).is_some_and(|b| b > 1 << 20));
        }
    }
}

/// A decode step on an adapter is one submit and reads back only the sampled id (4 bytes): the
/// greedy choice is made on the device and the step's kernels go out in one batch
/// (`Device::one_submit`). An 8-layer random model, so a step launches far more kernels than the
/// 64 after which a batch is otherwise submitted; f32 weights and Q8_0 ones.
#[test]
fn a_decoded_token_is_one_submit_and_four_bytes_read_back() {
    let _turn = one_at_a_time();
    let tmp = common::TempDir::new("eight_layers");
    let preset = random_llama::Preset {
        vocab: 512,
        hidden: 64,
        layers: 8,
        heads: 4,
        kv_heads: 2,
        inter: 128,
        ctx: 256,
    };
    random_llama::write(tmp.path(), &preset, &[Some(wgtensor::QType::Q8_0)], 7).unwrap();
    let files = [
        tmp.path().to_path_buf(),
        tmp.path()
            .join(random_llama::gguf_name(Some(wgtensor::QType::Q8_0))),
    ];
    for d in devices().into_iter().filter(|d| d.is_gpu()) {
        for f in &files {
            let m = AutoModel::load(f, &d, DType::F32).unwrap();
            let prompt = [1u32, 40, 50, 60];
            let opts = |n| wgtensor::models::GenerateOptions {
                max_new_tokens: n,
                eos_token_ids: Some(vec![]),
                ..Default::default()
            };
            let measure = |n: usize| {
                d.synchronize().unwrap();
                wgtensor::reset_kernel_stats(&d);
                wgtensor::reset_transfer_stats(&d);
                m.generate(&prompt, &opts(n)).unwrap();
                (wgtensor::kernel_stats(&d), wgtensor::transfer_stats(&d))
            };
            measure(4); // pipelines compiled, pools filled
                        // 12 new tokens against 4: 8 more decode steps, whatever prefill and setup cost.
            let (k4, t4) = measure(4);
            let (k12, t12) = measure(12);
            let steps = 8;
            let what = format!("{d}, {}", f.display());
            let dispatches = (k12.dispatches - k4.dispatches) / steps;
            assert!(dispatches > 64, "{what}: {dispatches} kernels a step");
            assert_eq!(
                k12.submits - k4.submits,
                steps,
                "{what}: submits per decoded token"
            );
            assert_eq!(
                t12.download_bytes - t4.download_bytes,
                4 * steps,
                "{what}: bytes read back per decoded token"
            );
        }
    }
}
