//! Text generation with a pretrained model: a Hugging Face directory or a llama.cpp `.gguf` file.
//!
//! ```text
//! cargo run --release --features models --example generate -- --model PATH [--tokenizer FILE]
//!     --prompt TEXT [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S]
//!     [--repetition-penalty R] [--device D] [--dtype f32|f16] [--ids] [--chat] [--batch N]
//! ```
//!
//! Streams the continuation, then prints `prefill: X tok/s, decode: Y tok/s on DEVICE (DTYPE)`;
//! with `--ids`, a last line `ids: [..]` (the generated ids as JSON). `--temperature 0` (the
//! default) is greedy. A GGUF file takes its tokenizer from `--tokenizer` or a `tokenizer.json`
//! beside it. `--help` prints the usage on stdout (exit code 0); a bad command line (an unknown
//! flag, a missing value, an argument that is not UTF-8 where text is needed) is a message and
//! the usage on stderr, exit code 2; any other error is one line on stderr and exit code 1.
//! Loading progress goes to stderr when it is a terminal. Make a model to try it with `examples/make_model.rs`.
//!
//! `--chat` makes the prompt a user message of the model's chat template (`tokenizer_config.json`
//! beside `tokenizer.json`, or the GGUF file's own) with the assistant header appended; the
//! rendered text carries the template's special tokens, so none are added when encoding it.
//! Without `--prompt`, it is a conversation: each line of stdin is a user turn (a `> ` prompt
//! shows when stdin is a terminal), the replies stream, and the conversation is kept; the KV
//! cache of one turn is kept for the next, so each turn runs only its new tokens. A chat stops at
//! the model's EOS ids (`generation_config.json`'s list) and the template's `eos_token`.
//!
//! `--batch N` generates for N prompts at once with `CausalLM::generate_batch` (the prompt's
//! first `len - i` ids for sequence `i`, at least one: ragged lengths) and prints each
//! continuation, then `batch N: G tokens in T s, decode X tok/s` on the device: the decode rate
//! of the whole batch, from the time of the generation less that of a run stopping after the
//! prefills and first ids.

#[path = "common/args.rs"]
mod cli;

use cli::{device, dtype, num, read_flags, text, Cli};
use std::ffi::OsString;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use wgtensor::models::{
    AutoModel, CausalLM, ChatMessage, GenerateOptions, KvCache, TextStream, TokenStream, Tokenizer,
};
use wgtensor::{DType, Device};

struct Args {
    model: PathBuf,
    tokenizer: Option<PathBuf>,
    prompt: String,
    options: GenerateOptions,
    device: Option<String>,
    dtype: DType,
    ids: bool,
    /// `--chat`, or no `--prompt`: a conversation through the chat template.
    chat: bool,
    /// `--prompt` was given (else the user turns come from stdin).
    has_prompt: bool,
    /// `--batch N`: N prompts through `generate_batch` (0: off).
    batch: usize,
}

const USAGE: &str = "usage: generate --model PATH [--tokenizer FILE] --prompt TEXT [--max-new-tokens N] \
[--temperature T] [--top-k K] [--top-p P] [--seed S] [--repetition-penalty R] [--device D] [--dtype f32|f16] [--ids] [--chat] [--batch N]
without --prompt: a chat, one user turn per line of stdin";

/// Parses the arguments after the program name; a usage error is the message to print.
fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Cli<Args>, String> {
    let mut a = Args {
        model: PathBuf::new(),
        tokenizer: None,
        prompt: String::new(),
        options: GenerateOptions {
            max_new_tokens: 64,
            ..Default::default()
        },
        device: None,
        dtype: DType::F32,
        ids: false,
        chat: false,
        has_prompt: false,
        batch: 0,
    };
    let (mut model, mut prompt) = (false, false);
    let cli = read_flags(args, |flag, value| {
        match flag {
            // Paths are taken as the OS gives them: they need not be UTF-8.
            "--model" => (a.model, model) = (PathBuf::from(value()?), true),
            "--tokenizer" => a.tokenizer = Some(PathBuf::from(value()?)),
            "--prompt" => (a.prompt, prompt) = (text(flag, value()?)?, true),
            "--max-new-tokens" => a.options.max_new_tokens = num(flag, value()?)?,
            "--temperature" => a.options.temperature = num(flag, value()?)?,
            "--top-k" => a.options.top_k = num(flag, value()?)?,
            "--top-p" => a.options.top_p = num(flag, value()?)?,
            "--seed" => a.options.seed = Some(num(flag, value()?)?),
            "--repetition-penalty" => a.options.repetition_penalty = num(flag, value()?)?,
            "--device" => a.device = Some(text(flag, value()?)?),
            "--dtype" => a.dtype = dtype(flag, value()?)?,
            "--ids" => a.ids = true,
            "--chat" => a.chat = true,
            "--batch" => a.batch = num(flag, value()?)?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    if let Cli::Help = cli {
        return Ok(Cli::Help);
    }
    if !model {
        return Err("--model is required".into());
    }
    // Without a prompt the user turns come from stdin: that is a chat.
    a.has_prompt = prompt;
    a.chat |= !prompt;
    Ok(Cli::Run(a))
}

/// The tokenizer: `--tokenizer`, else `tokenizer.json` in the model directory or beside the file.
fn tokenizer(args: &Args) -> Result<Tokenizer, String> {
    let path = match &args.tokenizer {
        Some(p) => p.clone(),
        None => {
            let dir = if args.model.is_dir() {
                args.model.clone()
            } else {
                args.model
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_default()
            };
            let p = dir.join("tokenizer.json");
            if !p.is_file() {
                return Err(format!(
                    "no tokenizer.json beside {} (GGUF vocabularies are not read); pass --tokenizer FILE",
                    args.model.display()
                ));
            }
            p
        }
    };
    let mut tok = Tokenizer::from_file(&path).map_err(|e| e.to_string())?;
    let gguf = args.model.extension().is_some_and(|e| e == "gguf");
    if args.chat && gguf && tok.chat_template().is_none() {
        // A GGUF file carries its model's template in its metadata.
        tok.load_chat_template(&args.model)
            .map_err(|e| e.to_string())?;
    }
    Ok(tok)
}

/// Peak resident memory of this process (Linux `VmHWM`), in MB.
fn peak_rss_mb() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

fn run(args: Args) -> Result<(), String> {
    let device = device(args.device.as_deref())?;
    if !args.model.exists() {
        return Err(format!(
            "{}: no such file or directory",
            args.model.display()
        ));
    }
    let tok = tokenizer(&args)?;
    let terminal = std::io::stderr().is_terminal();
    let t0 = std::time::Instant::now();
    let model =
        AutoModel::load_with_progress(&args.model, &device, args.dtype, &mut |done, total| {
            if terminal {
                let pct = if total == 0 {
                    100.0
                } else {
                    100.0 * done as f64 / total as f64
                };
                eprint!(
                    "\rloading {}: {pct:5.1}% of {:.1} MB",
                    args.model.display(),
                    total as f64 / 1e6
                );
            }
        })
        .map_err(|e| e.to_string())?;
    if terminal {
        eprintln!();
    }
    eprintln!(
        "loaded {} ({} layers, {:.1} MB of weights) on {device} in {:.2} s; peak host memory {:.0} MB",
        model.config().model_type,
        model.config().num_layers,
        model.size_in_bytes() as f64 / 1e6,
        t0.elapsed().as_secs_f64(),
        peak_rss_mb().unwrap_or(0.0)
    );
    if args.chat {
        return chat(&args, &tok, &model, &device);
    }
    let prompt = tok.encode(&args.prompt, true).map_err(|e| e.to_string())?;
    let ctx = model.config().max_position_embeddings;
    if prompt.len() >= ctx {
        return Err(format!(
            "the prompt is {} tokens, the model's context {ctx}: shorten it",
            prompt.len()
        ));
    }
    if args.batch > 0 {
        return batch(&args, &tok, &model, &device, &prompt);
    }
    let mut stream = model
        .stream(&prompt, &args.options)
        .map_err(|e| e.to_string())?;
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "{}", args.prompt);
    let (ids, device) = (args.ids, &device);
    print_stream(&mut out, &mut stream, tok.stream(), ids, (&model, device)).map(|_| ())
}

/// Prints `stream`'s text as it comes, then a line with its rates and, with `ids`, one with the
/// generated ids, which it returns.
fn print_stream(
    out: &mut dyn Write,
    stream: &mut TokenStream<'_>,
    mut text: TextStream<'_>,
    ids: bool,
    (model, device): (&CausalLM, &Device),
) -> Result<Vec<u32>, String> {
    let err = |e: wgtensor::Error| e.to_string();
    let mut generated = Vec::new();
    for id in stream.by_ref() {
        let id = id.map_err(err)?;
        generated.push(id);
        if let Some(piece) = text.push(id).map_err(err)? {
            let _ = write!(out, "{piece}");
            let _ = out.flush();
        }
    }
    if let Some(rest) = text.finish().map_err(err)? {
        let _ = write!(out, "{rest}");
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "prefill: {:.1} tok/s, decode: {:.1} tok/s on {device} ({})",
        stream.prefill_tokens_per_second(),
        stream.decode_tokens_per_second(),
        model.weight_type()
    );
    if ids {
        let list: Vec<String> = generated.iter().map(u32::to_string).collect();
        let _ = writeln!(out, "ids: [{}]", list.join(", "));
    }
    Ok(generated)
}

/// `--batch N`: N ragged prompts through `generate_batch`, and the batch's decode rate.
fn batch(
    args: &Args,
    tok: &Tokenizer,
    model: &CausalLM,
    device: &Device,
    prompt: &[u32],
) -> Result<(), String> {
    let err = |e: wgtensor::Error| e.to_string();
    let prompts: Vec<&[u32]> = (0..args.batch)
        .map(|i| &prompt[..prompt.len().saturating_sub(i).max(1)])
        .collect();
    let first = GenerateOptions {
        max_new_tokens: args.options.max_new_tokens.min(1),
        ..args.options.clone()
    };
    model.generate_batch(&prompts, &first).map_err(err)?; // warm-up
    let t0 = std::time::Instant::now();
    model.generate_batch(&prompts, &first).map_err(err)?;
    let t_first = t0.elapsed().as_secs_f64();
    let t0 = std::time::Instant::now();
    let outs = model.generate_batch(&prompts, &args.options).map_err(err)?;
    let t_all = t0.elapsed().as_secs_f64();
    let mut out = std::io::stdout().lock();
    for (i, ids) in outs.iter().enumerate() {
        let text = tok.decode(ids, true).map_err(err)?;
        let _ = writeln!(out, "[{i}] {text}");
        if args.ids {
            let list: Vec<String> = ids.iter().map(u32::to_string).collect();
            let _ = writeln!(out, "[{i}] ids: [{}]", list.join(", "));
        }
    }
    let total: usize = outs.iter().map(Vec::len).sum();
    let later = total.saturating_sub(outs.iter().filter(|o| !o.is_empty()).count());
    let _ = writeln!(
        out,
        "batch {}: {total} tokens in {t_all:.2} s, decode {:.1} tok/s on {device} ({})",
        args.batch,
        later as f64 / (t_all - t_first).max(1e-9),
        model.weight_type()
    );
    Ok(())
}

/// A conversation: `--prompt` as its one user turn, or each line of stdin as the next.
fn chat(args: &Args, tok: &Tokenizer, model: &CausalLM, device: &Device) -> Result<(), String> {
    let err = |e: wgtensor::Error| e.to_string();
    let mut options = args.options.clone();
    if options.eos_token_ids.is_none() {
        // The model's EOS ids, and the template's end-of-turn token (`<|im_end|>`, `<|eot_id|>`)
        // when the model's configuration does not list it.
        let mut eos = model.config().eos_token_ids.clone();
        let turn_end = tok
            .special_token("eos_token")
            .and_then(|t| tok.token_to_id(t));
        eos.extend(turn_end.filter(|id| !eos.contains(id)));
        options.eos_token_ids = Some(eos);
    }
    let ctx = model.config().max_position_embeddings;
    let terminal = std::io::stdin().is_terminal();
    let mut lines = std::io::stdin().lock().lines();
    let mut out = std::io::stdout().lock();
    let mut messages: Vec<ChatMessage> = Vec::new();
    // The cache of the last turn and the ids it holds, so that the next turn runs only the
    // tokens past what the two share.
    let mut cache: Option<KvCache> = None;
    let mut held: Vec<u32> = Vec::new();
    loop {
        let user = if args.has_prompt {
            if !messages.is_empty() {
                break;
            }
            args.prompt.clone()
        } else {
            if terminal {
                eprint!("> ");
            }
            match lines.next() {
                None => break,
                Some(line) => line.map_err(|e| format!("reading stdin: {e}"))?,
            }
        };
        messages.push(ChatMessage::user(user));
        let text = tok.apply_chat_template(&messages, true).map_err(err)?;
        // The template wrote the special tokens (BOS included): add none.
        let ids = tok.encode(&text, false).map_err(err)?;
        if ids.len() >= ctx {
            return Err(format!(
                "the conversation is {} tokens, the model's context {ctx}: start a new one",
                ids.len()
            ));
        }
        // Keep the cached positions this turn's ids start with (at least one id must run).
        let shared = held.iter().zip(&ids).take_while(|(a, b)| a == b).count();
        let keep = shared.min(ids.len() - 1);
        let needed = ids.len().saturating_add(options.max_new_tokens).min(ctx);
        let mut c = match cache.take() {
            Some(c) if c.capacity() >= needed => c,
            // Too small (or the first turn): a larger cache, run from the start.
            _ => model.new_cache(needed.max(ctx.min(4096))).map_err(err)?,
        };
        let keep = keep.min(c.len());
        c.truncate(keep).map_err(err)?;
        eprintln!("chat: {} prompt tokens, {keep} of them cached", ids.len());
        let mut stream = model
            .stream_with_cache(c, &ids[keep..], &options)
            .map_err(err)?;
        let generated = print_stream(
            &mut out,
            &mut stream,
            tok.stream(),
            args.ids,
            (model, device),
        )?;
        let c = stream.into_cache();
        held = ids
            .iter()
            .chain(&generated)
            .copied()
            .take(c.len())
            .collect();
        cache = Some(c);
        let reply = tok.decode(&generated, true).map_err(err)?;
        messages.push(ChatMessage::assistant(reply));
    }
    Ok(())
}

fn main() -> ExitCode {
    cli::main(USAGE, parse, run)
}
