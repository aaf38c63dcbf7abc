//! Optimizers in the shape of `torch.optim`: [`Sgd`] (momentum, Nesterov, weight decay),
//! [`Adam`] and [`AdamW`], with PyTorch's update formulas, plus the [`GradScaler`] of mixed
//! precision training.
//!
//! An optimizer's [`Optimizer::step`] reads every parameter's gradient, computes the update
//! with tensor ops on the parameter's device (under [`crate::no_grad`]) and replaces the
//! parameter through [`Module::named_parameters_mut`] with a new leaf from [`nn::param`].
//! The gradient is carried over to the new leaf, so [`Optimizer::zero_grad`] behaves as in
//! PyTorch. State (momentum buffers, moments) is keyed by parameter name.
//!
//! ```
//! use wgtensor::nn::{Linear, Module};
//! use wgtensor::optim::{Optimizer, Sgd};
//! use wgtensor::{Device, Tensor};
//! let d = Device::cpu();
//! let mut model = Linear::new(3, 1, true, &d)?;
//! let mut opt = Sgd::new(0.1).momentum(0.9);
//! let x = Tensor::randn(&[8, 3], &d)?;
//! let before = model.forward(&x)?.pow_scalar(2.0)?.mean_all()?.to_scalar::<f32>()?;
//! for _ in 0..20 {
//!     opt.zero_grad(&model);
//!     let loss = model.forward(&x)?.pow_scalar(2.0)?.mean_all()?;
//!     loss.backward()?;
//!     opt.step(&mut model)?;
//! }
//! let after = model.forward(&x)?.pow_scalar(2.0)?.mean_all()?.to_scalar::<f32>()?;
//! assert!(after < before);
//! # Ok::<(), wgtensor::Error>(())
//! ```

mod adam;
mod checkpoint;
mod clip;
pub mod lr_scheduler;
mod scaler;
mod sgd;
mod state;

pub use adam::{Adam, AdamW};
pub use checkpoint::{load_checkpoint, save_checkpoint};
pub use clip::clip_grad_norm_;
pub use lr_scheduler::{CosineWithWarmup, LrScheduler, StepLR};
pub use scaler::GradScaler;
pub use sgd::Sgd;

use crate::nn::{self, Module};
use crate::{Error, Result, Tensor};

/// The `Optimizer` methods every optimizer spells the same way: `step` and `step_if_finite`
/// run its `update(model, found_inf)`, `lr` and `set_lr` read and write its `lr` field.
macro_rules! update_and_lr {
    () => {
        fn step(&mut self, model: &mut dyn Module) -> Result<()> {
            self.update(model, None)
        }

        fn step_if_finite(&mut self, model: &mut dyn Module, found_inf: &Tensor) -> Result<()> {
            self.update(model, Some(found_inf))
        }

        fn lr(&self) -> f32 {
            self.lr
        }

        fn set_lr(&mut self, lr: f32) {
            self.lr = lr;
        }
    };
}
use update_and_lr;

/// Runs `step` on an optimizer's `state`, restoring the state when it fails: all or nothing.
pub(crate) fn all_or_nothing<S: Clone>(
    state: &mut S,
    step: impl FnOnce(&mut S) -> Result<()>,
) -> Result<()> {
    let before = state.clone();
    let result = step(state);
    if result.is_err() {
        *state = before;
    }
    result
}

/// What every optimizer does: update the parameters from their gradients, and clear them.
pub trait Optimizer {
    /// Updates every parameter of `model` that has a gradient (parameters without one are
    /// left alone, as in PyTorch).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for invalid hyperparameters (negative or non-finite learning
    /// rate, betas outside `[0, 1)`); the errors of the tensor ops (device, memory).
    fn step(&mut self, model: &mut dyn Module) -> Result<()>;

    /// [`Optimizer::step`], skipped where `found_inf` (a 0-d f32 flag, as
    /// [`GradScaler::found_inf`] gives) is non-zero: parameters and state stay as they were.
    /// The decision is made by the kernels, never on the host, so a step does not wait for the
    /// flag: [`Sgd`], [`Adam`] and [`AdamW`] write every update and every piece of state
    /// through a select on the flag (Adam's step count lives on the device). The default runs
    /// `step` and then selects, per parameter, the old value where the flag is set; an
    /// optimizer with state of its own should override it to gate that state too.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `found_inf` does not hold exactly one element; the errors
    /// of [`Optimizer::step`].
    ///
    /// ```
    /// use wgtensor::nn::{param, Linear, Module};
    /// use wgtensor::optim::{Optimizer, Sgd};
    /// use wgtensor::{Device, Tensor};
    /// let d = Device::best();
    /// let mut m = Linear::from_weights(param(Tensor::from_vec(vec![1f32], &[1, 1], &d)?), None)?;
    /// m.forward(&Tensor::from_vec(vec![2f32], &[1, 1], &d)?)?.sum_all()?.backward()?;
    /// let mut opt = Sgd::new(0.1);
    /// opt.step_if_finite(&mut m, &Tensor::from_vec(vec![1f32], &[], &d)?)?; // skipped
    /// assert_eq!(m.weight().to_vec::<f32>()?, vec![1.0]);
    /// opt.step_if_finite(&mut m, &Tensor::from_vec(vec![0f32], &[], &d)?)?; // stepped
    /// assert_eq!(m.weight().to_vec::<f32>()?, vec![0.8]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    fn step_if_finite(&mut self, model: &mut dyn Module, found_inf: &Tensor) -> Result<()> {
        check_flag("Optimizer::step_if_finite", found_inf)?;
        let before: Vec<Tensor> = model.parameters();
        self.step(model)?;
        let _no_grad = crate::no_grad();
        let mut masks = Masks::new(found_inf);
        for ((_, p), old) in model.named_parameters_mut().into_iter().zip(before) {
            if p.shape() != old.shape() || p.device() != old.device() {
                continue;
            }
            let kept = masks.on(p.device())?.where_cond(&old, p)?;
            let g = p.grad();
            let kept = nn::param(kept);
            kept.set_grad(g)?;
            *p = kept;
        }
        Ok(())
    }

    /// Clears every parameter's gradient (PyTorch's `zero_grad(set_to_none=True)`).
    fn zero_grad(&self, model: &dyn Module) {
        for p in model.parameters() {
            p.zero_grad();
        }
    }

    /// The learning rate.
    fn lr(&self) -> f32;

    /// Changes the learning rate (for schedules).
    fn set_lr(&mut self, lr: f32);

    /// The optimizer's state by name, to resume training (PyTorch's `optimizer.state_dict()`):
    /// `lr` (0-d f32) and per parameter `state.<param>.<slot>` (Adam: `exp_avg`, `exp_avg_sq`,
    /// `step` as 0-d i32; SGD with momentum: `momentum_buffer`). Tensors stay on their device.
    /// The default holds only `lr`.
    ///
    /// # Errors
    /// Allocation errors.
    fn state_dict(&self) -> Result<Vec<(String, Tensor)>> {
        Ok(vec![state::lr_entry(self.lr())?])
    }

    /// Replaces the state with `state` (as [`Optimizer::state_dict`] names it; put the moment
    /// and momentum tensors on the parameters' device first). `lr` must be a CPU tensor, as
    /// `state_dict` gives it: it is read from CPU storage, never from a device. Adam's `step`
    /// may be a CPU count or a device count (which then keeps counting on the device).
    /// Validated whole before anything changes. The optimizer holds no model, so whether each
    /// tensor fits its parameter (shape, dtype, device) is checked by the next step, before it
    /// changes anything, and by [`load_checkpoint`] at load time.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an unknown or missing key, a bad or non-CPU `lr`, or
    /// moments whose shapes disagree.
    fn load_state_dict(&mut self, state: Vec<(String, Tensor)>) -> Result<()> {
        let parsed = state::parse("Optimizer::load_state_dict", state, &[])?;
        if let Some(lr) = parsed.lr {
            self.set_lr(lr);
        }
        Ok(())
    }
}

/// Runs `update(name, param, grad, skip)` for every parameter with a gradient and puts the
/// result in its place as a new leaf that keeps the gradient.
///
/// With a `found_inf` flag (see [`Optimizer::step_if_finite`]), `update` gets `skip`, a 0-d
/// U8 mask on the parameter's device, and must apply it to the parameter and to every piece
/// of state it writes (`skip.where_cond(&old, &new)`), so that nothing waits for the flag.
pub(crate) fn update_params(
    model: &mut dyn Module,
    found_inf: Option<&Tensor>,
    mut update: impl FnMut(&str, &Tensor, &Tensor, Option<&Tensor>) -> Result<Tensor>,
) -> Result<()> {
    let _no_grad = crate::no_grad();
    let mut devices: Vec<crate::Device> = Vec::new();
    if let Some(f) = found_inf {
        check_flag("Optimizer::step_if_finite", f)?;
    }
    let mut masks = found_inf.map(Masks::new);
    // Every new value is computed before any parameter is replaced, so an error at one
    // parameter leaves them all as they were (the optimizers restore their state likewise).
    let mut params = model.named_parameters_mut();
    let mut updated = Vec::with_capacity(params.len());
    for (i, (name, p)) in params.iter().enumerate() {
        let Some(g) = p.grad() else { continue };
        let skip = match &mut masks {
            Some(m) => Some(m.on(p.device())?.clone()),
            None => None,
        };
        let new = update(name, p, &g, skip.as_ref())?;
        let new = nn::param(new);
        new.set_grad(Some(g))?;
        if !devices.contains(new.device()) {
            devices.push(new.device().clone());
        }
        updated.push((i, new));
    }
    for (i, new) in updated {
        *params[i].1 = new;
    }
    // A step ends the fused chains it started: the new parameters and the optimizer's state
    // (moments, momentum) run now, so the next step reads buffers instead of inlining (and
    // recomputing, and keeping alive) every earlier step's chain.
    for d in &devices {
        crate::tensor::run_pending(d)?;
    }
    Ok(())
}

/// The skip mask of a `found_inf` flag on each device that needs it: a 0-d U8, non-zero where
/// the flag is, made by a kernel (the flag is copied to another device only when a model spans
/// several).
struct Masks<'a> {
    flag: &'a Tensor,
    on: Vec<(crate::Device, Tensor)>,
}

impl<'a> Masks<'a> {
    fn new(flag: &'a Tensor) -> Masks<'a> {
        Masks {
            flag,
            on: Vec::new(),
        }
    }

    fn on(&mut self, device: &crate::Device) -> Result<&Tensor> {
        if let Some(i) = self.on.iter().position(|(d, _)| d == device) {
            return Ok(&self.on[i].1);
        }
        let here = if self.flag.device() == device {
            self.flag.clone()
        } else {
            self.flag.to(device)?
        };
        let mask = here.reshape(&[])?.ne_scalar(0.0)?;
        self.on.push((device.clone(), mask));
        Ok(&self.on.last().expect("pushed").1)
    }
}

/// Refuses optimizer state that does not fit its parameter (state restored for another model,
/// or edited): `slots(name)` lists the state tensors kept for parameter `name`, which must
/// have its shape, dtype and device. Checked for every parameter with a gradient before a step
/// changes anything, so a bad slot is a typed error naming the parameter, never a broadcast or
/// a silent restart of the moments.
pub(crate) fn check_state<'a>(
    op: &'static str,
    model: &dyn Module,
    slots: impl Fn(&str) -> Vec<(&'static str, &'a Tensor)>,
) -> Result<()> {
    for (name, p) in model.named_parameters() {
        if p.grad().is_none() {
            continue;
        }
        for (slot, t) in slots(&name) {
            if t.shape() != p.shape() || t.dtype() != p.dtype() || t.device() != p.device() {
                return Err(Error::InvalidArgument {
                    op,
                    message: format!(
                        "\"state.{name}.{slot}\" is {} {:?} on {}, but parameter {name:?} is \
                         {} {:?} on {}: the state belongs to another model or device; load \
                         state saved for this model (moved to its device) or start afresh",
                        t.dtype(),
                        t.shape(),
                        t.device(),
                        p.dtype(),
                        p.shape(),
                        p.device()
                    ),
                });
            }
        }
    }
    Ok(())
}

/// A `found_inf` flag holds one element.
fn check_flag(op: &'static str, flag: &Tensor) -> Result<()> {
    if flag.numel() == 1 {
        Ok(())
    } else {
        Err(Error::InvalidArgument {
            op,
            message: format!(
                "found_inf must hold one element (a 0-d flag, as GradScaler::found_inf gives), \
                 got shape {:?}",
                flag.shape()
            ),
        })
    }
}

/// Hyperparameter checks shared by the optimizers.
pub(crate) fn check_hyper(op: &'static str, name: &str, v: f32, ok: bool) -> Result<()> {
    if ok && v.is_finite() {
        Ok(())
    } else {
        Err(Error::InvalidArgument {
            op,
            message: format!("invalid {name} {v}"),
        })
    }
}
