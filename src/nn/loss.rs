//! Loss functions (PyTorch's `F.mse_loss` and `F.cross_entropy`), written with differentiable
//! tensor ops so `loss.backward()` works on every device.

use crate::error::check_rank;
use crate::ops::geometry::CeSpec;
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

/// How a loss combines its per-sample values (PyTorch's `reduction=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Reduction {
    /// The mean over the samples that count (for cross-entropy: the targets that are not
    /// `ignore_index`); NaN when none count, as in PyTorch.
    #[default]
    Mean,
    /// The sum over the samples.
    Sum,
    /// One value per sample (ignored samples give 0).
    None,
}

/// Options of [`cross_entropy_with`], PyTorch's keyword arguments of `F.cross_entropy`.
///
/// ```
/// use wgtensor::nn::{CrossEntropyOptions, Reduction};
/// let o = CrossEntropyOptions::default();
/// assert_eq!((o.ignore_index, o.label_smoothing, o.reduction), (Some(-100), 0.0, Reduction::Mean));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CrossEntropyOptions {
    /// Samples whose target equals this id contribute nothing (default `Some(-100)`, PyTorch's).
    pub ignore_index: Option<i64>,
    /// ε in `0..=1`: the target distribution is `(1 - ε)` on the class plus `ε / C` everywhere.
    pub label_smoothing: f32,
    /// How per-sample losses combine.
    pub reduction: Reduction,
}

impl Default for CrossEntropyOptions {
    fn default() -> Self {
        CrossEntropyOptions {
            ignore_index: Some(-100),
            label_smoothing: 0.0,
            reduction: Reduction::Mean,
        }
    }
}

/// Cross entropy from unnormalised `logits` `[N, C]` and class ids `targets` `[N]` (U32 or
/// I32): `mean_i(-log_softmax(logits)[i, targets[i]])` (PyTorch's `F.cross_entropy` with its
/// defaults). See [`cross_entropy_with`] for `ignore_index`, `label_smoothing` and `reduction`.
///
/// One fused op on every device: a GPU computes each row's log-sum-exp and picked logit in one
/// kernel and never reads the targets back (an out-of-range target is reported by the next
/// synchronizing call as [`Error::IndexOutOfRange`]); the backward is one kernel too.
///
/// # Errors
/// As [`cross_entropy_with`].
///
/// ```
/// use wgtensor::{nn, Device, Tensor};
/// let d = Device::best();
/// let logits = Tensor::from_vec(vec![0f32, 0.0, 5.0, -5.0], &[2, 2], &d)?;
/// let targets = Tensor::from_vec(vec![1u32, 0], &[2], &d)?;
/// let loss = nn::cross_entropy(&logits, &targets)?.to_scalar::<f32>()?;
/// let expected = (2f32.ln() + (1.0 + (-10f32).exp()).ln()) / 2.0;
/// assert!((loss - expected).abs() < 1e-6);
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub fn cross_entropy(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    cross_entropy_with(logits, targets, &CrossEntropyOptions::default())
}

/// [`cross_entropy`] with PyTorch's options: samples whose target is `ignore_index` count for
/// nothing (and are left out of the mean), `label_smoothing` mixes the uniform distribution
/// into the target, `reduction` picks mean, sum or one loss per sample. The result (and its
/// gradient) has the logits' dtype (f32 or f16; f16 is computed in f32).
///
/// # Errors
/// [`Error::InvalidArgument`] when `logits` is not 2-D, `targets` is not `[N]`, or
/// `label_smoothing` is outside `0..=1`; [`Error::IndexOutOfRange`] for a target outside
/// `0..C` that is not `ignore_index` (on a GPU from the next synchronizing call, with that
/// sample's loss and gradient 0); [`Error::InvalidArgument`] for targets that are not
/// U32/I32; [`Error::DeviceMismatch`] when they are on different devices.
///
/// ```
/// use wgtensor::nn::{cross_entropy_with, CrossEntropyOptions, Reduction};
/// use wgtensor::{Device, Tensor};
/// let d = Device::best();
/// let logits = Tensor::from_vec(vec![0f32, 0.0, 5.0, -5.0], &[2, 2], &d)?;
/// let targets = Tensor::from_vec(vec![1i32, -100], &[2], &d)?;
/// let opts = CrossEntropyOptions { reduction: Reduction::None, ..Default::default() };
/// let per_sample = cross_entropy_with(&logits, &targets, &opts)?.to_vec::<f32>()?;
/// assert!((per_sample[0] - 2f32.ln()).abs() < 1e-6);
/// assert_eq!(per_sample[1], 0.0); // ignored
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub fn cross_entropy_with(
    logits: &Tensor,
    targets: &Tensor,
    opts: &CrossEntropyOptions,
) -> Result<Tensor> {
    let op = "cross_entropy";
    check_rank(
        op,
        "logits",
        logits.shape(),
        2,
        "[N, C] (reshape to [-1, C])",
    )?;
    let n = logits.shape()[0];
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
    logits.check_ids(op, targets)?;
    if !(0.0..=1.0).contains(&opts.label_smoothing) {
        return Err(Error::InvalidArgument {
            op,
            message: format!(
                "label_smoothing must lie in 0..=1, got {}",
                opts.label_smoothing
            ),
        });
    }
    let dtype = logits.dtype();
    if !matches!(dtype, DType::F32 | DType::F16) {
        return Err(logits.unsupported(op));
    }
    let spec = CeSpec {
        ignore: opts.ignore_index,
        smoothing: opts.label_smoothing,
    };
    let reduction = opts.reduction;
    // Untracked: the whole op is one node of the graph, recorded below.
    let (x, stats, loss) = crate::no_grad_scope(|| -> Result<_> {
        let x = logits.to_dtype(DType::F32)?.contiguous()?;
        let stats = x.ce_rows(targets, &spec)?;
        let loss = match reduction {
            Reduction::None => stats.narrow(0, 0, 1)?.reshape(&[n])?,
            Reduction::Sum => stats.narrow(0, 0, 1)?.sum_all()?,
            Reduction::Mean => {
                // Σ loss / Σ valid: 0 / 0 = NaN when no sample counts (or N = 0).
                let sums = stats.narrow(0, 0, 2)?.sum(-1, false)?;
                sums.narrow(0, 0, 1)?
                    .div(&sums.narrow(0, 1, 1)?)?
                    .reshape(&[])?
            }
        };
        Ok((x, stats, loss.to_dtype(dtype)?))
    })?;
    let targets = targets.clone();
    Ok(crate::autograd::record(
        "cross_entropy",
        loss,
        &[logits],
        move |g, _| {
            let g = g.to_dtype(DType::F32)?;
            let valid = stats.narrow(0, 1, 1)?.reshape(&[n])?;
            let rows = match reduction {
                Reduction::None | Reduction::Sum => valid.mul(&g)?,
                Reduction::Mean => {
                    let count = valid.sum_all()?;
                    valid.mul(&g.div(&count)?)?
                }
            };
            let grad = x.ce_grad(&targets, &spec, &stats, &rows)?;
            Ok(vec![Some(grad.to_dtype(dtype)?)])
        },
    ))
}
