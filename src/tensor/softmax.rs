//! softmax and log_softmax (the softmax family of the row-op table, `src/ops/rows.rs`):
//! validate, then dispatch to `cpu/softmax.rs` or `gpu/rows.rs`.

use super::Data;
use super::Tensor;
use crate::ops::RowOp;
use crate::shape::normalize_dim;
use crate::storage::{CpuStorage, Storage};
use crate::{cpu, Result};

impl Tensor {
    /// The softmax-family row op `op` (softmax or log_softmax) over `dim`, untracked.
    fn softmax_op(&self, dim: isize, op: RowOp) -> Result<Tensor> {
        let name = op.name();
        if self.dtype() == crate::DType::F16 {
            // Computed in f32 (a convert kernel each way) and rounded once to f16.
            return self.via_f32(true, |t| t.softmax_op(dim, op));
        }
        self.require_f32(name)?;
        if self.ndim() == 0 {
            // One element over a dim of size 1, as PyTorch treats 0-d tensors: softmax is 1.
            // Dims 0 and -1 are valid (checked as one dim: `normalize_dim(_, -1, 0)` rejects -1).
            normalize_dim(name, dim, 1)?;
            return self.reshape(&[1])?.softmax_op(0, op)?.reshape(&[]);
        }
        let d = normalize_dim(name, dim, self.ndim())?;
        if self.numel() == 0 {
            return Tensor::zeros(self.shape(), self.dtype(), self.device());
        }
        // Past one binding, rows along any dim but 0 stay whole in blocks of dim 0.
        if d != 0 {
            if let Some(g) = super::chunked::blocks_needed(&[self], self.numel()) {
                return super::chunked::map_dim0_blocks(name, g, self, &|b| {
                    b.softmax_op(d as isize, op)
                });
            }
        }
        let storage = match self.data()? {
            Data::Cpu(_) => Storage::from(CpuStorage::F32(cpu::softmax::softmax(
                op,
                self.host_f32(name)?,
                self.layout(),
                d,
            ))),
            Data::Gpu(b) => Storage::from(b.device.softmax(op, b, self.layout(), d)?),
        };
        Ok(self.derived(storage, self.shape()))
    }

    /// `exp(x) / Σ exp(x)` along `dim` (`-1` is the last), computed as
    /// `exp(x - max) / Σ exp(x - max)` so large inputs do not overflow. A NaN in a row makes
    /// that row NaN, as in PyTorch.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `dim` is out of range;
    /// [`Error::UnsupportedDType`](crate::Error::UnsupportedDType) for integer tensors. f16
    /// tensors are converted to f32, computed in f32 and rounded once to f16.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![1000f32, 1000.0, 0.0, 0.0], &[2, 2], &Device::cpu())?;
    /// assert_eq!(t.softmax(-1)?.to_vec::<f32>()?, vec![0.5, 0.5, 0.5, 0.5]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn softmax(&self, dim: isize) -> Result<Tensor> {
        let out = self.softmax_op(dim, RowOp::Softmax)?;
        Ok(crate::autograd::reduce::softmax(self, dim, false, out))
    }

    /// `log(softmax(x))` along `dim`, computed as `(x - max) - log Σ exp(x - max)`: finite where
    /// `softmax(x).log()` would underflow to `-inf`.
    ///
    /// # Errors
    /// As [`Tensor::softmax`].
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![0f32, -200.0], &[2], &Device::cpu())?;
    /// let l = t.log_softmax(0)?.to_vec::<f32>()?;
    /// assert_eq!(l[0], 0.0);
    /// assert_eq!(l[1], -200.0);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn log_softmax(&self, dim: isize) -> Result<Tensor> {
        let out = self.softmax_op(dim, RowOp::LogSoftmax)?;
        Ok(crate::autograd::reduce::softmax(self, dim, true, out))
    }
}
