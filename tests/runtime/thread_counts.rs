//! Same input, same bits at any thread count (FAULTS: a kernel whose split points or partial
//! sums follow rayon's thread count). Each thread count is a child process (rayon reads
//! `RAYON_NUM_THREADS` once, when its global pool starts) that prints a hash of the f32 bits of
//! every CPU op family; the parent asserts that 1, 2, 3, 7 and 12 threads agree exactly.
//! A user's machine has whatever core count it has, so 7 and 12 matter as much as 1 and 2.

use std::collections::BTreeMap;
use wgtensor::nn::{cross_entropy_with, CrossEntropyOptions, Reduction};
use wgtensor::{Conv2dOptions, Device, Result, Tensor};

const CHILD: &str = "WGTENSOR_THREAD_COUNT_TEST_CHILD";

/// Values with no pattern a summation order could keep exact.
fn values(n: usize, salt: u32) -> Vec<f32> {
    (0..n as u32)
        .map(|i| {
            let h = (i ^ salt).wrapping_mul(2_654_435_761).rotate_left(13) ^ salt;
            (h % 200_003) as f32 / 79_190.0 - 1.26
        })
        .collect()
}

fn fnv(v: &[f32]) -> u64 {
    v.iter().fold(0xcbf2_9ce4_8422_2325, |h, x| {
        (h ^ u64::from(x.to_bits())).wrapping_mul(0x100_0000_01b3)
    })
}

fn t(shape: &[usize], salt: u32) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_vec(values(n, salt), shape, &Device::cpu()).unwrap()
}

fn h(t: &Tensor) -> u64 {
    fnv(&t.to_vec::<f32>().unwrap())
}

/// Products of every shape class the CPU matmul treats differently: the reported
/// `[40, 160] x [160, 64]`, odd sizes split by rows and by columns, a depth past gemm's
/// 512-deep block, one activation row against a row-major matrix and against `Wᵀ` (the
/// decode step's kernel), a batch, and `x · Wᵀ + b`.
fn matmuls(out: &mut Vec<(String, u64)>) -> Result<()> {
    let mut put = |name: &str, v: Tensor| out.push((name.to_string(), h(&v)));
    put(
        "matmul_40x160x64",
        t(&[40, 160], 1).matmul(&t(&[160, 64], 2))?,
    );
    put(
        "matmul_40x160x64_wt",
        t(&[40, 160], 25).matmul(&t(&[64, 160], 26).t()?)?,
    );
    put(
        "matmul_257x300x129",
        t(&[257, 300], 3).matmul(&t(&[300, 129], 4))?,
    );
    put(
        "matmul_33x700x90",
        t(&[33, 700], 5).matmul(&t(&[700, 90], 6))?,
    );
    put(
        "matmul_300x1100x70",
        t(&[300, 1100], 7).matmul(&t(&[1100, 70], 8))?,
    );
    put(
        "matmul_9x4096x9",
        t(&[9, 4096], 21).matmul(&t(&[4096, 9], 22))?,
    );
    put(
        "matvec_1x4096x1000",
        t(&[1, 4096], 9).matmul(&t(&[4096, 1000], 10))?,
    );
    put(
        "matvec_t_1x4096x1000",
        t(&[1, 4096], 11).matmul(&t(&[1000, 4096], 12).t()?)?,
    );
    put(
        "matmul_bt_64x600x200",
        t(&[64, 600], 13).matmul(&t(&[200, 600], 14).t()?)?,
    );
    put(
        "matmul_batch_6x70x96x80",
        t(&[6, 70, 96], 15).matmul(&t(&[6, 96, 80], 16))?,
    );
    put(
        "linear_37x256x100",
        t(&[37, 256], 17).linear(&t(&[100, 256], 18), Some(&t(&[100], 19)))?,
    );
    put(
        "linear_5x64x48_3d",
        t(&[5, 7, 64], 20).linear(&t(&[48, 64], 23), Some(&t(&[48], 24)))?,
    );
    Ok(())
}

/// Reductions, rows ops, convolution, attention and a loss, forward.
fn forwards(out: &mut Vec<(String, u64)>) -> Result<()> {
    let mut put = |name: &str, v: Tensor| out.push((name.to_string(), h(&v)));
    let long = t(&[3_000_017], 30);
    put("sum_all", long.sum_all()?);
    put("mean_all", long.mean_all()?);
    put("max_all", long.max_all()?);
    let grid = t(&[1500, 2001], 31);
    put("sum_dim0", grid.sum(0, false)?);
    put("sum_dim1", grid.sum(1, false)?);
    put("mean_dim0", grid.mean(0, false)?);
    put("var_dim1", grid.var(1, 1, false)?);
    put("var_dim0", grid.var(0, 1, false)?);
    put("max_dim0", grid.max(0, false)?);
    let rows = t(&[512, 1000], 32);
    put("softmax", rows.softmax(1)?);
    put("log_softmax", rows.log_softmax(1)?);
    put("softmax_dim0", rows.softmax(0)?);
    put("layer_norm", rows.layer_norm(None, None, 1e-5)?);
    let img = t(&[4, 8, 32, 32], 33);
    let w = t(&[16, 8, 3, 3], 34);
    put(
        "conv2d",
        img.conv2d(
            &w,
            Some(&t(&[16], 35)),
            &Conv2dOptions::default().padding(1),
        )?,
    );
    put(
        "conv2d_1x1_wide",
        t(&[1, 64, 40, 40], 36).conv2d(&t(&[96, 64, 1, 1], 37), None, &Conv2dOptions::default())?,
    );
    let (q, k, v) = (
        t(&[2, 4, 200, 64], 38),
        t(&[2, 4, 200, 64], 39),
        t(&[2, 4, 200, 64], 40),
    );
    put(
        "attention_causal",
        Tensor::scaled_dot_product_attention(&q, &k, &v, None, true, 0.0, None)?,
    );
    put(
        "attention",
        Tensor::scaled_dot_product_attention(&q, &k, &v, None, false, 0.0, None)?,
    );
    let logits = t(&[256, 1000], 41);
    let targets = Tensor::from_vec(
        (0..256u32).map(|i| i * 389 % 1000).collect(),
        &[256],
        &Device::cpu(),
    )?;
    let none = CrossEntropyOptions {
        reduction: Reduction::None,
        ..Default::default()
    };
    put(
        "cross_entropy_none",
        cross_entropy_with(&logits, &targets, &none)?,
    );
    put(
        "cross_entropy_mean",
        cross_entropy_with(&logits, &targets, &CrossEntropyOptions::default())?,
    );
    Ok(())
}

/// A training step's gradients: a two-layer perceptron under cross entropy, a convolution and
/// attention, each backward from a scalar loss.
fn gradients(out: &mut Vec<(String, u64)>) -> Result<()> {
    let mut put = |name: &str, v: Option<Tensor>| out.push((name.to_string(), h(&v.unwrap())));
    let leaf = |shape: &[usize], salt| t(shape, salt).requires_grad_(true);
    let x = t(&[128, 256], 50);
    let (w1, b1) = (leaf(&[512, 256], 51), leaf(&[512], 52));
    let (w2, b2) = (leaf(&[10, 512], 53), leaf(&[10], 54));
    let y = Tensor::from_vec(
        (0..128u32).map(|i| i * 7 % 10).collect(),
        &[128],
        &Device::cpu(),
    )?;
    let hidden = x.linear(&w1, Some(&b1))?.relu()?;
    let loss = cross_entropy_with(
        &hidden.linear(&w2, Some(&b2))?,
        &y,
        &CrossEntropyOptions::default(),
    )?;
    loss.backward()?;
    put("mlp_loss", Some(loss));
    put("mlp_grad_w1", w1.grad());
    put("mlp_grad_b1", b1.grad());
    put("mlp_grad_w2", w2.grad());
    put("mlp_grad_b2", b2.grad());

    let (img, w) = (leaf(&[6, 8, 24, 24], 55), leaf(&[16, 8, 3, 3], 56));
    let yc = img.conv2d(&w, None, &Conv2dOptions::default().padding(1))?;
    yc.mul(&t(yc.shape(), 57))?.sum_all()?.backward()?;
    put("conv2d_grad_x", img.grad());
    put("conv2d_grad_w", w.grad());

    let (q, k, v) = (
        leaf(&[3, 4, 150, 32], 58),
        leaf(&[3, 4, 150, 32], 59),
        leaf(&[3, 4, 150, 32], 60),
    );
    let o = Tensor::scaled_dot_product_attention(&q, &k, &v, None, true, 0.0, None)?;
    o.mul(&t(o.shape(), 61))?.sum_all()?.backward()?;
    put("attention_grad_q", q.grad());
    put("attention_grad_k", k.grad());
    put("attention_grad_v", v.grad());

    let xn = leaf(&[300, 700], 62);
    let (gn, bn) = (leaf(&[700], 63), leaf(&[700], 64));
    let yn = xn.layer_norm(Some(&gn), Some(&bn), 1e-5)?;
    yn.mul(&t(yn.shape(), 65))?.sum_all()?.backward()?;
    put("layer_norm_grad_x", xn.grad());
    put("layer_norm_grad_w", gn.grad());
    put("layer_norm_grad_b", bn.grad());
    Ok(())
}

/// The child's body: one `BITS name hash` line per result.
#[test]
fn child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let mut out = Vec::new();
    matmuls(&mut out).unwrap();
    forwards(&mut out).unwrap();
    gradients(&mut out).unwrap();
    println!("THREADS {}", rayon::current_num_threads());
    for (name, hash) in out {
        println!("BITS {name} {hash:016x}");
    }
}

/// Runs the `child` test of this binary under `RAYON_NUM_THREADS=threads`: name -> hash.
fn bits_at(threads: usize) -> BTreeMap<String, String> {
    let text = crate::common::run_at_threads("thread_counts::child", CHILD, threads);
    assert!(
        text.contains(&format!("THREADS {threads}\n")),
        "the child did not run {threads} threads:\n{text}"
    );
    text.lines()
        .filter_map(|l| {
            // libtest may print the test's name on the same line first.
            let f: Vec<&str> = l[l.find("BITS ")? + 5..].split(' ').collect();
            Some((f[0].to_string(), f[1].to_string()))
        })
        .collect()
}

#[test]
fn every_cpu_op_gives_the_same_bits_at_1_2_3_7_and_12_threads() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let base = bits_at(1);
    assert!(base.len() >= 40, "too few results: {base:?}");
    let mut differ = Vec::new();
    for threads in [2, 3, 7, 12] {
        let got = bits_at(threads);
        assert_eq!(got.len(), base.len());
        for (name, hash) in &base {
            if got.get(name) != Some(hash) {
                differ.push(format!("{name} at {threads} threads"));
            }
        }
    }
    assert!(differ.is_empty(), "bits differ from 1 thread's: {differ:?}");
}

/// Median wall time of CPU matmuls at this process's thread count (`cargo test --release
/// --test thread_counts -- --ignored --nocapture`, under `RAYON_NUM_THREADS`): the figures
/// behind the shape-only split of `src/cpu/matmul.rs`. `at` and `wt` mark a transposed A
/// (`xᵀ · dy`, a weight gradient) and B (`x · Wᵀ`, a linear layer).
#[test]
#[ignore]
fn matmul_timing() {
    let shapes = [
        (256, 256, 256, ""),
        (512, 512, 512, ""),
        (1024, 1024, 1024, ""),
        (2048, 2048, 2048, ""),
        (2048, 64, 64, ""),
        (64, 2048, 256, "at"),
        (257, 300, 129, ""),
        (128, 768, 3072, "wt"),
        (512, 1024, 4096, "wt"),
        (100, 700, 90, ""),
    ];
    for (m, k, n, how) in shapes {
        let a = if how == "at" {
            t(&[k, m], 1).t().unwrap()
        } else {
            t(&[m, k], 1)
        };
        let b = if how == "wt" {
            t(&[n, k], 2).t().unwrap()
        } else {
            t(&[k, n], 2)
        };
        let reps = (4e9 / (m * n * k) as f64).clamp(5.0, 200.0) as usize;
        a.matmul(&b).unwrap();
        let mut times: Vec<f64> = (0..reps)
            .map(|_| {
                let start = std::time::Instant::now();
                std::hint::black_box(a.matmul(&b).unwrap());
                start.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        times.sort_by(f64::total_cmp);
        println!(
            "TIME {m}x{k}x{n}{} min {:.0} median {:.0} us",
            if how.is_empty() {
                String::new()
            } else {
                format!(" {how}")
            },
            times[0],
            times[reps / 2]
        );
    }
}
