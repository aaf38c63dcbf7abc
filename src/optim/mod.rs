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
mod clip;
pub mod lr_scheduler;
mod scaler;
mod sgd;
mod state;

pub use adam::{Adam, AdamW};
pub use clip::clip_grad_norm_;
pub use lr_scheduler::{CosineWithWarmup, LrScheduler, StepLR};
pub use scaler::GradScaler;
pub use sgd::Sgd;
pub use state::{load_checkpoint, save_checkpoint};

use crate::nn::{self, Module};
use crate::{Error, Result, Tensor};

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
    /// [`Sgd`], [`Adam`] and [`AdamW`] decide on the device (every update is written through a
    /// select on the flag, and Adam's step count lives on the device), so a GPU step never
    /// waits for the flag. For CPU parameters the flag is read on the host, which costs no
    /// transfer when it is a CPU tensor. The default reads the flag back (one download) and
    /// calls `step` when it is zero.
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
        let flag = found_inf.to_dtype(crate::DType::F32)?.to_vec::<f32>()?[0];
        if flag == 0.0 {
            self.step(model)
        } else {
            Ok(())
        }
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
    /// and momentum tensors on the parameters' device first; `lr` and `step` are host scalars,
    /// best left on the CPU, where reading them costs no transfer). Validated whole before
    /// anything changes.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an unknown or missing key, a bad `lr`, or moments whose
    /// shapes disagree.
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
/// With a `found_inf` flag (see [`Optimizer::step_if_finite`]), CPU parameters are skipped on
/// the host when the flag is set, and GPU parameters get `skip`, a 0-d U8 mask on their device
/// that `update` must apply to the parameter and to every piece of state it writes
/// (`skip.where_cond(&old, &new)`), so that nothing waits for the flag.
pub(crate) fn update_params(
    model: &mut dyn Module,
    found_inf: Option<&Tensor>,
    mut update: impl FnMut(&str, &Tensor, &Tensor, Option<&Tensor>) -> Result<Tensor>,
) -> Result<()> {
    let _no_grad = crate::no_grad();
    let mut devices: Vec<crate::Device> = Vec::new();
    // Per device: `Ok(skip)` decided on the host (CPU), `Err(mask)` decided on the device.
    let mut gates: Vec<(crate::Device, std::result::Result<bool, Tensor>)> = Vec::new();
    if let Some(f) = found_inf {
        check_flag("Optimizer::step_if_finite", f)?;
    }
    for (name, p) in model.named_parameters_mut() {
        let Some(g) = p.grad() else { continue };
        let mut skip = None;
        if let Some(flag) = found_inf {
            let dev = p.device().clone();
            if !gates.iter().any(|(d, _)| d == &dev) {
                let here = if flag.device() == &dev {
                    flag.clone()
                } else {
                    flag.to(&dev)?
                };
                let gate = if dev.is_cpu() {
                    Ok(here.to_dtype(crate::DType::F32)?.to_vec::<f32>()?[0] != 0.0)
                } else {
                    Err(here.reshape(&[])?.ne_scalar(0.0)?)
                };
                gates.push((dev.clone(), gate));
            }
            match &gates.iter().find(|(d, _)| d == &dev).expect("gate").1 {
                Ok(true) => continue,
                Ok(false) => {}
                Err(mask) => skip = Some(mask.clone()),
            }
        }
        let new = update(&name, p, &g, skip.as_ref())?;
        let new = nn::param(new);
        new.set_grad(Some(g))?;
        if !devices.contains(new.device()) {
            devices.push(new.device().clone());
        }
        *p = new;
    }
    // A step ends the fused chains it started: the new parameters and the optimizer's state
    // (moments, momentum) run now, so the next step reads buffers instead of inlining (and
    // recomputing, and keeping alive) every earlier step's chain.
    for d in &devices {
        if let Some(g) = d.as_gpu() {
            crate::tensor::materialize_pending(g)?;
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
