//! Backward of the CPU convolution kernel: both gradients from the same blocked unfold + gemm
//! kernels as the forward (`cpu/conv.rs`), not from a gather's scatter.

use super::record;
use crate::cpu::conv::Geom;
use crate::Tensor;

pub(crate) fn conv2d_cpu(x: &Tensor, weight: &Tensor, geo: Geom, out: Tensor) -> Tensor {
    let (xs, ws) = (x.clone(), weight.clone());
    record("conv2d", out, &[x, weight], move |g, needs| {
        let need = [needs.first() == Some(&true), needs.get(1) == Some(&true)];
        let [dx, dw] = Tensor::conv2d_cpu_grads(&xs, &ws, g, &geo, need)?;
        Ok(vec![dx, dw])
    })
}
