//! Optimizers against hand-computed PyTorch formulas (3 steps, on every device), losses
//! against host formulas and finite differences, and the dynamic loss scaler.

mod common;

use common::{assert_close, data, devices, values};
use wgtensor::nn::{self, Module};
use wgtensor::optim::{Adam, AdamW, GradScaler, Optimizer, Sgd};
use wgtensor::{DType, Device, Error, Result, Tensor};

/// One parameter vector; the test loss is `sum(c * p) + 0.5 * sum(p²)`, gradient `c + p`.
struct Vector(Tensor);

impl Module for Vector {
    fn forward(&self, c: &Tensor) -> Result<Tensor> {
        let quad = self.0.mul(&self.0)?.mul_scalar(0.5)?;
        c.mul(&self.0)?.add(&quad)?.sum_all()
    }
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        vec![("p".into(), self.0.clone())]
    }
    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        vec![("p".into(), &mut self.0)]
    }
}

const P0: [f64; 3] = [0.5, -1.0, 2.0];
const C: [f64; 3] = [0.3, 0.7, -0.2];

/// Runs 3 steps of `opt` on `dev` and returns the parameter after each step.
fn run(opt: &mut dyn Optimizer, dev: &Device) -> Vec<Vec<f32>> {
    let p0: Vec<f32> = P0.iter().map(|&v| v as f32).collect();
    let c: Vec<f32> = C.iter().map(|&v| v as f32).collect();
    let mut m = Vector(nn::param(Tensor::from_vec(p0, &[3], dev).unwrap()));
    let c = Tensor::from_vec(c, &[3], dev).unwrap();
    let mut out = Vec::new();
    for _ in 0..3 {
        opt.zero_grad(&m);
        m.forward(&c).unwrap().backward().unwrap();
        opt.step(&mut m).unwrap();
        assert!(m.0.is_leaf() && m.0.requires_grad(), "still a parameter");
        assert_eq!(m.0.device(), dev, "updated on its device");
        out.push(values(&m.0));
    }
    out
}

/// The reference: `update(p, g, t)` applied for t = 1..=3 with g = c + p, in f64.
fn reference(mut update: impl FnMut(&mut [f64; 3], [f64; 3], i32)) -> Vec<Vec<f32>> {
    let mut p = P0;
    (1..=3)
        .map(|t| {
            let g = [C[0] + p[0], C[1] + p[1], C[2] + p[2]];
            update(&mut p, g, t);
            p.iter().map(|&v| v as f32).collect()
        })
        .collect()
}

fn compare(name: &str, make: impl Fn() -> Box<dyn Optimizer>, expected: Vec<Vec<f32>>) {
    for dev in devices() {
        let got = run(make().as_mut(), &dev);
        for (t, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert_close(g, e, 1e-5, 1e-6, &format!("{name} step {} on {dev}", t + 1));
        }
    }
}

#[test]
fn sgd_plain_momentum_nesterov_weight_decay() {
    let (lr, mom, wd) = (0.1, 0.9, 0.01);
    compare(
        "sgd",
        || Box::new(Sgd::new(0.1)),
        reference(|p, g, _| {
            for i in 0..3 {
                p[i] -= lr * g[i];
            }
        }),
    );
    for nesterov in [false, true] {
        let mut buf = [0.0f64; 3];
        let expected = reference(|p, g, t| {
            for i in 0..3 {
                let d = g[i] + wd * p[i];
                buf[i] = if t == 1 { d } else { mom * buf[i] + d };
                let step = if nesterov { d + mom * buf[i] } else { buf[i] };
                p[i] -= lr * step;
            }
        });
        compare(
            &format!("sgd momentum nesterov={nesterov}"),
            || {
                Box::new(
                    Sgd::new(0.1)
                        .momentum(0.9)
                        .weight_decay(0.01)
                        .nesterov(nesterov),
                )
            },
            expected,
        );
    }
}

/// PyTorch's Adam/AdamW step in f64.
fn adam_reference(lr: f64, wd: f64, decoupled: bool) -> Vec<Vec<f32>> {
    let (b1, b2, eps) = (0.9f64, 0.999f64, 1e-8f64);
    let (mut m, mut v) = ([0.0f64; 3], [0.0f64; 3]);
    reference(move |p, g, t| {
        for i in 0..3 {
            let mut gi = g[i];
            if decoupled {
                p[i] *= 1.0 - lr * wd;
            } else {
                gi += wd * p[i];
            }
            m[i] = b1 * m[i] + (1.0 - b1) * gi;
            v[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
            let bc1 = 1.0 - b1.powi(t);
            let bc2 = 1.0 - b2.powi(t);
            p[i] -= lr / bc1 * m[i] / (v[i].sqrt() / bc2.sqrt() + eps);
        }
    })
}

#[test]
fn adam_and_adamw() {
    compare(
        "adam",
        || Box::new(Adam::new(0.1)),
        adam_reference(0.1, 0.0, false),
    );
    compare(
        "adam + L2",
        || Box::new(Adam::new(0.1).weight_decay(0.1)),
        adam_reference(0.1, 0.1, false),
    );
    compare(
        "adamw",
        || Box::new(AdamW::new(0.1).weight_decay(0.1)),
        adam_reference(0.1, 0.1, true),
    );
}

#[test]
fn parameters_without_grad_are_untouched_and_bad_hyperparameters_error() -> Result<()> {
    let d = Device::cpu();
    let mut m = Vector(nn::param(Tensor::ones(&[3], DType::F32, &d)?));
    Sgd::new(0.1).step(&mut m)?;
    assert_eq!(values(&m.0), vec![1.0; 3]);
    m.forward(&Tensor::ones(&[3], DType::F32, &d)?)?
        .backward()?;
    let err = Sgd::new(-1.0).step(&mut m).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    assert!(Adam::new(0.1).betas(1.0, 0.9).step(&mut m).is_err());
    // zero_grad clears the carried-over gradient.
    let mut opt = Sgd::new(0.1);
    opt.step(&mut m)?;
    assert!(m.0.grad().is_some());
    opt.zero_grad(&m);
    assert!(m.0.grad().is_none());
    Ok(())
}

#[test]
fn mse_loss_value_and_gradient() -> Result<()> {
    for dev in devices() {
        let p = data(6, 1, 1.0);
        let t = data(6, 2, 1.0);
        let pred = Tensor::from_vec(p.clone(), &[2, 3], &dev)?.requires_grad_(true);
        let target = Tensor::from_vec(t.clone(), &[2, 3], &dev)?;
        let loss = nn::mse_loss(&pred, &target)?;
        let expected: f32 = p
            .iter()
            .zip(&t)
            .map(|(a, b)| (a - b) * (a - b))
            .sum::<f32>()
            / 6.0;
        assert_close(&values(&loss), &[expected], 1e-5, 0.0, "mse value");
        loss.backward()?;
        let g: Vec<f32> = p.iter().zip(&t).map(|(a, b)| 2.0 * (a - b) / 6.0).collect();
        assert_close(&values(&pred.grad().unwrap()), &g, 1e-5, 1e-7, "mse grad");
        assert!(matches!(
            nn::mse_loss(&pred, &target.reshape(&[6])?),
            Err(Error::ShapeMismatch { .. })
        ));
    }
    Ok(())
}

#[test]
fn cross_entropy_value_gradient_and_errors() -> Result<()> {
    let (n, c) = (4, 3);
    let x = data(n * c, 5, 2.0);
    let ids = [2u32, 0, 1, 2];
    // Host reference: loss = mean(logsumexp(row) - row[id]); grad = (softmax - onehot) / n.
    let mut loss = 0.0f64;
    let mut grad = vec![0f32; n * c];
    for i in 0..n {
        let row = &x[i * c..(i + 1) * c];
        let lse = row.iter().map(|&v| (v as f64).exp()).sum::<f64>().ln();
        loss += lse - row[ids[i] as usize] as f64;
        for j in 0..c {
            let sm = ((row[j] as f64) - lse).exp();
            let hot = if j == ids[i] as usize { 1.0 } else { 0.0 };
            grad[i * c + j] = ((sm - hot) / n as f64) as f32;
        }
    }
    for dev in devices() {
        let logits = Tensor::from_vec(x.clone(), &[n, c], &dev)?.requires_grad_(true);
        let targets = Tensor::from_vec(ids.to_vec(), &[n], &dev)?;
        let l = nn::cross_entropy(&logits, &targets)?;
        assert_close(
            &values(&l),
            &[(loss / n as f64) as f32],
            1e-5,
            0.0,
            "ce value",
        );
        l.backward()?;
        assert_close(
            &values(&logits.grad().unwrap()),
            &grad,
            1e-4,
            1e-6,
            "ce grad",
        );
        let i32_ids = Tensor::from_vec(vec![2i32, 0, 1, 2], &[n], &dev)?;
        assert_close(
            &values(&nn::cross_entropy(&logits, &i32_ids)?),
            &values(&l),
            0.0,
            0.0,
            "i32 ids",
        );
        let bad = Tensor::from_vec(vec![0u32, 3, 1, 0], &[n], &dev)?;
        let err = nn::cross_entropy(&logits, &bad).unwrap_err().to_string();
        assert!(err.contains("target 3 at position 1"), "{err}");
        let short = Tensor::from_vec(vec![0u32; 3], &[3], &dev)?;
        assert!(nn::cross_entropy(&logits, &short).is_err());
        let float_ids = Tensor::zeros(&[n], DType::F32, &dev)?;
        assert!(matches!(
            nn::cross_entropy(&logits, &float_ids),
            Err(Error::UnsupportedDType { .. })
        ));
        assert!(nn::cross_entropy(&logits.reshape(&[12])?, &targets).is_err());
    }
    Ok(())
}

#[test]
fn grad_scaler_skips_inf_steps_backs_off_and_grows() -> Result<()> {
    for dev in devices() {
        let mut m = Vector(nn::param(Tensor::ones(&[3], DType::F32, &dev)?));
        let c = Tensor::from_vec(vec![1f32, 2.0, 3.0], &[3], &dev)?;
        let mut opt = Sgd::new(0.5);
        let mut scaler = GradScaler::new().init_scale(1024.0).growth_interval(2);
        // A finite step: gradients c + p = [2, 3, 4] after unscaling.
        scaler.scale(&m.forward(&c)?)?.backward()?;
        assert_close(
            &values(&m.0.grad().unwrap()),
            &[2048.0, 3072.0, 4096.0],
            0.0,
            0.0,
            "scaled",
        );
        assert!(scaler.step(&mut opt, &mut m)?);
        scaler.update();
        assert_close(&values(&m.0), &[0.0, -0.5, -1.0], 1e-6, 0.0, "stepped");
        assert_eq!(scaler.get_scale(), 1024.0);
        // An overflowing step: skipped, scale halved.
        opt.zero_grad(&m);
        let huge = Tensor::full(&[3], 1e36, DType::F32, &dev)?;
        scaler.scale(&m.forward(&huge)?)?.backward()?;
        assert!(!scaler.step(&mut opt, &mut m)?);
        scaler.update();
        assert_eq!(scaler.get_scale(), 512.0);
        assert_close(&values(&m.0), &[0.0, -0.5, -1.0], 0.0, 0.0, "skipped");
        // Two finite steps in a row: scale doubles.
        for _ in 0..2 {
            opt.zero_grad(&m);
            scaler.scale(&m.forward(&c)?)?.backward()?;
            assert!(scaler.step(&mut opt, &mut m)?);
            scaler.update();
        }
        assert_eq!(scaler.get_scale(), 1024.0);
    }
    Ok(())
}
