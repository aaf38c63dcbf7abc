//! The norm family of the row-op table (`src/ops/rows.rs`: layer_norm, rms_norm): validate,
//! then dispatch to `cpu/norm.rs` or `gpu/rows.rs` (one kernel per call).

use super::Data;
use super::Tensor;
use crate::ops::RowOp;
use crate::storage::{CpuStorage, Storage};
use crate::{cpu, DType, Error, Result};

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

    /// The kernel call, untracked: packed copies of the operands, one CPU or GPU kernel.
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
        let nrows = x.numel() / len;
        let storage = match x.data()? {
            Data::Cpu(_) => {
                let slice = |p: &Option<Tensor>| -> Result<Option<Vec<f32>>> {
                    p.as_ref()
                        .map(|p| Ok(p.host_f32(row.name())?.to_vec()))
                        .transpose()
                };
                let (w, b) = (slice(&weight)?, slice(&bias)?);
                Storage::from(CpuStorage::F32(cpu::norm::norm(
                    row,
                    x.host_f32(row.name())?,
                    len,
                    w.as_deref(),
                    b.as_deref(),
                    eps,
                )?))
            }
            Data::Gpu(buf) => {
                fn gpu<'a>(
                    p: &'a Option<Tensor>,
                    op: &'static str,
                ) -> Result<Option<&'a crate::gpu::buffer::GpuBuffer>> {
                    p.as_ref()
                        .map(|p| p.gpu_data()?.ok_or_else(|| p.unsupported(op)))
                        .transpose()
                }
                let (w, b) = (gpu(&weight, row.name())?, gpu(&bias, row.name())?);
                Storage::from(buf.device.norm(row, buf, nrows, len, w, b, eps)?)
            }
        };
        Ok(self.derived(storage, self.shape()))
    }

    /// The norm `row`'s gradients by the CPU kernel when `x` is an f32 CPU tensor (else
    /// `None`, and the caller composes them from ops): `dx`, and with `want_wb` the weight and
    /// bias gradients `[len]`.
    pub(crate) fn norm_cpu_grads(
        row: RowOp,
        x: &Tensor,
        weight: Option<&Tensor>,
        g: &Tensor,
        eps: f32,
        want_wb: bool,
    ) -> Result<Option<LayerNormGrads>> {
        let f32_cpu = |t: &Tensor| t.is_cpu() && t.dtype() == DType::F32;
        if !f32_cpu(x) || !f32_cpu(g) || !weight.is_none_or(f32_cpu) || x.numel() == 0 {
            return Ok(None);
        }
        let op = row.name();
        let len = *x.shape().last().unwrap_or(&1);
        let (xc, gc) = (x.contiguous()?, g.contiguous()?);
        let wc = weight.map(Tensor::contiguous).transpose()?;
        let w = wc.as_ref().map(|w| w.host_f32(op)).transpose()?;
        let (dx, wb) = cpu::norm::norm_backward(
            row,
            xc.host_f32(op)?,
            gc.host_f32(op)?,
            len,
            w,
            eps,
            want_wb,
        )?;
        let cpu = |v: Vec<f32>, shape: &[usize]| x.derived(CpuStorage::F32(v), shape);
        Ok(Some((
            cpu(dx, x.shape()),
            wb.map(|(dw, db)| (cpu(dw, &[len]), cpu(db, &[len]))),
        )))
    }
}
