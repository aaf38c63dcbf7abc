//! The fused path of [`Tensor::scaled_dot_product_attention`]: one kernel streams keys and
//! values once per block of queries with an online softmax (`cpu/attention.rs`,
//! `shaders/attention.wgsl`), keeps only the per-row log-sum-exp, and the backward recomputes
//! the scores block by block. Memory grows with `L + S`, never with `L × S` (except a float
//! mask's own gradient, which has the mask's size).
//!
//! It serves f32 attention on every device; other dtypes and empty shapes take the composed
//! path (matmul, mask, softmax, matmul), which also stays as the reference the tests compare
//! against (`testing::force_attention`).

use super::dispatch::attention::{self, Mask, Problem};
use super::Tensor;
use crate::autograd::elementwise::sum_to;
use crate::ops::backend::Dropout;
use crate::shape::broadcast_shapes;
use crate::{DType, Error, Result};
use std::cell::Cell;

const OP: &str = "scaled_dot_product_attention";

thread_local! {
    /// `Some(true)`: always fused where it applies; `Some(false)`: always composed.
    static FORCE: Cell<Option<bool>> = const { Cell::new(None) };
}

/// Forces the fused (`Some(true)`) or composed (`Some(false)`) attention on this thread, or
/// returns to the default (`None`: fused wherever it applies).
pub(crate) fn force(mode: Option<bool>) {
    FORCE.with(|f| f.set(mode));
}

/// One `scaled_dot_product_attention` call: its operands and options, checked by the caller
/// (dims that line up, `dropout_p` in `[0, 1)`, the scale resolved).
#[derive(Clone, Copy)]
pub(crate) struct Call<'a> {
    pub q: &'a Tensor,
    pub k: &'a Tensor,
    pub v: &'a Tensor,
    pub mask: Option<&'a Tensor>,
    pub causal: bool,
    pub dropout_p: f32,
    pub scale: f32,
}

/// The fused attention, or `None` when it does not apply (the caller composes it).
pub(crate) fn try_fused(call: Call<'_>) -> Result<Option<Tensor>> {
    let Call { q, k, v, mask, .. } = call;
    match FORCE.with(Cell::get) {
        Some(false) => return Ok(None),
        // Decided before `prepare` draws the dropout's counter range, so the composed path
        // draws the same range.
        None if !fused_by_default(q, k, v, mask) => return Ok(None),
        _ => {}
    }
    let Some(p) = prepare(call)? else {
        if FORCE.with(Cell::get) == Some(true) {
            return Err(Error::InvalidArgument {
                op: OP,
                message: format!(
                    "the fused kernels do not serve q {:?} {} on {} (f32, no empty dims, \
                     indices within u32 on a GPU); testing::force_attention(Some(\"fused\")) requires them",
                    q.shape(),
                    q.dtype(),
                    q.device()
                ),
            });
        }
        return Ok(None);
    };
    let (out, lse) = crate::no_grad_scope(|| attention::forward(&p))?;
    let float_mask = p.mask.as_ref().and_then(|m| m.grad_of.clone());
    let mut inputs = vec![q, k, v];
    if let Some(m) = &float_mask {
        inputs.push(m);
    }
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape().to_vec()).collect();
    let saved_out = out.clone();
    Ok(Some(crate::autograd::record(
        "scaled_dot_product_attention",
        out,
        &inputs,
        move |g, needs| {
            let grads = crate::no_grad_scope(|| backward(&p, &saved_out, &lse, g, needs))?;
            grads
                .into_iter()
                .zip(&shapes)
                .map(|(g, shape)| g.map(|g| sum_to(g, shape)).transpose())
                .collect()
        },
    )))
}

/// Whether the fused kernels are the default for these operands, as q's device rules by size
/// (see `dispatch::attention::fused_by_default`). Shapes that do not line up answer true and
/// are left to `prepare`'s errors.
fn fused_by_default(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>) -> bool {
    let lead = |t: &Tensor| t.shape()[..t.ndim().saturating_sub(2)].to_vec();
    let mut batch_shape = lead(q);
    for t in [Some(k), Some(v), mask].into_iter().flatten() {
        match broadcast_shapes(OP, &batch_shape, &lead(t)) {
            Ok(b) => batch_shape = b,
            Err(_) => return true,
        }
    }
    let dim = |t: &Tensor| {
        t.shape()
            .get(t.ndim().wrapping_sub(2))
            .copied()
            .unwrap_or(1)
    };
    attention::fused_by_default(q.device(), batch_shape.iter().product(), dim(q), dim(k))
}

/// The problem, or `None` where the fused kernels do not apply.
fn prepare(call: Call<'_>) -> Result<Option<Problem>> {
    let Call {
        q,
        k,
        v,
        mask,
        causal,
        dropout_p,
        scale,
    } = call;
    if [q, k, v].iter().any(|t| t.dtype() != DType::F32)
        || mask.is_some_and(|m| !matches!(m.dtype(), DType::F32 | DType::U8))
        || [k, v]
            .iter()
            .chain(mask.as_ref())
            .any(|t| t.device() != q.device())
    {
        return Ok(None);
    }
    let lead = |t: &Tensor| t.shape()[..t.ndim() - 2].to_vec();
    let mut batch_shape = broadcast_shapes(OP, &lead(q), &lead(k))?;
    batch_shape = broadcast_shapes(OP, &batch_shape, &lead(v))?;
    let (l, e) = (q.shape()[q.ndim() - 2], q.shape()[q.ndim() - 1]);
    let (s, ev) = (k.shape()[k.ndim() - 2], v.shape()[v.ndim() - 1]);
    if let Some(m) = mask {
        let ms = m.shape();
        let mlead = &ms[..ms.len().saturating_sub(2)];
        batch_shape = broadcast_shapes(OP, &batch_shape, mlead)?;
        // The mask's own last two dims must broadcast to [L, S].
        let tail = &ms[ms.len().saturating_sub(2)..];
        broadcast_shapes(OP, tail, &[l, s]).and_then(|t| {
            if t == [l, s] {
                Ok(())
            } else {
                Err(Error::ShapeMismatch {
                    op: OP,
                    lhs: ms.to_vec(),
                    rhs: vec![l, s],
                })
            }
        })?;
    }
    // Checked (debug and release alike): shapes whose products overflow are a typed error.
    let overflow = || Error::ShapeOverflow {
        shape: [batch_shape.as_slice(), &[l, s]].concat(),
    };
    let batch = batch_shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(overflow)?;
    if [batch, l, s, e, ev].contains(&0) {
        return Ok(None);
    }
    let scores = batch
        .checked_mul(l)
        .and_then(|x| x.checked_mul(s))
        .ok_or_else(overflow)?;
    if !attention::supported(q.device(), (batch, l, s, e, ev)) {
        return Ok(None);
    }
    let dropout = (dropout_p > 0.0).then(|| {
        let (seed, offset) = crate::random::take(scores);
        Dropout {
            p: dropout_p,
            seed,
            offset,
        }
    });
    // In the full shape `[batch.., rows, cols]`, as views where the device's kernels read
    // them in place, else packed.
    let views = attention::reads_views(q.device());
    let packed = |t: &Tensor, rows: usize, cols: usize| -> Result<Tensor> {
        let mut shape = batch_shape.clone();
        shape.extend([rows, cols]);
        let x = t.detach().expand(&shape)?;
        if views && (cols == 1 || x.layout().strides.last() == Some(&1)) {
            return Ok(x);
        }
        x.contiguous()
    };
    let (qp, kp, vp) = crate::no_grad_scope(|| -> Result<_> {
        Ok((packed(q, l, e)?, packed(k, s, e)?, packed(v, s, ev)?))
    })?;
    let mask = match mask {
        None => None,
        Some(m) => {
            let mut full = batch_shape.clone();
            full.extend([l, s]);
            let replace = m.dtype() == DType::U8;
            let values = crate::no_grad_scope(|| -> Result<Tensor> {
                let f = if replace {
                    let zero = Tensor::zeros(&[1], DType::F32, m.device())?;
                    let gone = Tensor::full(&[1], f64::NEG_INFINITY, DType::F32, m.device())?;
                    m.where_cond(&zero, &gone)?
                } else {
                    m.detach()
                };
                // Materialised in its own shape (pending programs and odd views resolved),
                // then broadcast by strides.
                f.contiguous()?.expand(&full)
            })?;
            Some(Mask {
                view: values,
                replace,
                grad_of: (!replace).then(|| m.clone()),
            })
        }
    };
    Ok(Some(Problem {
        batch_shape,
        spec: (batch, l, s, e, ev),
        scale,
        causal,
        dropout,
        q: qp,
        k: kp,
        v: vp,
        mask,
    }))
}

/// Gradients of the recorded inputs (q, k, v, and the float mask when it is one), each in
/// the full shape.
fn backward(
    p: &Problem,
    out: &Tensor,
    lse: &Tensor,
    g: &Tensor,
    needs: &[bool],
) -> Result<Vec<Option<Tensor>>> {
    let want_ds = needs.get(3).copied().unwrap_or(false);
    // D = rowsum(dO ∘ O), the softmax backward's per-row term: `[batch.., L]`, packed.
    let d = g.mul(out)?.sum(-1, false)?.contiguous()?;
    let (dq, dk, dv, ds) = attention::backward(p, lse, g, &d, want_ds)?;
    let mut grads = vec![
        needs[0].then_some(dq),
        needs[1].then_some(dk),
        needs[2].then_some(dv),
    ];
    if needs.len() > 3 {
        grads.push(ds.filter(|_| want_ds));
    }
    Ok(grads)
}
