//! Speech to text with a Hugging Face Whisper directory (e.g. `openai/whisper-tiny`).
//!
//! ```text
//! cargo run --release --features models --example transcribe -- --model DIR --audio FILE.wav
//!     [--device D] [--dtype f32|f16] [--ids] [--bench N]
//! ```
//!
//! Reads the WAV file (16-bit or float, any sample rate, mixed down to mono, resampled to
//! 16 kHz), prints the text and, with `--ids`, a last line `ids: [..]`. `--bench N` transcribes
//! N more times after a warm-up and prints
//! `time: X ms per transcription (W windows, T ids) on DEVICE (DTYPE)`; `scripts/whisper_peer.py`
//! writes a Whisper-tiny-sized model and 30 s of audio and measures transformers on them.
//! `--help` prints the usage on stdout (exit code 0); a bad command line is a message and the
//! usage on stderr, exit code 2; any other error is one line on stderr and exit code 1.

#[path = "common/args.rs"]
mod cli;

use cli::{device, dtype, num, read_flags, text, Cli};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;
use wgtensor::models::{read_wav, Whisper};
use wgtensor::DType;

const USAGE: &str =
    "usage: transcribe --model DIR --audio FILE.wav [--device D] [--dtype f32|f16] \
[--ids] [--bench N]";

struct Args {
    model: PathBuf,
    audio: PathBuf,
    device: Option<String>,
    dtype: DType,
    ids: bool,
    bench: usize,
}

fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Cli<Args>, String> {
    let mut a = Args {
        model: PathBuf::new(),
        audio: PathBuf::new(),
        device: None,
        dtype: DType::F32,
        ids: false,
        bench: 0,
    };
    let (mut model, mut audio) = (false, false);
    let cli = read_flags(args, |flag, value| {
        match flag {
            "--model" => (a.model, model) = (PathBuf::from(value()?), true),
            "--audio" => (a.audio, audio) = (PathBuf::from(value()?), true),
            "--device" => a.device = Some(text(flag, value()?)?),
            "--dtype" => a.dtype = dtype(flag, value()?)?,
            "--ids" => a.ids = true,
            "--bench" => a.bench = num(flag, value()?)?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    if let Cli::Help = cli {
        return Ok(Cli::Help);
    }
    if !model || !audio {
        return Err("--model and --audio are required".into());
    }
    Ok(Cli::Run(a))
}

fn run(args: Args) -> Result<(), String> {
    let device = device(args.device.as_deref())?;
    let whisper = Whisper::load(&args.model, &device, args.dtype).map_err(|e| e.to_string())?;
    let rate = whisper.log_mel().sampling_rate();
    let samples = read_wav(&args.audio, rate).map_err(|e| e.to_string())?;
    let t = whisper.transcribe(&samples).map_err(|e| e.to_string())?;
    println!("{}", t.text);
    if args.bench > 0 {
        let start = Instant::now();
        for _ in 0..args.bench {
            whisper.transcribe(&samples).map_err(|e| e.to_string())?;
        }
        let ms = start.elapsed().as_secs_f64() * 1000.0 / args.bench as f64;
        println!(
            "time: {ms:.1} ms per transcription ({} windows, {} ids) on {device} ({})",
            t.windows.len(),
            t.ids.len(),
            args.dtype
        );
    }
    if args.ids {
        println!("ids: {:?}", t.ids);
    }
    Ok(())
}

fn main() -> ExitCode {
    cli::main(USAGE, parse, run)
}
