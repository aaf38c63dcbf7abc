//! The fused cross-entropy kernels behind `nn::cross_entropy`: per-row statistics
//! `[loss, valid, lse]` and the logits' gradient, on the CPU (`cpu/cross_entropy.rs`) or a GPU
//! (`gpu/rows.rs`). Targets stay on their device: the CPU checks them as it goes, a
//! GPU kernel reports a bad one at the next synchronizing call.

use super::dispatch::device_ids;
use super::Data;
use super::Tensor;
use crate::cpu::cross_entropy::{self as ce, CeSpec};
use crate::gpu::rows::CeWords;
use crate::storage::{CpuStorage, Storage};
use crate::{DType, Error, Result};

const OP: &str = "cross_entropy";

impl Tensor {
    /// `[3, n]` statistics (loss, valid, log-sum-exp per row) of `self`, packed f32 logits
    /// `[n, c]`, against `targets` `[n]`. Untracked.
    pub(crate) fn ce_rows(&self, targets: &Tensor, spec: &CeSpec) -> Result<Tensor> {
        let (n, c) = (self.shape()[0], self.shape()[1]);
        if n == 0 {
            return Tensor::zeros(&[3, 0], DType::F32, self.device());
        }
        let storage = match self.data()? {
            Data::Cpu(_) => {
                let t = host_targets(targets, c, spec)?;
                Storage::from(CpuStorage::F32(ce::rows(
                    self.host_f32(OP)?,
                    n,
                    c,
                    &t,
                    spec,
                )))
            }
            Data::Gpu(b) => {
                let ids = device_ids(targets)?;
                let words = words(targets, spec);
                Storage::from(b.device.cross_entropy_rows(
                    OP,
                    (b, self.layout().offset),
                    (n, c),
                    ids.parts()?,
                    &words,
                )?)
            }
        };
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
        let storage = match self.data()? {
            Data::Cpu(_) => {
                let t = host_targets(targets, c, spec)?;
                Storage::from(CpuStorage::F32(ce::backward(
                    self.host_f32(OP)?,
                    (n, c),
                    &t,
                    spec,
                    stats.host_f32(OP)?,
                    g.host_f32(OP)?,
                )))
            }
            Data::Gpu(b) => {
                let ids = device_ids(targets)?;
                let (Some(sb), Some(gb)) = (stats.gpu_data()?, g.gpu_data()?) else {
                    return Err(Error::InvalidArgument {
                        op: OP,
                        message: "statistics on another device than the logits".into(),
                    });
                };
                if stats.layout().offset != 0 {
                    return Err(Error::InvalidArgument {
                        op: OP,
                        message: "cross-entropy statistics must start their buffer".into(),
                    });
                }
                Storage::from(b.device.cross_entropy_backward(
                    OP,
                    (b, self.layout().offset),
                    (n, c),
                    ids.parts()?,
                    &words(targets, spec),
                    sb,
                    (gb, g.layout().offset),
                )?)
            }
        };
        Ok(self.derived(storage, &[n, c]))
    }
}

/// The ignored class as the targets' bits, and the smoothing, for the kernels.
fn words(targets: &Tensor, spec: &CeSpec) -> CeWords {
    let ignore = spec.ignore.and_then(|i| {
        if targets.dtype() == DType::I32 {
            i32::try_from(i).ok().map(|v| v as u32)
        } else {
            u32::try_from(i).ok()
        }
    });
    CeWords {
        ignore,
        smoothing: spec.smoothing,
    }
}

/// The targets on the host, each a class in `0..c` or the ignored one (the CPU path).
fn host_targets(targets: &Tensor, c: usize, spec: &CeSpec) -> Result<Vec<i64>> {
    let t: Vec<i64> = match targets.dtype() {
        DType::I32 => targets
            .to_vec::<i32>()?
            .into_iter()
            .map(i64::from)
            .collect(),
        _ => targets
            .to_vec::<u32>()?
            .into_iter()
            .map(i64::from)
            .collect(),
    };
    if let Some(&bad) = t
        .iter()
        .find(|&&id| spec.ignore != Some(id) && (id < 0 || id as usize >= c))
    {
        return Err(Error::IndexOutOfRange {
            op: OP,
            index: bad,
            bound: c,
        });
    }
    Ok(t)
}
