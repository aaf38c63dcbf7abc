//! Gradients of the ops that take ids. Each backward is itself a device op (index_add,
//! scatter_add, gather, index_select), so a training step that looks up embeddings or gathers
//! never reads ids back.

use super::record;
use crate::shape::normalize_dim;
use crate::{DType, Tensor};

/// Records `out = x.index_select(dim, ids)`: the gradient rows of repeated ids add up
/// (`zeros.index_add(dim, ids, g)`).
pub(crate) fn index_select(x: &Tensor, dim: isize, ids: &Tensor, out: Tensor) -> Tensor {
    let (shape, ids2) = (x.shape().to_vec(), ids.clone());
    record("index_select", out, &[x, ids], move |g, needs| {
        if !needs[0] {
            return Ok(vec![None, None]);
        }
        let d = normalize_dim("index_select", dim, shape.len())?;
        let zeros = Tensor::zeros(&shape, DType::F32, g.device())?;
        let gx = zeros.index_add_untracked(d as isize, &ids2, &g.to_dtype(DType::F32)?)?;
        Ok(vec![Some(gx), None])
    })
}

/// Records `out = x.gather(dim, index)`: the gradient scatter-adds back.
pub(crate) fn gather(x: &Tensor, dim: isize, index: &Tensor, out: Tensor) -> Tensor {
    let (shape, idx) = (x.shape().to_vec(), index.clone());
    record("gather", out, &[x, index], move |g, needs| {
        if !needs[0] {
            return Ok(vec![None, None]);
        }
        let zeros = Tensor::zeros(&shape, DType::F32, g.device())?;
        Ok(vec![Some(zeros.scatter_add(dim, &idx, g)?), None])
    })
}

/// Records `out = x.scatter_add(d, index, src)`: `x` gets the gradient as is, `src` the
/// gradient gathered at the index (zeros where `src` is larger than the index).
pub(crate) fn scatter_add(
    x: &Tensor,
    d: usize,
    index: &Tensor,
    src: &Tensor,
    out: Tensor,
) -> Tensor {
    let (idx, src_shape) = (index.clone(), src.shape().to_vec());
    record("scatter_add", out, &[x, index, src], move |g, needs| {
        let gs = if needs[2] {
            let mut picked = g.gather(d as isize, &idx)?;
            // Pad back to src's shape, one dim at a time.
            for (k, &want) in src_shape.iter().enumerate() {
                let have = picked.shape()[k];
                if have < want {
                    let mut pad = picked.shape().to_vec();
                    pad[k] = want - have;
                    let zeros = Tensor::zeros(&pad, g.dtype(), g.device())?;
                    picked = Tensor::cat(&[&picked, &zeros], k as isize)?;
                }
            }
            Some(picked)
        } else {
            None
        };
        Ok(vec![needs[0].then(|| g.clone()), None, gs])
    })
}

/// Records `out = x.index_add(dim, ids, src)`: `x` gets the gradient as is, `src` the rows
/// the ids picked.
pub(crate) fn index_add(x: &Tensor, dim: isize, ids: &Tensor, src: &Tensor, out: Tensor) -> Tensor {
    let ids2 = ids.clone();
    record("index_add", out, &[x, ids, src], move |g, needs| {
        let gs = if needs[2] {
            Some(g.index_select(dim, &ids2)?)
        } else {
            None
        };
        Ok(vec![needs[0].then(|| g.clone()), None, gs])
    })
}
