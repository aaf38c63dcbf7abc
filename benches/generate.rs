//! Prefill and greedy-decode speed of the 125 M-parameter Llama of the benchmarks (12 layers,
//! hidden 768, 12 heads, 4 key-value heads, intermediate 2048, vocabulary 32,000), with f32,
//! f16, Q8_0 and Q4_0 weights, and Q4_K_M and Q6_K where their files exist, on the CPU and
//! every adapter.
//!
//! The model comes from `examples/make_model.rs` (random weights, no download):
//!
//! ```text
//! cargo run --release --features models --example make_model -- --out target/llm125m --preset 125m --gguf q8_0
//! cargo run --release --features models --example make_model -- --out target/llm125m --preset 125m --gguf q4_0
//! cargo bench --bench generate --features models [-- FILTER]
//! ```
//!
//! The K-quant files come from llama.cpp's own quantizer (`make_model` does not write them):
//! `--gguf f32`, then `python3 scripts/quantize_gguf.py target/llm125m/model-f32.gguf
//! target/llm125m/model-q4_k_m.gguf q4_k_m` (and `q6_k`); their rows are skipped without them.
//!
//! `WGTENSOR_BENCH_LLM=DIR` reads the model from DIR instead of `target/llm125m`. Each row
//! prints `dtype/device: prefill X tok/s (P tokens), decode Y tok/s (N tokens)`, the best of
//! the rounds (median in brackets) and the load average, so figures from a shared machine can
//! be read against it. Prefill is one `forward_last` over a P-token prompt; decode is N steps
//! of one token each, every step reading back the argmax id (4 bytes), as `generate` does.
//! GPU rows use fewer tokens (software adapters are 50-100x slower). Peer:
//! transformers + PyTorch eager on the same model (see docs/performance.md).

use std::path::PathBuf;
use std::time::Instant;
use wgtensor::models::{AutoModel, CausalLM};
use wgtensor::{DType, Device, Result};

fn devices() -> Vec<Device> {
    let mut v = vec![Device::cpu()];
    v.extend(
        wgtensor::adapters()
            .iter()
            .filter_map(|a| a.names.first()?.parse().ok()),
    );
    v
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// One round: (prefill seconds, decode seconds).
fn round(model: &CausalLM, prompt: &[u32], new: usize) -> Result<(f64, f64)> {
    let mut cache = model.new_cache(prompt.len() + new)?;
    let t0 = Instant::now();
    let logits = model.forward_last(prompt, &mut cache)?;
    let mut id = logits.argmax_all()?.to_scalar::<u32>()?;
    let prefill = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    for _ in 0..new {
        let logits = model.forward_last(&[id], &mut cache)?;
        id = logits.argmax_all()?.to_scalar::<u32>()?;
    }
    Ok((prefill, t1.elapsed().as_secs_f64()))
}

fn row(name: &str, model: &CausalLM, cpu: bool) -> Result<()> {
    let (p, n, rounds) = if cpu { (128, 32, 3) } else { (16, 4, 1) };
    // Ids spread over the vocabulary, fixed.
    let prompt: Vec<u32> = (0..p as u32).map(|i| 300 + (i * 7919) % 31_000).collect();
    round(model, &prompt[..8], 2)?; // warm-up: kernels, pools, caches
    let mut pre = Vec::new();
    let mut dec = Vec::new();
    for _ in 0..rounds {
        let (a, b) = round(model, &prompt, n)?;
        pre.push(p as f64 / a);
        dec.push(n as f64 / b);
    }
    let best_med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() - 1], v[v.len() / 2])
    };
    let (pb, pm) = best_med(&mut pre);
    let (db, dm) = best_med(&mut dec);
    println!(
        "{name}: prefill {pb:.1} tok/s ({pm:.1}) ({p} tokens), decode {db:.1} tok/s ({dm:.1}) \
         ({n} tokens), load average {}",
        load_average()
    );
    Ok(())
}

fn main() {
    let filter = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .unwrap_or_default();
    let dir = std::env::var_os("WGTENSOR_BENCH_LLM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/llm125m"));
    if !dir.join("config.json").is_file() {
        println!(
            "generate: no model in {} (make it: cargo run --release --features models \
             --example make_model -- --out {} --preset 125m --gguf q8_0, again with --gguf q4_0)",
            dir.display(),
            dir.display()
        );
        return;
    }
    for dev in devices() {
        for dtype in ["f32", "f16", "q8_0", "q4_0", "q4_k_m", "q6_k"] {
            let name = format!("{dtype}/{dev}");
            if !name.contains(&filter) {
                continue;
            }
            let loaded = match dtype {
                "f32" => AutoModel::load(&dir, &dev, DType::F32),
                "f16" => AutoModel::load(&dir, &dev, DType::F16),
                q => {
                    let f = dir.join(format!("model-{q}.gguf"));
                    if !f.is_file() {
                        println!("{name}: skipped (no {})", f.display());
                        continue;
                    }
                    AutoModel::load(&f, &dev, DType::F32)
                }
            };
            let r = loaded.and_then(|m| row(&name, &m, dev.is_cpu()));
            if let Err(e) = r {
                println!("{name}: failed: {e}");
            }
        }
    }
}
