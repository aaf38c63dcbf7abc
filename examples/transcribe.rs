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

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;
use wgtensor::models::{read_wav, Whisper};
use wgtensor::{DType, Device};

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

enum Cli {
    Run(Args),
    Help,
}

fn text(what: &str, v: OsString) -> Result<String, String> {
    v.into_string()
        .map_err(|v| format!("{what}: {v:?} is not valid UTF-8"))
}

fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Cli, String> {
    let mut a = Args {
        model: PathBuf::new(),
        audio: PathBuf::new(),
        device: None,
        dtype: DType::F32,
        ids: false,
        bench: 0,
    };
    let (mut model, mut audio) = (false, false);
    let mut it = args.into_iter();
    while let Some(flag) = it.next() {
        let flag = text("argument", flag)?;
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--model" => (a.model, model) = (PathBuf::from(value()?), true),
            "--audio" => (a.audio, audio) = (PathBuf::from(value()?), true),
            "--device" => a.device = Some(text(&flag, value()?)?),
            "--dtype" => {
                a.dtype = match text(&flag, value()?)?.as_str() {
                    "f32" => DType::F32,
                    "f16" => DType::F16,
                    other => return Err(format!("--dtype: {other:?} is not f32 or f16")),
                }
            }
            "--ids" => a.ids = true,
            "--bench" => {
                let v = text(&flag, value()?)?;
                a.bench = v
                    .parse()
                    .map_err(|_| format!("--bench: {v:?} is not a valid number"))?;
            }
            "--help" | "-h" => return Ok(Cli::Help),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if !model || !audio {
        return Err("--model and --audio are required".into());
    }
    Ok(Cli::Run(a))
}

fn run(args: Args) -> Result<(), String> {
    let device: Device = match &args.device {
        Some(d) => d.parse().map_err(|e: wgtensor::Error| e.to_string())?,
        None => Device::best(),
    };
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
    // Mesa's device-select layer complains on machines without a display; keep the output clean.
    if std::env::var_os("XDG_RUNTIME_DIR").is_none()
        && std::env::var_os("NODEVICE_SELECT").is_none()
    {
        // SAFETY: first statement of `main`, before any other thread exists.
        unsafe { std::env::set_var("NODEVICE_SELECT", "1") };
    }
    let args = match parse(std::env::args_os().skip(1)) {
        Ok(Cli::Run(args)) => args,
        Ok(Cli::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
