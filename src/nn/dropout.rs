//! `Dropout`: random zeroing while training, identity in eval (PyTorch's `nn.Dropout`).

use super::Module;
use crate::{Error, Result, Tensor};

/// Zeroes each element with probability `p` while training and scales the survivors by
/// `1 / (1 - p)`, so the expected value is unchanged; the identity in eval mode.
///
/// Like every PyTorch module it starts in training mode: call [`Module::eval`] for inference.
/// The mask is drawn from the crate's seeded generator ([`crate::manual_seed`]) on the host, so
/// one seed drops the same elements on every device.
///
/// ```
/// use wgtensor::nn::{Dropout, Module};
/// use wgtensor::{Device, Tensor};
/// let mut drop = Dropout::new(0.5)?;
/// let x = Tensor::ones(&[1000], wgtensor::DType::F32, &Device::cpu())?;
/// let y = drop.forward(&x)?.to_vec::<f32>()?;
/// assert!(y.iter().all(|&v| v == 0.0 || v == 2.0)); // dropped, or scaled by 1 / (1 - p)
/// drop.eval();
/// assert_eq!(drop.forward(&x)?.to_vec::<f32>()?, x.to_vec::<f32>()?);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Dropout {
    p: f32,
    training: bool,
}

impl Dropout {
    /// Dropout with drop probability `p` in `[0, 1]`, in training mode.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `p` is outside `[0, 1]` (or NaN).
    ///
    /// ```
    /// let d = wgtensor::nn::Dropout::new(0.1)?;
    /// assert!(wgtensor::nn::Dropout::new(1.5).is_err());
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn new(p: f32) -> Result<Dropout> {
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::InvalidArgument {
                op: "Dropout::new",
                message: format!("dropout probability has to be between 0 and 1, got {p}"),
            });
        }
        Ok(Dropout { p, training: true })
    }

    /// The drop probability.
    ///
    /// ```
    /// assert_eq!(wgtensor::nn::Dropout::new(0.1)?.p(), 0.1);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn p(&self) -> f32 {
        self.p
    }

    /// Whether the layer is in training mode (dropping).
    ///
    /// ```
    /// use wgtensor::nn::{Dropout, Module};
    /// let mut d = Dropout::new(0.1)?;
    /// d.eval();
    /// assert!(!d.is_training());
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn is_training(&self) -> bool {
        self.training
    }
}

impl Module for Dropout {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if !self.training || self.p == 0.0 {
            return Ok(x.clone());
        }
        // In the input's dtype (f16 activations drop too).
        let zero = Tensor::zeros(&[1], x.dtype(), x.device())?;
        if self.p == 1.0 {
            return x.mul(&zero);
        }
        // Keep where u >= p: probability 1 - p for u uniform in [0, 1). On a GPU the mask is
        // drawn inside the kernel that applies it (Philox, no upload), and backward recomputes
        // it from the same generator offsets.
        let keep = Tensor::rand(x.shape(), x.device())?.ge_scalar(self.p)?;
        keep.where_cond(&x.mul_scalar(1.0 / (1.0 - self.p))?, &zero)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }

    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        Vec::new()
    }

    fn set_training(&mut self, training: bool) {
        self.training = training;
    }
}
