//! End-to-end training: the same seeded model and data trained for 100 steps on the CPU and on
//! every adapter give the same losses (within 1e-3 relative), and the loss goes down.

use crate::common;

use std::f32::consts::PI;
use wgtensor::nn::{self, Linear, Module, ReLU, Sequential};
use wgtensor::optim::{Adam, Optimizer};
use wgtensor::{Device, Result, Tensor};

/// Two interleaved spiral arms (as in examples/train_mlp.rs) from the crate's seeded RNG.
fn spirals(per_class: usize) -> Result<(Tensor, Tensor)> {
    let cpu = Device::cpu();
    let t = Tensor::rand(&[per_class * 2], &cpu)?.to_vec::<f32>()?;
    let mut xy = Vec::new();
    let mut labels = Vec::new();
    for (i, &ti) in t.iter().enumerate() {
        let class = (i % 2) as u32;
        let r = 0.1 + 0.9 * ti;
        let theta = 3.0 * PI * r + PI * class as f32;
        xy.extend([r * theta.cos(), r * theta.sin()]);
        labels.push(class);
    }
    Ok((
        Tensor::from_vec(xy, &[per_class * 2, 2], &cpu)?,
        Tensor::from_vec(labels, &[per_class * 2], &cpu)?,
    ))
}

/// The losses of `steps` Adam steps over batches of `batch` rows, on `device`.
fn train(
    model: &Sequential,
    x: &Tensor,
    y: &Tensor,
    device: &Device,
    steps: usize,
    batch: usize,
) -> Result<Vec<f32>> {
    let mut model = model.clone();
    model.to(device)?;
    let mut opt = Adam::new(0.01);
    let n = y.numel();
    let mut losses = Vec::new();
    for step in 0..steps {
        let start = (step * batch) % n;
        let xb = x.narrow(0, start, batch)?.to(device)?;
        let yb = y.narrow(0, start, batch)?.to(device)?;
        opt.zero_grad(&model);
        let loss = nn::cross_entropy(&model.forward(&xb)?, &yb)?;
        loss.backward()?;
        opt.step(&mut model)?;
        losses.push(loss.to_scalar::<f32>()?);
    }
    Ok(losses)
}

#[test]
fn cpu_and_every_adapter_agree_after_100_steps() -> Result<()> {
    // Everything random is drawn once, so the RNG is not shared with parallel tests mid-way.
    wgtensor::manual_seed(1234);
    let (x, y) = spirals(128)?;
    let cpu = Device::cpu();
    let model = Sequential::new()
        .add(Linear::new(2, 32, true, &cpu)?)
        .add(ReLU)
        .add(Linear::new(32, 32, true, &cpu)?)
        .add(ReLU)
        .add(Linear::new(32, 2, true, &cpu)?);
    let expected = train(&model, &x, &y, &cpu, 100, 64)?;
    let (first, last) = (expected[0], expected[99]);
    assert!(
        last < 0.7 * first,
        "training does not reduce the loss: {first} -> {last}"
    );
    for dev in common::gpus() {
        let got = train(&model, &x, &y, &dev, 100, 64)?;
        for (step, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert!(
                (g - e).abs() <= 1e-3 * e.abs(),
                "step {step} on {dev}: loss {g} vs {e} on the CPU (more than 1e-3 relative)"
            );
        }
        eprintln!(
            "train: after 100 steps cpu loss {} vs {dev} {}",
            expected[99], got[99]
        );
    }
    Ok(())
}
