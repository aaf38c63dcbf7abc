//! A training step stays on the device: with the batch already there, one step of (a) the
//! 784-256-10 MLP, (b) an Embedding + Linear + Dropout + cross_entropy model, (c) a CNN (Conv2d,
//! BatchNorm2d, MaxPool2d) and (d) a causal TransformerBlock makes no upload and no download
//! until the loss is read, and then exactly one download (convolution's index maps and the
//! attention masks are made or cached on the device by the first step). One test in its own
//! binary, so no other test's transfers on the shared device are counted.

use crate::common;

use wgtensor::nn::{
    self, BatchNorm2d, Conv2d, Dropout, Embedding, Flatten, Linear, MaxPool2d, Module, ReLU,
    Sequential, TransformerBlock,
};
use wgtensor::optim::{Adam, Optimizer};
use wgtensor::{
    kernel_stats, manual_seed, reset_kernel_stats, transfer_stats, Device, Result, Tensor,
};

/// One Adam step of `model` on `(x, y)`; the loss tensor, not read.
fn step(model: &mut Sequential, opt: &mut Adam, x: &Tensor, y: &Tensor) -> Result<Tensor> {
    opt.zero_grad(model);
    let loss = nn::cross_entropy(&model.forward(x)?, y)?;
    loss.backward()?;
    opt.step(model)?;
    Ok(loss)
}

/// Runs `steps` steps; checks that the last one crosses the host only when its loss is read.
fn assert_resident(
    device: &Device,
    what: &str,
    model: &mut Sequential,
    x: &Tensor,
    y: &Tensor,
) -> Result<f32> {
    let mut opt = Adam::new(1e-3);
    // A first step compiles the kernels and creates the optimizer state.
    let first = step(model, &mut opt, x, y)?.to_scalar::<f32>()?;
    assert!(first.is_finite(), "{device} {what}: first loss {first}");
    let before = transfer_stats(device);
    reset_kernel_stats(device);
    let loss = step(model, &mut opt, x, y)?;
    let during = transfer_stats(device);
    assert_eq!(
        during.uploads, before.uploads,
        "{device} {what}: uploads in a step"
    );
    assert_eq!(
        during.downloads, before.downloads,
        "{device} {what}: downloads in a step"
    );
    let value = loss.to_scalar::<f32>()?;
    let after = transfer_stats(device);
    // The CPU has no transfers to count.
    let read = u64::from(device.is_gpu());
    assert_eq!(
        after.downloads,
        before.downloads + read,
        "{device} {what}: reading the loss"
    );
    assert_eq!(
        after.uploads, before.uploads,
        "{device} {what}: uploads reading the loss"
    );
    assert!(value.is_finite(), "{device} {what}: {first} then {value}");
    if device.is_gpu() {
        let k = kernel_stats(device);
        // Recorded for the closing note: dispatches per step (target < 40 for the MLP).
        eprintln!(
            "{device} {what}: {} dispatches, {} submits per step",
            k.dispatches, k.submits
        );
    }
    Ok(value)
}

#[test]
fn a_training_step_crosses_the_host_only_to_read_the_loss() -> Result<()> {
    let _serial = common::serial();
    for device in common::devices() {
        manual_seed(7);
        // (a) The 784-256-10 MLP, batch 128, generated on the device (no upload).
        let mut mlp = Sequential::new()
            .add(Linear::new(784, 256, true, &device)?)
            .add(ReLU)
            .add(Linear::new(256, 10, true, &device)?);
        let x = Tensor::rand(&[128, 784], &device)?;
        let y = Tensor::randint(0, 10, &[128], &device)?;
        assert_resident(&device, "mlp", &mut mlp, &x, &y)?;

        // (b) Embedding + Linear + Dropout + cross_entropy over a 50-token vocabulary.
        let mut lm = Sequential::new()
            .add(Embedding::new(50, 16, &device)?)
            .add(Dropout::new(0.1)?)
            .add(Linear::new(16, 50, true, &device)?);
        let ids = Tensor::randint(0, 50, &[64], &device)?;
        let next = Tensor::randint(0, 50, &[64], &device)?;
        assert_resident(&device, "embedding", &mut lm, &ids, &next)?;

        // (c) A small CNN on 8x8 images.
        let same = wgtensor::Conv2dOptions::default().padding(1);
        let mut cnn = Sequential::new()
            .add(Conv2d::new(1, 4, [3, 3], same, true, &device)?)
            .add(BatchNorm2d::new(4, &device)?)
            .add(ReLU)
            .add(MaxPool2d::new([2, 2]))
            .add(Flatten::default())
            .add(Linear::new(4 * 4 * 4, 10, true, &device)?);
        let img = Tensor::rand(&[16, 1, 8, 8], &device)?;
        let label = Tensor::randint(0, 10, &[16], &device)?;
        assert_resident(&device, "cnn", &mut cnn, &img, &label)?;

        // (d) A causal transformer block over 6 positions of width 8.
        let mut gpt = Sequential::new()
            .add(TransformerBlock::new(8, 2, 16, true, 0.1, &device)?)
            .add(Flatten::default())
            .add(Linear::new(6 * 8, 5, true, &device)?);
        let seq = Tensor::randn(&[4, 6, 8], &device)?;
        let cls = Tensor::randint(0, 5, &[4], &device)?;
        assert_resident(&device, "transformer", &mut gpt, &seq, &cls)?;
    }
    Ok(())
}
