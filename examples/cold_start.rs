//! Cold start: the time from process start to the first 128x128 matmul result on the best
//! device (a GPU when one is present: `WGTENSOR_DEVICE=gpu:0` forces the software adapter).
//!
//! ```text
//! WGTENSOR_CACHE_DIR=$(mktemp -d) cargo run --release --example cold_start   # empty cache
//! cargo run --release --example cold_start                                   # warm cache
//! ```
//!
//! Prints `first 128x128 matmul: X ms after process start (...)`, the part spent opening the
//! device, and the autotune report. The time of exec and of the Rust runtime before `main` is
//! not counted (a few ms); measure with `time` for the whole.

use std::time::Instant;
use wgtensor::{Device, Result, Tensor};

fn main() -> Result<()> {
    let start = Instant::now();
    let device = Device::best();
    let opened = start.elapsed();
    let a = Tensor::ones(&[128, 128], wgtensor::DType::F32, &device)?;
    let c = a.matmul(&a)?.to_vec::<f32>()?;
    let first = start.elapsed();
    assert_eq!(c[0], 128.0);
    println!(
        "first 128x128 matmul: {:.1} ms after process start (device {device} opened in {:.1} ms)",
        first.as_secs_f64() * 1e3,
        opened.as_secs_f64() * 1e3
    );
    // The second call of a shape class is where tuning happens when nothing is cached.
    let t = Instant::now();
    a.matmul(&a)?.to_vec::<f32>()?;
    println!(
        "second 128x128 matmul (tunes on an empty cache): {:.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let report = wgtensor::autotune_report(&device);
    println!("autotune searches in this process: {}", report.searches);
    for e in report.entries {
        println!("  {}/{}: {} ({})", e.family, e.class, e.variant, e.source);
    }
    Ok(())
}
