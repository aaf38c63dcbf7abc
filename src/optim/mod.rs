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

/// Runs `update(name, param, grad)` for every parameter with a gradient and puts the result in
/// its place as a new leaf that keeps the gradient.
pub(crate) fn update_params(
    model: &mut dyn Module,
    mut update: impl FnMut(&str, &Tensor, &Tensor) -> Result<Tensor>,
) -> Result<()> {
    let _no_grad = crate::no_grad();
    let mut devices: Vec<crate::Device> = Vec::new();
    for (name, p) in model.named_parameters_mut() {
        let Some(g) = p.grad() else { continue };
        let new = update(&name, p, &g)?;
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
