//! Backward formulas of the reductions and of softmax / log_softmax.

use super::record;
use crate::shape::normalize_dim;
use crate::{Result, Tensor};

/// Which reduction a node came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reduction {
    Sum,
    /// A sum reading NaN as 0: NaN elements get no gradient.
    NanSum,
    Mean,
    Prod,
    Max,
    Min,
}

impl Reduction {
    fn name(self) -> &'static str {
        match self {
            Reduction::Sum => "sum",
            Reduction::NanSum => "nansum",
            Reduction::Mean => "mean",
            Reduction::Prod => "prod",
            Reduction::Max => "max",
            Reduction::Min => "min",
        }
    }
}

/// Brings an output (or its gradient) of a reduction back to the input's rank (size 1 on the
/// reduced dims) so it broadcasts against the input.
fn unreduce(t: &Tensor, in_shape: &[usize], dim: Option<usize>, keepdim: bool) -> Result<Tensor> {
    match dim {
        None => t.reshape(&vec![1; in_shape.len()]),
        Some(d) if !keepdim => t.unsqueeze(d as isize),
        Some(_) => Ok(t.clone()),
    }
}

/// Records `out = x.<kind>(dim, keepdim)` (`dim: None` for the `_all` forms).
///
/// max/min send the gradient to the elements equal to the result; ties share it equally
/// (PyTorch's rule for `amax`/`amin`), so the gradient sums to the output gradient either way.
/// prod uses `out / x`, so an input containing 0 gets a NaN/inf gradient (documented limit).
pub(crate) fn reduce(
    kind: Reduction,
    x: &Tensor,
    dim: Option<isize>,
    keepdim: bool,
    out: Tensor,
) -> Tensor {
    let (x2, o) = (x.clone(), out.clone());
    record(kind.name(), out, &[x], move |g, _| {
        let x = &x2;
        let shape = x.shape();
        let d = match dim {
            Some(d) if x.ndim() > 0 => Some(normalize_dim(kind.name(), d, x.ndim())?),
            _ => None,
        };
        let g = unreduce(g, shape, d, keepdim)?;
        let gx = match kind {
            Reduction::Sum => g.expand(shape)?,
            Reduction::NanSum => x.ne(x)?.where_cond(
                &Tensor::full(&[], 0.0, x.dtype(), x.device())?,
                &g.expand(shape)?,
            )?,
            Reduction::Mean => {
                let n = match d {
                    Some(d) => shape[d],
                    None => x.numel(),
                };
                g.div_scalar(n as f32)?.expand(shape)?
            }
            Reduction::Prod => g.mul(&unreduce(&o, shape, d, keepdim)?)?.div(x)?,
            Reduction::Max | Reduction::Min => {
                let hit = x.eq(&unreduce(&o, shape, d, keepdim)?)?;
                let ones = hit.where_cond(
                    &Tensor::full(&[], 1.0, x.dtype(), x.device())?,
                    &Tensor::full(&[], 0.0, x.dtype(), x.device())?,
                )?;
                let count = match d {
                    Some(d) => ones.sum(d as isize, true)?,
                    None => ones.sum_all()?.reshape(&vec![1; shape.len()])?,
                };
                ones.mul(&g.div(&count)?)?
            }
        };
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

/// Records `out = x.softmax(dim)` (or `log_softmax` when `log`).
pub(crate) fn softmax(x: &Tensor, dim: isize, log: bool, out: Tensor) -> Tensor {
    let o = out.clone();
    let name = if log { "log_softmax" } else { "softmax" };
    record(name, out, &[x], move |g, _| {
        let gx = if log {
            // y = log_softmax(x): dx = g - softmax(x) * sum(g)
            g.sub(&o.exp()?.mul(&g.sum(dim, true)?)?)?
        } else {
            // y = softmax(x): dx = y * (g - sum(g * y))
            o.mul(&g.sub(&g.mul(&o)?.sum(dim, true)?)?)?
        };
        Ok(vec![Some(gx)])
    })
}
