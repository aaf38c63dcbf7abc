//! The norm family of the row-op table (`src/ops/rows.rs`: layer_norm, rms_norm): validate,
//! then ask the backend (`BackendStorage::norm`, one kernel per call; its gradients by
//! `BackendStorage::norm_backward` where the backend has a kernel for them).

use super::dispatch;
use super::Tensor;
use crate::ops::backend::NormSpec;
use crate::ops::RowOp;
use crate::{DType, Error, Result};

/// `dx`, and the weight and bias gradients when asked for.
pub(crate) type LayerNormGrads = (Tensor, Option<(Tensor, Tensor)>);

impl Tensor {
    /// The norm `row` of the rows of the last dim, tracked: what the table's norm methods
    /// (`layer_norm`, `rms_norm`) call.
    pub(super) fn norm(
        &self,
        row: RowOp,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f32,
    ) -> Result<Tensor> {
        let op = row.name();
        if !(eps >= 0.0 && eps.is_finite()) {
            return Err(Error::InvalidArgument {
                op,
                message: format!("eps must be a finite number >= 0, got {eps}"),
            });
        }
        let Some(&len) = self.shape().last() else {
            return Err(Error::InvalidArgument {
                op,
                message: "a 0-d tensor has no last dim to normalise; reshape it to [1]".into(),
            });
        };
        for p in [weight, bias].into_iter().flatten() {
            if p.shape() != [len] {
                return Err(Error::ShapeMismatch {
                    op,
                    lhs: self.shape().to_vec(),
                    rhs: p.shape().to_vec(),
                });
            }
            self.check_device(op, p)?;
            if !matches!(p.dtype(), DType::F32 | DType::F16) {
                return Err(p.unsupported(op));
            }
        }
        let f32_of = |p: Option<&Tensor>| -> Result<Option<Tensor>> {
            p.map(|p| p.to_dtype(DType::F32)).transpose()
        };
        if self.dtype() == DType::F16
            || [weight, bias]
                .into_iter()
                .flatten()
                .any(|p| p.dtype() == DType::F16)
        {
            // Widened through tracked conversions, so gradients flow back in the caller's dtypes.
            let (w, b) = (f32_of(weight)?, f32_of(bias)?);
            let y = self
                .to_dtype(DType::F32)?
                .norm(row, w.as_ref(), b.as_ref(), eps)?;
            return if self.dtype() == DType::F16 {
                y.to_dtype(DType::F16)
            } else {
                Ok(y)
            };
        }
        self.require_f32(op)?;
        let out = if self.numel() == 0 {
            Tensor::zeros(self.shape(), DType::F32, self.device())?
        } else {
            self.norm_forward(row, weight, bias, eps, len)?
        };
        Ok(crate::autograd::norm::norm(
            row, self, weight, bias, eps, out,
        ))
    }

    /// The kernel call, untracked: packed copies of the operands, one backend kernel.
    fn norm_forward(
        &self,
        row: RowOp,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f32,
        len: usize,
    ) -> Result<Tensor> {
        let _guard = crate::no_grad();
        let x = self.contiguous()?;
        let weight = weight.map(Tensor::contiguous).transpose()?;
        let bias = bias.map(Tensor::contiguous).transpose()?;
        let spec = NormSpec {
            row,
            nrows: x.numel() / len,
            len,
            eps,
        };
        let storage = dispatch::norm(&x, &spec, weight.as_ref(), bias.as_ref())?
            .ok_or_else(|| x.unsupported(row.name()))?;
        Ok(self.derived(storage, self.shape()))
    }

    /// The norm `row`'s gradients by the backend's own kernel (the CPU has one) when `x`, `g`
    /// and `weight` are f32 on one device (else `None`, and the caller composes them from ops):
    /// `dx`, and with `want_wb` the weight and bias gradients `[len]`.
    pub(crate) fn norm_kernel_grads(
        row: RowOp,
        x: &Tensor,
        weight: Option<&Tensor>,
        g: &Tensor,
        eps: f32,
        want_wb: bool,
    ) -> Result<Option<LayerNormGrads>> {
        let f32_here = |t: &Tensor| t.dtype() == DType::F32 && t.device() == x.device();
        if !f32_here(x) || !f32_here(g) || !weight.is_none_or(f32_here) || x.numel() == 0 {
            return Ok(None);
        }
        let len = *x.shape().last().unwrap_or(&1);
        let spec = NormSpec {
            row,
            nrows: x.numel() / len,
            len,
            eps,
        };
        let Some((dx, wb)) = dispatch::norm_backward(x, g, weight, &spec, want_wb)? else {
            return Ok(None);
        };
        Ok(Some((
            x.derived(dx, x.shape()),
            wb.map(|(dw, db)| (x.derived(dw, &[len]), x.derived(db, &[len]))),
        )))
    }
}
