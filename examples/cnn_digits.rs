//! A small CNN trained on real handwritten digits (the UCI optical-digits set vendored in
//! `data/digits/`, CC BY 4.0): 8x8 grey images, 10 classes.
//!
//! ```text
//! cargo run --release --example cnn_digits                  # the best device
//! WGTENSOR_DEVICE=cpu cargo run --release --example cnn_digits
//! ```
//!
//! Conv(1→16, 3x3) → BatchNorm → ReLU → MaxPool 2 → Conv(16→32, 3x3) → ReLU → MaxPool 2 →
//! Flatten → Linear(128→10), Adam, batches from a `DataLoader` that uploads the next batch while
//! the current step runs. Deterministic for the seed. Prints `test accuracy: XX.XX%` on 399
//! held-out images and fails below 97 %. `CI=true` trains fewer epochs (see docs/models.md).

use flate2::read::GzDecoder;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::Read;
use std::time::Instant;
use wgtensor::data::{DataLoader, TensorDataset};
use wgtensor::nn::{
    self, BatchNorm2d, Conv2d, Flatten, Linear, MaxPool2d, Module, ReLU, Sequential,
};
use wgtensor::optim::{Adam, Optimizer};
use wgtensor::{Conv2dOptions, Device, Error, Result, Tensor};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/digits/digits.csv.gz");

/// Pixels scaled to [0, 1] and labels, in file order.
fn load() -> Result<(Vec<f32>, Vec<u32>)> {
    let io = |e: std::io::Error| Error::InvalidArgument {
        op: "cnn_digits",
        message: format!("reading {DATA}: {e}"),
    };
    let mut text = String::new();
    GzDecoder::new(std::fs::File::open(DATA).map_err(io)?)
        .read_to_string(&mut text)
        .map_err(io)?;
    let (mut px, mut labels) = (Vec::new(), Vec::new());
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Vec<f32> = line
            .split(',')
            .map(|s| s.trim().parse::<f32>())
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| Error::InvalidArgument {
                op: "cnn_digits",
                message: format!("bad number in {DATA}: {e}"),
            })?;
        px.extend(v[..64].iter().map(|p| p / 16.0));
        labels.push(v[64] as u32);
    }
    Ok((px, labels))
}

/// A seeded Fisher-Yates shuffle of `0..n` (xorshift64*), so the split never changes.
fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    let mut s = seed | 1;
    for i in (1..n).rev() {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        let r = s.wrapping_mul(0x2545_F491_4F6C_DD1D);
        v.swap(i, (r % (i as u64 + 1)) as usize);
    }
    v
}

fn main() -> Result<()> {
    wgtensor::manual_seed(0);
    let (device, why) = Device::best_with_reason();
    println!("training on {device}: {why}");
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let epochs = if ci { 8 } else { 15 };

    let (px, labels) = load()?;
    let n = labels.len();
    // A fixed split: two images in nine (after a seeded shuffle) are held out.
    let cpu = Device::cpu();
    let order = shuffled(n, 1234);
    let (mut train, mut test) = (Vec::new(), Vec::new());
    for (k, &i) in order.iter().enumerate() {
        if k % 9 == 4 || k % 9 == 8 {
            test.push(i)
        } else {
            train.push(i)
        }
    }
    let pick = |ids: &[usize]| -> Result<(Tensor, Tensor)> {
        let x: Vec<f32> = ids
            .iter()
            .flat_map(|&i| px[i * 64..i * 64 + 64].to_vec())
            .collect();
        let y: Vec<u32> = ids.iter().map(|&i| labels[i]).collect();
        Ok((
            Tensor::from_vec(x, &[ids.len(), 1, 8, 8], &cpu)?,
            Tensor::from_vec(y, &[ids.len()], &cpu)?,
        ))
    };
    let (xtr, ytr) = pick(&train)?;
    let (xte, yte) = pick(&test)?;
    println!(
        "{} training and {} test images of 8x8 pixels",
        train.len(),
        test.len()
    );

    let same = Conv2dOptions::default().padding(1);
    let mut model = Sequential::new()
        .add(Conv2d::new(1, 16, [3, 3], same, true, &cpu)?)
        .add(BatchNorm2d::new(16, &cpu)?)
        .add(ReLU)
        .add(MaxPool2d::new([2, 2]))
        .add(Conv2d::new(16, 32, [3, 3], same, true, &cpu)?)
        .add(ReLU)
        .add(MaxPool2d::new([2, 2]))
        .add(Flatten::default())
        .add(Linear::new(32 * 2 * 2, 10, true, &cpu)?);
    model.to(&device)?;
    let mut opt = Adam::new(3e-3);
    let mut loader = DataLoader::new(TensorDataset::new(vec![xtr, ytr])?, 64, &device)?
        .shuffle(7)
        .drop_last(false);

    let bar = ProgressBar::new((epochs * loader.len()) as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} [{elapsed}] {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let began = Instant::now();
    for epoch in 0..epochs {
        loader.set_epoch(epoch as u64);
        let mut last = None;
        for batch in loader.iter() {
            let batch = batch?;
            opt.zero_grad(&model);
            let loss = nn::cross_entropy(&model.forward(&batch[0])?, &batch[1])?;
            loss.backward()?;
            opt.step(&mut model)?;
            last = Some(loss);
            bar.inc(1);
        }
        if let Some(l) = last {
            bar.set_message(format!(
                "epoch {} loss {:.4}",
                epoch + 1,
                l.to_scalar::<f32>()?
            ));
        }
    }
    bar.finish();
    let per_epoch = began.elapsed().as_secs_f64() / epochs as f64;

    model.eval();
    let logits = wgtensor::no_grad_scope(|| model.forward(&xte.to(&device)?))?;
    let pred = logits.argmax(-1, false)?.to_vec::<u32>()?;
    let truth = yte.to_vec::<u32>()?;
    let hits = pred.iter().zip(&truth).filter(|(p, t)| p == t).count();
    let acc = hits as f64 / truth.len() as f64 * 100.0;
    println!("{epochs} epochs, {per_epoch:.2} s per epoch on {device}");
    println!("test accuracy: {acc:.2}%");
    if acc < 97.0 {
        return Err(Error::InvalidArgument {
            op: "cnn_digits",
            message: format!("test accuracy {acc:.2}% is below 97%"),
        });
    }
    Ok(())
}
