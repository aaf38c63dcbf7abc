//! Row kernels: softmax over 1024 x 1024 rows on the CPU and on every GPU adapter, each next to
//! a peer measured in the same run, and softmax / layer_norm over rows of 768 and 4096.
//!
//! Peers. CPU: a plain scalar Rust loop (max, `f32::exp`, sum, divide, one output row at a time)
//! and wgtensor's strided path (the same rows read through a transposed view: the generic fold
//! the contiguous path replaced). GPU: softmax composed of generic ops (`max`, fused
//! `sub`/`exp`, `sum`, `div`: the multi-dispatch shape the single row kernel replaces).
//! Throughput: bytes read + written (8 per element). GPU timings wait for the device
//! (`Device::synchronize`), readback excluded.
//!
//! `cargo bench --bench rows` (add `-- --quick` for a faster, noisier run).

use criterion::{criterion_group, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;
use wgtensor::{Device, Tensor};

fn data(n: usize) -> Vec<f32> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 22) as f32 - 2.0
        })
        .collect()
}

/// The CPU peer: the straightforward scalar loop.
fn plain_softmax(x: &[f32], len: usize, out: &mut [f32]) {
    for (o, r) in out.chunks_mut(len).zip(x.chunks(len)) {
        let m = r.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut s = 0.0;
        for (o, &v) in o.iter_mut().zip(r) {
            *o = (v - m).exp();
            s += *o;
        }
        for o in o.iter_mut() {
            *o /= s;
        }
    }
}

fn composed_softmax(t: &Tensor) -> Tensor {
    let m = t.max(-1, true).unwrap();
    let e = t.sub(&m).unwrap().exp().unwrap();
    e.div(&e.sum(-1, true).unwrap()).unwrap()
}

fn adapters() -> Vec<Device> {
    wgtensor::adapters()
        .iter()
        .filter_map(|a| a.names.first()?.parse().ok())
        .collect()
}

fn settle(t: &Tensor) {
    t.device().synchronize().unwrap();
    black_box(t);
}

fn cpu_1024(c: &mut Criterion) {
    let n = 1024 * 1024;
    let v = data(n);
    let t = Tensor::from_vec(v.clone(), &[1024, 1024], &Device::cpu()).unwrap();
    let tt = t.transpose(0, 1).unwrap();
    let mut out = vec![0f32; n];
    let mut g = c.benchmark_group("softmax_1024x1024_cpu");
    g.throughput(Throughput::Bytes(n as u64 * 8));
    g.sample_size(20);
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(3));
    g.bench_function("plain_scalar_loop", |b| {
        b.iter(|| plain_softmax(black_box(&v), 1024, &mut out))
    });
    g.bench_function("wgtensor_strided_path", |b| {
        b.iter(|| black_box(tt.softmax(0).unwrap()))
    });
    g.bench_function("wgtensor", |b| b.iter(|| black_box(t.softmax(-1).unwrap())));
    g.finish();
}

fn gpu_1024(c: &mut Criterion) {
    let n = 1024 * 1024;
    let v = data(n);
    let mut g = c.benchmark_group("softmax_1024x1024_gpu");
    g.throughput(Throughput::Bytes(n as u64 * 8));
    g.sample_size(10);
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(3));
    for dev in adapters() {
        let t = Tensor::from_vec(v.clone(), &[1024, 1024], &dev).unwrap();
        g.bench_function(format!("composed_ops/{dev}"), |b| {
            b.iter(|| settle(&composed_softmax(&t)))
        });
        g.bench_function(format!("wgtensor/{dev}"), |b| {
            b.iter(|| settle(&t.softmax(-1).unwrap()))
        });
    }
    g.finish();
}

fn row_sizes(c: &mut Criterion) {
    let mut devices = vec![Device::cpu()];
    devices.extend(adapters());
    for (rows, len) in [(512usize, 768usize), (96, 4096)] {
        let n = rows * len;
        let v = data(n);
        let mut g = c.benchmark_group(format!("rows_{rows}x{len}"));
        g.throughput(Throughput::Bytes(n as u64 * 8));
        g.sample_size(10);
        g.warm_up_time(Duration::from_millis(300));
        g.measurement_time(Duration::from_secs(2));
        for dev in &devices {
            let t = Tensor::from_vec(v.clone(), &[rows, len], dev).unwrap();
            let w = Tensor::ones(&[len], wgtensor::DType::F32, dev).unwrap();
            let b = Tensor::zeros(&[len], wgtensor::DType::F32, dev).unwrap();
            g.bench_function(format!("softmax/{dev}"), |bn| {
                bn.iter(|| settle(&t.softmax(-1).unwrap()))
            });
            g.bench_function(format!("layer_norm/{dev}"), |bn| {
                bn.iter(|| settle(&t.layer_norm(Some(&w), Some(&b), 1e-5).unwrap()))
            });
        }
        g.finish();
    }
}

criterion_group!(benches, cpu_1024, gpu_1024, row_sizes);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
