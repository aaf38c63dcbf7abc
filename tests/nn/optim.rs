//! Optimizers against hand-computed PyTorch formulas (3 steps, on every device), losses
//! against host formulas and finite differences, and the dynamic loss scaler.

use crate::common;

use common::{assert_close, data, devices, values, Vector};
use wgtensor::nn::{self, Module};
use wgtensor::optim::{Adam, AdamW, GradScaler, Optimizer, Sgd};
use wgtensor::{DType, Device, Error, Result, Tensor};

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
        // On a GPU the kernel finds the bad target: it surfaces at the readback.
        let err = nn::cross_entropy(&logits, &bad)
            .and_then(|l| l.to_vec::<f32>())
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::IndexOutOfRange {
                    op: "cross_entropy",
                    index: 3,
                    bound: 3
                }
            ),
            "{err}"
        );
        let short = Tensor::from_vec(vec![0u32; 3], &[3], &dev)?;
        assert!(nn::cross_entropy(&logits, &short).is_err());
        let float_ids = Tensor::zeros(&[n], DType::F32, &dev)?;
        assert!(matches!(
            nn::cross_entropy(&logits, &float_ids),
            Err(Error::InvalidArgument { .. })
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
        scaler.step(&mut opt, &mut m)?;
        assert_eq!(scaler.found_inf().unwrap().to_scalar::<f32>()?, 0.0);
        scaler.update()?;
        assert!(scaler.found_inf().is_none());
        assert_close(&values(&m.0), &[0.0, -0.5, -1.0], 1e-6, 0.0, "stepped");
        assert_eq!(scaler.get_scale()?.to_scalar::<f32>()?, 1024.0);
        // An overflowing step: skipped, scale halved.
        opt.zero_grad(&m);
        let huge = Tensor::full(&[3], 1e36, DType::F32, &dev)?;
        scaler.scale(&m.forward(&huge)?)?.backward()?;
        scaler.step(&mut opt, &mut m)?;
        assert_eq!(scaler.found_inf().unwrap().to_scalar::<f32>()?, 1.0);
        scaler.update()?;
        assert_eq!(scaler.get_scale()?.to_scalar::<f32>()?, 512.0);
        assert_close(&values(&m.0), &[0.0, -0.5, -1.0], 0.0, 0.0, "skipped");
        // Two finite steps in a row: scale doubles.
        for _ in 0..2 {
            opt.zero_grad(&m);
            scaler.scale(&m.forward(&c)?)?.backward()?;
            scaler.step(&mut opt, &mut m)?;
            assert_eq!(scaler.found_inf().unwrap().to_scalar::<f32>()?, 0.0);
            scaler.update()?;
        }
        assert_eq!(scaler.get_scale()?.to_scalar::<f32>()?, 1024.0);
    }
    Ok(())
}

// --- Schedulers, gradient clipping, optimizer state and resumed training ---------------------

use wgtensor::optim::{
    clip_grad_norm_, load_checkpoint, save_checkpoint, CosineWithWarmup, LrScheduler, StepLR,
};

#[test]
fn step_lr_and_cosine_with_warmup_follow_their_formulas() {
    let mut opt = Sgd::new(0.1);
    let mut s = StepLR::new(&mut opt, 3, 0.1).unwrap();
    let mut got = vec![opt.lr()];
    for _ in 0..7 {
        s.step(&mut opt);
        got.push(opt.lr());
    }
    // 0.1 * 0.1^floor(t / 3), by hand.
    let want = [0.1, 0.1, 0.1, 0.01, 0.01, 0.01, 0.001, 0.001];
    assert_close(&got, &want, 1e-6, 0.0, "StepLR");
    assert_eq!(s.last_epoch(), 7);

    let mut opt = Adam::new(1.0);
    let mut s = CosineWithWarmup::new(&mut opt, 4, 12, 0.1).unwrap();
    let mut got = vec![opt.lr()];
    for _ in 0..20 {
        s.step(&mut opt);
        got.push(opt.lr());
    }
    // Warm-up t / 4, then 0.1 + 0.9 * 0.5 * (1 + cos(pi * (t - 4) / 8)), by hand.
    let hand = [
        (0, 0.0),
        (1, 0.25),
        (2, 0.5),
        (3, 0.75),
        (4, 1.0),
        (6, 0.1 + 0.45 * (1.0 + std::f32::consts::FRAC_1_SQRT_2)),
        (8, 0.55),
        (10, 0.1 + 0.45 * (1.0 - std::f32::consts::FRAC_1_SQRT_2)),
        (12, 0.1),
        (20, 0.1),
    ];
    for (t, want) in hand {
        assert_close(&[got[t]], &[want], 1e-6, 1e-7, &format!("cosine t={t}"));
    }
    // Resuming: the rate is a function of the count alone.
    let mut opt2 = Adam::new(1.0);
    let mut s2 = CosineWithWarmup::new(&mut opt2, 4, 12, 0.1).unwrap();
    s2.set_last_epoch(6);
    s2.apply(&mut opt2);
    assert_eq!(opt2.lr(), got[6]);

    let mut o = Sgd::new(0.1);
    assert!(StepLR::new(&mut o, 0, 0.5).is_err());
    assert!(StepLR::new(&mut o, 1, f32::NAN).is_err());
    assert!(CosineWithWarmup::new(&mut o, 5, 5, 0.0).is_err());
    assert!(
        CosineWithWarmup::new(&mut o, 0, 5, 0.5).is_err(),
        "min_lr above base_lr"
    );
}

#[test]
fn clip_grad_norm_matches_pytorch() {
    let ga = data(7, 11, 2.0);
    let gb = data(12, 12, 2.0);
    let norm: f64 = ga
        .iter()
        .chain(&gb)
        .map(|&x| f64::from(x) * f64::from(x))
        .sum::<f64>()
        .sqrt();
    for dev in devices() {
        for max_norm in [0.5f32, 1e6] {
            let a = nn::param(Tensor::zeros(&[7], DType::F32, &dev).unwrap());
            let b = nn::param(Tensor::zeros(&[3, 4], DType::F32, &dev).unwrap());
            let untouched = nn::param(Tensor::zeros(&[2], DType::F32, &dev).unwrap());
            a.set_grad(Some(Tensor::from_vec(ga.clone(), &[7], &dev).unwrap()))
                .unwrap();
            b.set_grad(Some(Tensor::from_vec(gb.clone(), &[3, 4], &dev).unwrap()))
                .unwrap();
            let total =
                clip_grad_norm_(&[a.clone(), b.clone(), untouched.clone()], max_norm).unwrap();
            assert_eq!((total.shape(), total.device()), (&[][..], &dev));
            let got = total.to_scalar::<f32>().unwrap();
            assert_close(&[got], &[norm as f32], 1e-5, 0.0, &format!("norm on {dev}"));
            // PyTorch: coef = max_norm / (norm + 1e-6), clamped to 1.
            let coef = (f64::from(max_norm) / (norm + 1e-6)).min(1.0);
            let scaled = |g: &[f32]| -> Vec<f32> {
                g.iter().map(|&x| (f64::from(x) * coef) as f32).collect()
            };
            let ctx = format!("clipped grads, max_norm {max_norm} on {dev}");
            assert_close(&values(&a.grad().unwrap()), &scaled(&ga), 1e-5, 1e-7, &ctx);
            assert_close(&values(&b.grad().unwrap()), &scaled(&gb), 1e-5, 1e-7, &ctx);
            assert!(untouched.grad().is_none());
        }
    }
    let none = clip_grad_norm_(&[], 1.0).unwrap();
    assert_eq!(none.to_scalar::<f32>().unwrap(), 0.0);
    assert!(matches!(
        clip_grad_norm_(&[], -1.0),
        Err(Error::InvalidArgument { .. })
    ));
}

/// The transfer counters are per device and other tests share the device: this check runs
/// alone in a child process.
#[test]
fn clip_grad_norm_waits_for_nothing() {
    common::run_child("optim::clip_grad_norm_child", &[]);
}

#[test]
fn clip_grad_norm_child() {
    if !common::is_child("optim::clip_grad_norm_child") {
        return;
    }
    for dev in common::gpus() {
        let p = nn::param(Tensor::zeros(&[300], DType::F32, &dev).unwrap());
        p.set_grad(Some(
            Tensor::from_vec(data(300, 3, 1.0), &[300], &dev).unwrap(),
        ))
        .unwrap();
        dev.synchronize().unwrap();
        let before = wgtensor::transfer_stats(&dev);
        let norm = clip_grad_norm_(std::slice::from_ref(&p), 0.1).unwrap();
        let after = wgtensor::transfer_stats(&dev);
        assert_eq!(
            (after.downloads, after.wait_time),
            (before.downloads, before.wait_time),
            "no readback and no wait inside clip_grad_norm_ on {dev}"
        );
        assert!(norm.to_scalar::<f32>().unwrap() > 0.1);
        assert!(
            wgtensor::transfer_stats(&dev).downloads > after.downloads,
            "counted"
        );
    }
    common::child_done("optim::clip_grad_norm_child");
}

/// A 3-4-2 MLP with fixed weights (`seed` picks them).
fn mlp(dev: &Device, seed: u64) -> nn::Sequential {
    let t = |n: usize, s: u64, shape: &[usize]| {
        nn::param(Tensor::from_vec(data(n, seed * 10 + s, 0.5), shape, dev).unwrap())
    };
    nn::Sequential::new()
        .add(nn::Linear::from_weights(t(12, 1, &[4, 3]), Some(t(4, 2, &[4]))).unwrap())
        .add(nn::Tanh)
        .add(nn::Linear::from_weights(t(8, 3, &[2, 4]), Some(t(2, 4, &[2]))).unwrap())
}

fn train(
    model: &mut nn::Sequential,
    opt: &mut dyn Optimizer,
    sched: &mut StepLR,
    dev: &Device,
    steps: usize,
) {
    let x = Tensor::from_vec(data(24, 5, 1.0), &[8, 3], dev).unwrap();
    let y = Tensor::from_vec(data(16, 6, 1.0), &[8, 2], dev).unwrap();
    for _ in 0..steps {
        opt.zero_grad(model);
        nn::mse_loss(&model.forward(&x).unwrap(), &y)
            .unwrap()
            .backward()
            .unwrap();
        clip_grad_norm_(&model.parameters(), 1.0).unwrap();
        opt.step(model).unwrap();
        sched.step(opt);
    }
}

#[test]
fn training_resumes_from_a_checkpoint_exactly() {
    type Make = fn() -> Box<dyn Optimizer>;
    let optimizers: [(&str, Make); 3] = [
        ("adam", || Box::new(Adam::new(0.05))),
        ("adamw", || Box::new(AdamW::new(0.05).weight_decay(0.1))),
        ("sgd", || {
            Box::new(Sgd::new(0.05).momentum(0.9).nesterov(true))
        }),
    ];
    for dev in devices() {
        for (name, make) in optimizers {
            let ctx = format!("{name} on {dev}");
            // 10 uninterrupted steps.
            let mut model = mlp(&dev, 1);
            let mut opt = make();
            let mut sched = StepLR::new(opt.as_mut(), 3, 0.5).unwrap();
            train(&mut model, opt.as_mut(), &mut sched, &dev, 10);
            let want: Vec<Vec<f32>> = model.parameters().iter().map(values).collect();

            // 5 steps, save, load into a fresh model (other weights) and optimizer, 5 more.
            let mut model = mlp(&dev, 1);
            let mut opt = make();
            let mut sched = StepLR::new(opt.as_mut(), 3, 0.5).unwrap();
            train(&mut model, opt.as_mut(), &mut sched, &dev, 5);
            let path = std::env::temp_dir().join(format!(
                "wgtensor_resume_{}_{name}_{}.safetensors",
                std::process::id(),
                dev.to_string().replace(':', "_")
            ));
            save_checkpoint(&path, &model, opt.as_ref()).unwrap();
            let names: Vec<String> = opt
                .state_dict()
                .unwrap()
                .into_iter()
                .map(|(n, _)| n)
                .collect();
            assert!(names.contains(&"lr".to_string()), "{ctx}: {names:?}");
            let slots: &[&str] = if name == "sgd" {
                &["momentum_buffer"]
            } else {
                &["exp_avg", "exp_avg_sq", "step"]
            };
            for slot in slots {
                assert!(
                    names.contains(&format!("state.0.weight.{slot}")),
                    "{ctx}: {names:?}"
                );
            }
            drop((model, opt));

            let mut model = mlp(&dev, 2);
            let mut opt = make();
            let mut sched = StepLR::new(opt.as_mut(), 3, 0.5).unwrap();
            load_checkpoint(&path, &mut model, opt.as_mut(), &dev).unwrap();
            sched.set_last_epoch(5);
            assert_eq!(opt.lr(), sched.get_last_lr(), "{ctx}: the saved rate");
            train(&mut model, opt.as_mut(), &mut sched, &dev, 5);
            let got: Vec<Vec<f32>> = model.parameters().iter().map(values).collect();
            for (g, w) in got.iter().zip(&want) {
                assert_close(g, w, 1e-6, 0.0, &ctx);
            }
            std::fs::remove_file(path).ok();
        }
    }
}

#[test]
fn bad_optimizer_state_is_rejected_whole() {
    let cpu = Device::cpu();
    let mut model = mlp(&cpu, 1);
    let mut opt = Adam::new(0.1);
    model
        .forward(&Tensor::ones(&[1, 3], DType::F32, &cpu).unwrap())
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    opt.step(&mut model).unwrap();
    let good = opt.state_dict().unwrap();
    let expect = |state: Vec<(String, Tensor)>, part: &str| {
        let mut o = Adam::new(0.3);
        match o.load_state_dict(state) {
            Err(Error::InvalidArgument { message, .. }) => {
                assert!(message.contains(part), "{part:?} missing from {message}")
            }
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
        assert_eq!(o.lr(), 0.3, "nothing changed");
        assert_eq!(o.state_dict().unwrap().len(), 1);
    };
    let missing: Vec<_> = good
        .iter()
        .filter(|(n, _)| n != "state.0.weight.step")
        .cloned()
        .collect();
    expect(missing, "state.0.weight.step");
    let mut extra = good.clone();
    extra.push((
        "state.0.weight.velocity".into(),
        Tensor::ones(&[1], DType::F32, &cpu).unwrap(),
    ));
    expect(extra, "velocity");
    let mut ok = Adam::new(0.3);
    ok.load_state_dict(good).unwrap();
    assert_eq!(ok.lr(), 0.1);
    // A model part that does not match leaves the model and the optimizer as they were.
    let path = std::env::temp_dir().join(format!(
        "wgtensor_bad_ckpt_{}.safetensors",
        std::process::id()
    ));
    save_checkpoint(&path, &Linear1::new(), &opt).unwrap();
    let before: Vec<Vec<f32>> = model.parameters().iter().map(values).collect();
    let mut fresh = Adam::new(0.3);
    assert!(load_checkpoint(&path, &mut model, &mut fresh, &cpu).is_err());
    assert_eq!(fresh.lr(), 0.3);
    assert_eq!(
        before,
        model.parameters().iter().map(values).collect::<Vec<_>>()
    );
    std::fs::remove_file(path).ok();
}

/// A module with one unrelated parameter, to write a checkpoint that does not fit `mlp`.
struct Linear1(Tensor);

impl Linear1 {
    fn new() -> Linear1 {
        Linear1(nn::param(
            Tensor::ones(&[5], DType::F32, &Device::cpu()).unwrap(),
        ))
    }
}

impl Module for Linear1 {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.mul(&self.0)
    }
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        vec![("other".into(), self.0.clone())]
    }
    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        vec![("other".into(), &mut self.0)]
    }
}
