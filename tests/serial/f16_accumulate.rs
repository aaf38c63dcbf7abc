//! Opt-in f16 accumulation of f16 matrix products (`set_f16_accumulation`): on every adapter
//! with `SHADER_F16`, every kernel that reads f16 (each forced in turn) is checked against the
//! CPU's f32-accumulated product with an f16-accumulation tolerance, on edge shapes; a sum that
//! f16 cannot hold shows that f16 accumulation really ran; NaN propagates; turning it off
//! restores f32 accumulation. In the `serial` binary (one test at a time): the setting is process-wide.

use crate::common;

use common::{data, gpus};
use wgtensor::{set_f16_accumulation, DType, Device, Tensor};

/// An f16 tensor of `shape` with values in [-scale, scale), on `dev`.
fn half(shape: &[usize], seed: u64, scale: f32, dev: &Device) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_vec(data(n, seed, scale), shape, &Device::cpu())
        .and_then(|t| t.to_dtype(DType::F16))
        .and_then(|t| t.to(dev))
        .unwrap()
}

fn f32s(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap()
}

/// `a @ b` on `kernel` against the CPU (f32 accumulation): each output within
/// `2 K 2^-11 Σ_k |a_ik b_kj|` plus half an f16 ulp of the result.
fn check(a: &Tensor, b: &Tensor, kernel: &str, ctx: &str) {
    let got = a.matmul_with_kernel(b, kernel).unwrap();
    assert_eq!(got.dtype(), DType::F16, "{ctx}");
    let cpu = Device::cpu();
    let (ca, cb) = (a.to(&cpu).unwrap(), b.to(&cpu).unwrap());
    let want = f32s(&ca.matmul(&cb).unwrap());
    let bound = f32s(&ca.abs().unwrap().matmul(&cb.abs().unwrap()).unwrap());
    let k = a.shape()[a.ndim() - 1] as f32;
    let got = f32s(&got);
    assert_eq!(got.len(), want.len(), "{ctx}");
    for (i, ((g, w), s)) in got.iter().zip(&want).zip(&bound).enumerate() {
        let tol = 2.0 * k * 2f32.powi(-11) * s + w.abs() * 2f32.powi(-11) + 1e-6;
        assert!(
            (g - w).abs() <= tol,
            "{ctx}: output {i}: {g} vs {w} (tolerance {tol})"
        );
    }
}

#[test]
fn f16_accumulation_matches_the_cpu_where_the_adapter_runs_f16() {
    let _serial = common::serial();
    // On the CPU the setting changes nothing: f32 accumulation, rounded once.
    let cpu = Device::cpu();
    set_f16_accumulation(true);
    let ones_a = Tensor::ones(&[1, 3000], DType::F16, &cpu).unwrap();
    let ones_b = Tensor::ones(&[3000, 1], DType::F16, &cpu).unwrap();
    assert_eq!(f32s(&ones_a.matmul(&ones_b).unwrap()), vec![3000.0]);
    let mut ran = 0;
    for dev in gpus() {
        if !wgtensor::testing::native_f16(&dev) {
            eprintln!("{dev}: no SHADER_F16, f16 accumulation not offered (f32 accumulation)");
            set_f16_accumulation(true);
            let (a, b) = (ones_a.to(&dev).unwrap(), ones_b.to(&dev).unwrap());
            assert_eq!(f32s(&a.matmul(&b).unwrap()), vec![3000.0], "{dev}");
            continue;
        }
        ran += 1;
        // Kernels reading f16 in place: all but the vec4 ones (f32 operands only).
        let kernels: Vec<&str> = Tensor::matmul_kernels()
            .into_iter()
            .filter(|k| !k.starts_with("register_vec4"))
            .collect();
        let (a, b) = (ones_a.to(&dev).unwrap(), ones_b.to(&dev).unwrap());
        set_f16_accumulation(true);
        for &kernel in &kernels {
            // 3000 ones: an f16 running sum stops at 2048 (2048 + 1 rounds to even, 2048);
            // f32 accumulation gives 3000, which f16 holds. Split-K gives way to a kernel
            // without it.
            // gemv_t spreads K over 256 partial sums (32 invocations x 8 lanes) of at most 12
            // ones each, added in a tree: exact in f16, so 3000.
            let c = a.matmul_with_kernel(&b, kernel).unwrap();
            let want = if kernel == "gemv_t" { 3000.0 } else { 2048.0 };
            assert_eq!(f32s(&c), vec![want], "{dev} {kernel}: f16 accumulation ran");
            // K past one 16,384 chunk and 65,535 (chunks add into the f16 output): a sparse
            // row of ones sums exactly.
            let k = 70_001;
            let mut row = vec![0f32; k];
            for i in (0..k).step_by(997) {
                row[i] = 1.0;
            }
            let want = row.iter().sum::<f32>();
            let lhs = Tensor::from_vec(row, &[1, k], &cpu)
                .and_then(|t| t.to_dtype(DType::F16))
                .and_then(|t| t.to(&dev))
                .unwrap();
            let rhs = Tensor::ones(&[k, 3], DType::F16, &dev).unwrap();
            assert_eq!(
                f32s(&lhs.matmul_with_kernel(&rhs, kernel).unwrap()),
                vec![want; 3],
                "{dev} {kernel}: K = {k}"
            );
            for (m, kk, n) in [
                (1, 1, 1),
                (63, 17, 65),
                (64, 64, 64),
                (65, 33, 63),
                (7, 300, 5),
            ] {
                let ctx = format!("{dev} {kernel} [{m}, {kk}] @ [{kk}, {n}]");
                let x = half(&[m, kk], 1, 1.0, &dev);
                let y = half(&[kk, n], 2, 1.0, &dev);
                check(&x, &y, kernel, &ctx);
                // Transposed views, read in place.
                let xt = half(&[kk, m], 3, 1.0, &dev).t().unwrap();
                let yt = half(&[n, kk], 4, 1.0, &dev).t().unwrap();
                check(&xt, &yt, kernel, &format!("{ctx}, transposed"));
            }
            // Batched with a broadcast batch dim.
            let x = half(&[2, 1, 5, 7], 5, 1.0, &dev);
            let y = half(&[3, 7, 4], 6, 1.0, &dev);
            check(&x, &y, kernel, &format!("{dev} {kernel} batched"));
            // NaN in row 1 of A: row 1 of the product is NaN, the others are not.
            let mut v = data(3 * 8, 7, 1.0);
            v[8 + 2] = f32::NAN;
            let x = Tensor::from_vec(v, &[3, 8], &cpu)
                .and_then(|t| t.to_dtype(DType::F16))
                .and_then(|t| t.to(&dev))
                .unwrap();
            let y = half(&[8, 2], 8, 1.0, &dev);
            let c = f32s(&x.matmul_with_kernel(&y, kernel).unwrap());
            assert!(c[2].is_nan() && c[3].is_nan(), "{dev} {kernel}: {c:?}");
            assert!(
                c[0].is_finite() && c[5].is_finite(),
                "{dev} {kernel}: {c:?}"
            );
        }
        // The adapter's own choice takes the f16 path too; off again, f32 accumulation.
        assert_eq!(f32s(&a.matmul(&b).unwrap()), vec![2048.0], "{dev}");
        set_f16_accumulation(false);
        assert_eq!(f32s(&a.matmul(&b).unwrap()), vec![3000.0], "{dev}");
    }
    set_f16_accumulation(false);
    eprintln!("f16 accumulation checked on {ran} adapter(s) with SHADER_F16");
}
