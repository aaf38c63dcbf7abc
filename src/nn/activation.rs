//! Parameter-free layers: activations, `Softmax` and `Identity`.

use super::Module;
use crate::{Result, Tensor};

macro_rules! activations {
    ($($(#[$doc:meta])* $name:ident => $method:ident;)*) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $name;

        impl Module for $name {
            fn forward(&self, x: &Tensor) -> Result<Tensor> {
                x.$method()
            }

            fn named_parameters(&self) -> Vec<(String, Tensor)> {
                Vec::new()
            }

            fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
                Vec::new()
            }
        }
    )*};
}

activations! {
    /// `max(x, 0)` elementwise (PyTorch's `nn.ReLU`).
    ///
    /// ```
    /// use wgtensor::nn::{Module, ReLU};
    /// let x = wgtensor::Tensor::from_vec(vec![-1f32, 2.0], &[2], &wgtensor::Device::cpu())?;
    /// assert_eq!(ReLU.forward(&x)?.to_vec::<f32>()?, vec![0.0, 2.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ReLU => relu;
    /// Exact (erf) GELU, PyTorch's `nn.GELU()` with `approximate='none'`.
    ///
    /// ```
    /// use wgtensor::nn::{Module, GELU};
    /// let x = wgtensor::Tensor::from_vec(vec![0f32], &[1], &wgtensor::Device::cpu())?;
    /// assert_eq!(GELU.forward(&x)?.to_vec::<f32>()?, vec![0.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    GELU => gelu;
    /// `x * sigmoid(x)` (PyTorch's `nn.SiLU`).
    ///
    /// ```
    /// use wgtensor::nn::{Module, SiLU};
    /// let x = wgtensor::Tensor::from_vec(vec![0f32], &[1], &wgtensor::Device::cpu())?;
    /// assert_eq!(SiLU.forward(&x)?.to_vec::<f32>()?, vec![0.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    SiLU => silu;
    /// `1 / (1 + exp(-x))` (PyTorch's `nn.Sigmoid`).
    ///
    /// ```
    /// use wgtensor::nn::{Module, Sigmoid};
    /// let x = wgtensor::Tensor::from_vec(vec![0f32], &[1], &wgtensor::Device::cpu())?;
    /// assert_eq!(Sigmoid.forward(&x)?.to_vec::<f32>()?, vec![0.5]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Sigmoid => sigmoid;
    /// `tanh(x)` (PyTorch's `nn.Tanh`).
    ///
    /// ```
    /// use wgtensor::nn::{Module, Tanh};
    /// let x = wgtensor::Tensor::from_vec(vec![0f32], &[1], &wgtensor::Device::cpu())?;
    /// assert_eq!(Tanh.forward(&x)?.to_vec::<f32>()?, vec![0.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Tanh => tanh;
}

/// Softmax along `dim` (PyTorch's `nn.Softmax(dim)`; `-1` is the last dim).
///
/// ```
/// use wgtensor::nn::{Module, Softmax};
/// let x = wgtensor::Tensor::from_vec(vec![1f32, 1.0], &[1, 2], &wgtensor::Device::cpu())?;
/// assert_eq!(Softmax::new(-1).forward(&x)?.to_vec::<f32>()?, vec![0.5, 0.5]);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Softmax {
    dim: isize,
}

impl Softmax {
    /// Softmax over `dim`.
    ///
    /// ```
    /// let s = wgtensor::nn::Softmax::new(-1);
    /// assert_eq!(s.dim(), -1);
    /// ```
    pub fn new(dim: isize) -> Softmax {
        Softmax { dim }
    }

    /// The dim it normalises.
    ///
    /// ```
    /// assert_eq!(wgtensor::nn::Softmax::new(1).dim(), 1);
    /// ```
    pub fn dim(&self) -> isize {
        self.dim
    }
}

impl Module for Softmax {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.softmax(self.dim)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }

    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        Vec::new()
    }
}

/// Returns its input unchanged (PyTorch's `nn.Identity`): a placeholder in a [`super::Sequential`].
///
/// ```
/// use wgtensor::nn::{Identity, Module};
/// let x = wgtensor::Tensor::from_vec(vec![3f32], &[1], &wgtensor::Device::cpu())?;
/// assert_eq!(Identity.forward(&x)?.to_vec::<f32>()?, vec![3.0]);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Identity;

impl Module for Identity {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x.clone())
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }

    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        Vec::new()
    }
}
