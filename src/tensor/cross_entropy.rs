//! The fused cross-entropy kernels behind `nn::cross_entropy`: per-row statistics
//! `[loss, valid, lse]` and the logits' gradient, each one call of the backend interface
//! (`BackendStorage::cross_entropy`). Targets stay on their device: the CPU checks them before
//! its kernel runs, a GPU kernel reports a bad one at the next synchronizing call.

use super::dispatch;
use super::Tensor;
use crate::ops::backend::CeRows;
use crate::ops::geometry::CeSpec;
use crate::{DType, Result};

const OP: &str = "cross_entropy";

impl Tensor {
    /// `[3, n]` statistics (loss, valid, log-sum-exp per row) of `self`, packed f32 logits
    /// `[n, c]`, against `targets` `[n]`. Untracked.
    pub(crate) fn ce_rows(&self, targets: &Tensor, spec: &CeSpec) -> Result<Tensor> {
        let n = self.shape()[0];
        if n == 0 {
            return Tensor::zeros(&[3, 0], DType::F32, self.device());
        }
        let ce = self.ce_desc(spec);
        let storage =
            dispatch::cross_entropy(self, targets, &ce)?.ok_or_else(|| self.unsupported(OP))?;
        Ok(self.derived(storage, &[3, n]))
    }

    /// The gradient `[n, c]` of the logits `self` given [`ce_rows`](Self::ce_rows)' `stats` and
    /// the per-row upstream gradient `g` `[n]` (f32).
    pub(crate) fn ce_grad(
        &self,
        targets: &Tensor,
        spec: &CeSpec,
        stats: &Tensor,
        g: &Tensor,
    ) -> Result<Tensor> {
        let (n, c) = (self.shape()[0], self.shape()[1]);
        if n == 0 || c == 0 {
            return Tensor::zeros(&[n, c], DType::F32, self.device());
        }
        let stats = stats.contiguous()?;
        let g = g.contiguous()?;
        let ce = self.ce_desc(spec);
        let storage = dispatch::cross_entropy_backward(self, targets, &ce, &stats, &g)?
            .ok_or_else(|| self.unsupported(OP))?;
        Ok(self.derived(storage, &[n, c]))
    }

    /// The kernels' description of the packed logits `self` `[n, c]`.
    fn ce_desc<'a>(&self, spec: &'a CeSpec) -> CeRows<'a> {
        CeRows {
            n: self.shape()[0],
            c: self.shape()[1],
            offset: self.layout().offset,
            spec,
        }
    }
}
