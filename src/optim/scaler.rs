//! Dynamic loss scaling for mixed precision (PyTorch's `torch.amp.GradScaler`).

use super::Optimizer;
use crate::nn::Module;
use crate::{Error, Result, Tensor};

/// Multiplies the loss by a large factor before backward so small f16 gradients do not flush to
/// zero, divides the gradients back before the optimizer step, skips steps whose gradients hold
/// inf/NaN (halving the scale) and doubles the scale after `growth_interval` finite steps in a
/// row. Defaults as PyTorch's: scale 2^16, growth 2 every 2000 steps, backoff 0.5.
///
/// ```
/// use wgtensor::nn::{param, Linear, Module};
/// use wgtensor::optim::{GradScaler, Optimizer, Sgd};
/// use wgtensor::{Device, Tensor};
/// let d = Device::cpu();
/// let mut model = Linear::from_weights(param(Tensor::from_vec(vec![1f32], &[1, 1], &d)?), None)?;
/// let mut opt = Sgd::new(0.1);
/// let mut scaler = GradScaler::new();
/// let loss = model.forward(&Tensor::from_vec(vec![2f32], &[1, 1], &d)?)?.sum_all()?;
/// scaler.scale(&loss)?.backward()?;           // gradients are 2 * 65536
/// assert!(scaler.step(&mut opt, &mut model)?); // unscaled to 2, then stepped
/// scaler.update();
/// assert_eq!(model.weight().to_vec::<f32>()?, vec![0.8]);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct GradScaler {
    scale: f32,
    growth_factor: f32,
    backoff_factor: f32,
    growth_interval: u32,
    /// Finite steps since the last scale change.
    good_steps: u32,
    /// Result of the check in this iteration's `unscale` (`None` before it ran).
    found_inf: Option<bool>,
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
            scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
            good_steps: 0,
            found_inf: None,
        }
    }

    /// Starting scale (default 2^16).
    #[must_use]
    pub fn init_scale(mut self, scale: f32) -> GradScaler {
        self.scale = scale;
        self
    }

    /// Factor applied after `growth_interval` finite steps (default 2).
    #[must_use]
    pub fn growth_factor(mut self, f: f32) -> GradScaler {
        self.growth_factor = f;
        self
    }

    /// Factor applied when a step had inf/NaN gradients (default 0.5).
    #[must_use]
    pub fn backoff_factor(mut self, f: f32) -> GradScaler {
        self.backoff_factor = f;
        self
    }

    /// Finite steps in a row before the scale grows (default 2000).
    #[must_use]
    pub fn growth_interval(mut self, n: u32) -> GradScaler {
        self.growth_interval = n;
        self
    }

    /// The current scale.
    pub fn get_scale(&self) -> f32 {
        self.scale
    }

    /// `loss * scale`: call `backward` on this instead of on the loss.
    ///
    /// # Errors
    /// The errors of `mul_scalar`.
    pub fn scale(&self, loss: &Tensor) -> Result<Tensor> {
        loss.mul_scalar(self.scale)
    }

    /// Divides every gradient of `model` by the scale, in place of the old one, and records
    /// whether any of them holds inf or NaN (returned). Called by [`GradScaler::step`] unless
    /// already called this iteration (for gradient clipping on true gradients).
    ///
    /// # Errors
    /// The errors of the tensor ops; one readback of a scalar synchronizes with the device.
    pub fn unscale(&mut self, model: &dyn Module) -> Result<bool> {
        let _no_grad = crate::no_grad();
        let inv = 1.0 / self.scale;
        // Per device, the sum of every `g * 0`: 0 when all are finite, NaN if any is inf/NaN.
        // One readback per device instead of one per parameter.
        let mut checks: Vec<Tensor> = Vec::new();
        for p in model.parameters() {
            let Some(g) = p.grad() else { continue };
            let g = g.mul_scalar(inv)?;
            let c = g.mul_scalar(0.0)?.sum_all()?.to_dtype(crate::DType::F32)?;
            match checks.iter_mut().find(|t| t.device() == c.device()) {
                Some(t) => *t = t.add(&c)?,
                None => checks.push(c),
            }
            p.set_grad(Some(g))?;
        }
        let mut found = false;
        for c in checks {
            found |= !c.to_scalar::<f32>()?.is_finite();
        }
        self.found_inf = Some(found);
        Ok(found)
    }

    /// Unscales the gradients (if [`GradScaler::unscale`] was not called yet) and runs
    /// `optimizer.step(model)` only when they are all finite. Returns whether it stepped.
    ///
    /// # Errors
    /// The errors of [`GradScaler::unscale`] and of the optimizer.
    pub fn step(&mut self, optimizer: &mut dyn Optimizer, model: &mut dyn Module) -> Result<bool> {
        if !(self.scale.is_finite() && self.scale > 0.0) {
            return Err(Error::InvalidArgument {
                op: "GradScaler::step",
                message: format!("the scale {} must be finite and positive", self.scale),
            });
        }
        let found = match self.found_inf {
            Some(f) => f,
            None => self.unscale(model)?,
        };
        if !found {
            optimizer.step(model)?;
        }
        Ok(!found)
    }

    /// Adjusts the scale after the iteration's step: backoff after inf/NaN, growth after
    /// `growth_interval` finite steps. Call once per iteration.
    pub fn update(&mut self) {
        match self.found_inf.take() {
            Some(true) => {
                self.scale *= self.backoff_factor;
                self.good_steps = 0;
            }
            Some(false) => {
                self.good_steps += 1;
                if self.good_steps >= self.growth_interval {
                    self.scale *= self.growth_factor;
                    self.good_steps = 0;
                }
            }
            None => {}
        }
    }
}
