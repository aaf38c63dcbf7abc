//! Dynamic loss scaling for mixed precision (PyTorch's `torch.amp.GradScaler`).

use super::Optimizer;
use crate::error::invalid;
use crate::nn::Module;
use crate::{DType, Error, Result, Tensor};

/// Multiplies the loss by a large factor before backward so small f16 gradients do not flush to
/// zero, divides the gradients back before the optimizer step, skips steps whose gradients hold
/// inf/NaN (halving the scale) and doubles the scale after `growth_interval` finite steps in a
/// row. Defaults as PyTorch's: scale 2^16, growth 2 every 2000 steps, backoff 0.5.
///
/// Everything stays on the device, as in PyTorch's CUDA scaler with a fused optimizer: the
/// scale and the growth tracker are 0-d f32 tensors on the device of the first scaled loss,
/// the inf/NaN check is a device-side flag ([`GradScaler::found_inf`]), and the optimizer skips
/// a step through [`Optimizer::step_if_finite`], so a training step never waits for the device.
/// [`GradScaler::get_scale`] hands out the scale tensor, read it when you need the number.
///
/// ```
/// use wgtensor::nn::{param, Linear, Module};
/// use wgtensor::optim::{GradScaler, Optimizer, Sgd};
/// use wgtensor::{Device, Tensor};
/// let d = Device::best();
/// let mut model = Linear::from_weights(param(Tensor::from_vec(vec![1f32], &[1, 1], &d)?), None)?;
/// let mut opt = Sgd::new(0.1);
/// let mut scaler = GradScaler::new();
/// let loss = model.forward(&Tensor::from_vec(vec![2f32], &[1, 1], &d)?)?.sum_all()?;
/// scaler.scale(&loss)?.backward()?; // gradients are 2 * 65536
/// scaler.step(&mut opt, &mut model)?; // unscaled to 2, then stepped
/// assert_eq!(scaler.found_inf().unwrap().to_scalar::<f32>()?, 0.0);
/// scaler.update()?;
/// assert_eq!(model.weight().to_vec::<f32>()?, vec![0.8]);
/// assert_eq!(scaler.get_scale()?.to_scalar::<f32>()?, 65536.0);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct GradScaler {
    init_scale: f32,
    growth_factor: f32,
    backoff_factor: f32,
    growth_interval: u32,
    /// The scale, a 0-d f32 on the device of the first scaled loss (`None` before it).
    scale: Option<Tensor>,
    /// Finite steps since the last scale change, a 0-d f32 beside `scale`.
    growth_tracker: Option<Tensor>,
    /// This iteration's inf/NaN flag (0-d f32, 1 = found), set by `unscale`.
    found_inf: Option<Tensor>,
}

impl Default for GradScaler {
    fn default() -> Self {
        GradScaler::new()
    }
}

impl GradScaler {
    /// A scaler with PyTorch's defaults.
    pub fn new() -> GradScaler {
        GradScaler {
            init_scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
            scale: None,
            growth_tracker: None,
            found_inf: None,
        }
    }

    setters! {
        /// Starting scale (default 2^16).
        init_scale: f32;
        /// Factor applied after `growth_interval` finite steps (default 2).
        growth_factor: f32;
        /// Factor applied when a step had inf/NaN gradients (default 0.5).
        backoff_factor: f32;
        /// Finite steps in a row before the scale grows (default 2000).
        growth_interval: u32;
    }

    /// The current scale as a 0-d f32 tensor on its device (a CPU tensor holding the starting
    /// scale before the first [`GradScaler::scale`]). Nothing is read back: call
    /// `to_scalar::<f32>()` on it for logging, outside the step.
    ///
    /// # Errors
    /// Allocation errors (before the first `scale`).
    pub fn get_scale(&self) -> Result<Tensor> {
        match &self.scale {
            Some(s) => Ok(s.clone()),
            None => Tensor::full(
                &[],
                self.init_scale.into(),
                DType::F32,
                &crate::Device::cpu(),
            ),
        }
    }

    /// This iteration's inf/NaN flag, a 0-d f32 on the scale's device (1 when some gradient
    /// held inf or NaN, so the step is skipped): set by [`GradScaler::unscale`] (or
    /// [`GradScaler::step`]) and cleared by [`GradScaler::update`]. Reading it synchronizes.
    pub fn found_inf(&self) -> Option<&Tensor> {
        self.found_inf.as_ref()
    }

    /// The scale on `device` (a copy when the model spans devices).
    fn scale_on(&self, op: &'static str, device: &crate::Device) -> Result<Tensor> {
        let s = self.scale.as_ref().ok_or_else(|| no_scale(op))?;
        if s.device() == device {
            Ok(s.clone())
        } else {
            s.to(device)
        }
    }

    /// `loss * scale`: call `backward` on this instead of on the loss. The first call puts
    /// the scale on the loss's device. A loss of another float dtype is multiplied in f32 and
    /// rounded back.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the starting scale is not finite and positive; the
    /// errors of the tensor ops.
    pub fn scale(&mut self, loss: &Tensor) -> Result<Tensor> {
        let op = "GradScaler::scale";
        if self.scale.is_none() {
            if !(self.init_scale.is_finite() && self.init_scale > 0.0) {
                return Err(invalid(
                    op,
                    format!(
                        "the scale {} must be finite and positive (set it with init_scale)",
                        self.init_scale
                    ),
                ));
            }
            let d = loss.device();
            self.scale = Some(Tensor::full(&[], self.init_scale.into(), DType::F32, d)?);
            self.growth_tracker = Some(Tensor::zeros(&[], DType::F32, d)?);
        }
        let s = self.scale_on(op, loss.device())?;
        if loss.dtype() == DType::F32 {
            loss.mul(&s)
        } else {
            loss.to_dtype(DType::F32)?.mul(&s)?.to_dtype(loss.dtype())
        }
    }

    /// Divides every gradient of `model` by the scale (in f32), in place of the old one, and
    /// sets [`GradScaler::found_inf`] when any of them holds inf or NaN. Called by
    /// [`GradScaler::step`] unless already called this iteration (for gradient clipping on
    /// true gradients). Nothing is read back: the check is a device-side flag.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] before any [`GradScaler::scale`]; the errors of the tensor
    /// ops.
    pub fn unscale(&mut self, model: &dyn Module) -> Result<()> {
        let op = "GradScaler::unscale";
        let _no_grad = crate::no_grad();
        let home_device = match &self.scale {
            Some(s) => s.device().clone(),
            None => return Err(no_scale(op)),
        };
        // Per device, the scale there and the sum of every `g * 0`: 0 when all are finite,
        // NaN if any is inf/NaN. One reduction per gradient, no readback.
        let mut per_device: Vec<(crate::Device, Tensor, Option<Tensor>)> = Vec::new();
        for p in model.parameters() {
            let Some(g) = p.grad() else { continue };
            let dev = g.device().clone();
            if !per_device.iter().any(|(d, _, _)| d == &dev) {
                let s = self.scale_on(op, &dev)?;
                per_device.push((dev.clone(), s, None));
            }
            let slot = per_device
                .iter_mut()
                .find(|(d, _, _)| d == &dev)
                .expect("device slot");
            let u = if g.dtype() == DType::F32 {
                g.div(&slot.1)?
            } else {
                g.to_dtype(DType::F32)?.div(&slot.1)?
            };
            let c = u.mul_scalar(0.0)?.sum_all()?;
            slot.2 = Some(match slot.2.take() {
                Some(t) => t.add(&c)?,
                None => c,
            });
            p.set_grad(Some(u.to_dtype(g.dtype())?))?;
        }
        let mut total = Tensor::zeros(&[], DType::F32, &home_device)?;
        for (_, _, c) in per_device {
            let Some(c) = c else { continue };
            let c = if c.device() == &home_device {
                c
            } else {
                c.to(&home_device)?
            };
            total = total.add(&c)?;
        }
        // NaN is the only value not equal to itself.
        self.found_inf = Some(total.ne(&total)?.to_dtype(DType::F32)?);
        Ok(())
    }

    /// Unscales the gradients (if [`GradScaler::unscale`] was not called yet) and runs
    /// `optimizer.step_if_finite(model, found_inf)`: the step is skipped, on the device, when
    /// some gradient held inf or NaN ([`GradScaler::found_inf`] tells which, on request).
    ///
    /// # Errors
    /// The errors of [`GradScaler::unscale`] and of the optimizer.
    pub fn step(&mut self, optimizer: &mut dyn Optimizer, model: &mut dyn Module) -> Result<()> {
        if self.found_inf.is_none() {
            self.unscale(model)?;
        }
        let flag = self.found_inf.clone().expect("set by unscale");
        optimizer.step_if_finite(model, &flag)
    }

    /// Adjusts the scale after the iteration's step, on the device: backoff after inf/NaN,
    /// growth after `growth_interval` finite steps in a row (kept only while the grown scale is
    /// finite), as PyTorch's `update`. Call once per iteration; without a step since the last
    /// call it does nothing.
    ///
    /// # Errors
    /// The errors of the tensor ops.
    pub fn update(&mut self) -> Result<()> {
        let (Some(found), Some(scale), Some(tracker)) = (
            self.found_inf.take(),
            self.scale.clone(),
            self.growth_tracker.clone(),
        ) else {
            return Ok(());
        };
        let _no_grad = crate::no_grad();
        let inf = found.ne_scalar(0.0)?;
        let next = tracker.add_scalar(1.0)?;
        let zero = next.mul_scalar(0.0)?;
        let due = next.ge_scalar(self.growth_interval as f32)?;
        let grown = scale.mul_scalar(self.growth_factor)?;
        let grown_ok = grown.mul_scalar(0.0)?.eq_scalar(0.0)?; // finite
        let on_good = due.where_cond(&grown_ok.where_cond(&grown, &scale)?, &scale)?;
        let new_scale = inf.where_cond(&scale.mul_scalar(self.backoff_factor)?, &on_good)?;
        let new_tracker = inf.where_cond(&zero, &due.where_cond(&zero, &next)?)?;
        // Run the two tiny chains now, so that iterations do not stack them into one kernel.
        crate::tensor::run_pending(new_scale.device())?;
        self.scale = Some(new_scale);
        self.growth_tracker = Some(new_tracker);
        Ok(())
    }
}

/// The error of a call that needs the scale before any loss was scaled.
fn no_scale(op: &'static str) -> Error {
    invalid(
        op,
        "no loss was scaled yet: call GradScaler::scale(&loss) and backward first".into(),
    )
}
