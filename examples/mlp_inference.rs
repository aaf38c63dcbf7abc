//! Model placement, PyTorch-style (`model = SimpleNet().to(device)`; `output = model(input)`):
//! build an MLP, save its weights as safetensors, load them onto the best device, run a batch,
//! and print where the parameters and the output live.
//!
//! Run: `cargo run --release --example mlp_inference`
//! (`WGTENSOR_DEVICE=gpu:0` forces a GPU, even a software one.)

use wgtensor::nn::{Linear, Module, ReLU, Sequential};
use wgtensor::{Device, Result, Tensor};

fn mlp(device: &Device) -> Result<Sequential> {
    Ok(Sequential::new()
        .add(Linear::new(10, 32, true, device)?)
        .add(ReLU)
        .add(Linear::new(32, 1, true, device)?))
}

fn main() -> Result<()> {
    wgtensor::manual_seed(0);
    // PyTorch: device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    let (device, why) = Device::best_with_reason();
    println!("device: {device} ({why})");

    // Build on the CPU and save the weights by name.
    let trained = mlp(&Device::cpu())?;
    let path = std::env::temp_dir().join("wgtensor_mlp_inference.safetensors");
    trained.save_weights(&path)?;
    println!(
        "saved {} parameters ({} tensors) to {}",
        trained.num_parameters(),
        trained.named_parameters().len(),
        path.display()
    );

    // A fresh model, weights loaded straight onto the chosen device.
    let mut model = mlp(&Device::cpu())?;
    model.load_weights(&path, &device)?;
    model.eval();
    for (name, p) in model.named_parameters() {
        println!("  {name:<9} {:?} on {}", p.shape(), p.device());
    }

    // input_data = torch.randn(1, 10).to(device); output = model(input_data)
    let input = Tensor::randn(&[4, 10], &Device::cpu())?.to(&device)?;
    let output = model.forward(&input)?;
    println!(
        "Model parameters on: {}",
        model.device().expect("the model has parameters")
    );
    println!(
        "Inference output on: {} shape {:?}",
        output.device(),
        output.shape()
    );
    println!("output: {:?}", output.to_vec::<f32>()?);

    // The same batch on the CPU model agrees (the CPU is the oracle).
    let reference = trained.forward(&input.cpu()?)?.to_vec::<f32>()?;
    let max_diff = output
        .to_vec::<f32>()?
        .iter()
        .zip(&reference)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    println!("max |device - cpu| = {max_diff:e}");
    std::fs::remove_file(&path).ok();
    Ok(())
}
