use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::time::Duration;

fn cpu(c: &mut Criterion) {
    let mut g = c.benchmark_group("cpu_matmul");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    for n in [256usize, 512, 1024, 2048] {
        let a: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 * 0.1).collect();
        let b = a.clone();
        let mut out = vec![0f32; n * n];
        g.throughput(Throughput::Elements((2 * n * n * n) as u64));
        g.bench_with_input(BenchmarkId::new("gemm", n), &n, |bch, &n| {
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
criterion_group!(benches, cpu);
criterion_main!(benches);
