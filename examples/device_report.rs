//! The device report: what wgtensor finds on this machine, whether every kernel family gives the
//! right answer there, and how close its kernels come to the device's own measured limits. Run it
//! on your machine and paste the output into a bug report:
//!
//! ```text
//! cargo run --release --features models --example device_report -- [--device D]... [--json FILE]
//!     [--preset 125m|1b|tiny] [--keep-model DIR] [--no-decode] [--full]
//! ```
//!
//! For the CPU and every adapter (or each `--device`):
//! - the adapter: name, vendor, backend, driver, type, and the limits and features wgtensor uses;
//! - correctness: every op family (elementwise, comparisons, reductions, rows, matmul in each
//!   dtype and GPU kernel, conv, attention, quantized products in each format, sampling) on small
//!   shapes against a host reference in f64, each line `ok` or the first mismatch;
//! - the device's measured limits: copy bandwidth (a buffer-to-buffer copy), read bandwidth (a
//!   streaming read kernel) and arithmetic peak (FMA chains, f32 and f16);
//! - kernels against those limits: matmul f32/f16 at 1024, 2048, 4096 (GFLOP/s, % of the FMA
//!   peak) and the matrix-vector products of decode, 4096 x 4096 in f32, f16, Q8_0, Q4_0, Q4_K and
//!   Q6_K (GB/s of weights read, % of the read bandwidth);
//! - decode of a random-weight Llama (the 125 M preset by default) per weight format: prefill and
//!   decode tokens/s, the bandwidth decode implies (weight bytes x tokens/s) as % of the read
//!   bandwidth, and the dispatches, submits and bytes read back per decoded token.
//!
//! Second views of a listed GPU (GL) get the correctness part only unless named with `--device`.
//! On software adapters the matmul rows run at 512 (1024 and up with `--full`) and fewer tokens
//! are decoded unless `--full`.
//! `--json FILE` writes every figure. An adapter that lacks a feature gets a line saying so.

#[path = "common/random_llama.rs"]
mod random_llama;
#[path = "common/report_checks.rs"]
mod report_checks;
#[path = "common/report_probe.rs"]
mod report_probe;

use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;
use wgtensor::models::{AutoModel, CausalLM};
use wgtensor::{DType, Device, QTensor, QType, Result, Tensor};

struct Args {
    devices: Vec<String>,
    json: Option<PathBuf>,
    preset: String,
    keep_model: Option<PathBuf>,
    decode: bool,
    full: bool,
}

const USAGE: &str = "usage: device_report [--device D]... [--json FILE] [--preset 125m|1b|tiny] \
                     [--keep-model DIR] [--no-decode] [--full]";

fn parse_args() -> std::result::Result<Option<Args>, String> {
    let mut a = Args {
        devices: Vec::new(),
        json: None,
        preset: "125m".into(),
        keep_model: None,
        decode: true,
        full: false,
    };
    let mut it = std::env::args_os().skip(1);
    while let Some(flag) = it.next() {
        let flag = flag
            .into_string()
            .map_err(|f| format!("argument {f:?} is not UTF-8; {USAGE}"))?;
        let mut value = || {
            it.next()
                .and_then(|v| v.into_string().ok())
                .ok_or_else(|| format!("{flag} needs a UTF-8 value; {USAGE}"))
        };
        match flag.as_str() {
            "--help" | "-h" => return Ok(None),
            "--device" => a.devices.push(value()?),
            "--json" => a.json = Some(PathBuf::from(value()?)),
            "--preset" => a.preset = value()?,
            "--keep-model" => a.keep_model = Some(PathBuf::from(value()?)),
            "--no-decode" => a.decode = false,
            "--full" => a.full = true,
            other => return Err(format!("unknown argument {other:?}; {USAGE}")),
        }
    }
    Ok(Some(a))
}

/// The devices to report on: those named, else the CPU and every adapter (second views too).
fn devices(args: &Args) -> std::result::Result<Vec<(Device, bool)>, String> {
    if !args.devices.is_empty() {
        return args
            .devices
            .iter()
            .map(|d| {
                d.parse::<Device>()
                    .map(|dev| (dev, true))
                    .map_err(|e| format!("--device {d}: {e}"))
            })
            .collect();
    }
    let mut out = vec![(Device::cpu(), true)];
    for a in wgtensor::adapters() {
        match a.names[0].parse::<Device>() {
            Ok(d) => out.push((d, a.gpu_index.is_some())),
            Err(e) => println!("{}: does not open: {e}", a.names[0]),
        }
    }
    Ok(out)
}

fn adapter_of(dev: &Device) -> Option<wgtensor::AdapterSummary> {
    let name = dev.to_string();
    wgtensor::adapters()
        .into_iter()
        .find(|a| a.names.contains(&name))
}

fn is_software(dev: &Device) -> bool {
    adapter_of(dev).is_some_and(|a| a.is_software)
}

fn adapter_section(dev: &Device) -> Value {
    let Some(a) = adapter_of(dev) else {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        println!(
            "  host: {} threads (rayon {}), {}",
            threads,
            rayon::current_num_threads(),
            cpu_name()
        );
        return json!({"kind": "cpu", "threads": threads, "name": cpu_name()});
    };
    println!(
        "  adapter: {} [{} {}, vendor 0x{:04x}, device 0x{:04x}{}]",
        a.name,
        a.backend,
        a.device_type,
        a.vendor,
        a.device_id,
        if a.is_software { ", software" } else { "" }
    );
    println!("  driver: {}", a.driver);
    println!(
        "  limits: max buffer {} MiB, max storage binding {} MiB, workgroup storage {} KiB, \
         {} invocations/workgroup, {} workgroups/dim",
        a.max_buffer_size >> 20,
        a.max_storage_buffer_binding_size >> 20,
        a.max_compute_workgroup_storage_size >> 10,
        a.max_compute_invocations_per_workgroup,
        a.max_compute_workgroups_per_dimension
    );
    println!(
        "  features: f16 {}, subgroups {} (sizes {}-{}), timestamp queries {}, unified memory {}",
        yes(a.shader_f16),
        yes(a.subgroups),
        a.subgroup_sizes.0,
        a.subgroup_sizes.1,
        yes(a.timestamp_query),
        yes(a.unified_memory)
    );
    json!({
        "name": a.name, "names": a.names, "backend": a.backend, "device_type": a.device_type,
        "vendor": a.vendor, "device_id": a.device_id, "software": a.is_software, "driver": a.driver,
        "max_buffer_size": a.max_buffer_size,
        "max_storage_buffer_binding_size": a.max_storage_buffer_binding_size,
        "max_compute_workgroup_storage_size": a.max_compute_workgroup_storage_size,
        "max_compute_invocations_per_workgroup": a.max_compute_invocations_per_workgroup,
        "max_compute_workgroups_per_dimension": a.max_compute_workgroups_per_dimension,
        "shader_f16": a.shader_f16, "subgroups": a.subgroups,
        "subgroup_sizes": [a.subgroup_sizes.0, a.subgroup_sizes.1],
        "timestamp_query": a.timestamp_query, "unified_memory": a.unified_memory,
    })
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// Seconds per call of `f` (its work waited for): the best of three timed batches of at least
/// 0.2 s each, or one batch when a single call takes a second. Two calls come first: the first
/// builds the kernels, the second lets the autotuner time its variants for this shape class
/// (once per adapter: the winners persist), so what is timed is what a user's program gets.
fn time_per_call(dev: &Device, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..2 {
        f()?;
        dev.synchronize()?;
    }
    let t = Instant::now();
    f()?;
    dev.synchronize()?;
    let once = t.elapsed().as_secs_f64();
    let n = ((0.2 / once.max(1e-6)) as usize).clamp(1, 4096);
    let rounds = if once >= 1.0 { 0 } else { 3 };
    let mut best = once;
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..n {
            f()?;
        }
        dev.synchronize()?;
        best = best.min(t.elapsed().as_secs_f64() / n as f64);
    }
    Ok(best)
}

fn pct(x: f64, of: Option<f64>) -> String {
    of.map_or("-".into(), |o| format!("{:.0} %", 100.0 * x / o))
}

fn matmul_section(dev: &Device, peaks: &report_probe::Limits, full: bool) -> Value {
    let mut rows = Vec::new();
    for dtype in [DType::F32, DType::F16] {
        let peak = if dtype == DType::F32 {
            peaks.fma_f32
        } else {
            peaks.fma_f16
        };
        // A software adapter runs the WGSL on the host's cores, about 2 GFLOP/s on two of them:
        // it gets a 512 product (the autotuner times each variant of its class once, most of
        // two minutes at 1024 there), the larger sizes with --full.
        let sizes: &[usize] = if is_software(dev) && !full {
            &[512, 1024, 2048, 4096]
        } else {
            &[1024, 2048, 4096]
        };
        for &n in sizes {
            let label = format!("matmul {dtype:?} {n}x{n}x{n}").to_lowercase();
            if n > 512 && is_software(dev) && !full {
                println!("  {label}: skipped on a software adapter (--full runs it)");
                continue;
            }
            let r = (|| -> Result<f64> {
                wgtensor::manual_seed(1);
                let a = Tensor::randn(&[n, n], dev)?.to_dtype(dtype)?;
                let b = Tensor::randn(&[n, n], dev)?.to_dtype(dtype)?;
                time_per_call(dev, || a.matmul(&b).map(drop))
            })();
            match r {
                Ok(s) => {
                    let gflops = 2.0 * (n as f64).powi(3) / s / 1e9;
                    println!(
                        "  {label}: {:.3} ms, {gflops:.1} GFLOP/s, {} of the FMA peak",
                        s * 1e3,
                        pct(gflops, peak)
                    );
                    rows.push(json!({"dtype": format!("{dtype:?}").to_lowercase(), "n": n,
                        "ms": s * 1e3, "gflops": gflops,
                        "pct_of_peak": peak.map(|p| 100.0 * gflops / p)}));
                }
                Err(e) => println!("  {label}: failed: {e}"),
            }
        }
    }
    Value::Array(rows)
}

fn matvec_section(dev: &Device, read_gbs: Option<f64>) -> Value {
    const N: usize = 4096;
    let mut rows = Vec::new();
    let mut row = |label: &str, bytes: usize, r: Result<f64>| match r {
        Ok(s) => {
            let gbs = bytes as f64 / s / 1e9;
            println!(
                "  matvec {label} {N}x{N}: {:.1} us, {gbs:.1} GB/s of weights, {} of the read bandwidth",
                s * 1e6,
                pct(gbs, read_gbs)
            );
            rows.push(json!({"format": label, "us": s * 1e6, "gbs": gbs,
                "pct_of_read_bandwidth": read_gbs.map(|r| 100.0 * gbs / r)}));
        }
        Err(e) => println!("  matvec {label}: failed: {e}"),
    };
    // Calls cycle through copies of the matrix totalling at least 256 MiB, so that no call finds
    // its weights in a last-level cache (an H200's L2 holds 60 MB, a whole f16 4096 x 4096).
    let copies = |bytes: usize| (256usize << 20).div_ceil(bytes).clamp(1, 32);
    for dtype in [DType::F32, DType::F16] {
        let r = (|| -> Result<f64> {
            wgtensor::manual_seed(2);
            // The copies are drawn on the host and uploaded: on a software adapter, drawing
            // 256 MiB of normals in WGSL took most of a minute of the report.
            let host = Device::cpu();
            let ws = (0..copies(N * N * dtype.size_in_bytes()))
                .map(|_| Tensor::randn(&[N, N], &host)?.to_dtype(dtype)?.to(dev)?.t())
                .collect::<Result<Vec<_>>>()?;
            let x = Tensor::randn(&[1, N], dev)?.to_dtype(dtype)?;
            let mut i = 0;
            time_per_call(dev, || {
                i += 1;
                x.matmul(&ws[i % ws.len()]).map(drop)
            })
        })();
        let label = format!("{dtype:?}").to_lowercase();
        row(&label, N * N * dtype.size_in_bytes(), r);
    }
    for q in QType::ALL {
        let mut bytes = 0;
        let r = (|| -> Result<f64> {
            let host = QTensor::from_ggml(
                q,
                [N, N],
                &report_checks::random_blocks(q, N, N, 3),
                &Device::cpu(),
            )?;
            bytes = host.size_in_bytes();
            let ws = (0..copies(bytes))
                .map(|_| host.to(dev))
                .collect::<Result<Vec<_>>>()?;
            let x = Tensor::randn(&[1, N], dev)?;
            let mut i = 0;
            time_per_call(dev, || {
                i += 1;
                ws[i % ws.len()].matmul_t(&x).map(drop)
            })
        })();
        row(q.as_str(), bytes, r);
    }
    Value::Array(rows)
}

struct Model {
    dir: PathBuf,
    preset: random_llama::Preset,
    _temp: Option<TempDir>,
}

/// A directory removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn make_model(args: &Args) -> std::result::Result<Model, String> {
    let preset = random_llama::Preset::named(&args.preset)
        .ok_or_else(|| format!("--preset {:?} is not tiny, 125m or 1b", args.preset))?;
    let (dir, temp) = match &args.keep_model {
        Some(d) => (d.clone(), None),
        None => {
            let d = std::env::temp_dir().join(format!("wgtensor_report_{}", std::process::id()));
            (d.clone(), Some(TempDir(d)))
        }
    };
    let t = Instant::now();
    random_llama::write(&dir, &preset, &[Some(QType::Q8_0), Some(QType::Q4_0)], 0)?;
    println!(
        "model: random Llama {} ({} M parameters) written to {} in {:.1} s",
        args.preset,
        preset.parameters() / 1_000_000,
        dir.display(),
        t.elapsed().as_secs_f64()
    );
    Ok(Model {
        dir,
        preset,
        _temp: temp,
    })
}

fn load(m: &Model, format: &str, dev: &Device) -> Result<CausalLM> {
    match format {
        "f32" => AutoModel::load(&m.dir, dev, DType::F32),
        "f16" => AutoModel::load(&m.dir, dev, DType::F16),
        q => AutoModel::load(m.dir.join(format!("model-{q}.gguf")), dev, DType::F32),
    }
}

fn decode_section(dev: &Device, m: &Model, read_gbs: Option<f64>, full: bool) -> Value {
    let software = is_software(dev);
    let (p, n) = match (dev.is_cpu(), software && !full) {
        (true, _) => (128, 32),
        // Two cores run a software adapter's prefill at a few tokens a second.
        (false, true) => (8, 4),
        (false, false) => (128, 128),
    };
    let mut rows = Vec::new();
    for format in ["f32", "f16", "q8_0", "q4_0"] {
        let r = load(m, format, dev).and_then(|model| decode_row(&model, dev, p, n, &m.preset));
        match r {
            Ok((row, weight_bytes)) => {
                let gbs = weight_bytes as f64 * row.decode / 1e9;
                println!(
                    "  decode {format}: prefill {:.1} tok/s ({p} tokens), decode {:.1} tok/s ({n} tokens), \
                     {gbs:.1} GB/s of weights = {} of the read bandwidth; per token {:.0} dispatches, \
                     {:.2} submits, {:.0} bytes read back, {:.2} ms recording on the host",
                    row.prefill,
                    row.decode,
                    pct(gbs, read_gbs),
                    row.dispatches,
                    row.submits,
                    row.read_back,
                    row.record_ms
                );
                rows.push(
                    json!({"format": format, "prefill_tokens": p, "prefill_tok_s": row.prefill,
                    "decode_tokens": n, "decode_tok_s": row.decode, "weight_bytes": weight_bytes,
                    "decode_gbs": gbs, "pct_of_read_bandwidth": read_gbs.map(|r| 100.0 * gbs / r),
                    "dispatches_per_token": row.dispatches, "submits_per_token": row.submits,
                    "bytes_read_back_per_token": row.read_back,
                    "host_record_ms_per_token": row.record_ms}),
                );
            }
            Err(e) => println!("  decode {format}: failed: {e}"),
        }
    }
    Value::Array(rows)
}

struct DecodeRow {
    prefill: f64,
    decode: f64,
    dispatches: f64,
    submits: f64,
    read_back: f64,
    /// Host time per token spent recording (and submitting) the step's kernels.
    record_ms: f64,
}

/// Prefill `p` tokens, then decode `n` greedily, reading back each id (4 bytes) as `generate`
/// does. Returns the row and the weight bytes a decoded token reads (all weights but the
/// token-embedding table, of which one row is read).
fn decode_row(
    model: &CausalLM,
    dev: &Device,
    p: usize,
    n: usize,
    preset: &random_llama::Preset,
) -> Result<(DecodeRow, usize)> {
    let vocab = preset.vocab as u32;
    let prompt: Vec<u32> = (0..p as u32)
        .map(|i| 300 + (i * 7919) % (vocab - 300))
        .collect();
    {
        let mut warm = model.new_cache(16)?;
        let l = model.forward_last(&prompt[..8], &mut warm)?;
        let id = l.argmax_all()?.to_scalar::<u32>()?;
        model
            .forward_last(&[id], &mut warm)?
            .argmax_all()?
            .to_scalar::<u32>()?;
    }
    let mut cache = model.new_cache(p + n + 1)?;
    let t = Instant::now();
    let mut id = model
        .forward_last(&prompt, &mut cache)?
        .argmax_all()?
        .to_scalar::<u32>()?;
    let prefill = p as f64 / t.elapsed().as_secs_f64();
    wgtensor::reset_kernel_stats(dev);
    wgtensor::reset_transfer_stats(dev);
    let t = Instant::now();
    // Time spent recording a step against time spent waiting for its id: which side bounds
    // decode.
    let mut record = 0f64;
    for _ in 0..n {
        // One submit per token, as generation does it (`Device::one_submit`).
        id = dev.one_submit(|| -> Result<u32> {
            let r = Instant::now();
            let next = model.forward_last(&[id], &mut cache)?.argmax_all()?;
            record += r.elapsed().as_secs_f64();
            next.to_scalar::<u32>()
        })?;
    }
    let decode = n as f64 / t.elapsed().as_secs_f64();
    let (k, x) = (wgtensor::kernel_stats(dev), wgtensor::transfer_stats(dev));
    let params = preset.parameters() as f64;
    let embed = (preset.vocab * preset.hidden) as f64;
    let bytes = (model.size_in_bytes() as f64 * (params - embed) / params) as usize;
    Ok((
        DecodeRow {
            prefill,
            decode,
            dispatches: k.dispatches as f64 / n as f64,
            submits: k.submits as f64 / n as f64,
            read_back: x.download_bytes as f64 / n as f64,
            record_ms: 1e3 * record / n as f64,
        },
        bytes,
    ))
}

fn run() -> std::result::Result<bool, String> {
    let Some(args) = parse_args()? else {
        println!("{USAGE}");
        return Ok(true);
    };
    let started = Instant::now();
    println!(
        "wgtensor {} device report, {} {}, {}",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::env::consts::ARCH,
        cpu_name()
    );
    let devs = devices(&args)?;
    let model = if args.decode {
        Some(make_model(&args)?)
    } else {
        None
    };
    let (mut all_ok, mut out) = (true, Vec::new());
    for (dev, measure) in devs {
        println!("\n== {dev} ({})", dev.name());
        let mut entry = serde_json::Map::new();
        entry.insert("device".into(), json!(dev.to_string()));
        entry.insert("adapter".into(), adapter_section(&dev));
        println!("correctness (against a host reference in f64):");
        let checks = report_checks::correctness(&dev);
        let mut cj = Vec::new();
        for c in &checks {
            println!("  {:<40} {}", c.name, c.line());
            all_ok &= c.ok();
            cj.push(json!({"check": c.name, "ok": c.ok(), "detail": c.line()}));
        }
        entry.insert("correctness".into(), Value::Array(cj));
        if !measure {
            println!("(a second view of a listed GPU: measured through its first view; --device {dev} measures it here)");
        } else {
            println!("measured limits:");
            let limits = report_probe::measure(&dev);
            entry.insert("limits".into(), limits.to_json());
            println!("kernels against those limits:");
            entry.insert("matmul".into(), matmul_section(&dev, &limits, args.full));
            entry.insert("matvec".into(), matvec_section(&dev, limits.read_gbs));
            if let Some(m) = &model {
                println!("decode ({} preset, random weights):", args.preset);
                entry.insert(
                    "decode".into(),
                    decode_section(&dev, m, limits.read_gbs, args.full),
                );
            }
        }
        out.push(Value::Object(entry));
    }
    println!(
        "\nreport done in {:.0} s; correctness {}",
        started.elapsed().as_secs_f64(),
        if all_ok {
            "all ok"
        } else {
            "FAILED (see above)"
        }
    );
    if let Some(path) = &args.json {
        let doc = json!({"wgtensor": env!("CARGO_PKG_VERSION"), "host": cpu_name(),
            "os": std::env::consts::OS, "arch": std::env::consts::ARCH,
            "correctness_ok": all_ok, "devices": out});
        let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(all_ok)
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(2),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
