//! The CPU's own convolution (`cpu/conv.rs`): blocked unfold + gemm forward and backward, in
//! place of the index-map gather the other devices take. Only f32 tensors on the CPU come here.

use super::Tensor;
use crate::cpu::conv::{self, Geom};
use crate::cpu::pool::{self, PoolGeom};
use crate::storage::CpuStorage;
use crate::{DType, Result};
use std::sync::Arc;

impl Tensor {
    /// Whether `conv2d` of `self` (4-d) and `weight` runs the CPU kernel.
    pub(super) fn conv2d_on_cpu(&self, weight: &Tensor) -> bool {
        self.is_cpu()
            && weight.is_cpu()
            && self.dtype() == DType::F32
            && weight.dtype() == DType::F32
            && self.numel() > 0
            && weight.numel() > 0
    }

    /// `conv2d` of the 4-d `self` without bias on the CPU, recorded for autograd.
    pub(super) fn conv2d_cpu(&self, weight: &Tensor, geo: Geom) -> Result<Tensor> {
        let op = "conv2d";
        let (x, w) = (self.contiguous()?, weight.contiguous()?);
        let y = conv::conv2d(x.host_f32(op)?, w.host_f32(op)?, &geo)?;
        let out = self.derived(CpuStorage::F32(y), &[geo.n, geo.o, geo.out[0], geo.out[1]]);
        Ok(crate::autograd::conv::conv2d_cpu(self, weight, geo, out))
    }

    /// The gradients of [`Tensor::conv2d_cpu`] for the inputs in `need` (`[x, weight]`), from
    /// the output gradient `g`.
    pub(crate) fn conv2d_cpu_grads(
        x: &Tensor,
        weight: &Tensor,
        g: &Tensor,
        geo: &Geom,
        need: [bool; 2],
    ) -> Result<[Option<Tensor>; 2]> {
        let op = "conv2d backward";
        let g = g.contiguous()?;
        let gy = g.host_f32(op)?;
        let dx = if need[0] {
            let w = weight.contiguous()?;
            let v = conv::conv2d_input_grad(gy, w.host_f32(op)?, geo)?;
            Some(x.derived(CpuStorage::F32(v), x.shape()))
        } else {
            None
        };
        let dw = if need[1] {
            let xc = x.contiguous()?;
            let v = conv::conv2d_weight_grad(xc.host_f32(op)?, gy, geo)?;
            Some(weight.derived(CpuStorage::F32(v), weight.shape()))
        } else {
            None
        };
        Ok([dx, dw])
    }

    /// Max pooling of the 4-d f32 CPU `self`: the maxima (recorded for autograd) and their
    /// plane offsets as a u32 tensor, both `[n, c, oh, ow]`.
    pub(super) fn max_pool2d_cpu(&self, geo: PoolGeom) -> Result<(Tensor, Tensor)> {
        let x = self.contiguous()?;
        let (v, idx) = pool::max_pool2d(x.host_f32("max_pool2d")?, &geo)?;
        let shape = [self.shape()[0], self.shape()[1], geo.out[0], geo.out[1]];
        let values = self.derived(CpuStorage::F32(v), &shape);
        let idx = Arc::new(idx);
        let indices = Tensor::from_parts(
            CpuStorage::U32(idx.to_vec()),
            &shape,
            DType::U32,
            self.device().clone(),
        );
        let values = crate::autograd::conv::max_pool2d_cpu(self, geo, idx, values);
        Ok((values, indices))
    }

    /// The input gradient of [`Tensor::max_pool2d_cpu`] from the output gradient `g`.
    pub(crate) fn max_pool2d_cpu_grad(
        x: &Tensor,
        g: &Tensor,
        idx: &[u32],
        geo: &PoolGeom,
    ) -> Result<Tensor> {
        let g = g.contiguous()?;
        let dx = pool::max_pool2d_backward(g.host_f32("max_pool2d backward")?, idx, geo)?;
        Ok(x.derived(CpuStorage::F32(dx), x.shape()))
    }
}
