//! Backward of the CPU convolution kernel: both gradients from the same blocked unfold + gemm
//! kernels as the forward (`cpu/conv.rs`), not from a gather's scatter.

use super::record;
use crate::ops::geometry::{BnGeom, Geom, PoolGeom};
use crate::{Result, Tensor};
use std::sync::Arc;

/// The convolution with its bias (when given) as one node: the bias gradient is the output
/// gradient summed per channel, in the same backward.
pub(crate) fn conv2d_cpu(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    geo: Geom,
    out: Tensor,
) -> Tensor {
    conv2d_node(x, weight, bias, out, move |x, w, g, need| {
        Tensor::conv2d_cpu_grads(x, w, g, &geo, need)
    })
}

/// A convolution as one node over `x`, `weight` and the bias (when given). `grads(x, weight,
/// g, need)` answers `[dx, dw, db]` for the inputs `need` names (in that order); both the
/// CPU's kernel and the GPU's implicit GEMM record through here, so the node's inputs and the
/// bias's place among the gradients are set in one place.
pub(crate) fn conv2d_node<F>(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    out: Tensor,
    grads: F,
) -> Tensor
where
    F: Fn(&Tensor, &Tensor, &Tensor, [bool; 3]) -> Result<[Option<Tensor>; 3]>
        + Send
        + Sync
        + 'static,
{
    let (xs, ws) = (x.clone(), weight.clone());
    let mut inputs = vec![x, weight];
    inputs.extend(bias);
    let has_bias = bias.is_some();
    record("conv2d", out, &inputs, move |g, needs| {
        let need = [0, 1, 2].map(|i| needs.get(i) == Some(&true));
        let [dx, dw, db] = grads(&xs, &ws, g, need)?;
        let mut grads = vec![dx, dw];
        if has_bias {
            grads.push(db);
        }
        Ok(grads)
    })
}

/// Max pooling on the CPU: the gradient goes to each window's maximum, found by the forward.
pub(crate) fn max_pool2d_cpu(x: &Tensor, geo: PoolGeom, idx: Arc<Vec<u32>>, out: Tensor) -> Tensor {
    let xs = x.clone();
    record("max_pool2d", out, &[x], move |g, _| {
        Ok(vec![Some(Tensor::max_pool2d_cpu_grad(&xs, g, &idx, &geo)?)])
    })
}

/// Batch norm on the CPU as one node over `x` and the affine parameters (when given); the
/// saved per-channel mean and `sqrt(var + eps)` are the forward's. `train`: the statistics
/// were the batch's, so `dx` carries their gradient too.
pub(crate) fn batch_norm_cpu(
    x: &Tensor,
    [weight, bias]: [Option<&Tensor>; 2],
    geo: BnGeom,
    (mean, std): (Arc<Vec<f32>>, Arc<Vec<f32>>),
    train: bool,
    out: Tensor,
) -> Tensor {
    let mut inputs = vec![x];
    inputs.extend(weight);
    inputs.extend(bias);
    let (xs, ws, has_bias) = (x.clone(), weight.cloned(), bias.is_some());
    record("batch_norm", out, &inputs, move |g, needs| {
        let [dx, dw, db] =
            Tensor::batch_norm_cpu_grads(&xs, ws.as_ref(), g, &geo, (&mean, &std), train)?;
        let mut grads = vec![needs.first().copied().unwrap_or(false).then_some(dx)];
        if ws.is_some() {
            grads.push(Some(dw));
        }
        if has_bias {
            grads.push(Some(db));
        }
        Ok(grads)
    })
}
