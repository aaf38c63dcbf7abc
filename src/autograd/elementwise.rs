//! Recording the elementwise ops for backward (binary with broadcasting, tensor-scalar, unary);
//! the formulas themselves are the op table's (`src/ops/mod.rs`).

use super::record;
use crate::ops::{BinaryOp, UnaryOp};
use crate::tensor::fused_on_cpu;
use crate::{Result, Tensor};

/// Sums a broadcast gradient back to `shape` (the input's shape before broadcasting): over the
/// leading dims the input did not have, and over the dims where it had size 1.
pub(crate) fn sum_to(g: Tensor, shape: &[usize]) -> Result<Tensor> {
    if g.shape() == shape {
        return Ok(g);
    }
    let lead = g.ndim() - shape.len();
    let mut r = g;
    for _ in 0..lead {
        r = r.sum(0, false)?;
    }
    for (d, &n) in shape.iter().enumerate() {
        if n == 1 && r.shape()[d] != 1 {
            r = r.sum(d as isize, true)?;
        }
    }
    r.reshape(shape)
}

/// Records `out = a op b` (broadcasting).
pub(crate) fn binary(op: BinaryOp, a: &Tensor, b: &Tensor, out: Tensor) -> Tensor {
    let (a2, b2, o) = (a.clone(), b.clone(), out.clone());
    record(op.name(), out, &[a, b], move |g, needs| {
        let (a, b) = (&a2, &b2);
        let ga = if needs[0] {
            Some(sum_to(fused_on_cpu(|| op.grad_a(a, b, &o, g))?, a.shape())?)
        } else {
            None
        };
        let gb = if needs[1] {
            Some(sum_to(fused_on_cpu(|| op.grad_b(a, b, &o, g))?, b.shape())?)
        } else {
            None
        };
        Ok(vec![ga, gb])
    })
}

/// Records `out = x op s`, or `s op x` when `scalar_first`.
pub(crate) fn scalar(op: BinaryOp, x: &Tensor, s: f32, scalar_first: bool, out: Tensor) -> Tensor {
    let (x2, o) = (x.clone(), out.clone());
    record(op.scalar_name(), out, &[x], move |g, _| {
        Ok(vec![Some(fused_on_cpu(|| {
            op.grad_scalar(&x2, s, scalar_first, &o, g)
        })?)])
    })
}

/// Records `out = op(x)`.
pub(crate) fn unary(op: UnaryOp, x: &Tensor, out: Tensor) -> Tensor {
    let (x2, o) = (x.clone(), out.clone());
    record(op.name(), out, &[x], move |g, _| {
        Ok(vec![Some(fused_on_cpu(|| op.grad(&x2, &o, g))?)])
    })
}
