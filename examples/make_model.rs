//! Writes a Llama-architecture model with random weights, no Python needed: a Hugging Face
//! directory (`config.json`, `model.safetensors`, a byte-level `tokenizer.json`, a
//! `tokenizer_config.json` with a small chat template for `generate --chat`) and, with
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
//! vocabulary 128,256; 5 GB in f32). `--gguf` may be given more than once. `--help` prints the
//! usage on stdout (exit code 0); a bad command line is a message and the usage on stderr, exit
//! code 2; a failure to write is exit code 1.

#[path = "common/args.rs"]
mod cli;
#[path = "common/random_llama.rs"]
mod random_llama;

use cli::{read_flags, text, Cli};
use random_llama::Preset;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use wgtensor::QType;

const USAGE: &str =
    "usage: make_model --out DIR [--preset tiny|125m|1b] [--gguf q8_0|q4_0|f32]... [--seed S]";

/// What the command line asks for.
struct Args {
    out: PathBuf,
    preset: String,
    ggufs: Vec<Option<QType>>,
    seed: u64,
}

/// Parses the arguments after the program name; a usage error is the message to print.
fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Cli<Args>, String> {
    let (mut out, mut preset, mut ggufs, mut seed) = (None, "tiny".to_string(), Vec::new(), 0u64);
    let cli = read_flags(args, |flag, value| {
        match flag {
            // The directory is taken as the OS gives it: it need not be UTF-8.
            "--out" => out = Some(PathBuf::from(value()?)),
            "--preset" => preset = text(flag, value()?)?,
            "--gguf" => ggufs.push(match text(flag, value()?)?.as_str() {
                "f32" => None,
                "q8_0" => Some(QType::Q8_0),
                "q4_0" => Some(QType::Q4_0),
                other => return Err(format!("--gguf: {other:?} is not q8_0, q4_0 or f32")),
            }),
            "--seed" => {
                seed = text(flag, value()?)?
                    .parse()
                    .map_err(|_| "--seed takes an integer".to_string())?
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    if let Cli::Help = cli {
        return Ok(Cli::Help);
    }
    let out = out.ok_or("--out DIR is required")?;
    Ok(Cli::Run(Args {
        out,
        preset,
        ggufs,
        seed,
    }))
}

fn run(args: Args) -> Result<(), String> {
    let Args {
        out,
        preset,
        ggufs,
        seed,
    } = args;
    let p = Preset::named(&preset)
        .ok_or_else(|| format!("--preset: {preset:?} is not tiny, 125m or 1b"))?;
    random_llama::write(&out, &p, &ggufs, seed)?;
    println!(
        "wrote {} (config.json, model.safetensors, tokenizer.json, tokenizer_config.json)",
        out.display()
    );
    for q in ggufs {
        println!("wrote {}", out.join(random_llama::gguf_name(q)).display());
    }
    Ok(())
}

fn main() -> ExitCode {
    cli::main(USAGE, parse, run)
}
