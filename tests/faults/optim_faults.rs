//! Optimizer state that does not fit its parameters, and steps that fail midway: a moment or
//! momentum buffer of another shape, dtype or device is a typed error naming the parameter
//! (at the next step, and at load time through `load_checkpoint`), never a broadcast or a
//! silent restart; a step that fails at one parameter leaves every parameter and every piece
//! of state as it was.

use crate::common;

use common::{devices, values};
use wgtensor::nn::{self, Module};
use wgtensor::optim::{load_checkpoint, save_checkpoint, Adam, AdamW, Optimizer, Sgd};
use wgtensor::{DType, Device, Error, Result, Tensor};

/// Two parameters, `a` then `b`, each with a gradient set by hand.
struct Two {
    a: Tensor,
    b: Tensor,
}

impl Two {
    fn new(b: Tensor, device: &Device) -> Two {
        let a = nn::param(Tensor::from_vec(vec![1f32, -2.0], &[2], device).unwrap());
        a.set_grad(Some(
            Tensor::from_vec(vec![0.5f32, 0.25], &[2], device).unwrap(),
        ))
        .unwrap();
        Two { a, b }
    }

    /// `b` is a float parameter of shape [3] with a gradient.
    fn floats(device: &Device) -> Two {
        let b = nn::param(Tensor::from_vec(vec![3f32, 4.0, 5.0], &[3], device).unwrap());
        b.set_grad(Some(
            Tensor::from_vec(vec![1f32, -1.0, 2.0], &[3], device).unwrap(),
        ))
        .unwrap();
        Two::new(b, device)
    }

    fn values(&self) -> Vec<Vec<f32>> {
        self.parameters().iter().map(values).collect()
    }
}

impl Module for Two {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.mul(&self.a)
    }
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        vec![("a".into(), self.a.clone()), ("b".into(), self.b.clone())]
    }
    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        vec![("a".into(), &mut self.a), ("b".into(), &mut self.b)]
    }
}

fn optimizers() -> Vec<(&'static str, Box<dyn Optimizer>)> {
    vec![
        ("Adam", Box::new(Adam::new(0.1))),
        ("AdamW", Box::new(AdamW::new(0.1))),
        ("Sgd", Box::new(Sgd::new(0.1).momentum(0.9))),
    ]
}

/// The state of `opt` as comparable host values.
fn state_values(opt: &dyn Optimizer) -> Vec<(String, Vec<f32>)> {
    opt.state_dict()
        .unwrap()
        .into_iter()
        .map(|(n, t)| (n, values(&t.to_dtype(DType::F32).unwrap())))
        .collect()
}

fn expect_names(r: Result<()>, needles: &[&str], ctx: &str) {
    match r {
        Err(Error::InvalidArgument { message, .. }) => {
            for n in needles {
                assert!(message.contains(n), "{ctx}: {n:?} missing from {message}");
            }
        }
        other => panic!("{ctx}: expected InvalidArgument, got {other:?}"),
    }
}

/// Moments of the wrong shape (one that would broadcast), the wrong dtype or the wrong device,
/// loaded with `load_state_dict`: the next step refuses them, naming the parameter, and
/// changes nothing.
#[test]
fn state_that_does_not_fit_its_parameter_is_refused_by_the_step() {
    let all = devices();
    for device in &all {
        let other = all.iter().find(|d| *d != device).cloned();
        for (name, mut opt) in optimizers() {
            let mut model = Two::floats(device);
            opt.step(&mut model).unwrap();
            let good = opt.state_dict().unwrap();
            let slot = if name == "Sgd" {
                "state.b.momentum_buffer"
            } else {
                "state.b.exp_avg"
            };
            let twin = if name == "Sgd" {
                None
            } else {
                Some("state.b.exp_avg_sq")
            };
            let mut bad_tensors = vec![
                ("shape [1]", Tensor::ones(&[1], DType::F32, device).unwrap()),
                (
                    "shape [3, 1]",
                    Tensor::ones(&[3, 1], DType::F32, device).unwrap(),
                ),
                ("dtype f16", Tensor::ones(&[3], DType::F16, device).unwrap()),
            ];
            if let Some(o) = &other {
                bad_tensors.push(("another device", Tensor::ones(&[3], DType::F32, o).unwrap()));
            }
            for (what, bad) in bad_tensors {
                let ctx = format!("{device} {name} {what}");
                let tampered: Vec<(String, Tensor)> = good
                    .iter()
                    .map(|(n, t)| {
                        if n == slot || Some(n.as_str()) == twin {
                            (n.clone(), bad.clone())
                        } else {
                            (n.clone(), t.clone())
                        }
                    })
                    .collect();
                opt.load_state_dict(tampered).unwrap();
                let params = model.values();
                let state = state_values(&*opt);
                expect_names(opt.step(&mut model), &["\"b\"", "state.b."], &ctx);
                assert_eq!(model.values(), params, "{ctx}: parameters changed");
                assert_eq!(state_values(&*opt), state, "{ctx}: state changed");
            }
            opt.load_state_dict(good).unwrap();
            opt.step(&mut model).unwrap();
        }
    }
}

/// A checkpoint whose optimizer part does not fit the model is refused at load time, naming
/// the parameter; model and optimizer stay as they were.
#[test]
fn load_checkpoint_checks_the_state_against_the_model() {
    for device in devices() {
        for (name, mut opt) in optimizers() {
            let ctx = format!("{device} {name}");
            let mut model = Two::floats(&device);
            opt.step(&mut model).unwrap();
            let path = std::env::temp_dir().join(format!(
                "wgtensor_{}_optstate_{name}_{}.safetensors",
                std::process::id(),
                device.to_string().replace(':', "_")
            ));
            // The state of a model whose `b` has 4 elements, saved with this model's weights.
            let mut wide = Two::new(
                nn::param(Tensor::ones(&[4], DType::F32, &device).unwrap()),
                &device,
            );
            wide.b
                .set_grad(Some(Tensor::ones(&[4], DType::F32, &device).unwrap()))
                .unwrap();
            let (_, mut wide_opt) = optimizers().into_iter().find(|(n, _)| *n == name).unwrap();
            wide_opt.step(&mut wide).unwrap();
            struct Pair<'a>(&'a Two);
            impl Module for Pair<'_> {
                fn forward(&self, x: &Tensor) -> Result<Tensor> {
                    self.0.forward(x)
                }
                fn named_parameters(&self) -> Vec<(String, Tensor)> {
                    self.0.named_parameters()
                }
                fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
                    Vec::new()
                }
            }
            save_checkpoint(&path, &Pair(&model), &*wide_opt).unwrap();
            let (params, state) = (model.values(), state_values(&*opt));
            let lr = opt.lr();
            opt.set_lr(0.5);
            let r = load_checkpoint(&path, &mut model, &mut *opt, &device);
            std::fs::remove_file(&path).ok();
            expect_names(r, &["\"b\"", "[4]", "[3]"], &ctx);
            assert_eq!(model.values(), params, "{ctx}: parameters changed");
            assert_eq!(opt.lr(), 0.5, "{ctx}: lr changed");
            opt.set_lr(lr);
            assert_eq!(state_values(&*opt), state, "{ctx}: state changed");
        }
    }
}

/// A step that fails at the second parameter (an integer parameter the update cannot compute
/// with) leaves the first parameter and all state as they were: all or nothing.
#[test]
fn a_step_that_fails_midway_changes_nothing() {
    for device in devices() {
        for (name, mut opt) in optimizers() {
            let ctx = format!("{device} {name}");
            // A fresh optimizer: no state yet, so nothing is refused before the update runs.
            let b = Tensor::from_vec(vec![1i32, 2, 3], &[3], &device).unwrap();
            b.set_grad(Some(
                Tensor::from_vec(vec![1i32, 1, 1], &[3], &device).unwrap(),
            ))
            .unwrap();
            let mut mixed = Two::new(b, &device);
            let (a, state) = (values(&mixed.a), state_values(&*opt));
            let r = opt.step(&mut mixed);
            assert!(
                r.is_err(),
                "{ctx}: an i32 parameter stepped: {:?}",
                values(&mixed.b)
            );
            assert_eq!(values(&mixed.a), a, "{ctx}: the first parameter changed");
            assert_eq!(state_values(&*opt), state, "{ctx}: state changed");
        }
    }
}
