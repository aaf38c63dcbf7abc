//! Data parallelism (PyTorch's `nn.DataParallel`): one replica of a model per device, the batch
//! split along dim 0, shards run concurrently, outputs gathered on the CPU. Uses every GPU
//! adapter plus the CPU; with a single adapter, a second logical device on it as well.
//!
//! Run: `cargo run --release --example data_parallel`

use std::time::Instant;
use wgtensor::nn::{DataParallel, Linear, Module, ReLU, Sequential};
use wgtensor::{Device, Result, Tensor};

fn main() -> Result<()> {
    wgtensor::manual_seed(0);
    let cpu = Device::cpu();
    let mut devices = vec![cpu.clone()];
    for i in 0..wgtensor::gpu_count() {
        devices.push(Device::gpu(i)?);
    }
    if wgtensor::gpu_count() == 1 {
        // One adapter: a second, independent device on it (its own queue and memory pool).
        devices.push(Device::gpu_logical(0)?);
    }
    let names: Vec<String> = devices.iter().map(|d| d.to_string()).collect();
    println!("replicating on: {}", names.join(", "));

    let model = Sequential::new()
        .add(Linear::new(64, 128, true, &cpu)?)
        .add(ReLU)
        .add(Linear::new(128, 10, true, &cpu)?);
    let dp = DataParallel::new(model.clone(), &devices, &cpu)?;
    for (i, d) in dp.devices().iter().enumerate() {
        let r = dp.replica(i).expect("one replica per device");
        println!(
            "  replica {i}: parameters on {}",
            r.device().expect("has parameters")
        );
        assert_eq!(r.device().as_ref(), Some(d));
    }

    let batch = 33; // odd on purpose: shards differ by at most one row
    let x = Tensor::randn(&[batch, 64], &cpu)?;
    // The first call builds each device's kernels; the second shows the steady state.
    for run in ["first (builds kernels)", "second"] {
        let started = Instant::now();
        let y = dp.forward(&x)?;
        println!(
            "{run}: output {:?} gathered on {} in {:.1} ms",
            y.shape(),
            y.device(),
            started.elapsed().as_secs_f64() * 1e3
        );
    }
    let y = dp.forward(&x)?;

    let single = model.forward(&x)?;
    let max_diff = y
        .to_vec::<f32>()?
        .iter()
        .zip(&single.to_vec::<f32>()?)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    println!("max |data-parallel - single device| = {max_diff:e}");
    Ok(())
}
