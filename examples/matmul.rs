//! A 1000×1000 matmul on the best device and on every adapter, timed against the CPU, with the
//! results moved back (`.cpu()`) and compared with the CPU's.
//!
//! Run: `cargo run --release --example matmul`

use std::time::{Duration, Instant};
use wgtensor::{Device, Tensor};

const N: usize = 1000;

/// Runs `a @ b` on `device` (operands moved there first, outside the timing) and returns the
/// result on the CPU with the best time of a few runs, each including the wait for the device.
fn timed(a: &Tensor, b: &Tensor, device: &Device) -> wgtensor::Result<(Tensor, Duration)> {
    let (a, b) = (a.to(device)?, b.to(device)?);
    // The first run compiles the kernel; it is timed too, but rarely the best.
    let mut best = Duration::MAX;
    let mut result = None;
    for _ in 0..3 {
        let start = Instant::now();
        let c = a.matmul(&b)?;
        device.synchronize()?;
        best = best.min(start.elapsed());
        result = Some(c);
    }
    Ok((result.expect("ran at least once").cpu()?, best))
}

fn gflops(t: Duration) -> f64 {
    2.0 * (N as f64).powi(3) / t.as_secs_f64() / 1e9
}

fn max_abs_diff(x: &Tensor, y: &Tensor) -> wgtensor::Result<f32> {
    let (x, y) = (x.to_vec::<f32>()?, y.to_vec::<f32>()?);
    Ok(x.iter()
        .zip(&y)
        .map(|(p, q)| (p - q).abs())
        .fold(0.0, f32::max))
}

fn main() -> wgtensor::Result<()> {
    let cpu = Device::cpu();
    wgtensor::manual_seed(0);
    let a = Tensor::randn(&[N, N], &cpu)?;
    let b = Tensor::randn(&[N, N], &cpu)?;

    let (reference, cpu_time) = timed(&a, &b, &cpu)?;
    println!(
        "cpu      {:>9.2?}  {:>7.1} GFLOP/s  (reference)",
        cpu_time,
        gflops(cpu_time)
    );

    let (best, why) = Device::best_with_reason();
    let mut devices = vec![(format!("best = {best}"), best.clone())];
    for i in 0..wgtensor::gpu_count() {
        let d = Device::gpu(i)?;
        devices.push((format!("{d} ({})", d.name()), d));
    }
    println!("Device::best() = {best}: {why}");
    for (label, device) in devices {
        let (c, t) = timed(&a, &b, &device)?;
        println!(
            "{label}\n         {:>9.2?}  {:>7.1} GFLOP/s  {:>6.2}× the CPU time, max |diff| vs CPU = {:e}",
            t,
            gflops(t),
            t.as_secs_f64() / cpu_time.as_secs_f64(),
            max_abs_diff(&c, &reference)?
        );
    }
    Ok(())
}
