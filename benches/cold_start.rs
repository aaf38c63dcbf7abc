//! Cold start: process start to the first 128x128 matmul result, as a whole process, with an
//! empty and with a warm wgtensor cache directory (`WGTENSOR_CACHE_DIR`).
//!
//! Each iteration re-runs this bench binary as a child (`WGTENSOR_COLD_CHILD`) that opens the
//! device named by `WGTENSOR_DEVICE` (the CPU, then every adapter), multiplies two 128x128 matrices, reads the result back and exits; the
//! peer is the same child doing nothing but start and exit, measured in the same run. The
//! driver's own shader cache (Mesa's, for the software adapter) is left as it is: clear it
//! (`MESA_SHADER_CACHE_DISABLE=true`) to measure a machine's very first run.
//!
//! `cargo bench --bench cold_start`.

use criterion::{criterion_group, BatchSize, Criterion};
use std::process::Command;
use std::time::Duration;
use wgtensor::{DType, Device, Tensor};

fn child() {
    if std::env::var("WGTENSOR_COLD_CHILD").as_deref() == Ok("noop") {
        return;
    }
    let d = Device::best();
    let a = Tensor::ones(&[128, 128], DType::F32, &d).expect("ones");
    let c = a
        .matmul(&a)
        .and_then(|c| c.to_vec::<f32>())
        .expect("matmul");
    assert_eq!(c[0], 128.0);
    // The second call of the class is where an empty cache gets its tuning.
    a.matmul(&a)
        .and_then(|c| c.to_vec::<f32>())
        .expect("matmul");
}

fn spawn(mode: &str, device: &str, cache: &std::path::Path) {
    let exe = std::env::current_exe().expect("the bench binary");
    let status = Command::new(exe)
        .env("WGTENSOR_COLD_CHILD", mode)
        .env("WGTENSOR_DEVICE", device)
        .env("WGTENSOR_CACHE_DIR", cache)
        .status()
        .expect("spawn the child");
    assert!(status.success(), "cold-start child failed: {status}");
}

fn cold_start(c: &mut Criterion) {
    let mut g = c.benchmark_group("cold_start_first_matmul_128");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(5));
    let tmp = std::env::temp_dir().join(format!("wgtensor-cold-{}", std::process::id()));
    g.bench_function("process_start_and_exit_only", |b| {
        b.iter(|| spawn("noop", "cpu", &tmp))
    });
    // The CPU and every adapter by name (`WGTENSOR_DEVICE` in the child).
    let mut devices = vec!["cpu".to_string()];
    devices.extend(
        wgtensor::adapters()
            .iter()
            .filter_map(|a| a.names.first().cloned()),
    );
    let mut n = 0u64;
    for dev in &devices {
        g.bench_function(format!("empty_cache/{dev}"), |b| {
            b.iter_batched(
                || {
                    n += 1;
                    let d = tmp.join(format!("empty{n}"));
                    let _ = std::fs::remove_dir_all(&d);
                    d
                },
                |d| spawn("matmul", dev, &d),
                BatchSize::PerIteration,
            )
        });
        let warm = tmp.join(format!("warm-{}", dev.replace(':', "_")));
        spawn("matmul", dev, &warm);
        g.bench_function(format!("warm_cache/{dev}"), |b| {
            b.iter(|| spawn("matmul", dev, &warm))
        });
    }
    g.finish();
    let _ = std::fs::remove_dir_all(&tmp);
}

criterion_group!(benches, cold_start);

fn main() {
    if std::env::var_os("WGTENSOR_COLD_CHILD").is_some() {
        child();
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
