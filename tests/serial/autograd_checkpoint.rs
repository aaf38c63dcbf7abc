//! Gradient checkpointing: identical gradients, lower peak memory. In the `serial` binary because
//! the memory statistics are process-global (every test there runs alone under
//! `common::serial()`).

use crate::common;

use common::{assert_close, devices, values};
use std::sync::Mutex;
use wgtensor::nn::{Checkpoint, Linear, Module, ReLU, Sequential};
use wgtensor::{Device, Result, Tensor};

static STATS: Mutex<()> = Mutex::new(());

/// `segments` blocks of `depth` Linear+ReLU layers of width `w`, checkpointed or not, sharing
/// one set of weights (cloned from `seed_model`).
fn block(w: usize, depth: usize, d: &Device) -> Result<Sequential> {
    let mut s = Sequential::new();
    for _ in 0..depth {
        s = s.add(Linear::new(w, w, true, d)?).add(ReLU);
    }
    Ok(s)
}

fn build(blocks: &[Sequential], checkpointed: bool) -> Sequential {
    let mut m = Sequential::new();
    for b in blocks {
        if checkpointed {
            m = m.add(Checkpoint::new(b.clone()));
        } else {
            m = m.add(b.clone());
        }
    }
    m
}

/// Peak bytes above the starting point during forward + backward, and the gradients
/// (input first, then every parameter).
fn run(model: &Sequential, x: &Tensor) -> Result<(u64, Vec<Vec<f32>>)> {
    let d = x.device().clone();
    for p in model.parameters() {
        p.zero_grad();
    }
    let x = x.requires_grad_(true);
    let base = wgtensor::memory_allocated(&d);
    wgtensor::reset_peak_memory_stats(&d);
    let loss = model.forward(&x)?.mul_scalar(0.01)?.sum_all()?;
    loss.backward()?;
    drop(loss);
    let peak = wgtensor::max_memory_allocated(&d).saturating_sub(base);
    let mut grads = vec![values(&x.grad().expect("input grad"))];
    for p in model.parameters() {
        grads.push(values(&p.grad().expect("parameter grad")));
    }
    Ok((peak, grads))
}

#[test]
fn checkpointing_gives_identical_gradients_with_lower_peak_memory() -> Result<()> {
    let _serial = common::serial();
    let _lock = STATS.lock().unwrap_or_else(|p| p.into_inner());
    for dev in devices() {
        // Small on the software GPU, which is slow; large enough on the CPU to dominate.
        let (w, rows) = if dev.is_gpu() { (64, 64) } else { (256, 512) };
        let blocks: Vec<Sequential> = (0..4).map(|_| block(w, 4, &dev)).collect::<Result<_>>()?;
        let x = Tensor::randn(&[rows, w], &Device::cpu())?.to(&dev)?;
        let plain = build(&blocks, false);
        let ckpt = build(&blocks, true);
        let (peak_plain, g_plain) = run(&plain, &x)?;
        let (peak_ckpt, g_ckpt) = run(&ckpt, &x)?;
        assert_eq!(g_plain.len(), 1 + 4 * 4 * 2);
        for (i, (a, b)) in g_ckpt.iter().zip(&g_plain).enumerate() {
            assert_close(a, b, 0.0, 0.0, &format!("gradient {i} on {dev}"));
        }
        eprintln!("checkpoint on {dev}: peak {peak_ckpt} bytes vs {peak_plain} without");
        assert!(
            (peak_ckpt as f64) < 0.7 * peak_plain as f64,
            "{dev}: checkpointed peak {peak_ckpt} is not clearly below {peak_plain}"
        );
    }
    Ok(())
}

#[test]
fn checkpoint_under_no_grad_is_a_plain_forward() -> Result<()> {
    let _serial = common::serial();
    let _lock = STATS.lock().unwrap_or_else(|p| p.into_inner());
    let d = Device::cpu();
    let b = block(8, 2, &d)?;
    let c = Checkpoint::new(b.clone());
    let x = Tensor::randn(&[3, 8], &d)?;
    let y = wgtensor::no_grad_scope(|| c.forward(&x))?;
    assert!(!y.requires_grad());
    assert_eq!(values(&y), values(&b.forward(&x)?));
    assert_eq!(c.named_parameters().len(), b.named_parameters().len());
    Ok(())
}
