//! The softmax family of the row-op table (`src/ops/rows.rs`: softmax, log_softmax): validate,
//! then ask the tensor's backend (`dispatch::softmax`: `cpu/softmax.rs` or `gpu/rows.rs`).

use super::dispatch;
use super::Tensor;
use crate::autograd::reduce::RowGrad;
use crate::ops::RowOp;
use crate::shape::normalize_dim;
use crate::Result;

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
        let storage = dispatch::softmax(self, op, d)?.ok_or_else(|| self.unsupported(name))?;
        Ok(self.derived(storage, self.shape()))
    }

    /// The softmax-family op `op` over `dim`, recording `grad` (the table entry's backward,
    /// `src/ops/rows.rs`): what the table's `dim` methods (`softmax`, `log_softmax`) call.
    pub(super) fn row_dim(&self, op: RowOp, dim: isize, grad: RowGrad) -> Result<Tensor> {
        let out = self.softmax_op(dim, op)?;
        Ok(crate::autograd::reduce::row_dim(self, op, dim, grad, out))
    }
}
