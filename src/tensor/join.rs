//! `cat` and `stack`: validate, then ask the backend (`BackendStorage::cat`, or
//! `BackendStorage::assemble` past one GPU binding).

use super::chunked::blocks_needed;
use super::dispatch;
use super::Tensor;
use crate::shape::normalize_dim;
use crate::{DType, Error, Result};

impl Tensor {
    /// Concatenates tensors along an existing `dim` (`torch.cat`; negative dims count from the
    /// end). Every tensor must have the same device, dtype and number of dims, and the same size
    /// in every dim but `dim`. Inputs may be strided views; the result is packed row-major.
    /// Every dtype works (f16 and u8 on a GPU are widened to 32 bits on the device, joined
    /// and narrowed back).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty list, 0-d tensors, a bad `dim` or mismatched
    /// shapes (the message names both shapes); [`Error::DeviceMismatch`] /
    /// [`Error::DTypeMismatch`] naming the first tensor and the offending one.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let d = Device::cpu();
    /// let a = Tensor::from_vec(vec![1f32, 2.0], &[1, 2], &d)?;
    /// let b = Tensor::from_vec(vec![3f32, 4.0, 5.0, 6.0], &[2, 2], &d)?;
    /// let c = Tensor::cat(&[&a, &b], 0)?;
    /// assert_eq!(c.shape(), &[3, 2]);
    /// assert_eq!(c.to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    /// assert!(Tensor::cat(&[&a, &b], 1).is_err()); // dim 0 differs: 1 vs 2
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn cat(tensors: &[&Tensor], dim: isize) -> Result<Tensor> {
        let out = Tensor::cat_untracked(tensors, dim)?;
        Ok(crate::autograd::shape::cat(tensors, dim, out))
    }

    fn cat_untracked(tensors: &[&Tensor], dim: isize) -> Result<Tensor> {
        let op = "cat";
        let Some(&first) = tensors.first() else {
            return Err(Error::InvalidArgument {
                op,
                message: "expected a non-empty list of tensors".into(),
            });
        };
        if first.ndim() == 0 {
            return Err(Error::InvalidArgument {
                op,
                message: "0-d tensors cannot be concatenated; use stack".into(),
            });
        }
        let d = normalize_dim(op, dim, first.ndim())?;
        let mut out_shape = first.shape().to_vec();
        out_shape[d] = 0;
        for (i, t) in tensors.iter().enumerate() {
            first.check_pair(op, t)?;
            let compatible = t.ndim() == first.ndim()
                && (0..t.ndim()).all(|k| k == d || t.shape()[k] == first.shape()[k]);
            if !compatible {
                return Err(Error::InvalidArgument {
                    op,
                    message: format!(
                        "tensor {i} has shape {:?} but tensor 0 has shape {:?}: every dim but \
                         dim {d} must match",
                        t.shape(),
                        first.shape()
                    ),
                });
            }
            out_shape[d] += t.shape()[d];
        }
        crate::shape::numel_checked(&out_shape)?;
        // Past one storage binding along dim 0 (the result, or a part's buffer: rows of an
        // embedding table past one binding): the parts are joined by buffer copies (no binding
        // limit), each packed first; every part but the last a whole number of 4-byte words.
        let whole_words = tensors
            .iter()
            .rev()
            .skip(1)
            .all(|t| (t.numel() * t.dtype().size_in_bytes()).is_multiple_of(4));
        if d == 0 && whole_words && blocks_needed(tensors, out_shape.iter().product()).is_some() {
            let packed = tensors
                .iter()
                .map(|t| t.contiguous())
                .collect::<Result<Vec<_>>>()?;
            let refs: Vec<&Tensor> = packed.iter().collect();
            if let Some(storage) = dispatch::assemble(op, &refs)? {
                return Ok(first.derived(storage, &out_shape));
            }
        }
        if let Some(storage) = dispatch::cat(op, tensors, d, &out_shape)? {
            return Ok(first.derived(storage, &out_shape));
        }
        // No kernel for a 16- or 8-bit dtype (a GPU's copy kernel moves 32-bit words, which
        // such elements share): widen each part on the device (f16 -> f32 and u8 -> u32 are
        // exact), join, and narrow back, so the data never leaves the device.
        let dtype = first.dtype();
        let wide = wide_dtype(dtype);
        if wide == dtype {
            return Err(first.unsupported(op));
        }
        let parts = tensors
            .iter()
            .map(|t| t.to_dtype(wide))
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&Tensor> = parts.iter().collect();
        Tensor::cat(&refs, d as isize)?.to_dtype(dtype)
    }

    /// Stacks tensors of one shape along a new `dim` (`torch.stack`): `dim` ranges over
    /// `ndim + 1` positions, `-1` appending a last dim.
    ///
    /// # Errors
    /// As [`Tensor::cat`]; all shapes must be equal (the message names both).
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let d = Device::cpu();
    /// let a = Tensor::from_vec(vec![1f32, 2.0], &[2], &d)?;
    /// let b = Tensor::from_vec(vec![3f32, 4.0], &[2], &d)?;
    /// assert_eq!(Tensor::stack(&[&a, &b], 0)?.to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 4.0]);
    /// let s = Tensor::stack(&[&a, &b], -1)?;
    /// assert_eq!(s.shape(), &[2, 2]);
    /// assert_eq!(s.to_vec::<f32>()?, vec![1.0, 3.0, 2.0, 4.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn stack(tensors: &[&Tensor], dim: isize) -> Result<Tensor> {
        let op = "stack";
        let Some(&first) = tensors.first() else {
            return Err(Error::InvalidArgument {
                op,
                message: "expected a non-empty list of tensors".into(),
            });
        };
        let d = normalize_dim(op, dim, first.ndim() + 1)?;
        for (i, t) in tensors.iter().enumerate() {
            if t.shape() != first.shape() {
                return Err(Error::InvalidArgument {
                    op,
                    message: format!(
                        "tensor {i} has shape {:?} but tensor 0 has shape {:?}: stack needs \
                         equal shapes",
                        t.shape(),
                        first.shape()
                    ),
                });
            }
        }
        let views = tensors
            .iter()
            .map(|t| t.unsqueeze(d as isize))
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&Tensor> = views.iter().collect();
        Tensor::cat(&refs, d as isize)
    }
}

/// The 32-bit dtype that holds every value of a 16- or 8-bit one exactly (a 32-bit dtype
/// itself).
fn wide_dtype(d: DType) -> DType {
    match d {
        DType::U8 => DType::U32,
        DType::F16 => DType::F32,
        d => d,
    }
}
