//! Sentence embeddings with a sentence-transformers (or plain Hugging Face) directory of a
//! `bert`, `roberta` or `xlm-roberta` encoder, e.g. `all-MiniLM-L6-v2` or `bge-small-en-v1.5`.
//!
//! ```text
//! cargo run --release --features models --example embed -- --model DIR [--device D]
//!     [--dtype f32|f16] --text TEXT [--text TEXT ..] [--text-file FILE] [--json] [--bench N]
//! ```
//!
//! Prints the embedding dimension and the cosine-similarity matrix of the texts; `--json` adds
//! a last line `{"embeddings": [[..], ..]}`. `--text-file` reads one text per line.
//! `--bench N` embeds the texts N more times after a warm-up and prints
//! `throughput: X sentences/s (batch B, T tokens per text on average) on DEVICE (DTYPE)`;
//! `scripts/embed_peer.py` writes a MiniLM-sized model and measures sentence-transformers on
//! the same texts. `--help` prints the usage on stdout (exit code 0); a bad command line is a
//! message and the usage on stderr, exit code 2; any other error is one line on stderr and exit
//! code 1.

#[path = "common/args.rs"]
mod cli;

use cli::{device, dtype, num, read_flags, text, Cli};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use wgtensor::models::{Embedder, Tokenizer};
use wgtensor::DType;

const USAGE: &str =
    "usage: embed --model DIR [--device D] [--dtype f32|f16] --text TEXT [--text TEXT ..] \
[--text-file FILE] [--json] [--bench N]";

struct Args {
    model: PathBuf,
    device: Option<String>,
    dtype: DType,
    texts: Vec<String>,
    text_file: Option<PathBuf>,
    json: bool,
    bench: usize,
}

fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Cli<Args>, String> {
    let mut a = Args {
        model: PathBuf::new(),
        device: None,
        dtype: DType::F32,
        texts: Vec::new(),
        text_file: None,
        json: false,
        bench: 0,
    };
    let mut model = false;
    let cli = read_flags(args, |flag, value| {
        match flag {
            "--model" => (a.model, model) = (PathBuf::from(value()?), true),
            "--device" => a.device = Some(text(flag, value()?)?),
            "--dtype" => a.dtype = dtype(flag, value()?)?,
            "--text" => a.texts.push(text(flag, value()?)?),
            "--text-file" => a.text_file = Some(PathBuf::from(value()?)),
            "--json" => a.json = true,
            "--bench" => a.bench = num(flag, value()?)?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    if let Cli::Help = cli {
        return Ok(Cli::Help);
    }
    if !model || (a.texts.is_empty() && a.text_file.is_none()) {
        return Err("--model and at least one --text (or --text-file) are required".into());
    }
    Ok(Cli::Run(a))
}

fn run(mut args: Args) -> Result<(), String> {
    let device = device(args.device.as_deref())?;
    if let Some(f) = &args.text_file {
        let s = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
        args.texts
            .extend(s.lines().filter(|l| !l.is_empty()).map(str::to_string));
    }
    let e = Embedder::load(&args.model, &device, args.dtype).map_err(|e| e.to_string())?;
    let texts: Vec<&str> = args.texts.iter().map(String::as_str).collect();
    let v = e.embed(&texts).map_err(|e| e.to_string())?;
    let n = texts.len();
    println!("{n} texts, embedding dimension {} on {device}", e.dim());
    // Every pair at once: [n, 1, dim] against [1, n, dim] broadcasts to [n, n].
    let sim = v
        .unsqueeze(1)
        .and_then(|a| a.cosine_similarity(&v.unsqueeze(0)?, -1, 1e-8))
        .and_then(|s| s.to_vec::<f32>())
        .map_err(|e| e.to_string())?;
    println!("cosine similarity:");
    for i in 0..n {
        let row: Vec<String> = sim[i * n..(i + 1) * n]
            .iter()
            .map(|s| format!("{s:7.4}"))
            .collect();
        println!("  [{}]", row.join(" "));
    }
    if args.bench > 0 {
        let tok =
            Tokenizer::from_file(args.model.join("tokenizer.json")).map_err(|e| e.to_string())?;
        let mut tokens = 0;
        for t in &texts {
            tokens += tok.encode(t, true).map_err(|e| e.to_string())?.len();
        }
        // Warm-up done above; every pass reads its result back, as a caller would.
        let t0 = std::time::Instant::now();
        for _ in 0..args.bench {
            e.embed(&texts)
                .and_then(|v| v.to_vec::<f32>())
                .map_err(|e| e.to_string())?;
        }
        let secs = t0.elapsed().as_secs_f64();
        println!(
            "throughput: {:.1} sentences/s (batch {n}, {:.1} tokens per text on average) on {device} ({})",
            (args.bench * n) as f64 / secs,
            tokens as f64 / n as f64,
            args.dtype
        );
    }
    if args.json {
        let values = v.to_vec::<f32>().map_err(|e| e.to_string())?;
        let rows: Vec<Vec<f32>> = values.chunks(e.dim().max(1)).map(<[f32]>::to_vec).collect();
        println!("{}", serde_json::json!({ "embeddings": rows }));
    }
    Ok(())
}

fn main() -> ExitCode {
    cli::main(USAGE, parse, run)
}
