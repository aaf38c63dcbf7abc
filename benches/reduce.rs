//! Reductions. CPU: wgtensor's `sum_all` over 16 M f32 next to a plain loop with 8 accumulators
//! (what a careful hand-written loop does) in the same run; the target is >= 0.8x its
//! throughput. GPU: `sum_all` at 1 M on every adapter (each backend view: `gpu:N`, `gl:N`),
//! readback included (synchronised).
//! Throughput is bytes read per second (4 bytes per element).
//!
//! `cargo bench --bench reduce` (add `-- --quick` for a faster, noisier run). After criterion's
//! report, an interleaved best-of-N comparison prints the GB/s of both CPU sums and their ratio,
//! then every first-pass variant of dim reductions over mid-size rows, forced in turn.

use criterion::{criterion_group, Criterion, Throughput};
use std::hint::black_box;
use std::time::{Duration, Instant};
use wgtensor::{Device, Tensor};

const N_CPU: usize = 16 << 20;
const N_GPU: usize = 1 << 20;

/// The peer: one pass, 8 independent accumulators (the compiler vectorises the lanes).
fn plain_sum(xs: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let mut chunks = xs.chunks_exact(8);
    for c in &mut chunks {
        for j in 0..8 {
            acc[j] += c[j];
        }
    }
    let tail: f32 = chunks.remainder().iter().sum();
    acc.iter().sum::<f32>() + tail
}

fn data(n: usize) -> Vec<f32> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect()
}

fn wg_sum(t: &Tensor) -> f32 {
    t.sum_all().unwrap().to_scalar::<f32>().unwrap()
}

fn cpu_sum(c: &mut Criterion) {
    let v = data(N_CPU);
    let t = Tensor::from_vec(v.clone(), &[N_CPU], &Device::cpu()).unwrap();
    let mut g = c.benchmark_group("sum_16M_f32_cpu");
    g.throughput(Throughput::Bytes(N_CPU as u64 * 4));
    g.sample_size(20);
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(3));
    g.bench_function("plain_loop_8acc", |b| b.iter(|| plain_sum(black_box(&v))));
    g.bench_function("wgtensor_sum_all", |b| b.iter(|| wg_sum(black_box(&t))));
    g.finish();
}

/// Every adapter wgpu found, through each backend that reaches it (`gpu:0` and its GL view
/// `gl:0` are separate wgpu devices with separate compilers).
fn adapters() -> Vec<Device> {
    let devices: Vec<Device> = wgtensor::adapters()
        .iter()
        .filter_map(|a| a.names.first()?.parse().ok())
        .collect();
    if devices.is_empty() {
        eprintln!("reduce bench: no GPU adapter found; GPU sums SKIPPED");
    }
    devices
}

fn gpu_sum(c: &mut Criterion) {
    let v = data(N_GPU);
    let mut g = c.benchmark_group("sum_1M_f32_gpu");
    g.throughput(Throughput::Bytes(N_GPU as u64 * 4));
    g.sample_size(10);
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(3));
    for dev in adapters() {
        let t = Tensor::from_vec(v.clone(), &[N_GPU], &dev).unwrap();
        // The readback inside `wg_sum` waits for the GPU: the timing covers the whole reduction.
        g.bench_function(format!("wgtensor_sum_all/{dev} ({})", dev.name()), |b| {
            b.iter(|| wg_sum(black_box(&t)))
        });
    }
    g.finish();
}

/// Interleaved best-of-N timings of both CPU sums: alternating runs see the same machine load,
/// so the ratio holds even when absolute numbers swing between runs.
fn ratio_summary() {
    let v = data(N_CPU);
    let t = Tensor::from_vec(v.clone(), &[N_CPU], &Device::cpu()).unwrap();
    let (mut best_plain, mut best_wg) = (f64::MAX, f64::MAX);
    for _ in 0..30 {
        let s = Instant::now();
        black_box(plain_sum(black_box(&v)));
        best_plain = best_plain.min(s.elapsed().as_secs_f64());
        let s = Instant::now();
        black_box(wg_sum(black_box(&t)));
        best_wg = best_wg.min(s.elapsed().as_secs_f64());
    }
    let gbs = |n: usize, secs: f64| n as f64 * 4.0 / secs / 1e9;
    println!(
        "sum over 16M f32 (best of 30, interleaved): plain loop {:.2} GB/s, wgtensor sum_all \
         {:.2} GB/s, ratio {:.2}x (target >= 0.8x)",
        gbs(N_CPU, best_plain),
        gbs(N_CPU, best_wg),
        best_plain / best_wg
    );
    let v = data(N_GPU);
    for dev in adapters() {
        let t = Tensor::from_vec(v.clone(), &[N_GPU], &dev).unwrap();
        let best = (0..10)
            .map(|_| {
                let s = Instant::now();
                black_box(wg_sum(&t));
                s.elapsed().as_secs_f64()
            })
            .fold(f64::MAX, f64::min);
        println!(
            "sum over 1M f32 on {dev} ({}), readback included (best of 10): {:.3} GB/s, {:.2} ms",
            dev.name(),
            gbs(N_GPU, best),
            best * 1e3
        );
        // The two first-pass variants the autotuner chooses between, forced in turn (rounds
        // alternate, so both see the same machine load).
        let variants = ["thread_per_chunk", "workgroup_per_chunk"];
        let mut bests = [f64::MAX; 2];
        for _round in 0..10 {
            for (i, v) in variants.iter().enumerate() {
                wgtensor::testing::force_reduce_variant(Some(v));
                let s = Instant::now();
                black_box(wg_sum(&t));
                bests[i] = bests[i].min(s.elapsed().as_secs_f64());
            }
        }
        wgtensor::testing::force_reduce_variant(None);
        for (v, b) in variants.iter().zip(bests) {
            println!(
                "  first pass {v}: {:.3} GB/s, {:.2} ms (best of 10, alternating)",
                gbs(N_GPU, b),
                b * 1e3
            );
        }
    }
}

/// Dim reductions over many mid-size rows (the class where one invocation per 256 contiguous
/// elements is uncoalesced on a GPU): every first-pass variant the adapter runs, forced in
/// turn (rounds alternate), readback included.
fn dim_variants() {
    for dev in adapters() {
        let variants = wgtensor::testing::reduce_variants(&dev);
        for (op, shape, dim) in [
            ("sum", [1024usize, 768], 1usize),
            ("argmax", [1024, 768], 1),
            ("sum", [256, 4096], 1),
            ("sum", [768, 1024], 0),
        ] {
            let n = shape[0] * shape[1];
            let t = Tensor::from_vec(data(n), &shape, &dev).unwrap();
            let run = |t: &Tensor| {
                black_box(match op {
                    "sum" => t
                        .sum(dim as isize, false)
                        .unwrap()
                        .to_vec::<f32>()
                        .unwrap()
                        .len(),
                    _ => t
                        .argmax(dim as isize, false)
                        .unwrap()
                        .to_vec::<u32>()
                        .unwrap()
                        .len(),
                })
            };
            let mut bests = vec![f64::MAX; variants.len()];
            for _round in 0..6 {
                for (i, v) in variants.iter().enumerate() {
                    wgtensor::testing::force_reduce_variant(Some(v));
                    let s = Instant::now();
                    run(&t);
                    bests[i] = bests[i].min(s.elapsed().as_secs_f64());
                }
            }
            wgtensor::testing::force_reduce_variant(None);
            for (v, b) in variants.iter().zip(bests) {
                println!(
                    "{op} of {shape:?} over dim {dim} on {dev}, first pass {v}: {:.3} GB/s, {:.2} \
                     ms (best of 6, alternating)",
                    n as f64 * 4.0 / b / 1e9,
                    b * 1e3
                );
            }
        }
    }
}

criterion_group!(benches, cpu_sum, gpu_sum);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    ratio_summary();
    dim_variants();
}
