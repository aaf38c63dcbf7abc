//! `cat` and `stack`: validate, then dispatch to `cpu/join.rs` or `gpu/join.rs`.

use super::Data;
use super::{backend, Backend, Tensor};
use crate::shape::normalize_dim;
use crate::storage::Storage;
use crate::{cpu, DType, Error, Result};

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
        let device = first.device();
        let storage = match backend(device) {
            Backend::Cpu => {
                let mut parts = Vec::with_capacity(tensors.len());
                for t in tensors {
                    match t.data()? {
                        Data::Cpu(s) => parts.push((s, t.layout())),
                        Data::Gpu(_) => return Err(first.device_mismatch(op, t)),
                    }
                }
                Storage::from(cpu::join::cat(&parts, d, &out_shape)?)
            }
            // Past one storage binding along dim 0 (the result, or a part's buffer: rows of an
            // embedding table past one binding): the parts are joined by buffer copies (no
            // binding limit), each packed first; every part but the last a whole number of
            // 4-byte words.
            Backend::Gpu(g)
                if d == 0
                    && ((out_shape.iter().product::<usize>() * first.dtype().size_in_bytes())
                        as u64
                        > g.binding_limit()
                        || tensors
                            .iter()
                            .any(|t| t.gpu_bytes().is_some_and(|b| b > g.binding_limit())))
                    && tensors
                        .iter()
                        .rev()
                        .skip(1)
                        .all(|t| (t.numel() * t.dtype().size_in_bytes()).is_multiple_of(4)) =>
            {
                let esize = first.dtype().size_in_bytes() as u64;
                let mut packed = Vec::with_capacity(tensors.len());
                for t in tensors {
                    if !t.is_gpu() {
                        return Err(first.device_mismatch(op, t));
                    }
                    packed.push(t.contiguous()?);
                }
                let mut owned = Vec::with_capacity(packed.len());
                for t in &packed {
                    let Some(b) = t.gpu_data()? else {
                        return Err(first.device_mismatch(op, t));
                    };
                    let len = t.numel() as u64 * esize;
                    // A packed view that starts inside its buffer is copied out first.
                    let offset = t.layout().offset as u64 * esize;
                    owned.push(if offset == 0 {
                        None
                    } else {
                        Some(g.extract(op, b, offset, len)?)
                    });
                }
                let parts: Vec<_> = packed
                    .iter()
                    .zip(&owned)
                    .map(|(t, o)| {
                        let len = t.numel() as u64 * esize;
                        match (o, t.gpu_data()) {
                            (Some(b), _) | (None, Ok(Some(b))) => Ok((b, len)),
                            _ => Err(first.device_mismatch(op, t)),
                        }
                    })
                    .collect::<Result<_>>()?;
                Storage::from(g.assemble(op, &parts)?)
            }
            Backend::Gpu(g) if first.dtype().size_in_bytes() == 4 => {
                let mut parts = Vec::with_capacity(tensors.len());
                for t in tensors {
                    match t.data()? {
                        Data::Gpu(b) => parts.push((b, t.layout())),
                        Data::Cpu(_) => return Err(first.device_mismatch(op, t)),
                    }
                }
                Storage::from(g.cat(&parts, d, &out_shape)?)
            }
            // The copy kernel moves 32-bit words and 16- / 8-bit elements share words: widen
            // each part on the device (f16 -> f32 and u8 -> u32 are exact), join, and narrow
            // back, so the data never leaves the GPU.
            Backend::Gpu(_) => {
                let (dtype, wide) = (first.dtype(), wide_dtype(first.dtype()));
                let parts = tensors
                    .iter()
                    .map(|t| {
                        if t.is_gpu() {
                            t.to_dtype(wide)
                        } else {
                            Err(first.device_mismatch(op, t))
                        }
                    })
                    .collect::<Result<Vec<_>>>()?;
                let refs: Vec<&Tensor> = parts.iter().collect();
                return Tensor::cat(&refs, d as isize)?.to_dtype(dtype);
            }
        };
        Ok(first.derived(storage, &out_shape))
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

/// The 32-bit dtype that holds every value of a 16- or 8-bit one exactly.
fn wide_dtype(d: DType) -> DType {
    match d {
        DType::U8 => DType::U32,
        _ => DType::F32,
    }
}
