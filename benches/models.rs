//! The model workloads compared with PyTorch, one row each, on the CPU and on every adapter:
//!
//! | row | workload |
//! |---|---|
//! | `conv2d_fwd` | 3x3 conv, 32 -> 32 channels, 8 images of 32x32, padding 1 |
//! | `conv2d_fwd_wgrad` | the same forward, then `sum().backward()` for the weight gradient |
//! | `sdpa_causal` | causal `scaled_dot_product_attention`, 4 heads x 256 x 64, forward |
//! | `sdpa_causal_composed` | the same through the composed reference (matmul, mask, softmax, matmul) |
//! | `sdpa_causal_fwd_bwd` | the same forward, then `sum().backward()` for q's gradient |
//! | `sdpa_causal_16k` | causal attention over 16,384 positions x 64 dims x 1 head, forward (CPU), with peak memory |
//! | `layer_norm` | `layer_norm` with weight and bias over the rows of 4096 x 1024 |
//! | `softmax` | `softmax` over the rows of 4096 x 1024 |
//! | `cnn_digits_adam` | the `cnn_digits` model, one Adam step, batch 64 of 1x8x8 |
//! | `char_transformer_adamw` | the `char_transformer` shape (2 blocks, width 64, 4 heads, context 64, vocabulary 65), one AdamW step, batch 32 |
//! | `mlp_adam` | MLP 784-256-10, one Adam step, batch 128 |
//! | `tiny_add_x1000` | 1,000 adds of two 16-element tensors (per-op overhead: the row's ms are µs per add) |
//! | `tiny_add_grad_x1000` | the same with one operand requiring grad (the autograd record) |
//!
//! Each row runs warm-up rounds, then prints the median (and range) of 9 timed rounds on the
//! CPU, 5 on a GPU; a round ends when the device has finished and one element of the result
//! has been read back, as `scripts/torch_peers.py` does for PyTorch, which prints the same row
//! names. `cargo bench --bench models [-- FILTER]` runs the rows whose `row/device` name contains
//! FILTER; `WGTENSOR_BENCH_ROUNDS=N` times N rounds instead (for a profiler, or steadier medians).

use std::time::Instant;
use wgtensor::nn::{
    self, BatchNorm2d, Conv2d, Embedding, Flatten, LayerNorm, Linear, MaxPool2d, Module, ReLU,
    Sequential, TransformerBlock,
};
use wgtensor::optim::{Adam, AdamW, Optimizer};
use wgtensor::{Conv2dOptions, Device, Result, Tensor};

fn devices() -> Vec<Device> {
    let mut v = vec![Device::cpu()];
    v.extend(
        wgtensor::adapters()
            .iter()
            .filter_map(|a| a.names.first()?.parse().ok()),
    );
    v
}

/// Waits for `t`'s device and reads one element, so a round includes the work it queued.
fn settle(t: &Tensor) -> Result<()> {
    t.device().synchronize()?;
    std::hint::black_box(t.flatten()?.narrow(0, 0, 1)?.to_vec::<f32>()?);
    Ok(())
}

/// Runs `round` after warm-up and prints `row/device: median ms (min - max, n rounds)`.
fn time(row: &str, dev: &Device, filter: &str, mut round: impl FnMut() -> Result<()>) {
    let name = format!("{row}/{dev}");
    if !name.contains(filter) {
        return;
    }
    let (warm, n) = if dev.is_cpu() { (3, 9) } else { (2, 5) };
    // More timed rounds on request (a profiler wants a longer run; medians steady with more).
    let n = std::env::var("WGTENSOR_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&r: &usize| r > 0)
        .unwrap_or(n);
    let mut ms = Vec::with_capacity(n);
    for i in 0..warm + n {
        let t0 = Instant::now();
        if let Err(e) = round() {
            println!("{name}: failed: {e}");
            return;
        }
        if i >= warm {
            ms.push(t0.elapsed().as_secs_f64() * 1e3);
        }
    }
    ms.sort_by(f64::total_cmp);
    println!(
        "{name}: {:.3} ms (min {:.3}, max {:.3}, {n} rounds)",
        ms[n / 2],
        ms[0],
        ms[n - 1]
    );
}

/// Whether any of `rows` on `dev` passes the filter (setups of filtered-out rows are skipped).
fn wanted(rows: &[&str], dev: &Device, filter: &str) -> bool {
    rows.iter().any(|r| format!("{r}/{dev}").contains(filter))
}

fn conv(dev: &Device, f: &str) -> Result<()> {
    if !wanted(&["conv2d_fwd", "conv2d_fwd_wgrad"], dev, f) {
        return Ok(());
    }
    wgtensor::manual_seed(0);
    let x = Tensor::randn(&[8, 32, 32, 32], dev)?;
    let w = Tensor::randn(&[32, 32, 3, 3], dev)?.mul_scalar(0.05)?;
    let o = Conv2dOptions::default().padding(1);
    time("conv2d_fwd", dev, f, || {
        let _g = wgtensor::no_grad();
        settle(&x.conv2d(&w, None, &o)?)
    });
    let w = w.requires_grad_(true);
    time("conv2d_fwd_wgrad", dev, f, || {
        w.zero_grad();
        x.conv2d(&w, None, &o)?.sum_all()?.backward()?;
        settle(&w.grad().expect("weight gradient"))
    });
    Ok(())
}

fn sdpa(dev: &Device, f: &str) -> Result<()> {
    let names = [
        "sdpa_causal",
        "sdpa_causal_composed",
        "sdpa_causal_fwd_bwd",
        "sdpa_causal_16k",
    ];
    if !wanted(&names, dev, f) {
        return Ok(());
    }
    let q = Tensor::randn(&[4, 256, 64], dev)?;
    let k = Tensor::randn(&[4, 256, 64], dev)?;
    let v = Tensor::randn(&[4, 256, 64], dev)?;
    let fwd = || {
        let _g = wgtensor::no_grad();
        settle(&Tensor::scaled_dot_product_attention(
            &q, &k, &v, None, true, 0.0, None,
        )?)
    };
    time("sdpa_causal", dev, f, fwd);
    // The composed reference (matmul, mask, softmax, matmul): the path before fusion.
    wgtensor::testing::force_attention(Some("composed"));
    time("sdpa_causal_composed", dev, f, fwd);
    wgtensor::testing::force_attention(None);
    let qg = q.requires_grad_(true);
    time("sdpa_causal_fwd_bwd", dev, f, || {
        let y = Tensor::scaled_dot_product_attention(&qg, &k, &v, None, true, 0.0, None)?;
        y.sum_all()?.backward()?;
        let g = qg.grad().expect("a gradient");
        qg.zero_grad();
        settle(&g)
    });
    // 16,384 positions x 64 dims x 1 head (a score matrix would be 1 GiB): CPU only, a software
    // adapter takes minutes (tests/ops/attention_fused.rs has the ignored GPU run).
    if dev.is_cpu() && "sdpa_causal_16k/cpu".contains(f) {
        let n = 16_384;
        let x = Tensor::randn(&[1, n, 64], dev)?;
        wgtensor::reset_peak_memory_stats(dev);
        let base = wgtensor::memory_allocated(dev);
        time("sdpa_causal_16k", dev, f, || {
            let _g = wgtensor::no_grad();
            settle(&Tensor::scaled_dot_product_attention(
                &x, &x, &x, None, true, 0.0, None,
            )?)
        });
        let peak = wgtensor::max_memory_allocated(dev) - base;
        println!("sdpa_causal_16k/{dev}: peak memory {:.1} MiB over the inputs (scores would be 1024 MiB)", peak as f64 / (1 << 20) as f64);
    }
    Ok(())
}

fn rows(dev: &Device, f: &str) -> Result<()> {
    if !wanted(&["layer_norm", "softmax"], dev, f) {
        return Ok(());
    }
    let x = Tensor::randn(&[4096, 1024], dev)?;
    let w = Tensor::randn(&[1024], dev)?;
    let b = Tensor::randn(&[1024], dev)?;
    time("layer_norm", dev, f, || {
        let _g = wgtensor::no_grad();
        settle(&x.layer_norm(Some(&w), Some(&b), 1e-5)?)
    });
    time("softmax", dev, f, || {
        let _g = wgtensor::no_grad();
        settle(&x.softmax(-1)?)
    });
    Ok(())
}

fn cnn(dev: &Device, f: &str) -> Result<()> {
    if !wanted(&["cnn_digits_adam"], dev, f) {
        return Ok(());
    }
    wgtensor::manual_seed(0);
    let cpu = Device::cpu();
    let same = Conv2dOptions::default().padding(1);
    let mut model = Sequential::new()
        .add(Conv2d::new(1, 16, [3, 3], same, true, &cpu)?)
        .add(BatchNorm2d::new(16, &cpu)?)
        .add(ReLU)
        .add(MaxPool2d::new([2, 2]))
        .add(Conv2d::new(16, 32, [3, 3], same, true, &cpu)?)
        .add(ReLU)
        .add(MaxPool2d::new([2, 2]))
        .add(Flatten::default())
        .add(Linear::new(32 * 2 * 2, 10, true, &cpu)?);
    model.to(dev)?;
    let mut opt = Adam::new(3e-3);
    let x = Tensor::rand(&[64, 1, 8, 8], dev)?;
    let y = Tensor::from_vec((0..64u32).map(|i| i % 10).collect(), &[64], dev)?;
    time("cnn_digits_adam", dev, f, || {
        opt.zero_grad(&model);
        let loss = nn::cross_entropy(&model.forward(&x)?, &y)?;
        loss.backward()?;
        opt.step(&mut model)?;
        settle(&loss)
    });
    Ok(())
}

/// The `char_transformer` example's model: token and position embeddings, pre-norm blocks, a
/// final LayerNorm and a linear head.
struct Gpt {
    tok: Embedding,
    pos: Embedding,
    blocks: Vec<TransformerBlock>,
    ln_f: LayerNorm,
    head: Linear,
    positions: Tensor,
}

impl Module for Gpt {
    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        let mut x = self
            .tok
            .forward(ids)?
            .add(&self.pos.forward(&self.positions)?)?;
        for b in &self.blocks {
            x = b.forward(&x)?;
        }
        self.head.forward(&self.ln_f.forward(&x)?)
    }
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut parts: Vec<&dyn Module> = vec![&self.tok, &self.pos];
        parts.extend(self.blocks.iter().map(|b| b as &dyn Module));
        parts.extend([&self.ln_f as &dyn Module, &self.head]);
        let mut v = Vec::new();
        for (i, m) in parts.into_iter().enumerate() {
            for (n, t) in m.named_parameters() {
                v.push((format!("{i}.{n}"), t));
            }
        }
        v
    }
    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        let mut parts: Vec<&mut dyn Module> = vec![&mut self.tok, &mut self.pos];
        parts.extend(self.blocks.iter_mut().map(|b| b as &mut dyn Module));
        parts.push(&mut self.ln_f);
        parts.push(&mut self.head);
        let mut v = Vec::new();
        for (i, m) in parts.into_iter().enumerate() {
            for (n, t) in m.named_parameters_mut() {
                v.push((format!("{i}.{n}"), t));
            }
        }
        v
    }
}

fn transformer(dev: &Device, f: &str) -> Result<()> {
    if !wanted(&["char_transformer_adamw"], dev, f) {
        return Ok(());
    }
    wgtensor::manual_seed(0);
    let (vocab, block, dim, batch) = (65, 64, 64, 32);
    let cpu = Device::cpu();
    let mut model = Gpt {
        tok: Embedding::new(vocab, dim, &cpu)?,
        pos: Embedding::new(block, dim, &cpu)?,
        blocks: vec![
            TransformerBlock::new(dim, 4, 4 * dim, true, 0.0, &cpu)?,
            TransformerBlock::new(dim, 4, 4 * dim, true, 0.0, &cpu)?,
        ],
        ln_f: LayerNorm::new(dim, &cpu)?,
        head: Linear::new(dim, vocab, true, &cpu)?,
        positions: Tensor::from_vec((0..block as u32).collect(), &[block], dev)?,
    };
    model.to(dev)?;
    let ids: Vec<u32> = (0..batch * block).map(|i| (i * 7 % vocab) as u32).collect();
    let x = Tensor::from_vec(ids.clone(), &[batch, block], dev)?;
    let y = Tensor::from_vec(
        ids.iter().map(|i| (i + 1) % 65).collect(),
        &[batch * block],
        dev,
    )?;
    let mut opt = AdamW::new(3e-3).weight_decay(0.01);
    time("char_transformer_adamw", dev, f, || {
        opt.zero_grad(&model);
        let logits = model.forward(&x)?.reshape(&[batch * block, vocab])?;
        let loss = nn::cross_entropy(&logits, &y)?;
        loss.backward()?;
        opt.step(&mut model)?;
        settle(&loss)
    });
    Ok(())
}

fn mlp(dev: &Device, f: &str) -> Result<()> {
    if !wanted(&["mlp_adam"], dev, f) {
        return Ok(());
    }
    wgtensor::manual_seed(1);
    let cpu = Device::cpu();
    let mut model = Sequential::new()
        .add(Linear::new(784, 256, true, &cpu)?)
        .add(ReLU)
        .add(Linear::new(256, 10, true, &cpu)?);
    model.to(dev)?;
    let x = Tensor::randn(&[128, 784], dev)?;
    let y = Tensor::from_vec((0..128u32).map(|i| i % 10).collect(), &[128], dev)?;
    let mut opt = Adam::new(1e-3);
    time("mlp_adam", dev, f, || {
        opt.zero_grad(&model);
        let loss = nn::cross_entropy(&model.forward(&x)?, &y)?;
        loss.backward()?;
        opt.step(&mut model)?;
        settle(&loss)
    });
    Ok(())
}

fn tiny(dev: &Device, f: &str) -> Result<()> {
    let a = Tensor::randn(&[16], dev)?;
    let b = Tensor::randn(&[16], dev)?;
    let w = Tensor::randn(&[16], dev)?.requires_grad_(true);
    for (row, x) in [("tiny_add_x1000", &a), ("tiny_add_grad_x1000", &w)] {
        time(row, dev, f, || {
            let mut y = a.clone();
            for _ in 0..1000 {
                y = x.add(&b)?;
            }
            settle(&y)
        });
    }
    Ok(())
}

fn main() {
    // `cargo bench` passes `--bench`; the first other argument filters rows.
    let filter = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .unwrap_or_default();
    for dev in devices() {
        for run in [conv, sdpa, rows, cnn, transformer, mlp, tiny] {
            if let Err(e) = run(&dev, &filter) {
                println!("setup on {dev} failed: {e}");
            }
        }
    }
}
