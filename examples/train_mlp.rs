//! Trains an MLP classifier on two interleaved spirals, generated in code with wgtensor's seeded
//! RNG, on the best device, with a progress bar showing the loss and the batch accuracy.
//!
//! While the device computes one step, the next batch is already being copied to it
//! (`to_async`), so uploads overlap with compute.
//!
//! ```text
//! cargo run --release --example train_mlp
//! WGTENSOR_DEVICE=gpu:0 cargo run --release --example train_mlp   # force the (software) GPU
//! ```

use indicatif::{ProgressBar, ProgressStyle};
use std::f32::consts::PI;
use wgtensor::nn::{self, Linear, Module, ReLU, Sequential};
use wgtensor::optim::{Adam, Optimizer};
use wgtensor::{Device, Result, Tensor};

/// `per_class` points on each of two spiral arms (1.5 turns, Gaussian noise), interleaved so
/// that every contiguous batch holds both classes. Returns `[2 * per_class, 2]` coordinates and
/// the class ids.
fn spirals(per_class: usize, noise: f32) -> Result<(Vec<f32>, Vec<u32>)> {
    let cpu = Device::cpu();
    let t = Tensor::rand(&[per_class * 2], &cpu)?.to_vec::<f32>()?;
    let eps = Tensor::randn(&[per_class * 2, 2], &cpu)?.to_vec::<f32>()?;
    let mut xy = Vec::with_capacity(per_class * 4);
    let mut labels = Vec::with_capacity(per_class * 2);
    for i in 0..per_class * 2 {
        let class = (i % 2) as u32;
        let r = 0.1 + 0.9 * t[i];
        let theta = 3.0 * PI * r + PI * class as f32;
        xy.push(r * theta.cos() + noise * eps[2 * i]);
        xy.push(r * theta.sin() + noise * eps[2 * i + 1]);
        labels.push(class);
    }
    Ok((xy, labels))
}

/// The fraction of rows whose largest logit is the label.
fn accuracy(logits: &Tensor, labels: &[u32]) -> Result<f32> {
    let pred = logits.argmax(-1, false)?.to_vec::<u32>()?;
    let hits = pred.iter().zip(labels).filter(|(p, l)| p == l).count();
    Ok(hits as f32 / labels.len().max(1) as f32)
}

fn main() -> Result<()> {
    wgtensor::manual_seed(7);
    let (device, why) = Device::best_with_reason();
    println!("training on {device}: {why}");

    let (per_class, batch, steps) = (1000, 200, 2000);
    let (xy, labels) = spirals(per_class, 0.02)?;
    let n = labels.len();
    let cpu = Device::cpu();
    let x_all = Tensor::from_vec(xy, &[n, 2], &cpu)?;
    let y_all = Tensor::from_vec(labels.clone(), &[n], &cpu)?;

    let mut model = Sequential::new()
        .add(Linear::new(2, 64, true, &cpu)?)
        .add(ReLU)
        .add(Linear::new(64, 64, true, &cpu)?)
        .add(ReLU)
        .add(Linear::new(64, 2, true, &cpu)?);
    model.to(&device)?;
    let mut opt = Adam::new(0.01);

    // Batch `i` starts uploading as soon as this is called; awaiting it later does not block
    // unless the copy is still running.
    let upload = |i: usize| {
        let start = (i * batch) % n;
        (
            x_all.narrow(0, start, batch).map(|x| x.to_async(&device)),
            y_all.narrow(0, start, batch).map(|y| y.to_async(&device)),
            start,
        )
    };

    let bar = ProgressBar::new(steps as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} [{elapsed}] {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut next = upload(0);
    for step in 0..steps {
        let (x_pending, y_pending, start) = next;
        let xb = pollster::block_on(x_pending?)?;
        let yb = pollster::block_on(y_pending?)?;
        next = upload(step + 1); // overlaps with this step's compute

        opt.zero_grad(&model);
        let logits = model.forward(&xb)?;
        let loss = nn::cross_entropy(&logits, &yb)?;
        loss.backward()?;
        opt.step(&mut model)?;

        if step % 20 == 0 || step + 1 == steps {
            let acc = accuracy(&logits, &labels[start..start + batch])?;
            let l = loss.to_scalar::<f32>()?;
            bar.set_message(format!("loss {l:.4}  batch accuracy {:.1}%", acc * 100.0));
        }
        bar.inc(1);
    }
    bar.finish();

    let logits = wgtensor::no_grad_scope(|| model.forward(&x_all.to(&device)?))?;
    let acc = accuracy(&logits, &labels)?;
    println!("training accuracy on all {n} points: {:.2}%", acc * 100.0);
    if acc < 0.95 {
        return Err(wgtensor::Error::InvalidArgument {
            op: "train_mlp",
            message: format!("training accuracy {:.2}% is below 95%", acc * 100.0),
        });
    }
    Ok(())
}
