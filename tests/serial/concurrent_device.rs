//! Two threads on one device (issue 41): one thread queues long work (chained `[2048, 2048]`
//! products) and then a reduction whose kernel is built while that work runs; the other runs
//! 200 small create/compute/readback rounds meanwhile. Both must finish with the right values on
//! the CPU, on `gpu:0` and on `gl:0`, whose wgpu backend guards its one GL context with a lock
//! that panics after a few seconds of waiting.
//!
//! Each run is a child process (`common::run_child`), so a panic or an abort is reported as this
//! test's failure instead of ending the test binary, and the kernel under test is built fresh.
//! CI runs this binary with the default number of test threads in its GL phase.

use crate::common;

use std::sync::Barrier;
use wgtensor::{Device, Tensor};

/// Side of the long products.
const N: usize = 2048;
/// Small rounds of the second thread.
const ROUNDS: usize = 200;
/// Names the device the child runs on (`cpu`, `gpu:0`, `gl:0`).
const TARGET_ENV: &str = "WGTENSOR_TEST_SHARED_DEVICE";
/// Products in the chain on an adapter: each is 17 GFLOP, about 20 s on the software adapters
/// of CI (the long work must span well over the GL lock's budget of a few seconds there),
/// milliseconds on a real GPU. The CPU, which has no shared context to contend for, runs one
/// (a debug build of the test takes most of a minute for it).
fn products(dev: &Device) -> usize {
    if dev.is_cpu() {
        1
    } else {
        2
    }
}

/// Column `j` of `x · P` is column `perm(j)` of `x`: `P[perm(j)][j] = 1`. Multiplying by an odd
/// number modulo a power of two is a bijection, so `P` is a permutation matrix and every product
/// is exact (one nonzero term per sum), checkable element by element.
fn perm(j: usize) -> usize {
    (j * 5 + 3) % N
}

fn permutation_matrix() -> Vec<f32> {
    let mut p = vec![0.0f32; N * N];
    for j in 0..N {
        p[perm(j) * N + j] = 1.0;
    }
    p
}

/// The long thread: `products(dev)` products queued, then (once the other thread runs) a sum whose
/// kernel this process has not built yet, then both read back and checked.
fn long_work(dev: &Device, start: &Barrier) {
    let host = common::data(N * N, 41, 1.0);
    let x0 = Tensor::from_slice(&host, &[N, N], dev).expect("upload x");
    let p = Tensor::from_slice(&permutation_matrix(), &[N, N], dev).expect("upload P");
    let mut x = x0;
    for k in 0..products(dev) {
        x = x
            .matmul(&p)
            .unwrap_or_else(|e| panic!("{dev}: product {k}: {e}"));
    }
    let t0 = std::time::Instant::now();
    start.wait();
    let s = x
        .sum_all()
        .unwrap_or_else(|e| panic!("{dev}: sum_all after the products: {e}"));
    let got_sum = s.to_vec::<f32>().expect("read the sum")[0] as f64;
    let got = x.to_vec::<f32>().expect("read the products");
    println!(
        "{dev}: the products and the sum were read back after {:?}",
        t0.elapsed()
    );

    // x · P^k: column j comes from column perm^k(j) of x.
    let mut src: Vec<usize> = (0..N).collect();
    for _ in 0..products(dev) {
        src = (0..N).map(|j| src[perm(j)]).collect();
    }
    for i in 0..N {
        for j in 0..N {
            let (a, e) = (got[i * N + j], host[i * N + src[j]]);
            assert!(
                a == e,
                "{dev}: product chain at [{i}, {j}]: got {a}, expected {e} (exact: P is a permutation)"
            );
        }
    }
    let want: f64 = host.iter().map(|&v| v as f64).sum();
    let scale: f64 = host.iter().map(|&v| (v as f64).abs()).sum();
    assert!(
        (got_sum - want).abs() <= 1e-5 * scale,
        "{dev}: sum_all after the products: got {got_sum}, expected {want} (tolerance {})",
        1e-5 * scale
    );
}

/// The short thread: create, compute (elementwise and a small product) and read back, `ROUNDS`
/// times, each checked exactly.
fn small_rounds(dev: &Device, start: &Barrier) {
    let m = 16;
    let mut eye = vec![0.0f32; m * m];
    for i in 0..m {
        eye[i * m + i] = 1.0;
    }
    let eye = Tensor::from_slice(&eye, &[m, m], dev).expect("upload the identity");
    start.wait();
    for r in 0..ROUNDS {
        let host = common::data(m * m, r as u64, 4.0);
        let x = Tensor::from_slice(&host, &[m, m], dev).expect("upload a small tensor");
        let y = x
            .mul_scalar(2.0)
            .and_then(|t| t.add_scalar(r as f32))
            .and_then(|t| t.matmul(&eye))
            .unwrap_or_else(|e| panic!("{dev}: small round {r}: {e}"));
        let got = y
            .to_vec::<f32>()
            .unwrap_or_else(|e| panic!("{dev}: small round {r} readback: {e}"));
        for (i, (&a, &h)) in got.iter().zip(&host).enumerate() {
            let e = h * 2.0 + r as f32;
            assert!(
                a == e,
                "{dev}: small round {r} at {i}: got {a}, expected {e}"
            );
        }
    }
}

/// The child body: both threads on the device named by `TARGET_ENV`.
#[test]
fn child_two_threads_share_one_device() {
    if !common::is_child("concurrent_device::child_two_threads_share_one_device") {
        return;
    }
    let name = std::env::var(TARGET_ENV).expect("the parent names the device");
    let dev: Device = name.parse().unwrap_or_else(|e| panic!("{name} opens: {e}"));
    let start = Barrier::new(2);
    std::thread::scope(|s| {
        let long = s.spawn(|| long_work(&dev, &start));
        let small = s.spawn(|| small_rounds(&dev, &start));
        // Join both before reporting, so either thread's panic message reaches the parent.
        let (l, r) = (long.join(), small.join());
        if let Err(p) = l {
            std::panic::resume_unwind(p);
        }
        if let Err(p) = r {
            std::panic::resume_unwind(p);
        }
    });
    println!(
        "{name}: {} products of [{N}, {N}] and {ROUNDS} small rounds, all right",
        products(&dev)
    );
    common::child_done("concurrent_device::child_two_threads_share_one_device");
}

fn run_on(name: &str) {
    let out = common::run_child(
        "concurrent_device::child_two_threads_share_one_device",
        &[(TARGET_ENV, name)],
    );
    for line in out
        .lines()
        .filter(|l| l.contains("all right") || l.contains("read back"))
    {
        eprintln!("{line}");
    }
}

#[test]
fn two_threads_share_the_cpu() {
    // Alone: the long products take minutes on the software adapters, and the parallel tests of
    // a shared binary would push them past the device timeout.
    let _alone = common::serial();
    run_on("cpu");
}

#[test]
fn two_threads_share_each_gpu() {
    // Alone: the long products take minutes on the software adapters, and the parallel tests of
    // a shared binary would push them past the device timeout.
    let _alone = common::serial();
    for dev in common::gpus() {
        run_on(&dev.to_string());
    }
}

#[test]
fn two_threads_share_each_gl_view() {
    // Alone: the long products take minutes on the software adapters, and the parallel tests of
    // a shared binary would push them past the device timeout.
    let _alone = common::serial();
    for dev in common::gl_views() {
        run_on(&dev.to_string());
    }
}
