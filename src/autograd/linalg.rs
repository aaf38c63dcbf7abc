//! Backward of `matmul` with `torch.matmul`'s shape rules (1-D operands, broadcast batches).

use super::elementwise::sum_to;
use super::record;
use crate::{Result, Tensor};

/// Records `out = a.matmul(b)`. With `A [.., M, K]`, `B [.., K, N]` and the output gradient
/// `G [.., M, N]`: `dA = G Bᵀ`, `dB = Aᵀ G`, summed over broadcast batch dims. A 1-D operand is
/// handled as the row `[1, K]` (lhs) or column `[K, 1]` (rhs) that matmul treats it as.
pub(crate) fn matmul(a: &Tensor, b: &Tensor, out: Tensor) -> Tensor {
    let (a2, b2) = (a.clone(), b.clone());
    record("matmul", out, &[a, b], move |g, needs| {
        matmul_grads(&a2, &b2, g, needs)
    })
}

/// Records `out = a.matmul(b) + bias` (a linear layer's one-pass product, `Tensor::linear`):
/// matmul's gradients for `a` and `b`, and for the bias the output gradient summed to its
/// shape, as the add's backward would.
pub(crate) fn matmul_bias(a: &Tensor, b: &Tensor, bias: &Tensor, out: Tensor) -> Tensor {
    let (a2, b2, shape) = (a.clone(), b.clone(), bias.shape().to_vec());
    record("linear", out, &[a, b, bias], move |g, needs| {
        let mut grads = matmul_grads(&a2, &b2, g, &needs[..2])?;
        grads.push(if needs[2] {
            Some(sum_to(g.clone(), &shape)?)
        } else {
            None
        });
        Ok(grads)
    })
}

/// matmul's input gradients (`needs` says which are wanted).
fn matmul_grads(
    a2: &Tensor,
    b2: &Tensor,
    g: &Tensor,
    needs: &[bool],
) -> Result<Vec<Option<Tensor>>> {
    let a_vec = a2.ndim() == 1;
    let b_vec = b2.ndim() == 1;
    let a = if a_vec { a2.unsqueeze(0)? } else { a2.clone() };
    let b = if b_vec { b2.unsqueeze(-1)? } else { b2.clone() };
    // The output gradient with the dims matmul dropped for 1-D operands put back.
    let mut g = g.clone();
    if a_vec {
        g = g.unsqueeze(if b_vec { 0 } else { -2 })?;
    }
    if b_vec {
        g = g.unsqueeze(-1)?;
    }
    let ga = if needs[0] {
        let d = g.matmul(&b.transpose(-2, -1)?)?;
        Some(reduce_batch(d, a.shape())?.reshape(a2.shape())?)
    } else {
        None
    };
    let gb = if needs[1] && b.ndim() == 2 && a.ndim() > 2 && a.shape()[a.ndim() - 1] > 0 {
        // One matrix shared by a batch (a linear layer's weight): Aᵀ G over the batch
        // read as more rows, one product with the batch summed inside it, instead of a
        // `[..batch, K, N]` stack of products reduced afterwards.
        let k = a.shape()[a.ndim() - 1];
        let n = g.shape()[g.ndim() - 1];
        let rows = a.numel() / k.max(1);
        let a_rows = a.reshape(&[rows, k])?;
        let g_rows = g.reshape(&[rows, n])?;
        Some(same_shape(weight_grad(&b, &a_rows, &g_rows)?, b2.shape())?)
    } else if needs[1] && b.ndim() == 2 && a.ndim() == 2 {
        Some(same_shape(weight_grad(&b, &a, &g)?, b2.shape())?)
    } else if needs[1] {
        let d = a.transpose(-2, -1)?.matmul(&g)?;
        Some(reduce_batch(d, b.shape())?.reshape(b2.shape())?)
    } else {
        None
    };
    Ok(vec![ga, gb])
}

/// `Aᵀ G` for a 2-D rhs `b`. When `b` is a transposed view (a linear layer's `weight.t()`),
/// it is computed as `(Gᵀ A)ᵀ`: the same sums of the same products, and the gradient that
/// reaches the weight through the transpose is then packed, as PyTorch's is, so the optimizer
/// reads it without a strided copy of its own (on the CPU that copy was 7 % of an MLP's Adam
/// step).
fn weight_grad(b: &Tensor, a: &Tensor, g: &Tensor) -> Result<Tensor> {
    if !b.is_contiguous() && b.t()?.is_contiguous() {
        return g.t()?.matmul(a)?.t();
    }
    a.t()?.matmul(g)
}

/// `t` reshaped to `shape`, or kept as it is (a transposed view stays one) when it has it.
fn same_shape(t: Tensor, shape: &[usize]) -> Result<Tensor> {
    if t.shape() == shape {
        Ok(t)
    } else {
        t.reshape(shape)
    }
}

/// Sums the batch dims of a gradient back to an operand's (possibly fewer or size-1) batch dims.
fn reduce_batch(d: Tensor, shape: &[usize]) -> Result<Tensor> {
    sum_to(d, shape)
}
