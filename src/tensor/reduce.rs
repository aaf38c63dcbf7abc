//! Reductions (their methods come from the table in `src/ops/reduce.rs`): validate, describe
//! the rows to reduce, then ask the backend (`BackendStorage::reduce`).
//!
//! The API follows PyTorch with one method per form: `sum_all()` reduces every element to a
//! 0-d tensor (`torch.sum(t)`), `sum(dim, keepdim)` reduces one dim (`t.sum(dim, keepdim)`;
//! negative dims count from the end). `max`/`min` return values only (PyTorch's `amax`/`amin`);
//! the positions come from `argmax`/`argmin`, which return [`DType::U32`] indices (GPU kernels
//! index with 32 bits, and an index is never negative).

use super::chunked::{blocks_needed, map_dim0_blocks};
use super::dispatch;
use super::Tensor;
use crate::autograd::reduce::{self as autograd, extreme_grad, ReduceGrad};
use crate::ops::geometry::Rows;
use crate::ops::{Empty, ReduceOp};
use crate::shape::normalize_dim;
use crate::{DType, Error, Result};

impl Tensor {
    /// Reductions of a tensor past one GPU binding, by blocks of rows: whole-tensor sum, prod,
    /// max, min and mean reduce each block, then the partials; per-dim reductions over a dim
    /// other than 0 reduce each block of rows. `None` when no block plan applies (the kernel
    /// launch then refuses the oversized binding with a typed error), or when `self` fits one
    /// binding.
    fn reduce_in_blocks(
        &self,
        op: ReduceOp,
        dim: Option<isize>,
        keepdim: bool,
    ) -> Result<Option<Tensor>> {
        let Some(g) = blocks_needed(&[self], 0) else {
            return Ok(None);
        };
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
                let partial = op.partials();
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
                let partial = op.partials();
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
            DType::I32 | DType::U32 if op.ints() => {}
            _ => return Err(self.unsupported(name)),
        }
        if let Some(t) = self.reduce_in_blocks(op, dim, keepdim)? {
            return Ok(t);
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
            return match op.empty() {
                Empty::Zeros => Tensor::zeros(&out_shape, dtype, self.device()),
                Empty::Ones => Tensor::ones(&out_shape, dtype, self.device()),
                Empty::Nan => Tensor::full(&out_shape, f64::NAN, dtype, self.device()),
                Empty::Undefined => {
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
        let storage = dispatch::reduce(&src, op, &rows)?.ok_or_else(|| self.unsupported(name))?;
        Ok(Tensor::from_parts(
            storage,
            &out_shape,
            dtype,
            self.device().clone(),
        ))
    }

    /// The methods of the reduction table (`src/ops/reduce.rs`) land here: the reduction,
    /// recorded for autograd when the op has a gradient.
    pub(crate) fn reduce_tracked(
        &self,
        op: ReduceOp,
        dim: Option<isize>,
        keepdim: bool,
    ) -> Result<Tensor> {
        let out = self.reduce_op(op, dim, keepdim)?;
        Ok(match op.grad() {
            Some(grad) => autograd::reduce(op.name(), grad, self, dim, keepdim, out),
            None => out,
        })
    }
}

// The public reduction methods and the nodes they record, from the table (`src/ops/reduce.rs`).
crate::ops::reduce_tensor_half!();
