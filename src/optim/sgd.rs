//! Stochastic gradient descent with PyTorch's `torch.optim.SGD` formulas (dampening 0).

use super::{all_or_nothing, check_hyper, check_state, state, update_params, Optimizer};
use crate::nn::Module;
use crate::{Result, Tensor};
use std::collections::HashMap;

/// SGD: `g = grad + weight_decay * p`; with momentum `buf = momentum * buf + g` (the first
/// step sets `buf = g`) and `g = buf`, or `g = g + momentum * buf` with Nesterov;
/// then `p = p - lr * g`.
///
/// ```
/// use wgtensor::nn::{param, Linear, Module};
/// use wgtensor::optim::{Optimizer, Sgd};
/// use wgtensor::{Device, Tensor};
/// let d = Device::cpu();
/// let mut m = Linear::from_weights(param(Tensor::from_vec(vec![1f32], &[1, 1], &d)?), None)?;
/// m.forward(&Tensor::from_vec(vec![2f32], &[1, 1], &d)?)?.sum_all()?.backward()?; // grad 2
/// Sgd::new(0.1).step(&mut m)?;
/// assert_eq!(m.weight().to_vec::<f32>()?, vec![0.8]);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Sgd {
    lr: f32,
    momentum: f32,
    weight_decay: f32,
    nesterov: bool,
    buffers: HashMap<String, Tensor>,
}

impl Sgd {
    /// Plain SGD with learning rate `lr`.
    pub fn new(lr: f32) -> Sgd {
        Sgd {
            lr,
            momentum: 0.0,
            weight_decay: 0.0,
            nesterov: false,
            buffers: HashMap::new(),
        }
    }

    setters! {
        /// Momentum factor (default 0).
        momentum: f32;
        /// L2 penalty added to the gradient (default 0).
        weight_decay: f32;
        /// Nesterov momentum (default off; needs momentum > 0).
        nesterov: bool;
    }
}

impl Sgd {
    /// One step, gated by `found_inf` when given (see [`Optimizer::step_if_finite`]).
    fn update(&mut self, model: &mut dyn Module, found_inf: Option<&Tensor>) -> Result<()> {
        check_hyper("Sgd::step", "learning rate", self.lr, self.lr >= 0.0)?;
        check_hyper("Sgd::step", "momentum", self.momentum, self.momentum >= 0.0)?;
        check_hyper(
            "Sgd::step",
            "weight_decay",
            self.weight_decay,
            self.weight_decay >= 0.0,
        )?;
        check_hyper(
            "Sgd::step",
            "momentum for Nesterov (needs > 0)",
            self.momentum,
            !self.nesterov || self.momentum > 0.0,
        )?;
        let (lr, mom, wd, nesterov) = (self.lr, self.momentum, self.weight_decay, self.nesterov);
        check_state("Sgd::step", &*model, |name| match self.buffers.get(name) {
            Some(b) => vec![("momentum_buffer", b)],
            None => Vec::new(),
        })?;
        // All or nothing: a step that fails midway restores every momentum buffer
        // (`update_params` keeps the parameters themselves unchanged).
        all_or_nothing(&mut self.buffers, |buffers| {
            update_params(model, found_inf, |name, p, g, skip| {
                let mut d = if wd != 0.0 {
                    g.add(&p.mul_scalar(wd)?)?
                } else {
                    g.clone()
                };
                if mom != 0.0 {
                    let old = buffers.get(name);
                    let buf = match old {
                        Some(b) => b.mul_scalar(mom)?.add(&d)?,
                        None => d.clone(),
                    };
                    // A skipped first step leaves a zero buffer: `mom * 0 + d` is then exactly the
                    // `buf = d` of a first step.
                    let kept = match (skip, old) {
                        (Some(s), Some(b)) => s.where_cond(b, &buf)?,
                        (Some(s), None) => {
                            s.where_cond(&Tensor::zeros(&[], d.dtype(), d.device())?, &buf)?
                        }
                        (None, _) => buf.clone(),
                    };
                    buffers.insert(name.to_string(), kept);
                    d = if nesterov {
                        d.add(&buf.mul_scalar(mom)?)?
                    } else {
                        buf
                    };
                }
                let new = p.sub(&d.mul_scalar(lr)?)?;
                match skip {
                    Some(s) => s.where_cond(p, &new),
                    None => Ok(new),
                }
            })
        })
    }
}

impl Optimizer for Sgd {
    super::update_and_lr!();

    fn state_dict(&self) -> Result<Vec<(String, Tensor)>> {
        state::dict(self.lr, &self.buffers, |b| {
            Ok(vec![("momentum_buffer", b.clone())])
        })
    }

    fn load_state_dict(&mut self, st: Vec<(String, Tensor)>) -> Result<()> {
        let op = "Sgd::load_state_dict";
        let parsed = state::parse(op, st, &["momentum_buffer"])?;
        let mut new = HashMap::new();
        for (name, mut slots) in parsed.slots {
            let buf = state::take(op, &name, &mut slots, "momentum_buffer")?;
            if !buf.dtype().is_float() {
                return Err(crate::Error::InvalidArgument {
                    op,
                    message: format!(
                        "\"state.{name}.momentum_buffer\" is {}; buffers are floats like their \
                         parameter",
                        buf.dtype()
                    ),
                });
            }
            new.insert(name, buf);
        }
        self.buffers = new;
        if let Some(lr) = parsed.lr {
            self.lr = lr;
        }
        Ok(())
    }
}
