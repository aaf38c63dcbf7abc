//! `Linear`: `y = x @ W^T + b`, PyTorch's `nn.Linear`.

use super::{param, Module};
use crate::{Device, Error, Result, Tensor};

/// A fully connected layer, `y = x @ W^T + b` over any leading dims (PyTorch's `nn.Linear`).
///
/// `weight` is `[out_features, in_features]` and `bias` `[out_features]`, initialised from
/// `U(-1/sqrt(in), 1/sqrt(in))` with the crate's seeded generator ([`crate::manual_seed`]), on
/// the host, so one seed gives the same layer on every device.
///
/// ```
/// use wgtensor::nn::{Linear, Module};
/// use wgtensor::{Device, Tensor};
/// let device = Device::best();
/// let layer = Linear::new(4, 3, true, &device)?;
/// let y = layer.forward(&Tensor::randn(&[2, 5, 4], &device)?)?;
/// assert_eq!(y.shape(), &[2, 5, 3]);
/// assert_eq!(layer.weight().shape(), &[3, 4]);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Linear {
    /// A new layer with PyTorch's default initialisation, created on `device`.
    ///
    /// # Errors
    /// Device errors (allocation, a lost GPU).
    ///
    /// ```
    /// wgtensor::manual_seed(0);
    /// let layer = wgtensor::nn::Linear::new(16, 4, true, &wgtensor::Device::cpu())?;
    /// // U(-1/4, 1/4), PyTorch's bound 1/sqrt(in_features)
    /// assert!(layer.weight().to_vec::<f32>()?.iter().all(|w| w.abs() <= 0.25));
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn new(
        in_features: usize,
        out_features: usize,
        bias: bool,
        device: &Device,
    ) -> Result<Linear> {
        // PyTorch's kaiming_uniform_(a = sqrt(5)) reduces to this bound for the weight, and the
        // bias uses the same one.
        let k = 1.0 / (in_features.max(1) as f32).sqrt();
        let uniform = |shape: &[usize]| -> Result<Tensor> {
            Tensor::rand(shape, &Device::cpu())?
                .mul_scalar(2.0 * k)?
                .sub_scalar(k)?
                .to(device)
        };
        let weight = uniform(&[out_features, in_features])?;
        let bias = if bias {
            Some(uniform(&[out_features])?)
        } else {
            None
        };
        Ok(Linear {
            weight: param(weight),
            bias: bias.map(param),
        })
    }

    /// A layer around existing weights: `weight` `[out, in]`, `bias` `[out]`, both f32 on one
    /// device.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `weight` is not 2-D or `bias` is not `[out]`;
    /// [`Error::DeviceMismatch`] / [`Error::DTypeMismatch`] when they differ in device or dtype.
    ///
    /// ```
    /// use wgtensor::nn::{Linear, Module};
    /// use wgtensor::{Device, Tensor};
    /// let d = Device::cpu();
    /// let w = Tensor::from_vec(vec![1f32, 2.0], &[1, 2], &d)?;
    /// let b = Tensor::from_vec(vec![0.5f32], &[1], &d)?;
    /// let layer = Linear::from_weights(w, Some(b))?;
    /// let y = layer.forward(&Tensor::from_vec(vec![1f32, 1.0], &[1, 2], &d)?)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![3.5]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn from_weights(weight: Tensor, bias: Option<Tensor>) -> Result<Linear> {
        super::check_weight_2d("Linear::from_weights", &weight, "[out, in]")?;
        if let Some(b) = &bias {
            if b.shape() != [weight.shape()[0]] {
                return Err(Error::InvalidArgument {
                    op: "Linear::from_weights",
                    message: format!(
                        "bias must have shape [{}] to match weight {:?}, got {:?}",
                        weight.shape()[0],
                        weight.shape(),
                        b.shape()
                    ),
                });
            }
            weight.check_pair("Linear::from_weights", b)?;
        }
        Ok(Linear {
            weight: param(weight),
            bias: bias.map(param),
        })
    }

    /// The weight, `[out_features, in_features]`.
    ///
    /// ```
    /// let l = wgtensor::nn::Linear::new(3, 2, true, &wgtensor::Device::cpu())?;
    /// assert_eq!(l.weight().shape(), &[2, 3]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// The bias, `[out_features]`, if the layer has one.
    ///
    /// ```
    /// let l = wgtensor::nn::Linear::new(3, 2, false, &wgtensor::Device::cpu())?;
    /// assert!(l.bias().is_none());
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }

    /// `in_features`.
    ///
    /// ```
    /// assert_eq!(wgtensor::nn::Linear::new(3, 2, true, &wgtensor::Device::cpu())?.in_features(), 3);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn in_features(&self) -> usize {
        self.weight.shape()[1]
    }

    /// `out_features`.
    ///
    /// ```
    /// assert_eq!(wgtensor::nn::Linear::new(3, 2, true, &wgtensor::Device::cpu())?.out_features(), 2);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn out_features(&self) -> usize {
        self.weight.shape()[0]
    }
}

impl Module for Linear {
    /// `x @ W^T + b` for `x` of shape `[.., in_features]`.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when the last dim of `x` is not `in_features`; the errors of
    /// matmul and add (device, dtype).
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if x.shape().last() != Some(&self.in_features()) {
            return Err(Error::ShapeMismatch {
                op: "Linear::forward",
                lhs: x.shape().to_vec(),
                rhs: self.weight.shape().to_vec(),
            });
        }
        // Mixed precision: the layer computes in the input's float dtype. f32 master weights
        // are cast (differentiably) for an f16 input, so the forward runs in f16 while the
        // gradients land on the f32 parameters, as under PyTorch's autocast.
        let w = follow_dtype(&self.weight, x)?;
        let b = self.bias.as_ref().map(|b| follow_dtype(b, x)).transpose()?;
        x.linear(&w, b.as_ref())
    }

    super::weight_and_bias_parameters!();
}

/// `p` in `x`'s dtype when both are floats of different widths; otherwise `p` unchanged (the op
/// then reports any real dtype mismatch).
pub(crate) fn follow_dtype(p: &Tensor, x: &Tensor) -> Result<Tensor> {
    let float = |d: crate::DType| matches!(d, crate::DType::F32 | crate::DType::F16);
    if p.dtype() != x.dtype() && float(p.dtype()) && float(x.dtype()) {
        p.to_dtype(x.dtype())
    } else {
        Ok(p.clone())
    }
}
