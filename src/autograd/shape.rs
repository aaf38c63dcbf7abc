//! Backward formulas of views, joins, selections and device transfers: they move gradients
//! around without arithmetic (except `expand`, whose gradient sums the repeated elements).

use super::elementwise::sum_to;
use super::record;
use crate::shape::normalize_dim;
use crate::{DType, Device, Tensor};

/// A view op, with what its backward needs to know.
#[derive(Clone, Debug)]
pub(crate) enum View {
    /// reshape, squeeze, unsqueeze, flatten: same elements, other shape.
    Reshape,
    Transpose(isize, isize),
    Permute(Vec<isize>),
    Narrow {
        dim: isize,
        start: usize,
    },
    Expand,
    Contiguous,
}

/// Records a view (or copy) `out` of `x`.
pub(crate) fn view(op: &'static str, kind: View, x: &Tensor, out: Tensor) -> Tensor {
    let x2 = x.clone();
    record(op, out, &[x], move |g, _| {
        let shape = x2.shape();
        let gx = match &kind {
            View::Reshape => g.reshape(shape)?,
            View::Transpose(a, b) => g.transpose(*a, *b)?,
            View::Permute(dims) => {
                let nd = dims.len();
                let mut inv = vec![0isize; nd];
                for (i, &d) in dims.iter().enumerate() {
                    inv[normalize_dim("permute", d, nd)?] = i as isize;
                }
                g.permute(&inv)?
            }
            View::Narrow { dim, start } => {
                let d = normalize_dim("narrow", *dim, shape.len())?;
                let after = shape[d] - start - g.shape()[d];
                let mut parts = Vec::new();
                for n in [*start, after] {
                    let mut s = shape.to_vec();
                    s[d] = n;
                    parts.push(Tensor::zeros(&s, g.dtype(), g.device())?);
                }
                Tensor::cat(&[&parts[0], g, &parts[1]], d as isize)?
            }
            View::Expand => sum_to(g.clone(), shape)?,
            View::Contiguous => g.clone(),
        };
        Ok(vec![Some(gx)])
    })
}

/// Records `out = Tensor::cat(tensors, dim)`: each input gets its slice of the gradient.
pub(crate) fn cat(tensors: &[&Tensor], dim: isize, out: Tensor) -> Tensor {
    let sizes: Vec<usize> = tensors
        .iter()
        .map(|t| {
            t.shape()
                .get(normalize_dim("cat", dim, t.ndim()).unwrap_or(0))
                .copied()
        })
        .map(|s| s.unwrap_or(0))
        .collect();
    record("cat", out, tensors, move |g, needs| {
        let d = normalize_dim("cat", dim, g.ndim())?;
        let mut start = 0;
        let mut grads = Vec::with_capacity(sizes.len());
        for (&n, &need) in sizes.iter().zip(needs) {
            grads.push(if need {
                Some(g.narrow(d as isize, start, n)?)
            } else {
                None
            });
            start += n;
        }
        Ok(grads)
    })
}

/// Records `out = mask.where_cond(on_true, on_false)`: each branch gets the gradient where it
/// was selected (summed back over broadcasting); the mask gets none.
pub(crate) fn where_cond(
    mask: &Tensor,
    on_true: &Tensor,
    on_false: &Tensor,
    out: Tensor,
) -> Tensor {
    let (m, t, f) = (mask.clone(), on_true.clone(), on_false.clone());
    record(
        "where_cond",
        out,
        &[mask, on_true, on_false],
        move |g, needs| {
            let zero = Tensor::full(&[], 0.0, g.dtype(), g.device())?;
            let gt = if needs[1] {
                Some(sum_to(m.where_cond(g, &zero)?, t.shape())?)
            } else {
                None
            };
            let gf = if needs[2] {
                Some(sum_to(m.where_cond(&zero, g)?, f.shape())?)
            } else {
                None
            };
            Ok(vec![None, gt, gf])
        },
    )
}

/// Records `out = x.clamp(min, max)`: the gradient passes where `min <= x <= max` (PyTorch).
pub(crate) fn clamp(x: &Tensor, min: f32, max: f32, out: Tensor) -> Tensor {
    let x2 = x.clone();
    record("clamp", out, &[x], move |g, _| {
        let zero = Tensor::full(&[], 0.0, g.dtype(), g.device())?;
        let inner = x2.le_scalar(max)?.where_cond(g, &zero)?;
        Ok(vec![Some(x2.ge_scalar(min)?.where_cond(&inner, &zero)?)])
    })
}

/// Records `out = x.to_dtype(..)`: the gradient is converted back to `x`'s dtype (float to
/// float only; other conversions carry no gradient).
pub(crate) fn to_dtype(x: &Tensor, out: Tensor) -> Tensor {
    let src = x.dtype();
    if !matches!(src, DType::F32 | DType::F16) {
        return out;
    }
    record("to_dtype", out, &[x], move |g, _| {
        Ok(vec![Some(g.to_dtype(src)?)])
    })
}

/// Records `out = x.to(device)`: the gradient goes back to `x`'s device.
pub(crate) fn to(x: &Tensor, out: Tensor) -> Tensor {
    let src: Device = x.device().clone();
    record("to", out, &[x], move |g, _| Ok(vec![Some(g.to(&src)?)]))
}
