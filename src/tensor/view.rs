//! Views: new shapes and strides over the same storage, without copying.

use super::{Tensor, TensorInner};
use crate::autograd::shape::{self as autograd, View};
use crate::shape::{broadcast_shapes, normalize_dim, numel_checked, Layout};
use crate::{Error, Result};
use std::sync::Arc;

impl Tensor {
    /// A tensor sharing this one's storage, read through `layout`.
    fn view(&self, layout: Layout) -> Tensor {
        Tensor(Arc::new(TensorInner {
            storage: self.0.storage.clone(),
            layout,
            dtype: self.dtype(),
            device: self.device().clone(),
            autograd: Default::default(),
        }))
    }

    /// The same elements with a new shape of equal element count. A view when the tensor is
    /// contiguous, otherwise a contiguous copy first (PyTorch's `reshape`).
    ///
    /// ```
    /// let t = wgtensor::Tensor::arange(0.0, 6.0, 1.0, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.reshape(&[2, 3])?.shape(), &[2, 3]);
    /// assert!(t.reshape(&[4, 2]).is_err());
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        let out = self.reshape_untracked(shape)?;
        Ok(autograd::view("reshape", View::Reshape, self, out))
    }

    fn reshape_untracked(&self, shape: &[usize]) -> Result<Tensor> {
        let n = numel_checked(shape)?;
        if n != self.numel() {
            return Err(Error::InvalidArgument {
                op: "reshape",
                message: format!(
                    "shape {:?} ({n} elements) is invalid for a tensor of shape {:?} ({} elements)",
                    shape,
                    self.shape(),
                    self.numel()
                ),
            });
        }
        let base = if self.is_contiguous() {
            self.clone()
        } else {
            self.contiguous()?
        };
        let offset = base.layout().offset;
        let mut layout = Layout::contiguous(shape);
        layout.offset = offset;
        Ok(base.view(layout))
    }

    /// Swaps two dims (negative dims count from the end).
    ///
    /// ```
    /// let t = wgtensor::Tensor::zeros(&[2, 3, 4], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.transpose(0, -1)?.shape(), &[4, 3, 2]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn transpose(&self, dim0: isize, dim1: isize) -> Result<Tensor> {
        let out = self.transpose_untracked(dim0, dim1)?;
        Ok(autograd::view(
            "transpose",
            View::Transpose(dim0, dim1),
            self,
            out,
        ))
    }

    fn transpose_untracked(&self, dim0: isize, dim1: isize) -> Result<Tensor> {
        let nd = self.ndim();
        let a = normalize_dim("transpose", dim0, nd)?;
        let b = normalize_dim("transpose", dim1, nd)?;
        let mut l = self.layout().clone();
        if nd > 0 {
            l.shape.swap(a, b);
            l.strides.swap(a, b);
        }
        Ok(self.view(l))
    }

    /// Transpose of a matrix (PyTorch's `t()`): swaps the two dims of a 2-D tensor, returns 0-D
    /// and 1-D tensors unchanged.
    ///
    /// ```
    /// let m = wgtensor::Tensor::arange(0.0, 6.0, 1.0, &wgtensor::Device::cpu())?.reshape(&[2, 3])?;
    /// assert_eq!(m.t()?.to_vec::<f32>()?, vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn t(&self) -> Result<Tensor> {
        match self.ndim() {
            0 | 1 => Ok(self.clone()),
            2 => self.transpose(0, 1),
            n => Err(Error::InvalidArgument {
                op: "t",
                message: format!(
                    "t() expects a tensor with at most 2 dims, got {n} (shape {:?}); use transpose",
                    self.shape()
                ),
            }),
        }
    }

    /// Reorders dims: output dim `i` is input dim `dims[i]` (a permutation; negatives allowed).
    ///
    /// ```
    /// let t = wgtensor::Tensor::zeros(&[2, 3, 4], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.permute(&[2, 0, 1])?.shape(), &[4, 2, 3]);
    /// assert!(t.permute(&[0, 0, 1]).is_err());
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn permute(&self, dims: &[isize]) -> Result<Tensor> {
        let out = self.permute_untracked(dims)?;
        Ok(autograd::view(
            "permute",
            View::Permute(dims.to_vec()),
            self,
            out,
        ))
    }

    fn permute_untracked(&self, dims: &[isize]) -> Result<Tensor> {
        let nd = self.ndim();
        let bad = || Error::InvalidArgument {
            op: "permute",
            message: format!(
                "{dims:?} is not a permutation of the {nd} dims of shape {:?}",
                self.shape()
            ),
        };
        if dims.len() != nd {
            return Err(bad());
        }
        let mut seen = vec![false; nd];
        let mut l = self.layout().clone();
        for (i, &d) in dims.iter().enumerate() {
            let d = normalize_dim("permute", d, nd).map_err(|_| bad())?;
            if std::mem::replace(&mut seen[d], true) {
                return Err(bad());
            }
            l.shape[i] = self.shape()[d];
            l.strides[i] = self.layout().strides[d];
        }
        Ok(self.view(l))
    }

    /// `len` elements of `dim` starting at `start` (PyTorch's `narrow`).
    ///
    /// ```
    /// let t = wgtensor::Tensor::arange(0.0, 10.0, 1.0, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.narrow(0, 2, 3)?.to_vec::<f32>()?, vec![2.0, 3.0, 4.0]);
    /// assert!(t.narrow(0, 8, 3).is_err());
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn narrow(&self, dim: isize, start: usize, len: usize) -> Result<Tensor> {
        let out = self.narrow_untracked(dim, start, len)?;
        Ok(autograd::view(
            "narrow",
            View::Narrow { dim, start },
            self,
            out,
        ))
    }

    fn narrow_untracked(&self, dim: isize, start: usize, len: usize) -> Result<Tensor> {
        let d = normalize_dim("narrow", dim, self.ndim())?;
        if self.ndim() == 0 {
            return Err(Error::InvalidArgument {
                op: "narrow",
                message: "a 0-d tensor has no dim to narrow".into(),
            });
        }
        let size = self.shape()[d];
        if start.checked_add(len).is_none_or(|end| end > size) {
            return Err(Error::InvalidArgument {
                op: "narrow",
                message: format!(
                    "start {start} + length {len} exceeds dim {d} of size {size} (shape {:?})",
                    self.shape()
                ),
            });
        }
        let mut l = self.layout().clone();
        if len > 0 {
            l.offset += start * l.strides[d];
        }
        l.shape[d] = len;
        Ok(self.view(l))
    }

    /// Removes `dim` if its size is 1; otherwise returns the tensor unchanged (as PyTorch does).
    ///
    /// ```
    /// let t = wgtensor::Tensor::zeros(&[2, 1, 3], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.squeeze(1)?.shape(), &[2, 3]);
    /// assert_eq!(t.squeeze(0)?.shape(), &[2, 1, 3]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn squeeze(&self, dim: isize) -> Result<Tensor> {
        let out = self.squeeze_untracked(dim)?;
        Ok(autograd::view("squeeze", View::Reshape, self, out))
    }

    fn squeeze_untracked(&self, dim: isize) -> Result<Tensor> {
        let d = normalize_dim("squeeze", dim, self.ndim())?;
        if self.ndim() == 0 || self.shape()[d] != 1 {
            return Ok(self.clone());
        }
        let mut l = self.layout().clone();
        l.shape.remove(d);
        l.strides.remove(d);
        Ok(self.view(l))
    }

    /// Inserts a dim of size 1 at `dim` (`-1` appends at the end).
    ///
    /// ```
    /// let t = wgtensor::Tensor::zeros(&[2, 3], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.unsqueeze(0)?.shape(), &[1, 2, 3]);
    /// assert_eq!(t.unsqueeze(-1)?.shape(), &[2, 3, 1]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn unsqueeze(&self, dim: isize) -> Result<Tensor> {
        let out = self.unsqueeze_untracked(dim)?;
        Ok(autograd::view("unsqueeze", View::Reshape, self, out))
    }

    fn unsqueeze_untracked(&self, dim: isize) -> Result<Tensor> {
        let d = normalize_dim("unsqueeze", dim, self.ndim() + 1)?;
        let mut l = self.layout().clone();
        // Any stride works for a size-1 dim; this one keeps contiguous tensors contiguous.
        let stride = l.strides.get(d).map_or(1, |&s| s * l.shape[d]);
        l.shape.insert(d, 1);
        l.strides.insert(d, stride);
        Ok(self.view(l))
    }

    /// A view broadcast to `shape` (size-1 dims repeat with stride 0; no copy). PyTorch's
    /// `expand`; see also [`Tensor::broadcast_as`].
    ///
    /// ```
    /// let t = wgtensor::Tensor::arange(0.0, 3.0, 1.0, &wgtensor::Device::cpu())?;
    /// let e = t.expand(&[2, 3])?;
    /// assert_eq!(e.to_vec::<f32>()?, vec![0.0, 1.0, 2.0, 0.0, 1.0, 2.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn expand(&self, shape: &[usize]) -> Result<Tensor> {
        let out = self.expand_untracked(shape)?;
        Ok(autograd::view("expand", View::Expand, self, out))
    }

    fn expand_untracked(&self, shape: &[usize]) -> Result<Tensor> {
        let target = broadcast_shapes("expand", self.shape(), shape)?;
        if target != shape {
            return Err(Error::ShapeMismatch {
                op: "expand",
                lhs: self.shape().to_vec(),
                rhs: shape.to_vec(),
            });
        }
        Ok(self.view(self.layout().broadcast_to(shape)))
    }

    /// Same as [`Tensor::expand`] (candle's name).
    pub fn broadcast_as(&self, shape: &[usize]) -> Result<Tensor> {
        self.expand(shape)
    }

    /// All elements as one dim.
    ///
    /// ```
    /// let t = wgtensor::Tensor::zeros(&[2, 3], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.flatten()?.shape(), &[6]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn flatten(&self) -> Result<Tensor> {
        self.reshape(&[self.numel()])
    }
}
