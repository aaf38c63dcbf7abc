//! Gradient clipping by global norm (PyTorch's `torch.nn.utils.clip_grad_norm_`).

use crate::{DType, Device, Error, Result, Tensor};

/// Scales the gradients of `params` in place so that their global L2 norm is at most
/// `max_norm`, and returns that norm (before clipping) as a 0-d f32 tensor on the device of the
/// first gradient, PyTorch's `clip_grad_norm_(params, max_norm)`:
///
/// `total = sqrt(Σ_p Σ_i g_pi²)`, `coef = min(max_norm / (total + 1e-6), 1)`, `g = g * coef`.
///
/// Everything runs on the gradients' device with tensor ops: no value is read back to the host,
/// so the call does not wait for the device (read the norm with `to_scalar::<f32>()` when it is
/// needed, e.g. for logging). Parameters without a gradient are skipped; f16 gradients are
/// squared and summed in f32. Gradients on several devices are summed on the first one (their
/// per-device partial norms move there, through the host between GPUs). A NaN or inf gradient
/// gives a NaN/inf norm and NaN gradients, as in PyTorch's default (`error_if_nonfinite=False`).
///
/// # Errors
/// [`Error::InvalidArgument`] when `max_norm` is negative or NaN; the errors of the tensor ops.
///
/// ```
/// use wgtensor::optim::clip_grad_norm_;
/// use wgtensor::{Device, Tensor};
/// let d = Device::best();
/// let p = Tensor::from_vec(vec![0f32, 0.0], &[2], &d)?.requires_grad_(true);
/// p.set_grad(Some(Tensor::from_vec(vec![3f32, 4.0], &[2], &d)?))?; // norm 5
/// let norm = clip_grad_norm_(&[p.clone()], 1.0)?;
/// assert_eq!(norm.to_scalar::<f32>()?, 5.0);
/// let g = p.grad().unwrap().to_vec::<f32>()?; // scaled by 1 / (5 + 1e-6)
/// assert!((g[0] - 0.6).abs() < 1e-5 && (g[1] - 0.8).abs() < 1e-5);
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub fn clip_grad_norm_(params: &[Tensor], max_norm: f32) -> Result<Tensor> {
    let op = "clip_grad_norm_";
    if max_norm.is_nan() || max_norm < 0.0 {
        return Err(Error::InvalidArgument {
            op,
            message: format!("max_norm must be >= 0 (got {max_norm})"),
        });
    }
    let _no_grad = crate::no_grad();
    let with_grad: Vec<(&Tensor, Tensor)> = params
        .iter()
        .filter_map(|p| p.grad().map(|g| (p, g)))
        .collect();
    let Some(device) = with_grad.first().map(|(_, g)| g.device().clone()) else {
        // PyTorch returns tensor(0.) when no parameter has a gradient.
        return Tensor::zeros(&[], DType::F32, &Device::cpu());
    };
    let mut total: Option<Tensor> = None;
    for (_, g) in &with_grad {
        let g32 = if g.dtype() == DType::F32 {
            g.clone()
        } else {
            g.to_dtype(DType::F32)?
        };
        let mut sq = g32.mul(&g32)?.sum_all()?;
        if sq.device() != &device {
            sq = sq.to(&device)?;
        }
        total = Some(match total {
            Some(t) => t.add(&sq)?,
            None => sq,
        });
    }
    let norm = match total {
        Some(t) => t.sqrt()?,
        None => return Tensor::zeros(&[], DType::F32, &device),
    };
    let coef = norm
        .add_scalar(1e-6)?
        .pow_scalar(-1.0)?
        .mul_scalar(max_norm)?
        .clamp(f32::NEG_INFINITY, 1.0)?;
    for (p, g) in with_grad {
        let mut c = if g.device() == &device {
            coef.clone()
        } else {
            coef.to(g.device())?
        };
        if g.dtype() != DType::F32 {
            c = c.to_dtype(g.dtype())?;
        }
        p.set_grad(Some(g.mul(&c)?))?;
    }
    Ok(norm)
}
