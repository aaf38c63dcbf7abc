//! Optimizer steps a backend runs fused: the tensor layer's face of them, so `src/optim` asks
//! for a step without knowing which backend has one.

use super::Tensor;
use crate::ops::geometry::AdamStep;
use crate::{DType, Result};

/// The packed f32 host data of `t`'s view, when it is a contiguous f32 CPU tensor.
fn packed_host_f32(t: &Tensor) -> Option<&[f32]> {
    if t.dtype() != DType::F32 || !t.is_contiguous() || !t.device().is_cpu() {
        return None;
    }
    let at = t.layout().offset;
    t.host_f32("adam").ok()?.get(at..at + t.numel())
}

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
        if !self.device().is_cpu() {
            return Ok(None);
        }
        // Weight gradients often arrive as transposed views of a matmul: pack them once.
        let grad = if grad.is_contiguous() {
            grad.clone()
        } else {
            grad.contiguous()?
        };
        let (Some(ps), Some(gs)) = (packed_host_f32(self), packed_host_f32(&grad)) else {
            return Ok(None);
        };
        let old = match moments {
            Some((m, v)) => match (packed_host_f32(m), packed_host_f32(v)) {
                (Some(m), Some(v)) if m.len() == ps.len() && v.len() == ps.len() => Some((m, v)),
                _ => return Ok(None),
            },
            None => None,
        };
        if gs.len() != ps.len() {
            return Ok(None);
        }
        let (np, nm, nv) = crate::cpu::adam::adam_step(ps, gs, old, hyper)?;
        let (shape, cpu) = (self.shape(), self.device());
        Ok(Some((
            Tensor::from_vec(np, shape, cpu)?,
            Tensor::from_vec(nm, shape, cpu)?,
            Tensor::from_vec(nv, shape, cpu)?,
        )))
    }
}
