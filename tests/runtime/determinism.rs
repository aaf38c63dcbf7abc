//! Same input, same bits, by default (FAULTS: autotuned variants that sum in other orders).
//! Each run is a child process with autotuning on (the cache is read once per process): every
//! autotuned op family (dim and packed reductions, softmax, layer_norm, cross_entropy, matmul)
//! runs three times on the CPU and every adapter and must give identical bits each time; a
//! second process whose cache file names other variants for every class must give the first
//! process's bits; `WGTENSOR_NONDETERMINISTIC=1` opts in to those variants.

use crate::common;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use wgtensor::nn::{cross_entropy_with, CrossEntropyOptions, Reduction};
use wgtensor::{autotune_report, Tensor};

const CHILD: &str = "WGTENSOR_DETERMINISM_TEST_CHILD";

/// Values with no pattern a summation order could keep exact.
fn values(n: usize, salt: u32) -> Vec<f32> {
    (0..n as u32)
        .map(|i| {
            let h = (i ^ salt).wrapping_mul(2_654_435_761).rotate_left(13) ^ salt;
            (h % 200_003) as f32 / 7919.0 - 12.6
        })
        .collect()
}

fn fnv(v: &[f32]) -> u64 {
    v.iter().fold(0xcbf2_9ce4_8422_2325, |h, x| {
        (h ^ u64::from(x.to_bits())).wrapping_mul(0x100_0000_01b3)
    })
}

/// Every autotuned family once on `d`: (name, bits hash) pairs.
fn run_all(d: &wgtensor::Device) -> Vec<(&'static str, u64)> {
    let t = |n: usize, shape: &[usize], salt| Tensor::from_vec(values(n, salt), shape, d).unwrap();
    let v = |t: Tensor| fnv(&t.to_vec::<f32>().unwrap());
    let tall = t(4096 * 64, &[4096, 64], 1);
    let wide = t(64 * 4096, &[64, 4096], 2);
    let long = t(1 << 16, &[1 << 16], 3);
    let rows = t(32 * 512, &[32, 512], 4);
    let targets = Tensor::from_vec((0..32u32).map(|i| i * 13 % 512).collect(), &[32], d).unwrap();
    let ce = CrossEntropyOptions {
        reduction: Reduction::None,
        ..Default::default()
    };
    let (a, b) = (t(64 * 128, &[64, 128], 5), t(128 * 96, &[128, 96], 6));
    vec![
        ("sum_dim0", v(tall.sum(0, false).unwrap())),
        ("sum_dim1", v(wide.sum(1, false).unwrap())),
        ("mean_dim1", v(wide.mean(1, false).unwrap())),
        ("sum_packed", v(long.sum_all().unwrap())),
        ("softmax", v(rows.softmax(1).unwrap())),
        ("layer_norm", v(rows.layer_norm(None, None, 1e-5).unwrap())),
        (
            "cross_entropy",
            v(cross_entropy_with(&rows, &targets, &ce).unwrap()),
        ),
        ("matmul", v(a.matmul(&b).unwrap())),
    ]
}

/// The child's body: every family three times on every device; in deterministic mode the three
/// must agree bit for bit. Prints one `DET` line per device and family, then the autotuner's
/// entries (`ENTRY`), for the parent.
#[test]
fn child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    for d in common::devices() {
        let runs: Vec<_> = (0..3).map(|_| run_all(&d)).collect();
        for (i, (name, h)) in runs[0].iter().enumerate() {
            if std::env::var_os("WGTENSOR_NONDETERMINISTIC").is_none() {
                for r in &runs[1..] {
                    assert_eq!(r[i].1, *h, "{name} on {d}: the bits changed between calls");
                }
            }
            println!("DET {d} {name} {h:016x}");
        }
        for e in autotune_report(&d).entries {
            println!(
                "ENTRY {}/{}\t{}\t{}",
                e.family, e.class, e.variant, e.source
            );
        }
    }
}

struct Child {
    /// `device name` -> bits hash, for every device and family.
    hashes: BTreeMap<String, u64>,
    /// Autotuner entries: key -> (variant, source).
    entries: BTreeMap<String, (String, String)>,
}

fn run(dir: &Path, nondeterministic: bool) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "determinism::child",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD, "1")
    .env("WGTENSOR_CACHE_DIR", dir)
    .env("WGTENSOR_AUTOTUNE", "on")
    .env_remove("WGTENSOR_NONDETERMINISTIC");
    if nondeterministic {
        cmd.env("WGTENSOR_NONDETERMINISTIC", "1");
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "child failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut c = Child {
        hashes: BTreeMap::new(),
        entries: BTreeMap::new(),
    };
    for line in text.lines() {
        // libtest may print the test's name on the same line first.
        if let Some(i) = line.find("DET ") {
            let f: Vec<&str> = line[i + 4..].split(' ').collect();
            let h = u64::from_str_radix(f[2], 16).unwrap();
            c.hashes.insert(format!("{} {}", f[0], f[1]), h);
        } else if let Some(i) = line.find("ENTRY ") {
            let f: Vec<&str> = line[i + 6..].split('\t').collect();
            c.entries
                .insert(f[0].to_string(), (f[1].to_string(), f[2].to_string()));
        }
    }
    assert!(c.hashes.len() >= 8, "no results in:\n{text}");
    c
}

/// A variant of the same family other than `v`, in another summation order.
fn other_variant(key: &str, v: &str) -> &'static str {
    match key.split('/').next().unwrap_or("") {
        "matmul" => "naive",
        "softmax" | "layer_norm" | "cross_entropy" if v == "invocation_per_row" => {
            "workgroup_per_row"
        }
        "softmax" | "layer_norm" | "cross_entropy" => "invocation_per_row",
        _ if v == "thread_per_chunk" => "workgroup_per_chunk",
        _ => "thread_per_chunk",
    }
}

#[test]
fn the_same_input_gives_the_same_bits_whatever_the_cache() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("wgtensor-determinism-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // A fresh (empty) cache: the three calls of each family agree (checked in the child).
    let fresh = run(&dir, false);
    if wgtensor::gpu_count() == 0 {
        let _ = std::fs::remove_dir_all(&dir);
        return; // the CPU part ran in the child
    }
    // A populated cache whose every class names a variant summing in another order than the
    // one the fresh process used.
    let file = dir.join("autotune.json");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|_| "{}".into());
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let adapters: Vec<String> = json["adapters"]
        .as_object()
        .map(|a| a.keys().cloned().collect())
        .unwrap_or_default();
    assert!(!adapters.is_empty(), "the fresh run wrote no cache: {text}");
    for adapter in &adapters {
        for (key, (variant, _)) in &fresh.entries {
            let other = other_variant(key, variant);
            let base = key.trim_end_matches(" any-order");
            for k in [base.to_string(), format!("{base} any-order")] {
                json["adapters"][adapter][&k] = serde_json::json!({ "variant": other });
            }
        }
    }
    std::fs::write(&file, serde_json::to_string(&json).unwrap()).unwrap();
    let populated = run(&dir, false);
    for (k, h) in &fresh.hashes {
        assert_eq!(
            populated.hashes.get(k),
            Some(h),
            "{k}: another result with a populated cache than with an empty one"
        );
    }
    // The opt-in mode takes the cache's variants, which do change some bits (so the test
    // above could fail).
    let fast = run(&dir, true);
    assert!(
        fast.entries.values().any(|(_, src)| src == "cache"),
        "{:?}",
        fast.entries
    );
    let changed = fresh
        .hashes
        .iter()
        .filter(|(k, h)| !k.starts_with("cpu") && fast.hashes.get(*k) != Some(h))
        .count();
    assert!(
        changed > 0,
        "no variant changed a result's bits: {:?}",
        fast.hashes
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The matmul kernels the deterministic autotuner chooses among (one `order`) give identical
/// bits, on every adapter.
#[test]
fn matmul_kernels_of_one_order_agree_bit_for_bit() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let fma = [
        "register",
        "register_vec4",
        "register_vec4_16x4",
        "register_vec4_4x16",
        "register_vec4_16x16",
        "register_vec4_r4x4",
        "register_vec4_r8x4",
        "tiled",
        "tiled_padded",
        "tiled_double",
    ];
    let plain = ["naive", "gemv_m1", "gemv_n1"];
    for d in common::gpus() {
        for (m, k, n) in [(64, 128, 96), (5, 300, 7), (1, 20000, 8)] {
            let a = Tensor::from_vec(values(m * k, 7), &[m, k], &d).unwrap();
            let b = Tensor::from_vec(values(k * n, 8), &[k, n], &d).unwrap();
            for group in [&fma[..], &plain[..]] {
                let mut first: Option<(&str, Vec<u32>)> = None;
                for &kernel in group {
                    let Ok(c) = a.matmul_with_kernel(&b, kernel) else {
                        continue; // a vec4 kernel on unaligned operands, or over the limit
                    };
                    let bits: Vec<u32> = c
                        .to_vec::<f32>()
                        .unwrap()
                        .iter()
                        .map(|x| x.to_bits())
                        .collect();
                    match &first {
                        None => first = Some((kernel, bits)),
                        Some((k0, b0)) => assert!(
                            *b0 == bits,
                            "{kernel} and {k0} give different bits for {m}x{k}x{n} on {d}"
                        ),
                    }
                }
            }
        }
    }
}
