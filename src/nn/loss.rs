//! Loss functions (PyTorch's `F.mse_loss` and `F.cross_entropy`), written with differentiable
//! tensor ops so `loss.backward()` works on every device.

use crate::{DType, Error, Result, Tensor};

/// Mean squared error, `mean((pred - target)²)` (PyTorch's `F.mse_loss`, reduction `mean`).
/// Shapes must be equal (PyTorch only warns on broadcasting, which is nearly always a bug).
///
/// # Errors
/// [`Error::ShapeMismatch`] when the shapes differ; the device/dtype errors of `sub`.
///
/// ```
/// use wgtensor::{nn, Device, Tensor};
/// let d = Device::cpu();
/// let p = Tensor::from_vec(vec![1f32, 2.0], &[2], &d)?;
/// let t = Tensor::from_vec(vec![0f32, 4.0], &[2], &d)?;
/// assert_eq!(nn::mse_loss(&p, &t)?.to_scalar::<f32>()?, 2.5);
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub fn mse_loss(pred: &Tensor, target: &Tensor) -> Result<Tensor> {
    if pred.shape() != target.shape() {
        return Err(Error::ShapeMismatch {
            op: "mse_loss",
            lhs: pred.shape().to_vec(),
            rhs: target.shape().to_vec(),
        });
    }
    let diff = pred.sub(target)?;
    diff.mul(&diff)?.mean_all()
}

/// Cross entropy from unnormalised `logits` `[N, C]` and class ids `targets` `[N]` (U32 or
/// I32): `mean_i(-log_softmax(logits)[i, targets[i]])` (PyTorch's `F.cross_entropy`).
///
/// The ids are read on the host to check their range (a readback on GPUs, as PyTorch's
/// device-side check also synchronizes on error) and turned into a one-hot mask on the logits'
/// device.
///
/// # Errors
/// [`Error::InvalidArgument`] when `logits` is not 2-D, `targets` is not `[N]`, or an id is
/// outside `0..C`; [`Error::UnsupportedDType`] for targets other than U32/I32;
/// [`Error::DeviceMismatch`] when they are on different devices.
///
/// ```
/// use wgtensor::{nn, Device, Tensor};
/// let d = Device::cpu();
/// let logits = Tensor::from_vec(vec![0f32, 0.0, 5.0, -5.0], &[2, 2], &d)?;
/// let targets = Tensor::from_vec(vec![1u32, 0], &[2], &d)?;
/// let loss = nn::cross_entropy(&logits, &targets)?.to_scalar::<f32>()?;
/// let expected = (2f32.ln() + (1.0 + (-10f32).exp()).ln()) / 2.0;
/// assert!((loss - expected).abs() < 1e-6);
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub fn cross_entropy(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    let op = "cross_entropy";
    if logits.ndim() != 2 {
        return Err(Error::InvalidArgument {
            op,
            message: format!(
                "logits must be [N, C], got shape {:?}; reshape to [-1, C] first",
                logits.shape()
            ),
        });
    }
    let (n, c) = (logits.shape()[0], logits.shape()[1]);
    if targets.shape() != [n] {
        return Err(Error::InvalidArgument {
            op,
            message: format!(
                "targets must be [{n}] class ids for logits {:?}, got shape {:?}",
                logits.shape(),
                targets.shape()
            ),
        });
    }
    if logits.device() != targets.device() {
        return Err(Error::DeviceMismatch {
            op,
            lhs: logits.device().to_string(),
            rhs: targets.device().to_string(),
        });
    }
    let ids: Vec<i64> = match targets.dtype() {
        DType::U32 => targets
            .to_vec::<u32>()?
            .into_iter()
            .map(i64::from)
            .collect(),
        DType::I32 => targets
            .to_vec::<i32>()?
            .into_iter()
            .map(i64::from)
            .collect(),
        other => {
            return Err(Error::UnsupportedDType {
                op,
                dtype: other,
                device: targets.device().to_string(),
            })
        }
    };
    let mut onehot = vec![0f32; n * c];
    for (i, &id) in ids.iter().enumerate() {
        if id < 0 || id as usize >= c {
            return Err(Error::InvalidArgument {
                op,
                message: format!(
                    "target {id} at position {i} is outside the {c} classes 0..{c} of logits {:?}",
                    logits.shape()
                ),
            });
        }
        onehot[i * c + id as usize] = 1.0;
    }
    let mut onehot = Tensor::from_vec(onehot, &[n, c], logits.device())?;
    if logits.dtype() != DType::F32 {
        onehot = onehot.to_dtype(logits.dtype())?;
    }
    let picked = logits.log_softmax(-1)?.mul(&onehot)?.sum_all()?;
    // The mean over no samples is NaN, as in PyTorch (not -0.0).
    let scale = if n == 0 { f32::NAN } else { -1.0 / n as f32 };
    picked.mul_scalar(scale)
}
