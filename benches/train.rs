//! One training step (forward, cross-entropy, backward, Adam update) of a 2-64-64-2 MLP on a
//! batch of 256, on the CPU and on gpu:0 if present. Besides criterion's time per step, prints
//! the host overhead per step: the time to record the step (every call returns once its work is
//! queued) next to the time until the device has finished it (reading the loss back).
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
    let y = Tensor::from_vec(ids, &[BATCH], device)?;
    Ok(Setup {
        model,
        opt: Adam::new(1e-3),
        x,
        y,
    })
}

/// Records one step; returns the loss without waiting for it.
fn step(s: &mut Setup) -> Result<Tensor> {
    s.opt.zero_grad(&s.model);
    let loss = nn::cross_entropy(&s.model.forward(&s.x)?, &s.y)?;
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
    for device in devices {
        let mut s = setup(&device).expect("setup");
        let (mut record, mut total, mut n) = (Duration::ZERO, Duration::ZERO, 0u32);
        group.bench_function(device.to_string(), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    let t0 = Instant::now();
                    let loss = step(&mut s).expect("step");
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
                "train_step/{device}: host records a step in {:.3} ms, step done after {:.3} ms \
                 (mean of {n})",
                record.as_secs_f64() * 1e3 / n as f64,
                total.as_secs_f64() * 1e3 / n as f64
            );
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
