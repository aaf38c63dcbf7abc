//! The normalisation layers over the last dim: `LayerNorm`, PyTorch's `nn.LayerNorm(d)`, and
//! `RMSNorm`, PyTorch's `nn.RMSNorm(d, eps)`.

use super::{param, Module};
use crate::{DType, Device, Error, Result, Tensor};

/// Normalises the last dim to zero mean and unit (biased) variance, then scales and shifts:
/// `y = (x - mean) / sqrt(var + eps) * weight + bias` (PyTorch's `nn.LayerNorm(dim)`).
///
/// `weight` starts at ones and `bias` at zeros; without elementwise affine there are no
/// parameters.
///
/// ```
/// use wgtensor::nn::{LayerNorm, Module};
/// use wgtensor::{Device, Tensor};
/// let d = Device::best();
/// let ln = LayerNorm::new(4, &d)?;
/// let y = ln.forward(&Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[1, 4], &d)?)?;
/// let v = y.to_vec::<f32>()?;
/// assert!(v.iter().sum::<f32>().abs() < 1e-5);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct LayerNorm {
    dim: usize,
    eps: f32,
    weight: Option<Tensor>,
    bias: Option<Tensor>,
}

/// A normalisation layer's learnable scale (ones) and shift (zeros) of `n` elements when
/// `affine`, else neither.
pub(super) fn affine_params(
    n: usize,
    affine: bool,
    device: &Device,
) -> Result<(Option<Tensor>, Option<Tensor>)> {
    if !affine {
        return Ok((None, None));
    }
    Ok((
        Some(param(Tensor::ones(&[n], DType::F32, device)?)),
        Some(param(Tensor::zeros(&[n], DType::F32, device)?)),
    ))
}

/// Refuses a variance floor `eps` that is negative or not finite (either norm's constructor).
fn check_eps(op: &'static str, eps: f32) -> Result<()> {
    if !(eps >= 0.0 && eps.is_finite()) {
        return Err(Error::InvalidArgument {
            op,
            message: format!("eps must be a finite number >= 0, got {eps}"),
        });
    }
    Ok(())
}

impl LayerNorm {
    /// `LayerNorm(dim)` with PyTorch's defaults: `eps = 1e-5`, elementwise affine.
    ///
    /// # Errors
    /// Device errors (allocation, a lost GPU).
    ///
    /// ```
    /// use wgtensor::nn::{LayerNorm, Module};
    /// let ln = LayerNorm::new(8, &wgtensor::Device::cpu())?;
    /// assert_eq!(ln.num_parameters(), 16); // weight and bias
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn new(dim: usize, device: &Device) -> Result<LayerNorm> {
        LayerNorm::with_options(dim, 1e-5, true, device)
    }

    /// `LayerNorm(dim, eps, elementwise_affine)`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `eps` is negative or not finite; device errors.
    ///
    /// ```
    /// use wgtensor::nn::{LayerNorm, Module};
    /// let ln = LayerNorm::with_options(8, 1e-6, false, &wgtensor::Device::cpu())?;
    /// assert_eq!(ln.num_parameters(), 0);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn with_options(dim: usize, eps: f32, affine: bool, device: &Device) -> Result<LayerNorm> {
        check_eps("LayerNorm::with_options", eps)?;
        let (weight, bias) = affine_params(dim, affine, device)?;
        Ok(LayerNorm {
            dim,
            eps,
            weight,
            bias,
        })
    }

    /// The normalised (last) dim's size.
    ///
    /// ```
    /// assert_eq!(wgtensor::nn::LayerNorm::new(8, &wgtensor::Device::cpu())?.dim(), 8);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The variance floor.
    ///
    /// ```
    /// assert_eq!(wgtensor::nn::LayerNorm::new(8, &wgtensor::Device::cpu())?.eps(), 1e-5);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn eps(&self) -> f32 {
        self.eps
    }
}

impl Module for LayerNorm {
    /// Normalises `x` of shape `[.., dim]` along its last dim.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when the last dim of `x` is not `dim`; the errors of the ops.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if x.shape().last() != Some(&self.dim) {
            return Err(Error::ShapeMismatch {
                op: "LayerNorm::forward",
                lhs: x.shape().to_vec(),
                rhs: vec![self.dim],
            });
        }
        // One kernel per row block (Tensor::layer_norm); an f16 input is normalised in f32 and
        // returned in f16 (autocast's rule for layer_norm).
        x.layer_norm(self.weight.as_ref(), self.bias.as_ref(), self.eps)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        super::own_parameters([
            ("weight", self.weight.as_ref()),
            ("bias", self.bias.as_ref()),
        ])
    }

    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        super::own_parameters_mut([
            ("weight", self.weight.as_mut()),
            ("bias", self.bias.as_mut()),
        ])
    }
}

/// Root-mean-square normalisation of the last dim with a learned scale, PyTorch's
/// `nn.RMSNorm(dim, eps)` (weight starts at ones).
///
/// ```
/// use wgtensor::nn::{Module, RMSNorm};
/// use wgtensor::{Device, Tensor};
/// let n = RMSNorm::new(2, 1e-6, &Device::best())?;
/// let y = n.forward(&Tensor::from_vec(vec![3f32, 4.0], &[1, 2], &Device::best())?)?;
/// let v = y.to_vec::<f32>()?;
/// assert!((v[0] * v[0] + v[1] * v[1] - 2.0).abs() < 1e-4);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct RMSNorm {
    weight: Tensor,
    eps: f32,
}

impl RMSNorm {
    /// A norm over `dim` features.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a negative or non-finite `eps`; device errors.
    ///
    /// ```
    /// use wgtensor::nn::{Module, RMSNorm};
    /// assert_eq!(RMSNorm::new(8, 1e-6, &wgtensor::Device::cpu())?.num_parameters(), 8);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn new(dim: usize, eps: f32, device: &Device) -> Result<RMSNorm> {
        check_eps("RMSNorm::new", eps)?;
        Ok(RMSNorm {
            weight: param(Tensor::ones(&[dim], DType::F32, device)?),
            eps,
        })
    }
}

impl Module for RMSNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.rms_norm(Some(&self.weight), self.eps)
    }
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        vec![("weight".into(), self.weight.clone())]
    }
    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        vec![("weight".into(), &mut self.weight)]
    }
}
