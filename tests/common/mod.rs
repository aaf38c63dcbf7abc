//! The shared test harness: one test body runs on the CPU and on every GPU adapter found, and
//! GPU results are compared with the CPU (the oracle) at an explicit tolerance.
#![allow(dead_code)]

use std::sync::Once;
use wgtensor::{Device, Tensor};

/// The CPU plus every `gpu:N`. Without an adapter the GPU part is skipped loudly; with
/// `WGTENSOR_REQUIRE_GPU=1` that skip is a failure (CI sets it).
pub fn devices() -> Vec<Device> {
    let mut out = vec![Device::cpu()];
    out.extend(gpus());
    out
}

/// Every `gpu:N`, opened; see [`devices`] for the skip policy.
pub fn gpus() -> Vec<Device> {
    static REPORT: Once = Once::new();
    let n = wgtensor::gpu_count();
    let require = std::env::var("WGTENSOR_REQUIRE_GPU").is_ok_and(|v| v == "1");
    if n == 0 {
        assert!(
            !require,
            "WGTENSOR_REQUIRE_GPU=1 but no GPU adapter was found: GPU tests would be skipped"
        );
        REPORT.call_once(|| {
            eprintln!("wgtensor tests: no GPU adapter found; GPU variants SKIPPED (CPU only)")
        });
        return Vec::new();
    }
    let gpus: Vec<Device> = (0..n)
        .map(|i| {
            Device::gpu(i).unwrap_or_else(|e| panic!("gpu:{i} is listed but does not open: {e}"))
        })
        .collect();
    REPORT.call_once(|| {
        for d in &gpus {
            eprintln!("wgtensor tests: running GPU variants on {d} = {}", d.name());
        }
    });
    gpus
}

/// Asserts `actual ≈ expected` elementwise: `|a - e| <= atol + rtol * |e|`; NaN matches only NaN,
/// infinities match only the same infinity. Prints the first mismatch with both values.
pub fn assert_close(actual: &[f32], expected: &[f32], rtol: f32, atol: f32, ctx: &str) {
    assert_eq!(actual.len(), expected.len(), "{ctx}: lengths differ");
    for (i, (&a, &e)) in actual.iter().zip(expected).enumerate() {
        let ok = if e.is_nan() {
            a.is_nan()
        } else if e.is_infinite() {
            a == e
        } else {
            a.is_finite() && (a - e).abs() <= atol + rtol * e.abs()
        };
        assert!(
            ok,
            "{ctx}: first mismatch at index {i}: got {a}, expected {e} (rtol {rtol}, atol {atol})"
        );
    }
}

/// Reads an f32 tensor back.
pub fn values(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().expect("readback")
}

/// Deterministic pseudo-random f32 in [-scale, scale) (no global RNG state, so tests can run in
/// parallel and still be reproducible).
pub fn data(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// The GL views of the adapters (`gl:N`): separate wgpu devices whose shaders go through another
/// compiler. Skipped loudly when there are none.
pub fn gl_views() -> Vec<Device> {
    let gl: Vec<Device> = wgtensor::adapters()
        .iter()
        .filter_map(|a| {
            a.names
                .first()
                .filter(|n| n.starts_with("gl:"))?
                .parse()
                .ok()
        })
        .collect();
    if gl.is_empty() {
        eprintln!("wgtensor tests: no GL adapter view; GL variants SKIPPED");
    }
    gl
}
