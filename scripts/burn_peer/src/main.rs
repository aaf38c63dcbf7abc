// burn-wgpu peers of wgtensor's benches/models.rs rows, timed the same way (2 warm-up rounds,
// median of 5; a round ends when the device has finished and one element has been read back):
// - `conv`: conv2d 3x3, 32 -> 32 channels, 8 images 32x32, padding 1, forward (`conv2d_fwd`);
// - `mlp`: MLP 784-256-10 (biases, ReLU), cross entropy against labels i % 10, one Adam step
//   (lr 1e-3, eps 1e-8 as wgtensor's `Adam::new`), batch 128 of x ~ N(0, 1) (`mlp_adam`).
use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::module::conv2d;
use burn::tensor::ops::ConvOptions;
use burn::tensor::{Device, Distribution, Int, Tensor};
use std::time::Instant;

/// Runs `round` 2 + 5 times and prints the median of the last 5 as `burn-wgpu {row}: ...`.
fn time(row: &str, runs: usize, mut round: impl FnMut()) {
    for _ in 0..runs {
        let mut ms = Vec::new();
        for i in 0..7 {
            let t0 = Instant::now();
            round();
            if i >= 2 {
                ms.push(t0.elapsed().as_secs_f64() * 1e3);
            }
        }
        ms.sort_by(f64::total_cmp);
        println!(
            "burn-wgpu {row}: {:.3} ms (min {:.3}, max {:.3}, 5 rounds)",
            ms[2], ms[0], ms[4]
        );
    }
}

/// Waits for the device, then reads the first element of `t` (as wgtensor's `settle`).
fn settle<const D: usize>(t: Tensor<D>) {
    t.device().sync().expect("device sync");
    let n: usize = t.dims().iter().product();
    let v: Vec<f32> = t
        .reshape([n])
        .slice([0..1])
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    std::hint::black_box(v);
}

fn conv(dev: &Device, runs: usize) {
    let x = Tensor::<4>::random([8, 32, 32, 32], Distribution::Normal(0.0, 1.0), dev);
    let w = Tensor::<4>::random([32, 32, 3, 3], Distribution::Normal(0.0, 0.05), dev);
    time("conv2d_fwd", runs, || {
        let y = conv2d(
            x.clone(),
            w.clone(),
            None,
            ConvOptions::new([1, 1], [1, 1], [1, 1], 1),
        );
        let v: Vec<f32> = y
            .flatten::<1>(0, 3)
            .slice([0..1])
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        std::hint::black_box(v);
    });
}

#[derive(Module, Debug)]
struct Mlp {
    hidden: Linear,
    relu: Relu,
    out: Linear,
}

fn mlp(dev: &Device, runs: usize) {
    let dev = dev.clone().autodiff();
    let mut model = Mlp {
        hidden: LinearConfig::new(784, 256).init(&dev),
        relu: Relu::new(),
        out: LinearConfig::new(256, 10).init(&dev),
    };
    let x = Tensor::<2>::random([128, 784], Distribution::Normal(0.0, 1.0), &dev);
    let labels: Vec<i32> = (0..128).map(|i| i % 10).collect();
    let y = Tensor::<1, Int>::from_ints(labels.as_slice(), &dev);
    let loss_fn = CrossEntropyLossConfig::new().init(&dev);
    let mut opt = AdamConfig::new().with_epsilon(1e-8).init();
    time("mlp_adam", runs, || {
        let logits = model
            .out
            .forward(model.relu.forward(model.hidden.forward(x.clone())));
        let loss = loss_fn.forward(logits, y.clone());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = opt.step(1e-3, model.clone(), grads);
        settle(loss);
    });
}

fn main() {
    let dev = Device::default();
    let mut args = std::env::args().skip(1);
    let runs: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1);
    let rows: Vec<String> = args.collect();
    let want = |r: &str| rows.is_empty() || rows.iter().any(|a| a == r);
    if want("conv") {
        conv(&dev, runs);
    }
    if want("mlp") {
        mlp(&dev, runs);
    }
}
