//! Backward of the CPU convolution kernel: both gradients from the same blocked unfold + gemm
//! kernels as the forward (`cpu/conv.rs`), not from a gather's scatter.

use super::record;
use crate::cpu::conv::Geom;
use crate::cpu::pool::PoolGeom;
use crate::Tensor;
use std::sync::Arc;

pub(crate) fn conv2d_cpu(x: &Tensor, weight: &Tensor, geo: Geom, out: Tensor) -> Tensor {
    let (xs, ws) = (x.clone(), weight.clone());
    record("conv2d", out, &[x, weight], move |g, needs| {
        let need = [needs.first() == Some(&true), needs.get(1) == Some(&true)];
        let [dx, dw] = Tensor::conv2d_cpu_grads(&xs, &ws, g, &geo, need)?;
        Ok(vec![dx, dw])
    })
}

/// Max pooling on the CPU: the gradient goes to each window's maximum, found by the forward.
pub(crate) fn max_pool2d_cpu(x: &Tensor, geo: PoolGeom, idx: Arc<Vec<u32>>, out: Tensor) -> Tensor {
    let xs = x.clone();
    record("max_pool2d", out, &[x], move |g, _| {
        Ok(vec![Some(Tensor::max_pool2d_cpu_grad(&xs, g, &idx, &geo)?)])
    })
}
