//! Quantized matrix-vector and matrix-matrix products (`QTensor::matmul_t`), with the plain f32
//! product through `Tensor::matmul` measured in the same run.
//!
//! - `cpu_matvec/<kind>/<rows>x<cols>`: one activation row (a decode step) against the weight
//!   shapes of a 125 M Llama (hidden 768, intermediate 2048, vocabulary 32,000). `q8_0`,
//!   `q4_0`, `q4_k`, `q6_k`: the default integer path (activations rounded to Q8 blocks); `q8_0_exact`: the
//!   f32 path (`set_quantized_activations(false)`); `f32`: `x @ W^T` with W dense.
//!   Throughput is in **bytes of weights read** per product, so criterion's GB/s is the
//!   bandwidth the kernel reaches.
//! - `cpu_prefill/<kind>/<m>`: `m` activation rows against 2048x768 (elements = 2·m·rows·cols
//!   flops, so Gelem/s reads as GFLOP/s).
//! - `cpu_decode_weights/<kind>`: every matrix-vector product of one decode step of that
//!   Llama (12 layers of q, k, v, o, gate, up, down, and the 32,000-row output head: 100 M
//!   weights), in bytes of weights read: the ceiling the matmuls put on decode tok/s.
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

/// `w` quantized to `q`; the K-quants (which `QTensor::quantize` does not make) as random
/// blocks of the same shape with a fixed f16 scale, as `device_report` makes them.
fn quantized(w: &Tensor, q: QType, rows: usize, cols: usize) -> QTensor {
    if matches!(q, QType::Q8_0 | QType::Q4_0) {
        return QTensor::quantize(w, q).unwrap();
    }
    let bb = q.block_bytes();
    let mut s = 0x2545_f491_4f6c_dd1d_u64;
    let mut bytes: Vec<u8> = (0..rows * cols / q.block_len() * bb)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as u8
        })
        .collect();
    // Where each format keeps its f16 scales (d, and dmin for Q4_K).
    let offsets: &[usize] = if q == QType::Q4_K { &[0, 2] } else { &[208] };
    let scale = wgtensor::f16::from_f32(0.004).to_le_bytes();
    for blk in bytes.chunks_mut(bb) {
        for &o in offsets {
            blk[o..o + 2].copy_from_slice(&scale);
        }
    }
    QTensor::from_ggml(q, [rows, cols], &bytes, &Device::cpu()).unwrap()
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
            ("q4_k", QType::Q4_K, true),
            ("q6_k", QType::Q6_K, true),
            ("q8_0_exact", QType::Q8_0, false),
        ] {
            let qt = quantized(&w, q, rows, cols);
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

/// The weight shapes of one decode step of the 125 M Llama, with their repeat counts.
const LLAMA_125M: [([usize; 2], usize); 5] = [
    ([768, 768], 24),  // q and o
    ([256, 768], 24),  // k and v (4 of 12 heads)
    ([2048, 768], 24), // gate and up
    ([768, 2048], 12), // down
    ([32000, 768], 1), // output head
];

fn cpu_decode_weights(c: &mut Criterion) {
    let mut g = c.benchmark_group("cpu_decode_weights");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(4));
    let cpu = Device::cpu();
    // One matrix per shape and repeat, as a model holds them (no cache reuse across layers).
    let dense: Vec<Tensor> = LLAMA_125M
        .iter()
        .flat_map(|&([r, c], n)| (0..n).map(move |_| (r, c)))
        .map(|(r, c)| weights(r, c, &cpu))
        .collect();
    let xs: Vec<Tensor> = dense
        .iter()
        .map(|w| Tensor::randn(&[1, w.shape()[1]], &cpu).unwrap())
        .collect();
    for (kind, q) in [("q8_0", QType::Q8_0), ("q4_0", QType::Q4_0)] {
        let qs: Vec<QTensor> = dense
            .iter()
            .map(|w| QTensor::quantize(w, q).unwrap())
            .collect();
        let bytes: usize = qs.iter().map(QTensor::size_in_bytes).sum();
        g.throughput(Throughput::Bytes(bytes as u64));
        g.bench_function(kind, |b| {
            b.iter(|| {
                for (w, x) in qs.iter().zip(&xs) {
                    w.matmul_t(x).unwrap();
                }
            })
        });
    }
    let wts: Vec<Tensor> = dense
        .iter()
        .map(|w| w.t().unwrap().contiguous().unwrap())
        .collect();
    drop(dense);
    let bytes: usize = wts.iter().map(|w| w.numel() * 4).sum();
    g.throughput(Throughput::Bytes(bytes as u64));
    g.bench_function("f32", |b| {
        b.iter(|| {
            for (w, x) in wts.iter().zip(&xs) {
                x.matmul(w).unwrap();
            }
        })
    });
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

criterion_group!(
    benches,
    cpu_matvec,
    cpu_decode_weights,
    cpu_prefill,
    gpu_matvec
);
criterion_main!(benches);
