//! Quantized matrix-vector and matrix-matrix products (`QTensor::matmul_t`), with the plain f32
//! product through `Tensor::matmul` measured in the same run.
//!
//! - `cpu_matvec/<kind>/<rows>x<cols>`: one activation row (a decode step) against the weight
//!   shapes of a 125 M Llama (hidden 768, intermediate 2048, vocabulary 32,000). `q8_0`,
//!   `q4_0`: the default integer path (activations rounded to Q8 blocks); `q8_0_exact`: the
//!   f32 path (`set_quantized_activations(false)`); `f32`: `x @ W^T` with W dense.
//!   Throughput is in **bytes of weights read** per product, so criterion's GB/s is the
//!   bandwidth the kernel reaches.
//! - `cpu_prefill/<kind>/<m>`: `m` activation rows against 2048x768 (elements = 2·m·rows·cols
//!   flops, so Gelem/s reads as GFLOP/s).
//! - `gpu_matvec/<adapter>/<kind>/<rows>x<cols>`: the same on every adapter, the wait for the
//!   result (a 4-byte-per-row readback) inside the timed region.
//!
//! Run: `cargo bench --bench quant` (filter with e.g. `cargo bench --bench quant -- cpu_matvec`).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::time::Duration;
use wgtensor::{Device, QTensor, QType, Tensor};

const SHAPES: [[usize; 2]; 3] = [[2048, 768], [768, 2048], [32000, 768]];

fn weights(rows: usize, cols: usize, device: &Device) -> Tensor {
    Tensor::randn(&[rows, cols], device).unwrap()
}

fn cpu_matvec(c: &mut Criterion) {
    let mut g = c.benchmark_group("cpu_matvec");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let cpu = Device::cpu();
    for [rows, cols] in SHAPES {
        let w = weights(rows, cols, &cpu);
        let x = Tensor::randn(&[1, cols], &cpu).unwrap();
        let id = format!("{rows}x{cols}");
        for (kind, q, integer) in [
            ("q8_0", QType::Q8_0, true),
            ("q4_0", QType::Q4_0, true),
            ("q8_0_exact", QType::Q8_0, false),
        ] {
            let qt = QTensor::quantize(&w, q).unwrap();
            g.throughput(Throughput::Bytes(qt.size_in_bytes() as u64));
            g.bench_with_input(BenchmarkId::new(kind, &id), &(), |b, _| {
                wgtensor::set_quantized_activations(integer);
                b.iter(|| qt.matmul_t(&x).unwrap());
                wgtensor::set_quantized_activations(true);
            });
        }
        let wt = w.t().unwrap().contiguous().unwrap();
        g.throughput(Throughput::Bytes((rows * cols * 4) as u64));
        g.bench_with_input(BenchmarkId::new("f32", &id), &(), |b, _| {
            b.iter(|| x.matmul(&wt).unwrap())
        });
    }
}

fn cpu_prefill(c: &mut Criterion) {
    let mut g = c.benchmark_group("cpu_prefill");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let cpu = Device::cpu();
    let [rows, cols] = [2048, 768];
    let w = weights(rows, cols, &cpu);
    let wt = w.t().unwrap().contiguous().unwrap();
    for m in [16usize, 128] {
        let x = Tensor::randn(&[m, cols], &cpu).unwrap();
        g.throughput(Throughput::Elements((2 * m * rows * cols) as u64));
        for (kind, q) in [("q8_0", QType::Q8_0), ("q4_0", QType::Q4_0)] {
            let qt = QTensor::quantize(&w, q).unwrap();
            g.bench_with_input(BenchmarkId::new(kind, m), &(), |b, _| {
                b.iter(|| qt.matmul_t(&x).unwrap())
            });
        }
        g.bench_with_input(BenchmarkId::new("f32", m), &(), |b, _| {
            b.iter(|| x.matmul(&wt).unwrap())
        });
    }
}

fn gpu_matvec(c: &mut Criterion) {
    let mut g = c.benchmark_group("gpu_matvec");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    for i in 0..wgtensor::gpu_count() {
        let Ok(device) = Device::gpu(i) else { continue };
        // Software adapters are 50-100x slower: the FFN shape only.
        let [rows, cols] = [2048, 768];
        let w = weights(rows, cols, &Device::cpu());
        let x = Tensor::randn(&[1, cols], &device).unwrap();
        let id = format!("{rows}x{cols}");
        for (kind, q) in [("q8_0", QType::Q8_0), ("q4_0", QType::Q4_0)] {
            let qt = QTensor::quantize(&w, q).unwrap().to(&device).unwrap();
            g.throughput(Throughput::Bytes(qt.size_in_bytes() as u64));
            g.bench_with_input(
                BenchmarkId::new(format!("{device}/{kind}"), &id),
                &(),
                |b, _| b.iter(|| qt.matmul_t(&x).unwrap().to_vec::<f32>().unwrap()),
            );
        }
        let wt = w.t().unwrap().contiguous().unwrap().to(&device).unwrap();
        g.throughput(Throughput::Bytes((rows * cols * 4) as u64));
        g.bench_with_input(
            BenchmarkId::new(format!("{device}/f32"), &id),
            &(),
            |b, _| b.iter(|| x.matmul(&wt).unwrap().to_vec::<f32>().unwrap()),
        );
    }
}

criterion_group!(benches, cpu_matvec, cpu_prefill, gpu_matvec);
criterion_main!(benches);
