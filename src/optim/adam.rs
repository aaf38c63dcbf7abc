//! Adam and AdamW with PyTorch's formulas (bias-corrected moments; AdamW's decoupled decay).

use super::{all_or_nothing, check_hyper, check_state, state, update_params, Optimizer};
use crate::nn::Module;
use crate::ops::geometry::AdamStep;
use crate::{DType, Device, Error, Result, Tensor};
use std::collections::HashMap;

/// Per-parameter moments and step count.
#[derive(Debug, Clone)]
struct Moments {
    m: Tensor,
    v: Tensor,
    /// Steps taken, counted on the host (bias corrections are then host scalars).
    step: i32,
    /// The step count as a 0-d f32 on the parameter's device, from the first gated step on
    /// ([`Optimizer::step_if_finite`]): a step skipped on the device must not advance it, so
    /// from then on it is the count, and the bias corrections are computed on the device.
    dstep: Option<Tensor>,
}

/// One Adam update in a single fused pass when the backend has one for these tensors (packed f32
/// CPU data: new parameter, moments and step), or `None` (the op-by-op path then runs: on a GPU
/// it fuses into one kernel). The same f32 operations in the same order as that path, so the
/// results are the same bits.
fn fused_step(
    p: &Tensor,
    g: &Tensor,
    prev: Option<&Moments>,
    (b1, b2): (f32, f32),
    lr: f32,
    eps: f32,
) -> Result<Option<(Tensor, Tensor, Tensor, i32)>> {
    let step = prev.map_or(1, |s| s.step + 1);
    let hyper = AdamStep {
        b1,
        b2,
        lr,
        eps,
        step,
    };
    let moments = prev.map(|s| (&s.m, &s.v));
    Ok(p.adam_step_fused(g, moments, &hyper)?
        .map(|(np, nm, nv)| (np, nm, nv, step)))
}

impl Moments {
    fn host(m: Tensor, v: Tensor, step: i32) -> Moments {
        Moments {
            m,
            v,
            step,
            dstep: None,
        }
    }
}

/// One Adam update whose step count lives on the device, gated by `skip` (a 0-d U8 mask):
/// where it is set, the moments and the count keep their old values, decided by the kernels
/// (the caller gates the parameter). `1 - β^t` is `1 - exp(t ln β)` on the device (within a few ulps of the host's
/// `powi`). Missing moments start as zeros, which gives exactly the first step's
/// `(1 - β1) g` and `(1 - β2) g²`.
fn device_step(
    p: &Tensor,
    g: &Tensor,
    prev: Option<&Moments>,
    skip: Option<&Tensor>,
    (b1, b2): (f32, f32),
    lr: f32,
    eps: f32,
) -> Result<(Tensor, Moments)> {
    let dev = p.device();
    let zero = Tensor::zeros(&[], g.dtype(), dev)?;
    let (m0, v0, t0) = match prev {
        Some(s) => {
            let t = match &s.dstep {
                Some(t) => t.clone(),
                None => Tensor::full(&[], f64::from(s.step), DType::F32, dev)?,
            };
            (s.m.clone(), s.v.clone(), t)
        }
        None => (zero.clone(), zero, Tensor::zeros(&[], DType::F32, dev)?),
    };
    let m = m0.mul_scalar(b1)?.add(&g.mul_scalar(1.0 - b1)?)?;
    let v = v0.mul_scalar(b2)?.add(&g.mul(g)?.mul_scalar(1.0 - b2)?)?;
    let t = t0.add_scalar(1.0)?;
    let correction = |beta: f32| -> Result<Tensor> {
        t.mul_scalar(beta.ln())?
            .exp()?
            .neg()?
            .add_scalar(1.0)?
            .to_dtype(p.dtype())
    };
    let (bc1, bc2) = (correction(b1)?, correction(b2)?);
    let denom = v.sqrt()?.div(&bc2.sqrt()?)?.add_scalar(eps)?;
    let new = p.sub(&m.div(&denom)?.div(&bc1)?.mul_scalar(lr)?)?;
    let step = prev.map_or(1, |s| s.step + 1);
    Ok(match skip {
        Some(s) => (
            new,
            Moments {
                m: s.where_cond(&m0, &m)?,
                v: s.where_cond(&v0, &v)?,
                step,
                dstep: Some(s.where_cond(&t0, &t)?),
            },
        ),
        None => (
            new,
            Moments {
                m,
                v,
                step,
                dstep: Some(t),
            },
        ),
    })
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

    setters! {
        /// Term added to the denominator for stability.
        eps: f32;
        /// L2 penalty added to the gradient (Adam), or decoupled decay (AdamW).
        weight_decay: f32;
    }
}

impl Adam {
    /// One step, gated by `found_inf` when given (see [`Optimizer::step_if_finite`]).
    fn update(&mut self, model: &mut dyn Module, found_inf: Option<&Tensor>) -> Result<()> {
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
        check_state(op, &*model, |name| match self.state.get(name) {
            Some(s) => vec![("exp_avg", &s.m), ("exp_avg_sq", &s.v)],
            None => Vec::new(),
        })?;
        // All or nothing: a step that fails midway restores the moments of every parameter
        // (`update_params` keeps the parameters themselves unchanged).
        all_or_nothing(&mut self.state, |state| {
            update_params(model, found_inf, |name, param, g, skip| {
                let mut p = param.clone();
                let mut g = g.clone();
                if wd != 0.0 {
                    if decoupled {
                        p = p.mul_scalar(1.0 - lr * wd)?;
                    } else {
                        g = g.add(&p.mul_scalar(wd)?)?;
                    }
                }
                let prev = state.get(name);
                if skip.is_some() || prev.is_some_and(|s| s.dstep.is_some()) {
                    let (new, moments) = device_step(&p, &g, prev, skip, (b1, b2), lr, eps)?;
                    // A skipped step keeps the parameter from before the decoupled decay.
                    let new = match skip {
                        Some(s) => s.where_cond(param, &new)?,
                        None => new,
                    };
                    state.insert(name.to_string(), moments);
                    return Ok(new);
                }
                if let Some((new, m, v, step)) = fused_step(&p, &g, prev, (b1, b2), lr, eps)? {
                    state.insert(name.to_string(), Moments::host(m, v, step));
                    return Ok(new);
                }
                // On a GPU the moments run as kernels of their own before the parameter's,
                // which then reads them rather than computing both again from the gradient; a
                // weight gradient (often a transposed view of a matmul) is packed once, so
                // every kernel reads packed data, four elements per invocation. The same
                // operations in the same order: the same values.
                let g = if g.is_contiguous() && g.layout().offset == 0 {
                    g
                } else {
                    g.contiguous()?.materialized()?
                };
                let (m, v, step) = match prev {
                    Some(s) => (
                        s.m.mul_scalar(b1)?.add(&g.mul_scalar(1.0 - b1)?)?,
                        s.v.mul_scalar(b2)?.add(&g.mul(&g)?.mul_scalar(1.0 - b2)?)?,
                        s.step + 1,
                    ),
                    None => (g.mul_scalar(1.0 - b1)?, g.mul(&g)?.mul_scalar(1.0 - b2)?, 1),
                };
                let (m, v) = (m.materialized()?, v.materialized()?);
                let bc1 = 1.0 - b1.powi(step);
                let bc2 = 1.0 - b2.powi(step);
                let denom = v.sqrt()?.div_scalar(bc2.sqrt())?.add_scalar(eps)?;
                let new = p.sub(&m.div(&denom)?.mul_scalar(lr / bc1)?)?;
                state.insert(name.to_string(), Moments::host(m, v, step));
                Ok(new)
            })
        })
    }
}

impl Optimizer for Adam {
    super::update_and_lr!();

    fn state_dict(&self) -> Result<Vec<(String, Tensor)>> {
        state::dict(self.lr, &self.state, |s| {
            let step = match &s.dstep {
                Some(t) => t.to_dtype(DType::I32)?,
                None => Tensor::from_vec(vec![s.step], &[], &Device::cpu())?,
            };
            Ok(vec![
                ("exp_avg", s.m.clone()),
                ("exp_avg_sq", s.v.clone()),
                ("step", step),
            ])
        })
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
            if !m.dtype().is_float() {
                return Err(bad(format!(
                    "\"state.{name}.exp_avg\" is {}; moments are floats like their parameter",
                    m.dtype()
                )));
            }
            if m.shape() != v.shape() || m.device() != v.device() || m.dtype() != v.dtype() {
                return Err(bad(format!(
                    "moments of {name:?} disagree: exp_avg {} {:?} on {}, exp_avg_sq {} {:?} \
                     on {}",
                    m.dtype(),
                    m.shape(),
                    m.device(),
                    v.dtype(),
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
            // A CPU count (what `state_dict` gives for host-counted steps) is read from its
            // storage; a device count (from a gated step) stays on its device and keeps
            // counting there: no readback either way.
            let moments = match state::cpu_i32_scalar(&step)? {
                Some(step) if step < 1 => {
                    return Err(bad(format!(
                        "\"state.{name}.step\" is {step}, must be >= 1"
                    )));
                }
                Some(step) => Moments::host(m, v, step),
                None => {
                    if step.device() != m.device() {
                        return Err(bad(format!(
                            "\"state.{name}.step\" is on {}, the moments on {}: keep it on \
                             the CPU or with the moments",
                            step.device(),
                            m.device()
                        )));
                    }
                    let dstep = step.reshape(&[])?.to_dtype(DType::F32)?;
                    Moments {
                        m,
                        v,
                        step: 1,
                        dstep: Some(dstep),
                    }
                }
            };
            new.insert(name, moments);
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

    fn step_if_finite(&mut self, model: &mut dyn Module, found_inf: &Tensor) -> Result<()> {
        self.0.step_if_finite(model, found_inf)
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
