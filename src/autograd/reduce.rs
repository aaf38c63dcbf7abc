//! Backward formulas of the reductions and of the softmax-family row ops (softmax, log_softmax).

use super::record;
use crate::ops::RowOp;
use crate::shape::normalize_dim;
use crate::{Result, Tensor};

/// A reduction's backward formula (its table entry's `grad`, `src/ops/reduce.rs`): the input
/// gradient from the input, the output and the output gradient (both brought back to the
/// input's rank) and the reduced dim (`None`: every element).
pub(crate) type ReduceGrad = fn(&Tensor, &Tensor, &Tensor, Option<usize>) -> Result<Tensor>;

/// Brings an output (or its gradient) of a reduction back to the input's rank (size 1 on the
/// reduced dims) so it broadcasts against the input.
fn unreduce(t: &Tensor, in_shape: &[usize], dim: Option<usize>, keepdim: bool) -> Result<Tensor> {
    match dim {
        None => t.reshape(&vec![1; in_shape.len()]),
        Some(d) if !keepdim => t.unsqueeze(d as isize),
        Some(_) => Ok(t.clone()),
    }
}

/// Records `out = x.<name>(dim, keepdim)` (`dim: None` for the `_all` forms) with its
/// backward formula `grad`.
pub(crate) fn reduce(
    name: &'static str,
    grad: ReduceGrad,
    x: &Tensor,
    dim: Option<isize>,
    keepdim: bool,
    out: Tensor,
) -> Tensor {
    let (x2, o) = (x.clone(), out.clone());
    record(name, out, &[x], move |g, _| {
        let x = &x2;
        let shape = x.shape();
        let d = match dim {
            Some(d) if x.ndim() > 0 => Some(normalize_dim(name, d, x.ndim())?),
            _ => None,
        };
        let g = unreduce(g, shape, d, keepdim)?;
        let gx = grad(x, &unreduce(&o, shape, d, keepdim)?, &g, d)?;
        // Broadcasting can leave a 0-d input's gradient with size-1 dims; reshape only then
        // (reshaping an expanded view would copy it).
        let gx = if gx.shape() == shape {
            gx
        } else {
            gx.reshape(shape)?
        };
        Ok(vec![Some(gx)])
    })
}

/// The gradient of max / min: it goes to the elements equal to the result, and ties share it
/// equally (PyTorch's rule for `amax`/`amin`), so it sums to the output gradient either way.
pub(crate) fn extreme_grad(x: &Tensor, o: &Tensor, g: &Tensor, d: Option<usize>) -> Result<Tensor> {
    let hit = x.eq(o)?;
    let ones = hit.where_cond(
        &Tensor::full(&[], 1.0, x.dtype(), x.device())?,
        &Tensor::full(&[], 0.0, x.dtype(), x.device())?,
    )?;
    let count = match d {
        Some(d) => ones.sum(d as isize, true)?,
        None => ones.sum_all()?.reshape(&vec![1; x.ndim()])?,
    };
    ones.mul(&g.div(&count)?)
}

/// A softmax-family row op's backward formula (its table entry's `grad`, `src/ops/rows.rs`):
/// the input gradient from the output `y`, its gradient `g` and the dim.
pub(crate) type RowGrad = fn(&Tensor, &Tensor, isize) -> Result<Tensor>;

/// Records `out = x.<row>(dim)` (softmax, log_softmax) with its backward formula `grad`.
pub(crate) fn row_dim(x: &Tensor, row: RowOp, dim: isize, grad: RowGrad, out: Tensor) -> Tensor {
    let o = out.clone();
    record(row.name(), out, &[x], move |g, _| {
        Ok(vec![Some(grad(&o, g, dim)?)])
    })
}
