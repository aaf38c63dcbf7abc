//! One training step (forward, cross-entropy, backward, Adam update) of a 2-64-64-2 MLP on a
//! batch of 256, on the CPU and on gpu:0 if present. Besides criterion's time per step, prints
//! the host overhead per step: the time to record the step (every call returns once its work is
//! queued) next to the time until the device has finished it (reading the loss back).
//!
//! `cross_entropy` reads its class ids back to check their range, which waits for the queued
//! forward on a GPU; the `mse` variant (one-hot f32 targets) records a step without any wait,
//! so its record time is the pure host overhead.
//!
//! `mlp_784_256_10`: the 784-256-10 MLP, batch 128, Adam, cross-entropy (the workload compared
//! with peers), with dispatches per step.
//!
//! Run: `cargo bench --bench train`

use criterion::{criterion_group, criterion_main, Criterion};
use std::time::{Duration, Instant};
use wgtensor::nn::{self, Linear, Module, ReLU, Sequential};
use wgtensor::optim::{Adam, Optimizer};
use wgtensor::{Device, Result, Tensor};

const BATCH: usize = 256;

struct Setup {
    model: Sequential,
    opt: Adam,
    x: Tensor,
    y: Tensor,
    onehot: Tensor,
}

fn setup(device: &Device) -> Result<Setup> {
    wgtensor::manual_seed(0);
    let cpu = Device::cpu();
    let mut model = Sequential::new()
        .add(Linear::new(2, 64, true, &cpu)?)
        .add(ReLU)
        .add(Linear::new(64, 64, true, &cpu)?)
        .add(ReLU)
        .add(Linear::new(64, 2, true, &cpu)?);
    model.to(device)?;
    let x = Tensor::randn(&[BATCH, 2], &cpu)?.to(device)?;
    let ids: Vec<u32> = (0..BATCH as u32).map(|i| i % 2).collect();
    let y = Tensor::from_vec(ids.clone(), &[BATCH], device)?;
    let hot: Vec<f32> = ids
        .iter()
        .flat_map(|&i| [(i == 0) as u8 as f32, i as f32])
        .collect();
    let onehot = Tensor::from_vec(hot, &[BATCH, 2], device)?;
    Ok(Setup {
        model,
        opt: Adam::new(1e-3),
        x,
        y,
        onehot,
    })
}

/// Records one step; returns the loss without waiting for it.
fn step(s: &mut Setup, mse: bool) -> Result<Tensor> {
    s.opt.zero_grad(&s.model);
    let logits = s.model.forward(&s.x)?;
    let loss = if mse {
        nn::mse_loss(&logits, &s.onehot)?
    } else {
        nn::cross_entropy(&logits, &s.y)?
    };
    loss.backward()?;
    s.opt.step(&mut s.model)?;
    Ok(loss)
}

fn bench(c: &mut Criterion) {
    let mut devices = vec![Device::cpu()];
    if let Ok(g) = Device::gpu(0) {
        devices.push(g);
    }
    let mut group = c.benchmark_group("train_step");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(5));
    for (device, mse) in devices
        .iter()
        .flat_map(|d| [(d.clone(), false), (d.clone(), true)])
    {
        let name = format!("{device}/{}", if mse { "mse" } else { "cross_entropy" });
        let mut s = setup(&device).expect("setup");
        let (mut record, mut total, mut n) = (Duration::ZERO, Duration::ZERO, 0u32);
        group.bench_function(&name, |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    let t0 = Instant::now();
                    let loss = step(&mut s, mse).expect("step");
                    let t1 = Instant::now();
                    loss.to_scalar::<f32>().expect("loss"); // waits for the device
                    record += t1 - t0;
                    total += t1.elapsed() + (t1 - t0);
                    n += 1;
                }
                start.elapsed()
            })
        });
        if n > 0 {
            println!(
                "train_step/{name}: host records a step in {:.3} ms, step done after {:.3} ms \
                 (mean of {n})",
                record.as_secs_f64() * 1e3 / n as f64,
                total.as_secs_f64() * 1e3 / n as f64
            );
        }
    }
    group.finish();
}

/// The MLP the project compares with peers: 784-256-10, batch 128, Adam, cross-entropy, the
/// batch already on the device. Prints dispatches and submits per step (`kernel_stats`).
fn mlp784(c: &mut Criterion) {
    let mut devices = vec![Device::cpu()];
    if let Ok(g) = Device::gpu(0) {
        devices.push(g);
    }
    let mut group = c.benchmark_group("mlp_784_256_10");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(5));
    for device in devices {
        wgtensor::manual_seed(1);
        let cpu = Device::cpu();
        let mut model = Sequential::new()
            .add(Linear::new(784, 256, true, &cpu).unwrap())
            .add(ReLU)
            .add(Linear::new(256, 10, true, &cpu).unwrap());
        model.to(&device).unwrap();
        let x = Tensor::randn(&[128, 784], &cpu)
            .unwrap()
            .to(&device)
            .unwrap();
        let ids: Vec<u32> = (0..128u32).map(|i| i % 10).collect();
        let y = Tensor::from_vec(ids, &[128], &device).unwrap();
        let mut opt = Adam::new(1e-3);
        let mut one_step = || {
            opt.zero_grad(&model);
            let loss = nn::cross_entropy(&model.forward(&x)?, &y)?;
            loss.backward()?;
            opt.step(&mut model)?;
            loss.to_scalar::<f32>()
        };
        for _ in 0..3 {
            one_step().unwrap(); // warm the pipeline and buffer caches
        }
        wgtensor::reset_kernel_stats(&device);
        one_step().unwrap();
        let k = wgtensor::kernel_stats(&device);
        println!(
            "mlp_784_256_10/{device}: {} dispatches, {} submits per step",
            k.dispatches, k.submits
        );
        group.bench_function(device.to_string(), |b| b.iter(|| one_step().unwrap()));
    }
    group.finish();
}

criterion_group!(benches, bench, mlp784);
criterion_main!(benches);
