//! Optimizer steps a backend runs fused: the tensor layer's face of them, so `src/optim` asks
//! for a step without knowing which backend has one (`BackendStorage::adam_step`).

use super::dispatch;
use super::Tensor;
use crate::ops::geometry::AdamStep;
use crate::Result;

impl Tensor {
    /// One Adam update of parameter `self` with gradient `grad` and the previous moments
    /// (`None` on the first step) in one pass: `Some((parameter, m, v))` where the backend has a
    /// fused step for these tensors (packed f32 on the CPU), `None` where the caller must run
    /// the op-by-op formula (on a GPU those ops fuse into one kernel anyway). Same bits as the
    /// op-by-op formula.
    pub(crate) fn adam_step_fused(
        &self,
        grad: &Tensor,
        moments: Option<(&Tensor, &Tensor)>,
        hyper: &AdamStep,
    ) -> Result<Option<(Tensor, Tensor, Tensor)>> {
        let shape = self.shape();
        Ok(
            dispatch::adam_step(self, grad, moments, hyper)?.map(|[p, m, v]| {
                (
                    self.derived(p, shape),
                    self.derived(m, shape),
                    self.derived(v, shape),
                )
            }),
        )
    }
}
