//! Matmul throughput, peers measured in the same run (machines here swing up to 2× between
//! runs, so only same-run ratios mean anything).
//!
//! - `cpu_matmul/{wgtensor,gemm,matrixmultiply}/N`: N×N×N f32 products on the CPU. wgtensor
//!   includes allocating its output tensor; the peers write into a preallocated buffer.
//! - `gpu_matmul/<adapter>/<kernel>/N`: every GPU kernel variant on every adapter (hardware or
//!   software), `auto=<kernel>` being the one `Tensor::matmul` picks; `f16_f32_acc` and
//!   `f16_f16_acc` at 512: f16 operands accumulated in f32 (the default) or in f16
//!   (`set_f16_accumulation`, adapters with `SHADER_F16`). The wait for the GPU is
//!   inside the timed region; operands are uploaded once, outside it.
//!
//! Throughput is reported in elements = floating-point operations (2·N³ per product), so
//! criterion's `Gelem/s` reads as GFLOP/s.
//!
//! Run: `cargo bench --bench matmul` (filter with e.g. `cargo bench --bench matmul -- cpu_`).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::time::Duration;
use wgtensor::{Device, Tensor};

/// Deterministic operands in [-1, 1).
fn operand(n: usize, seed: u32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 8) as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect()
}

fn cpu(c: &mut Criterion) {
    let mut g = c.benchmark_group("cpu_matmul");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let cpu = Device::cpu();
    for n in [256usize, 512, 1024, 2048] {
        let (a, b) = (operand(n * n, 1), operand(n * n, 2));
        let mut out = vec![0f32; n * n];
        g.throughput(Throughput::Elements(2 * (n as u64).pow(3)));
        let ta = Tensor::from_vec(a.clone(), &[n, n], &cpu).unwrap();
        let tb = Tensor::from_vec(b.clone(), &[n, n], &cpu).unwrap();
        g.bench_with_input(BenchmarkId::new("wgtensor", n), &n, |bch, _| {
            bch.iter(|| ta.matmul(&tb).unwrap())
        });
        g.bench_with_input(BenchmarkId::new("gemm", n), &n, |bch, &n| {
            // SAFETY: all three buffers hold n×n elements, addressed row-major.
            bch.iter(|| unsafe {
                gemm::gemm(
                    n,
                    n,
                    n,
                    out.as_mut_ptr(),
                    1,
                    n as isize,
                    false,
                    a.as_ptr(),
                    1,
                    n as isize,
                    b.as_ptr(),
                    1,
                    n as isize,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    gemm::Parallelism::Rayon(0),
                )
            })
        });
        g.bench_with_input(BenchmarkId::new("matrixmultiply", n), &n, |bch, &n| {
            // SAFETY: as above.
            bch.iter(|| unsafe {
                matrixmultiply::sgemm(
                    n,
                    n,
                    n,
                    1.0,
                    a.as_ptr(),
                    n as isize,
                    1,
                    b.as_ptr(),
                    n as isize,
                    1,
                    0.0,
                    out.as_mut_ptr(),
                    n as isize,
                    1,
                )
            })
        });
    }
    g.finish();
}

fn gpu(c: &mut Criterion) {
    let adapters = wgtensor::adapters();
    if adapters.is_empty() {
        eprintln!("gpu_matmul: no GPU adapter found; GPU benchmarks skipped");
        return;
    }
    let mut g = c.benchmark_group("gpu_matmul");
    // Software adapters take up to a second per 512³ product with the naive kernel.
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_secs(1));
    for info in adapters {
        let name = &info.names[0];
        let device: Device = match name.parse() {
            Ok(d) => d,
            Err(e) => {
                eprintln!("gpu_matmul: {name} does not open ({e}); skipped");
                continue;
            }
        };
        eprintln!("gpu_matmul: {name} = {} ({})", info.name, info.device_type);
        for n in [256usize, 512, 1024] {
            let ta = Tensor::from_vec(operand(n * n, 1), &[n, n], &device).unwrap();
            let tb = Tensor::from_vec(operand(n * n, 2), &[n, n], &device).unwrap();
            g.throughput(Throughput::Elements(2 * (n as u64).pow(3)));
            let auto = format!("auto={}", ta.matmul_kernel_choice(&tb).unwrap());
            let mut run = |label: &str, kernel: Option<&str>| {
                let id = BenchmarkId::new(format!("{name}/{label}"), n);
                g.bench_with_input(id, &n, |bch, _| {
                    bch.iter(|| {
                        let c = match kernel {
                            Some(k) => ta.matmul_with_kernel(&tb, k).unwrap(),
                            None => ta.matmul(&tb).unwrap(),
                        };
                        device.synchronize().unwrap();
                        c
                    })
                });
            };
            for kernel in Tensor::matmul_kernels() {
                // The naive kernel takes seconds per 1024³ product on a software adapter.
                if n > 512 && kernel == "naive" {
                    continue;
                }
                run(kernel, Some(kernel));
            }
            // The tuned choice: the first call of the class runs the heuristic, the second
            // tunes (when the cache has no entry), later calls use the winner.
            run(&auto, None);
        }
        // f16 operands at 512: f32 accumulation (the default) next to the opt-in f16
        // accumulation, on adapters with SHADER_F16.
        if info.shader_f16 {
            let n = 512usize;
            let half = |seed| {
                Tensor::from_vec(operand(n * n, seed), &[n, n], &device)
                    .and_then(|t| t.to_dtype(wgtensor::DType::F16))
                    .unwrap()
            };
            let (ha, hb) = (half(5), half(6));
            g.throughput(Throughput::Elements(2 * (n as u64).pow(3)));
            for (label, acc16) in [("f16_f32_acc", false), ("f16_f16_acc", true)] {
                let id = BenchmarkId::new(format!("{name}/{label}"), n);
                g.bench_with_input(id, &n, |bch, _| {
                    wgtensor::set_f16_accumulation(acc16);
                    bch.iter(|| {
                        let c = ha.matmul(&hb).unwrap();
                        device.synchronize().unwrap();
                        c
                    })
                });
            }
            wgtensor::set_f16_accumulation(false);
        }
        // A GEMV, [1, 2048] @ [2048, 2048]: the heuristic's pick next to the GEMV kernel.
        let v = Tensor::from_vec(operand(2048, 3), &[1, 2048], &device).unwrap();
        let m = Tensor::from_vec(operand(2048 * 2048, 4), &[2048, 2048], &device).unwrap();
        g.throughput(Throughput::Elements(2 * 2048 * 2048));
        for kernel in ["register_vec4", "gemv_m1"] {
            let id = BenchmarkId::new(format!("{name}/gemv_1x2048x2048/{kernel}"), 2048);
            g.bench_with_input(id, &2048, |bch, _| {
                bch.iter(|| {
                    let c = v.matmul_with_kernel(&m, kernel).unwrap();
                    device.synchronize().unwrap();
                    c
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, cpu, gpu);
criterion_main!(benches);
