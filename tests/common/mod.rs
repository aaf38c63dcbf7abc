//! The shared test harness: one test body runs on the CPU and on every GPU adapter found, and
//! GPU results are compared with the CPU (the oracle) at an explicit tolerance.
#![allow(dead_code)]

pub mod broadcast;

use std::io::Write;
use std::sync::Once;
use wgtensor::{Device, Result, Tensor};

/// The CPU plus every `gpu:N`. Without an adapter the GPU part is skipped loudly; with
/// `WGTENSOR_REQUIRE_GPU=1` that skip is a failure (CI sets it).
pub fn devices() -> Vec<Device> {
    let mut out = vec![Device::cpu()];
    out.extend(gpus());
    out
}

/// Every `gpu:N`, opened; see [`devices`] for the skip policy.
pub fn gpus() -> Vec<Device> {
    static REPORT: Once = Once::new();
    // Kernel choices stay fixed in tests unless a test asks for autotuning
    // (tests/runtime/autotune.rs).
    wgtensor::testing::autotune_off_by_default();
    let n = wgtensor::gpu_count();
    let require = std::env::var("WGTENSOR_REQUIRE_GPU").is_ok_and(|v| v == "1");
    if n == 0 {
        assert!(
            !require,
            "WGTENSOR_REQUIRE_GPU=1 but no GPU adapter was found: GPU tests would be skipped"
        );
        REPORT.call_once(|| {
            say("wgtensor tests: no GPU adapter found; GPU variants SKIPPED (CPU only)")
        });
        return Vec::new();
    }
    let gpus: Vec<Device> = (0..n)
        .map(|i| {
            Device::gpu(i).unwrap_or_else(|e| panic!("gpu:{i} is listed but does not open: {e}"))
        })
        .collect();
    REPORT.call_once(|| {
        for d in &gpus {
            let backend = wgtensor::adapters()
                .into_iter()
                .find(|a| a.names[0] == d.to_string())
                .map(|a| a.backend)
                .unwrap_or_default();
            say(&format!(
                "wgtensor tests: running GPU variants on {d} = {} ({backend})",
                d.name()
            ));
        }
    });
    gpus
}

/// Writes to stderr past libtest's capture, so the CI log shows which adapters ran.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Asserts `actual ≈ expected` elementwise: `|a - e| <= atol + rtol * |e|`; NaN matches only NaN,
/// infinities match only the same infinity. Prints the first mismatch with both values.
pub fn assert_close(actual: &[f32], expected: &[f32], rtol: f32, atol: f32, ctx: &str) {
    assert_eq!(actual.len(), expected.len(), "{ctx}: lengths differ");
    for (i, (&a, &e)) in actual.iter().zip(expected).enumerate() {
        let ok = if e.is_nan() {
            a.is_nan()
        } else if e.is_infinite() {
            a == e
        } else {
            a.is_finite() && (a - e).abs() <= atol + rtol * e.abs()
        };
        assert!(
            ok,
            "{ctx}: first mismatch at index {i}: got {a}, expected {e} (rtol {rtol}, atol {atol})"
        );
    }
}

/// Reads an f32 tensor back.
pub fn values(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().expect("readback")
}

/// Deterministic pseudo-random f32 in [-scale, scale) (no global RNG state, so tests can run in
/// parallel and still be reproducible).
pub fn data(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// Env var that tells a child process which test body to run (see [`run_child`]).
pub const CHILD_ENV: &str = "WGTENSOR_TEST_CHILD";

/// Whether this process is the child [`run_child`] spawned to run `name`. Child entry points
/// return at once (and pass) unless this is true, so a normal `cargo test` skips their bodies.
pub fn is_child(name: &str) -> bool {
    std::env::var(CHILD_ENV).is_ok_and(|v| v == name)
}

/// Printed by a child test at the end of its body; [`run_child`] requires it, so a child that
/// returned early does not count as a pass.
pub fn child_done(name: &str) {
    println!("wgtensor child {name}: all checks passed");
}

/// Runs test `name` of the current test binary in a child process (`name --exact --nocapture`)
/// with `envs` set and `WGTENSOR_DEVICE` removed, for process-global state (environment
/// variables, adapter discovery, a destroyed device). Fails unless the child passed and reached
/// [`child_done`] within 5 minutes; returns its stdout.
pub fn run_child(name: &str, envs: &[(&str, &str)]) -> String {
    use std::io::Read;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let exe = std::env::current_exe().expect("path of the running test binary");
    let mut cmd = Command::new(exe);
    cmd.args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, name)
        .env_remove("WGTENSOR_DEVICE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn the child test process");
    let pipe = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = pipe(Box::new(child.stdout.take().unwrap()));
    let err = pipe(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
    let report = format!("--- child stdout:\n{stdout}\n--- child stderr:\n{stderr}");
    let status = status
        .unwrap_or_else(|| panic!("child {name} hung for 5 minutes and was killed\n{report}"));
    assert!(status.success(), "child {name} failed ({status})\n{report}");
    assert!(
        stdout.contains(&format!("test {name} ..."))
            && stdout.contains("test result: ok. 1 passed"),
        "child {name} did not report its test as passed\n{report}"
    );
    assert!(
        stdout.contains(&format!("wgtensor child {name}: all checks passed")),
        "child {name} passed without running its checks\n{report}"
    );
    stdout
}

/// Runs test `name` of this binary (`--exact`) in a child process under
/// `RAYON_NUM_THREADS=threads`, with `marker` set (the child's body runs only then): rayon sizes
/// its pool once per process, so each thread count needs a process of its own. Fails unless
/// the child passed; returns its stdout.
pub fn run_at_threads(name: &str, marker: &str, threads: usize) -> String {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(marker, "1")
        .env("RAYON_NUM_THREADS", threads.to_string())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "child at {threads} threads failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The GL views of the adapters (`gl:N`): separate wgpu devices whose shaders go through another
/// compiler. Skipped loudly when there are none.
pub fn gl_views() -> Vec<Device> {
    let gl: Vec<Device> = wgtensor::adapters()
        .iter()
        .filter_map(|a| {
            a.names
                .first()
                .filter(|n| n.starts_with("gl:"))?
                .parse()
                .ok()
        })
        .collect();
    if gl.is_empty() {
        eprintln!("wgtensor tests: no GL adapter view; GL variants SKIPPED");
    }
    gl
}

/// A model of one parameter vector `p` for optimizer tests: `forward(c)` is the loss
/// `sum(c * p) + 0.5 * sum(p²)`, whose gradient is `c + p`.
pub struct Vector(pub Tensor);

impl wgtensor::nn::Module for Vector {
    fn forward(&self, c: &Tensor) -> Result<Tensor> {
        let quad = self.0.mul(&self.0)?.mul_scalar(0.5)?;
        c.mul(&self.0)?.add(&quad)?.sum_all()
    }
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        vec![("p".into(), self.0.clone())]
    }
    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        vec![("p".into(), &mut self.0)]
    }
}

/// A directory of one test's own under the system temporary directory, removed with
/// everything in it when the guard drops, whether the test passes or panics, so the suite
/// leaves `$TMPDIR` as it found it. The name carries the tag, the process id and a counter.
pub struct TempDir(std::path::PathBuf);

impl TempDir {
    /// Creates `$TMPDIR/wgtensor-{tag}-{pid}-{n}`.
    pub fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("wgtensor-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a test's temporary directory");
        TempDir(dir)
    }

    /// The directory.
    pub fn path(&self) -> &std::path::Path {
        &self.0
    }

    /// A path inside the directory.
    pub fn join(&self, name: impl AsRef<std::path::Path>) -> std::path::PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Held for the whole body of every test of the `serial` binary: those tests read or set state
/// that the whole process shares (the memory, transfer and kernel counters of the shared devices,
/// their timeouts, process-wide switches), so they run one at a time.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The random generator is global (`manual_seed`, then draws that advance one stream): tests
/// that seed it and compare draws, and tests of the same binary that draw from it, take turns.
pub fn rng_lock() -> std::sync::MutexGuard<'static, ()> {
    static RNG: std::sync::Mutex<()> = std::sync::Mutex::new(());
    RNG.lock().unwrap_or_else(|p| p.into_inner())
}
