//! Reductions: validate, then dispatch to `cpu/reduce.rs` or `gpu/reduce.rs`.
//!
//! The API follows PyTorch with one method per form: `sum_all()` reduces every element to a
//! 0-d tensor (`torch.sum(t)`), `sum(dim, keepdim)` reduces one dim (`t.sum(dim, keepdim)`;
//! negative dims count from the end). `max`/`min` return values only (PyTorch's `amax`/`amin`);
//! the positions come from `argmax`/`argmin`, which return [`DType::U32`] indices (GPU kernels
//! index with 32 bits, and an index is never negative).

use super::chunked::{blocks_needed, map_dim0_blocks};
use super::Tensor;
use crate::autograd::reduce::{self as autograd, Reduction};
use crate::cpu::reduce::{ReduceOp, Rows};
use crate::gpu::GpuDevice;
use crate::shape::normalize_dim;
use crate::storage::{CpuStorage, Storage};
use crate::{cpu, DType, Error, Result};

impl Tensor {
    /// Reductions of a tensor past one GPU binding, by blocks of rows: whole-tensor sum, prod,
    /// max, min and mean reduce each block, then the partials; per-dim reductions over a dim
    /// other than 0 reduce each block of rows. `None` when no block plan applies (the kernel
    /// launch then refuses the oversized binding with a typed error).
    fn reduce_in_blocks(
        &self,
        g: &GpuDevice,
        op: ReduceOp,
        dim: Option<isize>,
        keepdim: bool,
    ) -> Result<Option<Tensor>> {
        let name = op.name();
        match dim {
            None if self.ndim() > 0 && op.is_arg() => {
                // Each block's extreme and its position; the first block holding the overall
                // extreme (NaN first, as argmax itself) wins, and its position is offset by the
                // block's start. All on the device: no readback.
                let flat = self.contiguous()?.flatten()?;
                let per = super::chunked::dim0_block_rows(g, &flat);
                let value_op = if op == ReduceOp::ArgMax {
                    ReduceOp::Max
                } else {
                    ReduceOp::Min
                };
                let values = map_dim0_blocks(name, g, &flat, &|b| {
                    b.reduce_op(value_op, None, false)?.reshape(&[1])
                })?;
                let local = map_dim0_blocks(name, g, &flat, &|b| {
                    b.reduce_op(op, None, false)?.reshape(&[1])
                })?;
                let block = values.reduce_op(op, None, false)?;
                // The winning block's local index: a one-hot pick (U32 stays exact).
                let nb = local.numel();
                let ids =
                    Tensor::arange(0.0, nb as f32, 1.0, self.device())?.to_dtype(DType::U32)?;
                let zero = Tensor::zeros(&[1], DType::U32, self.device())?;
                let within = ids.eq(&block)?.where_cond(&local, &zero)?.reduce_op(
                    ReduceOp::Sum,
                    None,
                    false,
                )?;
                let per = Tensor::full(&[], per as f64, DType::U32, self.device())?;
                Ok(Some(block.mul(&per)?.add(&within)?))
            }
            None if self.ndim() > 0 => {
                let partial = match op {
                    ReduceOp::Mean => ReduceOp::Sum,
                    other => other,
                };
                let flat = self.contiguous()?.flatten()?;
                let partials = map_dim0_blocks(name, g, &flat, &|b| {
                    b.reduce_op(partial, None, false)?.reshape(&[1])
                })?;
                let total = partials.reduce_op(partial, None, false)?;
                Ok(Some(if op == ReduceOp::Mean {
                    total.div_scalar(self.numel() as f32)?
                } else {
                    total
                }))
            }
            Some(d)
                if self.ndim() > 1 && normalize_dim(name, d, self.ndim())? == 0 && !op.is_arg() =>
            {
                // Over dim 0: each block of rows to one partial row, then the partials.
                let partial = match op {
                    ReduceOp::Mean => ReduceOp::Sum,
                    other => other,
                };
                let partials =
                    map_dim0_blocks(name, g, self, &|b| b.reduce_op(partial, Some(0), true))?;
                let total = partials.reduce_op(partial, Some(0), keepdim)?;
                Ok(Some(if op == ReduceOp::Mean {
                    total.div_scalar(self.shape()[0] as f32)?
                } else {
                    total
                }))
            }
            Some(d) if self.ndim() > 1 && normalize_dim(name, d, self.ndim())? != 0 => {
                let d = normalize_dim(name, d, self.ndim())? as isize;
                Ok(Some(map_dim0_blocks(name, g, self, &|b| {
                    b.reduce_op(op, Some(d), keepdim)
                })?))
            }
            _ => Ok(None),
        }
    }

    /// The shared path. `dim: None` reduces every element (of a row-major copy of strided views,
    /// so argmax/argmin return flat row-major indices).
    fn reduce_op(&self, op: ReduceOp, dim: Option<isize>, keepdim: bool) -> Result<Tensor> {
        let name = op.name();
        match self.dtype() {
            DType::F32 => {}
            // Accumulates in f32 (a convert kernel each way); values come back as f16.
            DType::F16 => return self.via_f32(true, |t| t.reduce_op(op, dim, keepdim)),
            // Integer sums and products wrap in the same dtype (there is no i64).
            DType::I32 | DType::U32 if op != ReduceOp::Mean => {}
            _ => return Err(self.unsupported(name)),
        }
        if let Some(g) = blocks_needed(&[self], 0) {
            if let Some(t) = self.reduce_in_blocks(g, op, dim, keepdim)? {
                return Ok(t);
            }
        }
        let (src, rows, out_shape) = match dim {
            Some(d) if self.ndim() > 0 => {
                let d = normalize_dim(name, d, self.ndim())?;
                let mut shape = self.shape().to_vec();
                if keepdim {
                    shape[d] = 1;
                } else {
                    shape.remove(d);
                }
                (self.clone(), Rows::along(self.layout(), d), shape)
            }
            _ => {
                if let Some(d) = dim {
                    // A 0-d tensor accepts dim 0 and -1, as in PyTorch, and stays 0-d.
                    // (Checked as one dim: `normalize_dim(_, -1, 0)` rejects -1.)
                    normalize_dim(name, d, 1)?;
                }
                let src = if self.is_contiguous() {
                    self.clone()
                } else {
                    self.contiguous()?
                };
                let rows = Rows::all(src.layout());
                (src, rows, Vec::new())
            }
        };
        let dtype = if op.is_arg() {
            DType::U32
        } else {
            self.dtype()
        };
        if rows.len == 0 {
            return match op {
                ReduceOp::Sum => Tensor::zeros(&out_shape, dtype, self.device()),
                ReduceOp::Prod => Tensor::ones(&out_shape, dtype, self.device()),
                ReduceOp::Mean => Tensor::full(&out_shape, f64::NAN, dtype, self.device()),
                ReduceOp::Max | ReduceOp::Min | ReduceOp::ArgMax | ReduceOp::ArgMin => {
                    let what = match dim {
                        Some(d) => format!("dim {d} of shape {:?} has size 0", self.shape()),
                        None => format!("the tensor of shape {:?} is empty", self.shape()),
                    };
                    Err(Error::InvalidArgument {
                        op: name,
                        message: format!("{what}: the {name} of no elements is undefined"),
                    })
                }
            };
        }
        if op.is_arg() && u32::try_from(rows.len).is_err() {
            return Err(Error::InvalidArgument {
                op: name,
                message: format!("{} elements per row exceed the U32 index range", rows.len),
            });
        }
        if rows.outputs() == 0 {
            return Tensor::zeros(&out_shape, dtype, self.device());
        }
        let storage = match src.storage()? {
            Storage::Cpu(s) if src.dtype() != DType::F32 => {
                Storage::Cpu(cpu::typed::reduce_int(op, s, &rows)?)
            }
            Storage::Cpu(_) => {
                let x = src.cpu_f32(name)?;
                Storage::Cpu(if op.is_arg() {
                    CpuStorage::U32(cpu::reduce::arg_reduce(op, x, &rows))
                } else {
                    CpuStorage::F32(cpu::reduce::reduce(op, x, &rows))
                })
            }
            Storage::Gpu(b) => Storage::Gpu(b.device.reduce_typed(
                name,
                op,
                src.dtype(),
                b,
                src.layout(),
                &rows,
            )?),
        };
        Ok(Tensor::from_parts(
            storage,
            &out_shape,
            dtype,
            self.device().clone(),
        ))
    }

    /// Sum of every element, as a 0-d tensor (`torch.sum(t)`). Pairwise on the CPU and a fixed
    /// tree on the GPU: accurate, and bit-identical from run to run on one device. NaN
    /// propagates; an empty tensor sums to 0.
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for u8 tensors (and `mean` of integers); GPU errors.
    /// f16 sums accumulate in f32 and round once; i32 / u32 sums wrap in their dtype.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[2, 2], &Device::cpu())?;
    /// let s = t.sum_all()?;
    /// assert_eq!(s.shape(), &[] as &[usize]);
    /// assert_eq!(s.to_scalar::<f32>()?, 10.0);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn sum_all(&self) -> Result<Tensor> {
        let out = self.reduce_op(ReduceOp::Sum, None, false)?;
        Ok(autograd::reduce(Reduction::Sum, self, None, false, out))
    }

    /// Sum over `dim` (`-1` is the last); `keepdim` keeps it with size 1 (`t.sum(dim, keepdim)`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `dim` is out of range; [`Error::UnsupportedDType`].
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], &Device::cpu())?;
    /// assert_eq!(t.sum(0, false)?.to_vec::<f32>()?, vec![5.0, 7.0, 9.0]);
    /// assert_eq!(t.sum(-1, true)?.shape(), &[2, 1]);
    /// assert!(t.sum(2, false).is_err());
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn sum(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        let out = self.reduce_op(ReduceOp::Sum, Some(dim), keepdim)?;
        Ok(autograd::reduce(
            Reduction::Sum,
            self,
            Some(dim),
            keepdim,
            out,
        ))
    }

    /// Mean of every element as a 0-d tensor; NaN for an empty tensor (as PyTorch).
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![1f32, 2.0, 3.0, 6.0], &[4], &Device::cpu())?;
    /// assert_eq!(t.mean_all()?.to_scalar::<f32>()?, 3.0);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn mean_all(&self) -> Result<Tensor> {
        let out = self.reduce_op(ReduceOp::Mean, None, false)?;
        Ok(autograd::reduce(Reduction::Mean, self, None, false, out))
    }

    /// Mean over `dim` (the sum divided by the dim's size).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `dim` is out of range.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[2, 2], &Device::cpu())?;
    /// assert_eq!(t.mean(1, false)?.to_vec::<f32>()?, vec![1.5, 3.5]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn mean(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        let out = self.reduce_op(ReduceOp::Mean, Some(dim), keepdim)?;
        Ok(autograd::reduce(
            Reduction::Mean,
            self,
            Some(dim),
            keepdim,
            out,
        ))
    }

    /// Product of every element as a 0-d tensor; 1 for an empty tensor.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[4], &Device::cpu())?;
    /// assert_eq!(t.prod_all()?.to_scalar::<f32>()?, 24.0);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn prod_all(&self) -> Result<Tensor> {
        let out = self.reduce_op(ReduceOp::Prod, None, false)?;
        Ok(autograd::reduce(Reduction::Prod, self, None, false, out))
    }

    /// Product over `dim`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `dim` is out of range.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[2, 2], &Device::cpu())?;
    /// assert_eq!(t.prod(0, false)?.to_vec::<f32>()?, vec![3.0, 8.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn prod(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        let out = self.reduce_op(ReduceOp::Prod, Some(dim), keepdim)?;
        Ok(autograd::reduce(
            Reduction::Prod,
            self,
            Some(dim),
            keepdim,
            out,
        ))
    }

    /// Largest element as a 0-d tensor (`torch.max(t)`); NaN if any element is NaN.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty tensor (PyTorch raises too).
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![1f32, 7.0, -3.0], &[3], &Device::cpu())?;
    /// assert_eq!(t.max_all()?.to_scalar::<f32>()?, 7.0);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn max_all(&self) -> Result<Tensor> {
        let out = self.reduce_op(ReduceOp::Max, None, false)?;
        Ok(autograd::reduce(Reduction::Max, self, None, false, out))
    }

    /// Largest value over `dim` (PyTorch's `amax`; [`Tensor::argmax`] gives the positions).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `dim` is out of range or has size 0.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![1f32, 9.0, 3.0, 4.0], &[2, 2], &Device::cpu())?;
    /// assert_eq!(t.max(-1, false)?.to_vec::<f32>()?, vec![9.0, 4.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn max(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        let out = self.reduce_op(ReduceOp::Max, Some(dim), keepdim)?;
        Ok(autograd::reduce(
            Reduction::Max,
            self,
            Some(dim),
            keepdim,
            out,
        ))
    }

    /// Smallest element as a 0-d tensor; NaN if any element is NaN.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty tensor.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![1f32, 7.0, -3.0], &[3], &Device::cpu())?;
    /// assert_eq!(t.min_all()?.to_scalar::<f32>()?, -3.0);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn min_all(&self) -> Result<Tensor> {
        let out = self.reduce_op(ReduceOp::Min, None, false)?;
        Ok(autograd::reduce(Reduction::Min, self, None, false, out))
    }

    /// Smallest value over `dim` (PyTorch's `amin`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `dim` is out of range or has size 0.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![1f32, 9.0, 3.0, 4.0], &[2, 2], &Device::cpu())?;
    /// assert_eq!(t.min(0, true)?.to_vec::<f32>()?, vec![1.0, 4.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn min(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        let out = self.reduce_op(ReduceOp::Min, Some(dim), keepdim)?;
        Ok(autograd::reduce(
            Reduction::Min,
            self,
            Some(dim),
            keepdim,
            out,
        ))
    }

    /// Flat row-major index of the largest element, as a 0-d [`DType::U32`] tensor. Ties give
    /// the first index; NaN counts as the largest value (the first NaN wins), as in PyTorch.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty tensor.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![1f32, 7.0, 7.0, 3.0], &[2, 2], &Device::cpu())?;
    /// assert_eq!(t.argmax_all()?.to_scalar::<u32>()?, 1);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn argmax_all(&self) -> Result<Tensor> {
        self.reduce_op(ReduceOp::ArgMax, None, false)
    }

    /// Index of the largest value along `dim`, as [`DType::U32`] (ties: first; NaN: first NaN).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `dim` is out of range or has size 0.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![1f32, 9.0, 3.0, 4.0], &[2, 2], &Device::cpu())?;
    /// assert_eq!(t.argmax(1, false)?.to_vec::<u32>()?, vec![1, 1]);
    /// assert_eq!(t.argmax(0, false)?.to_vec::<u32>()?, vec![1, 0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn argmax(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        self.reduce_op(ReduceOp::ArgMax, Some(dim), keepdim)
    }

    /// Flat row-major index of the smallest element (0-d [`DType::U32`]); ties give the first
    /// index, and NaN counts as the smallest value, as in PyTorch.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty tensor.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![4f32, 1.0, 1.0], &[3], &Device::cpu())?;
    /// assert_eq!(t.argmin_all()?.to_scalar::<u32>()?, 1);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn argmin_all(&self) -> Result<Tensor> {
        self.reduce_op(ReduceOp::ArgMin, None, false)
    }

    /// Index of the smallest value along `dim`, as [`DType::U32`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `dim` is out of range or has size 0.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![1f32, 9.0, 3.0, 0.0], &[2, 2], &Device::cpu())?;
    /// assert_eq!(t.argmin(-1, true)?.to_vec::<u32>()?, vec![0, 1]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn argmin(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        self.reduce_op(ReduceOp::ArgMin, Some(dim), keepdim)
    }
}
