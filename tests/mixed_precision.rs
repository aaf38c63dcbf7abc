//! Mixed precision: an f16 forward over f32 master weights (cast with the differentiable
//! `to_dtype`), trained with the dynamic loss scaler. matmul has no f16 kernel yet, so the f16
//! linear layer here is a broadcast multiply and an f16 sum.

mod common;

use common::{assert_close, data, devices, values};
use wgtensor::nn::{self, Module};
use wgtensor::optim::{GradScaler, Optimizer, Sgd};
use wgtensor::{DType, Device, Result, Tensor};

/// A 2-layer MLP whose master weights are f32 and whose forward runs in `compute` dtype.
struct Mlp {
    w1: Tensor,
    w2: Tensor,
    compute: DType,
}

/// `x [N, K] @ w[M, K]ᵀ` as `sum(x[N, 1, K] * w[1, M, K], -1)`, in the operands' dtype.
fn linear(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    x.unsqueeze(1)?.mul(&w.unsqueeze(0)?)?.sum(-1, false)
}

impl Module for Mlp {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let c = self.compute;
        let h = linear(&x.to_dtype(c)?, &self.w1.to_dtype(c)?)?.tanh()?;
        // Logits back in f32 for the loss, as autocast does for softmax/cross-entropy.
        linear(&h, &self.w2.to_dtype(c)?)?.to_dtype(DType::F32)
    }
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        vec![
            ("w1".into(), self.w1.clone()),
            ("w2".into(), self.w2.clone()),
        ]
    }
    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        vec![("w1".into(), &mut self.w1), ("w2".into(), &mut self.w2)]
    }
}

fn mlp(compute: DType, dev: &Device) -> Result<Mlp> {
    Ok(Mlp {
        w1: nn::param(Tensor::from_vec(data(16 * 2, 3, 0.7), &[16, 2], dev)?),
        w2: nn::param(Tensor::from_vec(data(2 * 16, 4, 0.3), &[2, 16], dev)?),
        compute,
    })
}

fn batch(dev: &Device) -> Result<(Tensor, Tensor)> {
    let x = data(64 * 2, 5, 1.0);
    let y: Vec<u32> = x.chunks(2).map(|p| u32::from(p[0] > p[1])).collect();
    Ok((
        Tensor::from_vec(x, &[64, 2], dev)?,
        Tensor::from_vec(y, &[64], dev)?,
    ))
}

/// Losses of `steps` SGD steps; with a scaler when given.
fn train(m: &mut Mlp, dev: &Device, steps: usize, mut scaler: Option<GradScaler>) -> Vec<f32> {
    let (x, y) = batch(dev).unwrap();
    let mut opt = Sgd::new(0.5);
    let mut losses = Vec::new();
    for _ in 0..steps {
        opt.zero_grad(m);
        let loss = nn::cross_entropy(&m.forward(&x).unwrap(), &y).unwrap();
        match &mut scaler {
            Some(s) => {
                s.scale(&loss).unwrap().backward().unwrap();
                s.step(&mut opt, m).unwrap();
                s.update();
            }
            None => {
                loss.backward().unwrap();
                opt.step(m).unwrap();
            }
        }
        losses.push(loss.to_scalar::<f32>().unwrap());
    }
    losses
}

#[test]
fn f16_forward_with_f32_master_weights_trains_like_f32() {
    for dev in devices() {
        let mut full = mlp(DType::F32, &dev).unwrap();
        let reference = train(&mut full, &dev, 60, None);
        let mut half = mlp(DType::F16, &dev).unwrap();
        let got = train(&mut half, &dev, 60, Some(GradScaler::new()));
        for p in half.parameters() {
            assert_eq!(p.dtype(), DType::F32, "master weights stay f32");
            assert_eq!(p.grad().unwrap().dtype(), DType::F32, "their grads are f32");
        }
        let (first, last) = (got[0], got[59]);
        assert!(
            last < 0.8 * first,
            "{dev}: f16 training stalls: {first} -> {last}"
        );
        // f16 rounding (11-bit mantissa) moves the trajectory a little, not the outcome.
        assert_close(
            &[last],
            &[reference[59]],
            0.05,
            0.0,
            &format!("{dev}: final loss"),
        );
    }
}

#[test]
fn loss_scaling_keeps_small_f16_gradients_from_flushing_to_zero() -> Result<()> {
    for dev in devices() {
        let (x, y) = batch(&dev)?;
        // A tiny loss weight makes every f16 gradient underflow without scaling.
        let tiny = 1e-7;
        let grads = |m: &Mlp, scale: f32| -> Result<Vec<f32>> {
            for p in m.parameters() {
                p.zero_grad();
            }
            let loss = nn::cross_entropy(&m.forward(&x)?, &y)?.mul_scalar(tiny * scale)?;
            loss.backward()?;
            let g = m.w1.grad().unwrap();
            Ok(values(&g.mul_scalar(1.0 / scale)?))
        };
        let full = mlp(DType::F32, &dev)?;
        let half = mlp(DType::F16, &dev)?;
        let exact = grads(&full, 1.0)?;
        assert!(exact.iter().any(|&g| g != 0.0));
        let unscaled = grads(&half, 1.0)?;
        assert!(
            unscaled.iter().all(|&g| g == 0.0),
            "{dev}: expected f16 underflow without scaling, got {unscaled:?}"
        );
        let scaled = grads(&half, GradScaler::new().get_scale())?;
        let max = exact.iter().fold(0f32, |a, &b| a.max(b.abs()));
        assert_close(
            &scaled,
            &exact,
            0.05,
            0.02 * max,
            &format!("{dev}: scaled f16 grads"),
        );
    }
    Ok(())
}
