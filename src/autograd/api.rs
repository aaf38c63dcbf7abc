//! The autograd methods on [`Tensor`]: PyTorch's names and semantics.

use super::{run_backward, tracked, Meta};
use crate::{Error, Result, Tensor};

impl Tensor {
    /// Whether gradients flow to or through this tensor: a leaf made with
    /// [`Tensor::requires_grad_`] (or a parameter from [`crate::nn::param`]), or the result of an
    /// op recorded from such tensors.
    ///
    /// ```
    /// let x = wgtensor::Tensor::ones(&[2], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert!(!x.requires_grad());
    /// let w = x.requires_grad_(true);
    /// assert!(w.requires_grad() && w.exp()?.requires_grad());
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn requires_grad(&self) -> bool {
        tracked(self)
    }

    /// A leaf sharing this tensor's data that requires grad (or not). Tensors are immutable, so
    /// unlike PyTorch's in-place `requires_grad_` this returns the new leaf: keep using the
    /// returned tensor. The result is always a fresh leaf without a gradient, detached from any
    /// graph `self` belongs to. Only float tensors receive gradients.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let w = Tensor::from_vec(vec![3f32], &[1], &Device::cpu())?.requires_grad_(true);
    /// w.mul(&w)?.sum_all()?.backward()?;
    /// assert_eq!(w.grad().unwrap().to_vec::<f32>()?, vec![6.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    #[must_use = "requires_grad_ returns the new leaf; self is unchanged"]
    pub fn requires_grad_(&self, requires_grad: bool) -> Tensor {
        self.with_autograd(Meta::leaf(requires_grad))
    }

    /// Whether this tensor is a leaf of the graph: not the result of a recorded op (PyTorch's
    /// `is_leaf`). Only leaves that require grad get their `grad()` filled.
    ///
    /// ```
    /// let w = wgtensor::Tensor::ones(&[2], wgtensor::DType::F32, &wgtensor::Device::cpu())?
    ///     .requires_grad_(true);
    /// assert!(w.is_leaf());
    /// assert!(!w.exp()?.is_leaf());
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn is_leaf(&self) -> bool {
        self.autograd_meta().node.is_none()
    }

    /// The same data outside the graph: a leaf that does not require grad (PyTorch's
    /// `detach()`). No copy is made.
    ///
    /// ```
    /// let w = wgtensor::Tensor::ones(&[2], wgtensor::DType::F32, &wgtensor::Device::cpu())?
    ///     .requires_grad_(true);
    /// let d = w.exp()?.detach();
    /// assert!(d.is_leaf() && !d.requires_grad());
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    #[must_use]
    pub fn detach(&self) -> Tensor {
        self.with_autograd(Meta::default())
    }

    /// The gradient accumulated into this leaf by [`Tensor::backward`] calls (PyTorch's
    /// `.grad`), or `None` before any backward, after [`Tensor::zero_grad`], and for non-leaves.
    /// It lives on this tensor's device.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![1f32, 2.0], &[2], &Device::cpu())?.requires_grad_(true);
    /// assert!(x.grad().is_none());
    /// x.mul_scalar(3.0)?.sum_all()?.backward()?;
    /// x.mul_scalar(3.0)?.sum_all()?.backward()?; // accumulates, as in PyTorch
    /// assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![6.0, 6.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn grad(&self) -> Option<Tensor> {
        self.autograd_meta()
            .grad
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replaces this leaf's gradient (`None` clears it, as [`Tensor::zero_grad`] does).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] / [`Error::DeviceMismatch`] when `grad` does not match the
    /// tensor's shape or device.
    ///
    /// ```
    /// use wgtensor::{DType, Device, Tensor};
    /// let w = Tensor::zeros(&[2], DType::F32, &Device::cpu())?.requires_grad_(true);
    /// w.set_grad(Some(Tensor::ones(&[2], DType::F32, &Device::cpu())?))?;
    /// assert_eq!(w.grad().unwrap().to_vec::<f32>()?, vec![1.0, 1.0]);
    /// assert!(w.set_grad(Some(Tensor::ones(&[3], DType::F32, &Device::cpu())?)).is_err());
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn set_grad(&self, grad: Option<Tensor>) -> Result<()> {
        if let Some(g) = &grad {
            check_seed("set_grad", self, g)?;
        }
        *self
            .autograd_meta()
            .grad
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = grad.map(|g| g.detach());
        Ok(())
    }

    /// Clears this leaf's gradient (`set_grad(None)`; PyTorch's `zero_grad(set_to_none=True)`).
    ///
    /// ```
    /// let w = wgtensor::Tensor::ones(&[1], wgtensor::DType::F32, &wgtensor::Device::cpu())?
    ///     .requires_grad_(true);
    /// w.exp()?.sum_all()?.backward()?;
    /// w.zero_grad();
    /// assert!(w.grad().is_none());
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn zero_grad(&self) {
        *self
            .autograd_meta()
            .grad
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Computes the gradient of this one-element tensor (a loss) with respect to every leaf
    /// that requires grad and adds it into their [`Tensor::grad`]. The graph stays valid, so a
    /// second call accumulates again.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the tensor has more than one element (use
    /// [`Tensor::backward_with`]) or does not require grad; errors of the backward ops.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![1f32, 2.0], &[2], &Device::cpu())?.requires_grad_(true);
    /// let loss = x.mul(&x)?.sum_all()?; // d/dx = 2x
    /// loss.backward()?;
    /// assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![2.0, 4.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn backward(&self) -> Result<()> {
        if self.numel() != 1 {
            return Err(Error::InvalidArgument {
                op: "backward",
                message: format!(
                    "backward() needs a one-element tensor (a loss), got shape {:?}; reduce it \
                     first (sum_all, mean_all) or pass the output gradient with backward_with",
                    self.shape()
                ),
            });
        }
        let seed = {
            let _g = super::no_grad();
            Tensor::ones(self.shape(), self.dtype(), self.device())?
        };
        self.backward_with(&seed)
    }

    /// Back-propagates `grad`, the gradient of some scalar with respect to `self` (PyTorch's
    /// `t.backward(gradient)`): a vector-Jacobian product.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `self` does not require grad;
    /// [`Error::ShapeMismatch`] / [`Error::DeviceMismatch`] when `grad` differs from `self`.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let d = Device::cpu();
    /// let x = Tensor::from_vec(vec![1f32, 2.0], &[2], &d)?.requires_grad_(true);
    /// let y = x.mul_scalar(5.0)?;
    /// y.backward_with(&Tensor::from_vec(vec![1f32, 0.5], &[2], &d)?)?;
    /// assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![5.0, 2.5]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn backward_with(&self, grad: &Tensor) -> Result<()> {
        if !self.requires_grad() {
            return Err(Error::InvalidArgument {
                op: "backward",
                message: format!(
                    "the tensor of shape {:?} does not require grad: no input of the ops that \
                     made it was created with requires_grad_(true) or nn::param, or it was \
                     computed under no_grad",
                    self.shape()
                ),
            });
        }
        check_seed("backward_with", self, grad)?;
        run_backward(self, grad.detach())
    }
}

/// A gradient handed in by the user must match the tensor it belongs to.
fn check_seed(op: &'static str, t: &Tensor, g: &Tensor) -> Result<()> {
    t.check_device(op, g)?;
    if g.shape() != t.shape() {
        return Err(Error::ShapeMismatch {
            op,
            lhs: t.shape().to_vec(),
            rhs: g.shape().to_vec(),
        });
    }
    t.check_dtype(op, g)
}
