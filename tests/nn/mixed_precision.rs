//! Mixed precision: an f16 forward over f32 master weights, trained with the dynamic loss
//! scaler. `nn::Linear` computes in its input's dtype, casting its f32 parameters with the
//! differentiable `to_dtype`, so gradients land on the f32 master weights.

use crate::common;

use common::{assert_close, data, devices, values};
use wgtensor::nn::{self, Linear, Module, Sequential, Tanh};
use wgtensor::optim::{GradScaler, Optimizer, Sgd};
use wgtensor::{DType, Device, Result, Tensor};

/// A 2-layer MLP (nn::Linear, f32 master weights) whose forward runs in `compute` dtype.
struct Mlp {
    net: Sequential,
    compute: DType,
}

impl Mlp {
    fn w1(&self) -> Tensor {
        self.net.named_parameters()[0].1.clone()
    }
}

impl Module for Mlp {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        // Logits back in f32 for the loss, as autocast does for softmax/cross-entropy.
        self.net
            .forward(&x.to_dtype(self.compute)?)?
            .to_dtype(DType::F32)
    }
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.net.named_parameters()
    }
    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        self.net.named_parameters_mut()
    }
}

fn mlp(compute: DType, dev: &Device) -> Result<Mlp> {
    let w1 = Tensor::from_vec(data(16 * 2, 3, 0.7), &[16, 2], dev)?;
    let w2 = Tensor::from_vec(data(2 * 16, 4, 0.3), &[2, 16], dev)?;
    let net = Sequential::new()
        .add(Linear::from_weights(w1, None)?)
        .add(Tanh)
        .add(Linear::from_weights(w2, None)?);
    Ok(Mlp { net, compute })
}

#[test]
fn linear_layers_run_in_f16_for_an_f16_input() -> Result<()> {
    for dev in devices() {
        let m = mlp(DType::F16, &dev)?;
        let x = Tensor::from_vec(data(8, 9, 1.0), &[4, 2], &dev)?.to_dtype(DType::F16)?;
        let h = m.net.forward(&x)?;
        assert_eq!(h.dtype(), DType::F16, "{dev}: f16 in, f16 out");
        let full = mlp(DType::F32, &dev)?;
        let want = values(&full.net.forward(&x.to_dtype(DType::F32)?)?);
        assert_close(
            &values(&h.to_dtype(DType::F32)?),
            &want,
            1e-2,
            1e-2,
            &format!("{dev}: f16 forward vs f32"),
        );
    }
    Ok(())
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
                s.update().unwrap();
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
            let g = m.w1().grad().unwrap();
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
        let scaled = grads(&half, GradScaler::new().get_scale()?.to_scalar::<f32>()?)?;
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

#[test]
fn layer_norm_normalises_an_f16_input_in_f32() -> Result<()> {
    for dev in devices() {
        let ln = nn::LayerNorm::new(16, &dev)?;
        // Large offsets: a variance computed in f16 would lose most of its digits.
        let x32 = Tensor::from_vec(data(4 * 16, 11, 1.0), &[4, 16], &dev)?.add_scalar(300.0)?;
        let x16 = x32.to_dtype(DType::F16)?;
        let y = ln.forward(&x16)?;
        assert_eq!(y.dtype(), DType::F16, "{dev}");
        let want = values(&ln.forward(&x16.to_dtype(DType::F32)?)?);
        assert_close(
            &values(&y.to_dtype(DType::F32)?),
            &want,
            1e-2,
            1e-2,
            &format!("{dev}: f16 LayerNorm"),
        );
    }
    Ok(())
}
