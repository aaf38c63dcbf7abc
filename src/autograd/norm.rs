//! Backward of `Tensor::layer_norm`, composed of existing ops (each a kernel of its own; the
//! forward is the fused one). With `x̂ = (x - mean) * rstd` and `ĝ = g * weight`:
//! `dx = rstd * (ĝ - mean(ĝ) - x̂ * mean(ĝ * x̂))`, `dweight = Σ_rows g * x̂`,
//! `dbias = Σ_rows g` (PyTorch's formulas).

use super::record;
use crate::Tensor;

pub(crate) fn layer_norm(
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
    record("layer_norm", out, &inputs, move |g, _| {
        // On the CPU one kernel computes every gradient (two passes over each row).
        let want_wb = w.is_some() || has_bias;
        if let Some((dx, wb)) = Tensor::layer_norm_cpu_grads(&xs, w.as_ref(), g, eps, want_wb)? {
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
        // x̂ by the forward kernel itself; rstd from the row variance.
        let xhat = xs.layer_norm(None, None, eps)?;
        let centered = xs.sub(&xs.mean(-1, true)?)?;
        let std = centered
            .mul(&centered)?
            .mean(-1, true)?
            .add_scalar(eps)?
            .sqrt()?;
        let gh = match &w {
            Some(w) => g.mul(w)?,
            None => g.clone(),
        };
        let dx = gh
            .sub(&gh.mean(-1, true)?)?
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
