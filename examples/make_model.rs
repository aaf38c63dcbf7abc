//! Writes a Llama-architecture model with random weights, no Python needed: a Hugging Face
//! directory (`config.json`, `model.safetensors`, a byte-level `tokenizer.json`) and, with
//! `--gguf`, a llama.cpp file beside it (`model-<type>.gguf`, q/k rows permuted as llama.cpp
//! stores them). For trying `examples/generate.rs` and for the benchmarks.
//!
//! ```text
//! cargo run --release --features models --example make_model -- --out DIR [--preset tiny|125m|1b]
//!     [--gguf q8_0|q4_0|f32]... [--seed S]
//! ```
//!
//! `tiny`: 2 layers, hidden 64 (a few hundred KB). `125m`: the 125 M-parameter Llama of the
//! benchmarks (12 layers, hidden 768, 12 heads, 4 key-value heads, intermediate 2048, vocabulary
//! 32,000, context 1024; 500 MB in f32). `1b`: Llama 3.2 1B's shape (16 layers, hidden 2048,
//! vocabulary 128,256; 5 GB in f32). `--gguf` may be given more than once.

#[path = "common/random_llama.rs"]
mod random_llama;

use random_llama::Preset;
use std::path::PathBuf;
use std::process::ExitCode;
use wgtensor::QType;

fn run() -> std::result::Result<(), String> {
    let (mut out, mut preset, mut ggufs, mut seed) = (None, "tiny".to_string(), Vec::new(), 0u64);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--out" => out = Some(PathBuf::from(value()?)),
            "--preset" => preset = value()?,
            "--gguf" => ggufs.push(match value()?.as_str() {
                "f32" => None,
                "q8_0" => Some(QType::Q8_0),
                "q4_0" => Some(QType::Q4_0),
                other => return Err(format!("--gguf: {other:?} is not q8_0, q4_0 or f32")),
            }),
            "--seed" => seed = value()?.parse().map_err(|_| "--seed takes an integer".to_string())?,
            other => {
                return Err(format!(
                    "unknown argument {other:?}; usage: make_model --out DIR [--preset tiny|125m|1b] [--gguf q8_0|q4_0|f32]... [--seed S]"
                ))
            }
        }
    }
    let out = out.ok_or("--out DIR is required")?;
    let p = Preset::named(&preset)
        .ok_or_else(|| format!("--preset: {preset:?} is not tiny, 125m or 1b"))?;
    random_llama::write(&out, &p, &ggufs, seed)?;
    println!(
        "wrote {} (config.json, model.safetensors, tokenizer.json)",
        out.display()
    );
    for q in ggufs {
        println!("wrote {}", out.join(random_llama::gguf_name(q)).display());
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
