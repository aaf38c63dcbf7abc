//! Adam and AdamW with PyTorch's formulas (bias-corrected moments; AdamW's decoupled decay).

use super::{check_hyper, state, update_params, Optimizer};
use crate::nn::Module;
use crate::{DType, Device, Error, Result, Tensor};
use std::collections::HashMap;

/// Per-parameter moments and step count.
#[derive(Debug, Clone)]
struct Moments {
    m: Tensor,
    v: Tensor,
    step: i32,
}

/// Adam (`torch.optim.Adam`): with `g = grad + weight_decay * p` (L2),
/// `m = β1 m + (1 - β1) g`, `v = β2 v + (1 - β2) g²`, and at step `t`
/// `p = p - lr / (1 - β1^t) * m / (sqrt(v) / sqrt(1 - β2^t) + eps)`.
/// Defaults: `betas = (0.9, 0.999)`, `eps = 1e-8`, `weight_decay = 0`.
///
/// ```
/// use wgtensor::nn::{param, Linear, Module};
/// use wgtensor::optim::{Adam, Optimizer};
/// use wgtensor::{Device, Tensor};
/// let d = Device::cpu();
/// let mut m = Linear::from_weights(param(Tensor::from_vec(vec![1f32], &[1, 1], &d)?), None)?;
/// m.forward(&Tensor::from_vec(vec![2f32], &[1, 1], &d)?)?.sum_all()?.backward()?;
/// Adam::new(0.1).step(&mut m)?; // the first Adam step moves by about lr
/// assert!((m.weight().to_vec::<f32>()?[0] - 0.9).abs() < 1e-6);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Adam {
    lr: f32,
    betas: (f32, f32),
    eps: f32,
    weight_decay: f32,
    decoupled: bool,
    state: HashMap<String, Moments>,
}

impl Adam {
    /// Adam with learning rate `lr` and PyTorch's defaults.
    pub fn new(lr: f32) -> Adam {
        Adam {
            lr,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.0,
            decoupled: false,
            state: HashMap::new(),
        }
    }

    /// Moment decay rates `(β1, β2)`, each in `[0, 1)`.
    #[must_use]
    pub fn betas(mut self, beta1: f32, beta2: f32) -> Adam {
        self.betas = (beta1, beta2);
        self
    }

    /// Term added to the denominator for stability.
    #[must_use]
    pub fn eps(mut self, eps: f32) -> Adam {
        self.eps = eps;
        self
    }

    /// L2 penalty added to the gradient (Adam), or decoupled decay (AdamW).
    #[must_use]
    pub fn weight_decay(mut self, weight_decay: f32) -> Adam {
        self.weight_decay = weight_decay;
        self
    }
}

impl Optimizer for Adam {
    fn step(&mut self, model: &mut dyn Module) -> Result<()> {
        let op = if self.decoupled {
            "AdamW::step"
        } else {
            "Adam::step"
        };
        let (b1, b2) = self.betas;
        check_hyper(op, "learning rate", self.lr, self.lr >= 0.0)?;
        check_hyper(op, "beta1", b1, (0.0..1.0).contains(&b1))?;
        check_hyper(op, "beta2", b2, (0.0..1.0).contains(&b2))?;
        check_hyper(op, "eps", self.eps, self.eps >= 0.0)?;
        check_hyper(
            op,
            "weight_decay",
            self.weight_decay,
            self.weight_decay >= 0.0,
        )?;
        let (lr, eps, wd, decoupled) = (self.lr, self.eps, self.weight_decay, self.decoupled);
        let state = &mut self.state;
        update_params(model, |name, p, g| {
            let mut p = p.clone();
            let mut g = g.clone();
            if wd != 0.0 {
                if decoupled {
                    p = p.mul_scalar(1.0 - lr * wd)?;
                } else {
                    g = g.add(&p.mul_scalar(wd)?)?;
                }
            }
            let prev = state
                .get(name)
                .filter(|s| s.m.shape() == g.shape() && s.m.device() == g.device());
            let (m, v, step) = match prev {
                Some(s) => (
                    s.m.mul_scalar(b1)?.add(&g.mul_scalar(1.0 - b1)?)?,
                    s.v.mul_scalar(b2)?.add(&g.mul(&g)?.mul_scalar(1.0 - b2)?)?,
                    s.step + 1,
                ),
                None => (g.mul_scalar(1.0 - b1)?, g.mul(&g)?.mul_scalar(1.0 - b2)?, 1),
            };
            let bc1 = 1.0 - b1.powi(step);
            let bc2 = 1.0 - b2.powi(step);
            let denom = v.sqrt()?.div_scalar(bc2.sqrt())?.add_scalar(eps)?;
            let new = p.sub(&m.div(&denom)?.mul_scalar(lr / bc1)?)?;
            state.insert(name.to_string(), Moments { m, v, step });
            Ok(new)
        })
    }

    fn lr(&self) -> f32 {
        self.lr
    }

    fn set_lr(&mut self, lr: f32) {
        self.lr = lr;
    }

    fn state_dict(&self) -> Result<Vec<(String, Tensor)>> {
        let mut out = vec![state::lr_entry(self.lr)?];
        let mut names: Vec<&String> = self.state.keys().collect();
        names.sort();
        for name in names {
            let s = &self.state[name];
            out.push((format!("state.{name}.exp_avg"), s.m.clone()));
            out.push((format!("state.{name}.exp_avg_sq"), s.v.clone()));
            let step = Tensor::from_vec(vec![s.step], &[], &Device::cpu())?;
            out.push((format!("state.{name}.step"), step));
        }
        Ok(out)
    }

    fn load_state_dict(&mut self, st: Vec<(String, Tensor)>) -> Result<()> {
        let op = "Adam::load_state_dict";
        let parsed = state::parse(op, st, &["exp_avg", "exp_avg_sq", "step"])?;
        let mut new = HashMap::new();
        for (name, mut slots) in parsed.slots {
            let m = state::take(op, &name, &mut slots, "exp_avg")?;
            let v = state::take(op, &name, &mut slots, "exp_avg_sq")?;
            let step = state::take(op, &name, &mut slots, "step")?;
            let bad = |message: String| Error::InvalidArgument { op, message };
            if m.shape() != v.shape() || m.device() != v.device() {
                return Err(bad(format!(
                    "moments of {name:?} disagree: exp_avg {:?} on {}, exp_avg_sq {:?} on {}",
                    m.shape(),
                    m.device(),
                    v.shape(),
                    v.device()
                )));
            }
            if step.numel() != 1 || step.dtype() != DType::I32 {
                return Err(bad(format!(
                    "\"state.{name}.step\" must be one i32, got {} of shape {:?}",
                    step.dtype(),
                    step.shape()
                )));
            }
            let step = step.to_vec::<i32>()?[0];
            if step < 1 {
                return Err(bad(format!(
                    "\"state.{name}.step\" is {step}, must be >= 1"
                )));
            }
            new.insert(name, Moments { m, v, step });
        }
        self.state = new;
        if let Some(lr) = parsed.lr {
            self.lr = lr;
        }
        Ok(())
    }
}

/// AdamW (`torch.optim.AdamW`): Adam whose weight decay is decoupled from the gradient,
/// `p = p * (1 - lr * weight_decay)` before the Adam update. Defaults as PyTorch's:
/// `betas = (0.9, 0.999)`, `eps = 1e-8`, `weight_decay = 0.01`.
///
/// ```
/// use wgtensor::nn::{param, Linear, Module};
/// use wgtensor::optim::{AdamW, Optimizer};
/// use wgtensor::{Device, Tensor};
/// let d = Device::cpu();
/// let mut m = Linear::from_weights(param(Tensor::from_vec(vec![1f32], &[1, 1], &d)?), None)?;
/// m.forward(&Tensor::from_vec(vec![2f32], &[1, 1], &d)?)?.sum_all()?.backward()?;
/// AdamW::new(0.1).weight_decay(0.5).step(&mut m)?; // 1 * (1 - 0.05) - 0.1
/// assert!((m.weight().to_vec::<f32>()?[0] - 0.85).abs() < 1e-6);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct AdamW(Adam);

impl AdamW {
    /// AdamW with learning rate `lr` and PyTorch's defaults.
    pub fn new(lr: f32) -> AdamW {
        AdamW(Adam {
            weight_decay: 0.01,
            decoupled: true,
            ..Adam::new(lr)
        })
    }

    /// Moment decay rates `(β1, β2)`, each in `[0, 1)`.
    #[must_use]
    pub fn betas(self, beta1: f32, beta2: f32) -> AdamW {
        AdamW(self.0.betas(beta1, beta2))
    }

    /// Term added to the denominator for stability.
    #[must_use]
    pub fn eps(self, eps: f32) -> AdamW {
        AdamW(self.0.eps(eps))
    }

    /// Decoupled weight decay (default 0.01).
    #[must_use]
    pub fn weight_decay(self, weight_decay: f32) -> AdamW {
        AdamW(self.0.weight_decay(weight_decay))
    }
}

impl Optimizer for AdamW {
    fn step(&mut self, model: &mut dyn Module) -> Result<()> {
        self.0.step(model)
    }

    fn lr(&self) -> f32 {
        self.0.lr
    }

    fn set_lr(&mut self, lr: f32) {
        self.0.lr = lr;
    }

    fn state_dict(&self) -> Result<Vec<(String, Tensor)>> {
        self.0.state_dict()
    }

    fn load_state_dict(&mut self, state: Vec<(String, Tensor)>) -> Result<()> {
        self.0.load_state_dict(state)
    }
}
