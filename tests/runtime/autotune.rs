//! Autotuning on the first adapter: the second call of a shape class times every candidate and
//! writes the cache file; a new process reads it and searches nothing; a corrupt file is
//! survived and rewritten; `force` retunes and `off` keeps the heuristic; the tuned kernel's
//! result matches the CPU. Each run is a child process (the cache is read once per process).

use std::path::{Path, PathBuf};
use std::process::Command;
use wgtensor::{autotune_report, Device, Tensor};

const CHILD: &str = "WGTENSOR_AUTOTUNE_TEST_CHILD";

/// The child's body: three products of one class on gpu:0, checked against the CPU, then the
/// report on one line.
#[test]
fn child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let d = Device::gpu(0).unwrap();
    let cpu = Device::cpu();
    let av: Vec<f32> = (0..3 * 96).map(|i| (i % 17) as f32 * 0.25 - 2.0).collect();
    let bv: Vec<f32> = (0..96 * 80).map(|i| (i % 13) as f32 * 0.5 - 3.0).collect();
    let want = Tensor::from_vec(av.clone(), &[3, 96], &cpu)
        .unwrap()
        .matmul(&Tensor::from_vec(bv.clone(), &[96, 80], &cpu).unwrap())
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let a = Tensor::from_vec(av, &[3, 96], &d).unwrap();
    let b = Tensor::from_vec(bv, &[96, 80], &d).unwrap();
    for _ in 0..3 {
        let got = a.matmul(&b).unwrap().to_vec::<f32>().unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-4 * w.abs().max(1.0), "{g} vs {w}");
        }
    }
    let r = autotune_report(&d);
    let e = r
        .entries
        .iter()
        .find(|e| e.family == "matmul")
        .expect("a matmul entry");
    println!(
        "AUTOTUNE searches={} source={} variant={} candidates={}",
        r.searches,
        e.source,
        e.variant,
        e.timings_ms.len()
    );
}

/// Runs the child with `mode` and the cache in `dir`; its report line's fields.
fn run(dir: &Path, mode: &str) -> (u64, String, String, usize) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "autotune::child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("WGTENSOR_CACHE_DIR", dir)
        .env("WGTENSOR_AUTOTUNE", mode)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // libtest may print the test's name on the same line first.
    let line = text
        .lines()
        .find_map(|l| l.find("AUTOTUNE ").map(|i| &l[i..]))
        .unwrap_or_else(|| {
            panic!(
                "no report in:\n{text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let field = |k: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{k}=")))
            .unwrap()
            .to_string()
    };
    (
        field("searches").parse().unwrap(),
        field("source"),
        field("variant"),
        field("candidates").parse().unwrap(),
    )
}

fn cache_json(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("autotune.json")).expect("the cache file");
    serde_json::from_str(&text).expect("the cache file is JSON")
}

#[test]
fn the_cache_is_written_read_survives_corruption_and_obeys_the_mode() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    if wgtensor::gpu_count() == 0 {
        assert!(
            !std::env::var("WGTENSOR_REQUIRE_GPU").is_ok_and(|v| v == "1"),
            "WGTENSOR_REQUIRE_GPU=1 but no adapter"
        );
        eprintln!("autotune tests: no GPU adapter; SKIPPED");
        return;
    }
    let dir: PathBuf =
        std::env::temp_dir().join(format!("wgtensor-autotune-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // First process: the second call tunes, every candidate is timed, the file is written.
    let (searches, source, variant, candidates) = run(&dir, "on");
    assert_eq!((searches, source.as_str()), (1, "tuned"));
    assert!(candidates >= 3, "only {candidates} candidates timed");
    let json = cache_json(&dir);
    let adapters = json["adapters"].as_object().unwrap();
    assert_eq!(adapters.len(), 1);
    let entries = adapters.values().next().unwrap().as_object().unwrap();
    assert!(
        entries.values().any(|e| e["variant"] == variant.as_str()),
        "{json}"
    );
    // Second process: read from the file, nothing searched, the same variant.
    assert_eq!(run(&dir, "on"), (0, "cache".into(), variant.clone(), 0));
    // `off` keeps the heuristic and searches nothing; `force` ignores the file and retunes.
    let (s, src, _, _) = run(&dir, "off");
    assert_eq!((s, src.as_str()), (0, "heuristic"));
    let (s, src, _, _) = run(&dir, "force");
    assert_eq!((s, src.as_str()), (1, "tuned"));
    // A corrupt file is ignored (a warning), the class retuned, and the file rewritten.
    std::fs::write(dir.join("autotune.json"), "{ not json").unwrap();
    let (s, src, _, _) = run(&dir, "on");
    assert_eq!((s, src.as_str()), (1, "tuned"));
    assert!(cache_json(&dir)["adapters"].is_object());
    // An unwritable cache directory (a file where the directory should be) is not an error.
    let blocked = dir.join("blocked");
    std::fs::write(&blocked, "a file, not a directory").unwrap();
    let (s, src, _, _) = run(&blocked, "on");
    assert_eq!((s, src.as_str()), (1, "tuned"));
    let _ = std::fs::remove_dir_all(&dir);
}
