//! Neural-network building blocks in the shape of PyTorch's `torch.nn`: a [`Module`] trait whose
//! `to(&device)` moves every parameter, the way `model.to(device)` does.
//!
//! Layers are written with the public tensor ops only, so they run on every device the ops run
//! on, and gradients (when autograd records the ops) come for free.

use crate::{DType, Device, Result, Tensor};

/// A layer or model: a forward function plus named parameters that can be moved between devices.
///
/// Names are dotted paths (`"0.weight"`, `"encoder.bias"`), the same ones safetensors files use.
///
/// ```
/// use wgtensor::nn::Module;
/// use wgtensor::{Device, Result, Tensor};
///
/// struct Scale(Tensor);
/// impl Module for Scale {
///     fn forward(&self, x: &Tensor) -> Result<Tensor> { x.mul(&self.0) }
///     fn named_parameters(&self) -> Vec<(String, Tensor)> { vec![("scale".into(), self.0.clone())] }
///     fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> { vec![("scale".into(), &mut self.0)] }
/// }
///
/// let mut m = Scale(Tensor::from_vec(vec![2f32], &[1], &Device::cpu())?);
/// m.to(&Device::cpu())?;
/// assert_eq!(m.device(), Some(Device::cpu()));
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub trait Module: Send + Sync {
    /// Runs the layer on `x`.
    fn forward(&self, x: &Tensor) -> Result<Tensor>;

    /// Every parameter and buffer with its dotted name, in a stable order.
    fn named_parameters(&self) -> Vec<(String, Tensor)>;

    /// Mutable access to the same tensors, in the same order: used by [`Module::to`], weight
    /// loading and optimizers, which replace parameters with new tensors.
    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)>;

    /// The parameters without names (PyTorch's `model.parameters()`).
    fn parameters(&self) -> Vec<Tensor> {
        self.named_parameters().into_iter().map(|(_, t)| t).collect()
    }

    /// Moves every parameter to `device` (PyTorch's `model.to(device)`); parameters stay
    /// parameters. On error the parameters already moved stay moved and the rest stay put.
    fn to(&mut self, device: &Device) -> Result<()> {
        for (_, p) in self.named_parameters_mut() {
            if p.device() != device {
                *p = param(p.to(device)?);
            }
        }
        Ok(())
    }

    /// The device of the first parameter (PyTorch's `next(model.parameters()).device`), or `None`
    /// for a module without parameters.
    fn device(&self) -> Option<Device> {
        self.named_parameters()
            .first()
            .map(|(_, t)| t.device().clone())
    }

    /// Switches training mode (Dropout is active only while training). Default: nothing to do.
    fn set_training(&mut self, _training: bool) {}

    /// `set_training(true)`, PyTorch's `model.train()`.
    fn train(&mut self) {
        self.set_training(true)
    }

    /// `set_training(false)`, PyTorch's `model.eval()`.
    fn eval(&mut self) {
        self.set_training(false)
    }

    /// Total number of parameter elements.
    fn num_parameters(&self) -> usize {
        self.named_parameters().iter().map(|(_, t)| t.numel()).sum()
    }

    /// The dtype of the first parameter, or `None` without parameters.
    fn dtype(&self) -> Option<DType> {
        self.named_parameters().first().map(|(_, t)| t.dtype())
    }
}

/// Marks a tensor as a trainable parameter. Every layer constructor and [`Module::to`] route
/// their parameters through here, so parameter-ness (gradient tracking) is decided in one place.
pub fn param(t: Tensor) -> Tensor {
    t
}
