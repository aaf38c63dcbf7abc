//! `add` on 1 M and 16 M f32: wgtensor on the CPU and on every GPU adapter, next to a plain Rust
//! loop measured in the same run (the peer the CPU path must keep up with).
//!
//! Run: `cargo bench --bench elementwise`
//! Throughput is reported as bytes moved (two inputs read, one output written).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;
use wgtensor::{Device, Tensor};

fn inputs(n: usize) -> (Vec<f32>, Vec<f32>) {
    let a = (0..n).map(|i| (i % 1024) as f32 * 0.5).collect();
    let b = (0..n).map(|i| (i % 977) as f32 * 0.25).collect();
    (a, b)
}

fn add(c: &mut Criterion) {
    let mut group = c.benchmark_group("add");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for (label, n) in [("1M", 1usize << 20), ("16M", 1 << 24)] {
        group.throughput(Throughput::Bytes(3 * 4 * n as u64));
        let (a, b) = inputs(n);

        // The peer: what a user would write by hand (allocating the output, as `add` does).
        group.bench_with_input(BenchmarkId::new("plain_loop", label), &n, |bench, _| {
            bench.iter(|| {
                let out: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
                black_box(out)
            })
        });

        let cpu = Device::cpu();
        let ta = Tensor::from_vec(a.clone(), &[n], &cpu).unwrap();
        let tb = Tensor::from_vec(b.clone(), &[n], &cpu).unwrap();
        group.bench_with_input(BenchmarkId::new("wgtensor_cpu", label), &n, |bench, _| {
            bench.iter(|| black_box(ta.add(&tb).unwrap()))
        });

        for i in 0..wgtensor::gpu_count() {
            let dev = Device::gpu(i).unwrap();
            let ga = ta.to(&dev).unwrap();
            let gb = tb.to(&dev).unwrap();
            // Synchronise inside the timed region: the op is only done when the GPU is.
            let name = format!("wgtensor_{}", dev.to_string().replace(':', ""));
            group.bench_with_input(BenchmarkId::new(name, label), &n, |bench, _| {
                bench.iter(|| {
                    let out = ga.add(&gb).unwrap();
                    dev.synchronize().unwrap();
                    black_box(out)
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, add);
criterion_main!(benches);
