//! The loss scaler decides on the device: a scaled step (finite or skipped) makes no upload,
//! no download and no wait; a skipped step leaves parameters and optimizer state exactly as
//! they were (Adam's step count included), so a run with skipped steps continues as the run
//! without them; `step_if_finite` checks its flag.

use crate::common;

use common::{assert_close, devices, values, Vector};
use wgtensor::nn::{self, Module};
use wgtensor::optim::{Adam, AdamW, GradScaler, Optimizer, Sgd};
use wgtensor::{transfer_stats, DType, Device, Error, Result, Tensor};

/// An optimizer with only `step` (it halves every parameter): the trait's default
/// `step_if_finite` applies.
struct Halve;

impl Optimizer for Halve {
    fn step(&mut self, model: &mut dyn Module) -> Result<()> {
        for (_, p) in model.named_parameters_mut() {
            *p = nn::param(p.mul_scalar(0.5)?);
        }
        Ok(())
    }
    fn lr(&self) -> f32 {
        0.0
    }
    fn set_lr(&mut self, _: f32) {}
}

/// Makes a fresh optimizer.
type Make = fn() -> Box<dyn Optimizer>;

/// Parameters after each finite step, and the optimizer state by name.
type Trace = (Vec<Vec<f32>>, Vec<(String, Vec<f32>)>);

fn optimizers() -> Vec<(&'static str, Make)> {
    vec![
        ("sgd", || Box::new(Sgd::new(0.1))),
        ("sgd nesterov", || {
            Box::new(
                Sgd::new(0.1)
                    .momentum(0.9)
                    .nesterov(true)
                    .weight_decay(0.01),
            )
        }),
        ("adam", || Box::new(Adam::new(0.05).weight_decay(0.01))),
        ("adamw", || Box::new(AdamW::new(0.05))),
        ("default step_if_finite", || Box::new(Halve)),
    ]
}

/// One scaled iteration; `overflow` multiplies the input so the scaled gradients are inf.
fn iteration(
    m: &mut Vector,
    opt: &mut dyn Optimizer,
    scaler: &mut GradScaler,
    c: &Tensor,
    huge: &Tensor,
    overflow: bool,
) -> Result<()> {
    opt.zero_grad(m);
    let input = if overflow { huge } else { c };
    scaler.scale(&m.forward(input)?)?.backward()?;
    scaler.step(opt, m)?;
    scaler.update()
}

/// Parameters after each finite iteration of `plan` (true = an overflowing iteration), and
/// the optimizer's state at the end.
fn run(dev: &Device, make: Make, plan: &[bool]) -> Result<Trace> {
    let mut m = Vector(nn::param(Tensor::from_vec(
        vec![0.5f32, -1.0, 2.0],
        &[3],
        dev,
    )?));
    let c = Tensor::from_vec(vec![0.3f32, 0.7, -0.2], &[3], dev)?;
    let huge = Tensor::full(&[3], 1e36, DType::F32, dev)?;
    let mut opt = make();
    // A scale of 2^10 that grows every iteration: unscaling stays exact (powers of two).
    let mut scaler = GradScaler::new().init_scale(1024.0).growth_interval(1);
    let mut out = Vec::new();
    for &overflow in plan {
        let before = values(&m.0);
        iteration(&mut m, opt.as_mut(), &mut scaler, &c, &huge, overflow)?;
        if overflow {
            assert_eq!(
                values(&m.0),
                before,
                "{dev}: a skipped step moved the parameter"
            );
        } else {
            out.push(values(&m.0));
        }
    }
    let state = opt
        .state_dict()?
        .into_iter()
        .map(|(k, t)| Ok((k, values(&t.to_dtype(DType::F32)?))))
        .collect::<Result<Vec<_>>>()?;
    Ok((out, state))
}

#[test]
fn skipped_steps_leave_parameters_and_state_as_they_were() -> Result<()> {
    for dev in devices() {
        for (name, make) in optimizers() {
            let (want, want_state) = run(&dev, make, &[false, false, false])?;
            for plan in [
                [true, false, false, false],
                [false, true, false, false],
                [false, false, true, false],
            ] {
                let (got, state) = run(&dev, make, &plan)?;
                let ctx = format!("{name} on {dev}, plan {plan:?}");
                for (t, (g, w)) in got.iter().zip(&want).enumerate() {
                    // Adam's bias corrections are computed on the device once a step is gated
                    // (exp(t ln β) instead of the host's powi): a few ulps apart.
                    assert_close(g, w, 1e-5, 1e-6, &format!("{ctx}: step {}", t + 1));
                }
                assert_eq!(state.len(), want_state.len(), "{ctx}: state entries");
                for ((k, v), (wk, wv)) in state.iter().zip(&want_state) {
                    assert_eq!(k, wk, "{ctx}");
                    assert_close(v, wv, 1e-5, 1e-7, &format!("{ctx}: {k}"));
                }
            }
        }
    }
    Ok(())
}

/// Transfer counters are per device and shared with other tests: this runs alone in a child.
#[test]
fn scaled_steps_read_nothing_back() {
    common::run_child("grad_scaler::scaled_steps_child", &[]);
}

#[test]
fn scaled_steps_child() {
    if !common::is_child("grad_scaler::scaled_steps_child") {
        return;
    }
    for dev in common::gpus() {
        for (name, make) in optimizers() {
            let mut m = Vector(nn::param(
                Tensor::from_vec(vec![0.5f32, -1.0, 2.0], &[3], &dev).unwrap(),
            ));
            let c = Tensor::from_vec(vec![0.3f32, 0.7, -0.2], &[3], &dev).unwrap();
            let huge = Tensor::full(&[3], 1e36, DType::F32, &dev).unwrap();
            let mut opt = make();
            let mut scaler = GradScaler::new().growth_interval(2);
            // The first iteration creates the scale and the optimizer state.
            iteration(&mut m, opt.as_mut(), &mut scaler, &c, &huge, false).unwrap();
            dev.synchronize().unwrap();
            let before = transfer_stats(&dev);
            for overflow in [false, true, false, false] {
                iteration(&mut m, opt.as_mut(), &mut scaler, &c, &huge, overflow).unwrap();
            }
            let after = transfer_stats(&dev);
            assert_eq!(
                (after.uploads, after.downloads, after.wait_time),
                (before.uploads, before.downloads, before.wait_time),
                "{name} on {dev}: no transfer and no wait in scaled steps"
            );
            // 5 iterations, one of them skipped: 65536 * 2 (after two finite) * 0.5 * 2.
            assert_eq!(
                scaler.get_scale().unwrap().to_scalar::<f32>().unwrap(),
                131072.0,
                "{name} on {dev}"
            );
            assert!(transfer_stats(&dev).downloads > after.downloads, "counted");
            if name == "adam" {
                // Adam's device step count round-trips through state_dict without a readback
                // (only `lr` is a host value, and it is a CPU tensor), and the reloaded
                // optimizer continues exactly as the original.
                let state = opt.state_dict().unwrap();
                let mut reloaded = Adam::new(1.0).weight_decay(0.01);
                let (mut twin, at) = (Vector(m.0.detach()), transfer_stats(&dev));
                twin.0 = nn::param(twin.0.clone());
                reloaded.load_state_dict(state).unwrap();
                let loaded = transfer_stats(&dev);
                assert_eq!(
                    (loaded.uploads, loaded.downloads),
                    (at.uploads, at.downloads),
                    "{dev}: loading Adam's state moved nothing"
                );
                let mut s2 = GradScaler::new();
                iteration(&mut m, opt.as_mut(), &mut scaler, &c, &huge, false).unwrap();
                iteration(&mut twin, &mut reloaded, &mut s2, &c, &huge, false).unwrap();
                assert_close(&values(&twin.0), &values(&m.0), 1e-6, 1e-7, "reloaded Adam");
                // A learning rate on the GPU is refused, not read back.
                let mut st = opt.state_dict().unwrap();
                for (k, t) in st.iter_mut() {
                    if k == "lr" {
                        *t = t.to(&dev).unwrap();
                    }
                }
                let err = Adam::new(1.0).load_state_dict(st).unwrap_err();
                assert!(err.to_string().contains("CPU"), "{err}");
            }
        }
    }
    common::child_done("grad_scaler::scaled_steps_child");
}

#[test]
fn step_if_finite_checks_its_flag_and_the_default_gates_the_parameters() -> Result<()> {
    for dev in devices() {
        let mut m = Vector(nn::param(Tensor::from_vec(vec![2f32, 4.0], &[2], &dev)?));
        m.forward(&Tensor::ones(&[2], DType::F32, &dev)?)?
            .backward()?;
        let set = Tensor::from_vec(vec![1f32], &[], &dev)?;
        let clear = Tensor::from_vec(vec![0f32], &[1], &dev)?;
        Halve.step_if_finite(&mut m, &set)?;
        assert_eq!(values(&m.0), vec![2.0, 4.0], "{dev}: skipped");
        Halve.step_if_finite(&mut m, &clear)?;
        assert_eq!(values(&m.0), vec![1.0, 2.0], "{dev}: stepped");
        let two = Tensor::zeros(&[2], DType::F32, &dev)?;
        for opt in [&mut Sgd::new(0.1) as &mut dyn Optimizer, &mut Halve] {
            let err = opt.step_if_finite(&mut m, &two).unwrap_err();
            assert!(
                matches!(&err, Error::InvalidArgument { message, .. } if message.contains("one element")),
                "{dev}: {err}"
            );
        }
        assert_eq!(
            values(&m.0),
            vec![1.0, 2.0],
            "{dev}: untouched by the errors"
        );
        // unscale before any scaled loss names the missing call.
        let err = GradScaler::new().unscale(&m).unwrap_err();
        assert!(err.to_string().contains("GradScaler::scale"), "{err}");
    }
    Ok(())
}
