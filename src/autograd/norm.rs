//! Backward of the norms (`Tensor::layer_norm`, `Tensor::rms_norm`: the norm family of the
//! row-op table), by the backend's own kernel where it has one (the CPU's, for f32 tensors),
//! else composed of existing ops (each a kernel of its own; the forward is the fused one).
//! With `x̂ = (x - mean) * rstd` and `ĝ = g * weight`:
//! `dx = rstd * (ĝ - mean(ĝ) - x̂ * mean(ĝ * x̂))`, `dweight = Σ_rows g * x̂`,
//! `dbias = Σ_rows g` (PyTorch's formulas). A norm that is not centred (rms_norm) has mean 0
//! and no `mean(ĝ)` term.

use super::record;
use crate::ops::RowOp;
use crate::Tensor;

pub(crate) fn norm(
    row: RowOp,
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f32,
    out: Tensor,
) -> Tensor {
    let mut inputs = vec![x];
    inputs.extend(weight);
    inputs.extend(bias);
    let (xs, w) = (x.clone(), weight.cloned());
    let has_bias = bias.is_some();
    record(row.name(), out, &inputs, move |g, _| {
        // Where the backend has a kernel (the CPU), it computes every gradient in one call.
        let want_wb = w.is_some() || has_bias;
        if let Some((dx, wb)) = Tensor::norm_kernel_grads(row, &xs, w.as_ref(), g, eps, want_wb)? {
            let mut grads = vec![Some(dx)];
            if let Some((dw, db)) = wb {
                if w.is_some() {
                    grads.push(Some(dw));
                }
                if has_bias {
                    grads.push(Some(db));
                }
            }
            return Ok(grads);
        }
        let len = *xs.shape().last().unwrap_or(&1);
        let rows = xs.numel() / len.max(1);
        // x̂ by the forward kernel itself (no weight, no bias); rstd from the row variance
        // about the centre.
        let (xhat, centered) = if row.centered() {
            (
                xs.layer_norm(None, None, eps)?,
                xs.sub(&xs.mean(-1, true)?)?,
            )
        } else {
            (xs.rms_norm(None, eps)?, xs.clone())
        };
        let std = centered
            .mul(&centered)?
            .mean(-1, true)?
            .add_scalar(eps)?
            .sqrt()?;
        let gh = match &w {
            Some(w) => g.mul(w)?,
            None => g.clone(),
        };
        let gh_c = if row.centered() {
            gh.sub(&gh.mean(-1, true)?)?
        } else {
            gh.clone()
        };
        let dx = gh_c
            .sub(&xhat.mul(&gh.mul(&xhat)?.mean(-1, true)?)?)?
            .div(&std)?;
        let mut grads = vec![Some(dx)];
        if w.is_some() {
            grads.push(Some(g.mul(&xhat)?.reshape(&[rows, len])?.sum(0, false)?));
        }
        if has_bias {
            grads.push(Some(g.reshape(&[rows, len])?.sum(0, false)?));
        }
        Ok(grads)
    })
}
