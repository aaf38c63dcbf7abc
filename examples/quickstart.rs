//! The PyTorch device tutorial, in wgtensor.
//!
//! Chooses a device, creates tensors on the CPU and directly on the device, moves them with
//! `.to()` / `.cpu()`, shows the device-mismatch error, runs a chain of elementwise ops where the
//! data lives, brings the result back, and reports time spent moving data versus computing.
//!
//! Run: `cargo run --release --example quickstart`
//! Force a device: `WGTENSOR_DEVICE=gpu:0 cargo run --release --example quickstart`

use std::time::{Duration, Instant};
use wgtensor::{DType, Device, Result, Tensor};

fn main() -> Result<()> {
    quiet_mesa_on_headless_machines();
    // 1. Choose the device. PyTorch: `device = "cuda" if torch.cuda.is_available() else "cpu"`.
    //    wgtensor's `best()` also skips software adapters (slower than the native CPU path) and
    //    honours WGTENSOR_DEVICE; it says why it chose what it chose. Asked for the CPU, the
    //    example does not look for GPUs at all.
    let cpu_asked = std::env::var("WGTENSOR_DEVICE").is_ok_and(|v| v.trim() == "cpu");
    if !cpu_asked {
        println!(
            "GPUs visible: {} (gpu_is_available = {})",
            wgtensor::gpu_count(),
            wgtensor::gpu_is_available()
        );
        for a in wgtensor::adapters() {
            println!(
                "  {:<10} {} [{}, {}]",
                a.names[0], a.name, a.backend, a.device_type
            );
        }
    }
    let (device, why) = Device::best_with_reason();
    println!("Using device: {device} ({})", device.name());
    println!("  because: {why}\n");

    // 2. Tensors are created on the CPU by default; `Device` picks another home.
    let cpu_tensor = Tensor::from_vec(vec![1f32, 2.0, 3.0], &[3], &Device::cpu())?;
    println!("Default tensor device: {}", cpu_tensor.device());
    let device_tensor = Tensor::randn(&[3, 4], &device)?; // torch.randn(3, 4, device=device)
    println!("Tensor created on: {}", device_tensor.device());

    // 3. `.to()` returns a new tensor; the original stays where it was (the tutorial's pitfall).
    let ones = Tensor::ones(&[2, 2], DType::F32, &Device::cpu())?;
    let moved = ones.to(&device)?;
    println!(
        "Original tensor: {}; moved tensor: {}",
        ones.device(),
        moved.device()
    );
    let back = moved.cpu()?;
    println!("Tensor moved back to: {}\n{back}\n", back.device());

    // 4. Ops never move data silently: mixing devices is an error that says how to fix it.
    if device.is_gpu() {
        let cpu_a = Tensor::randn(&[2, 2], &Device::cpu())?;
        let gpu_b = Tensor::randn(&[2, 2], &device)?;
        match &cpu_a + &gpu_b {
            Err(e) => println!("Error performing operation on different devices: {e}\n"),
            Ok(_) => unreachable!("mixed devices must not compute"),
        }
    } else {
        let shapes = Tensor::ones(&[3, 1], DType::F32, &device)?.add(&Tensor::ones(
            &[2, 2],
            DType::F32,
            &device,
        )?);
        if let Err(e) = shapes {
            println!(
                "(No GPU in use, so no device mismatch to show; a shape mismatch instead:)\n{e}\n"
            );
        }
    }

    // 5. A chain of elementwise ops on the device, timed separately from the transfers.
    let n = 1 << 20;
    let host: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 / 1000.0 - 0.5).collect();
    let mut transfer = Duration::ZERO;
    let mut compute = Duration::ZERO;

    let t0 = Instant::now();
    let x = Tensor::from_vec(host.clone(), &[1024, 1024], &device)?;
    let bias = Tensor::from_vec(vec![0.25f32; 1024], &[1024], &device)?;
    device.synchronize()?;
    transfer += t0.elapsed();

    let t0 = Instant::now();
    // y = gelu(x * 2 + bias) - sigmoid(x) * tanh(x), bias broadcast over rows.
    let y = (&(&x * 2.0)? + &bias)?.gelu()?;
    let y = (&y - &(&x.sigmoid()? * &x.tanh()?)?)?;
    let y = y.exp()?.log()?.maximum_scalar(-1.0)?;
    device.synchronize()?;
    compute += t0.elapsed();

    let t0 = Instant::now();
    let result = y.to_vec::<f32>()?;
    transfer += t0.elapsed();

    // 6. Check against plain Rust on the host.
    let max_err = host
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let b = 0.25f32;
            let g = gelu(v * 2.0 + b) - sigmoid(v) * v.tanh();
            let want = g.exp().ln().max(-1.0);
            (want - result[i]).abs()
        })
        .fold(0f32, f32::max);
    println!("Chain of 9 elementwise ops on {} elements ({device}): max |error| vs plain Rust = {max_err:.2e}", n);
    println!(
        "Result (first row, moved back): {}",
        y.narrow(0, 0, 1)?.cpu()?
    );
    println!(
        "Time moving data: {:.2} ms; time computing: {:.2} ms",
        transfer.as_secs_f64() * 1e3,
        compute.as_secs_f64() * 1e3
    );
    if device.is_gpu() {
        println!(
            "(Keep data on the device between ops: every transfer costs as much as many ops.)"
        );
    }
    assert!(max_err < 1e-3, "device result disagrees with the host");
    Ok(())
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// Exact GELU via an erf approximation (|error| < 1.5e-7).
fn gelu(x: f32) -> f32 {
    let z = x / std::f32::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.3275911 * z.abs());
    let poly = t
        * (0.254_829_6
            + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152_1 + t * 1.061_405_4))));
    let erf = z.signum() * (1.0 - poly * (-z * z).exp());
    0.5 * x * (1.0 + erf)
}

/// Mesa's Vulkan device-select layer prints "XDG_RUNTIME_DIR is invalid or not set" on machines
/// without a login session (CI, containers); `NODEVICE_SELECT=1` turns that layer off. An
/// application may set it for itself before any thread starts; wgtensor, a library, never
/// changes its host's environment.
fn quiet_mesa_on_headless_machines() {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none()
        && std::env::var_os("NODEVICE_SELECT").is_none()
    {
        // SAFETY: first statement of `main`, before any other thread exists.
        unsafe { std::env::set_var("NODEVICE_SELECT", "1") };
    }
}
