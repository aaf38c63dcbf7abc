//! A model larger than its device's memory budget is refused before any weight is allocated,
//! with an `OutOfMemory` naming the model's size and the budget; tensors already on the device
//! are untouched, and the same model loads once the budget allows it. One test function, since
//! the budget is per device for the whole process.

mod common;

use common::devices;
use std::path::PathBuf;
use wgtensor::models::AutoModel;
use wgtensor::{memory_allocated, memory_budget, set_memory_budget, DType, Error, Tensor};

fn model(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

#[test]
fn models_over_budget_are_refused_up_front() {
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
