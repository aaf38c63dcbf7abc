//! `cosine_similarity`, PyTorch's `torch.nn.functional.cosine_similarity`, composed from
//! recorded ops (multiply, sum, sqrt, clamp, divide), so it runs on every device and in every
//! float dtype those ops take, with gradients.

use crate::shape::{broadcast_shapes, normalize_dim};
use crate::{Result, Tensor};

impl Tensor {
    /// The cosine similarity of `self` and `other` along `dim`, PyTorch's
    /// `F.cosine_similarity(x1, x2, dim, eps)`: `Σ (x1 / max(‖x1‖, eps)) · (x2 / max(‖x2‖, eps))`
    /// over `dim`, each norm taken along `dim` and clamped on its own (PyTorch's current
    /// formula, which divides first so the result stays within [-1, 1]). The two broadcast to a
    /// common shape first and `dim` (negative counts from the end) names a dim of that shape,
    /// which the result drops. PyTorch's default `eps` is 1e-8.
    ///
    /// Gradients flow through the composed ops; where a norm is below `eps` the clamp passes
    /// none to it (PyTorch clamps in place outside autograd, so its gradient still reaches the
    /// norm there).
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let d = Device::best();
    /// let a = Tensor::from_vec(vec![1f32, 0.0, 1.0, 1.0], &[2, 2], &d)?;
    /// let b = Tensor::from_vec(vec![1f32, 0.0], &[1, 2], &d)?; // broadcasts over a's rows
    /// let s = a.cosine_similarity(&b, -1, 1e-8)?.to_vec::<f32>()?;
    /// assert!((s[0] - 1.0).abs() < 1e-6 && (s[1] - 0.5f32.sqrt()).abs() < 1e-6);
    /// // A zero vector: its norm is clamped to eps, so the similarity is 0, not NaN.
    /// let z = Tensor::zeros(&[2], wgtensor::DType::F32, &d)?;
    /// let one = Tensor::from_vec(vec![1f32, 0.0], &[2], &d)?;
    /// assert_eq!(z.cosine_similarity(&one, 0, 1e-8)?.to_vec::<f32>()?, vec![0.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) when the shapes do not broadcast;
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a `dim` outside the
    /// broadcast shape or a negative or NaN `eps`; the errors of the ops it is made of
    /// (integer dtypes, different devices).
    pub fn cosine_similarity(&self, other: &Tensor, dim: isize, eps: f32) -> Result<Tensor> {
        let op = "cosine_similarity";
        if eps.is_nan() || eps < 0.0 {
            return Err(crate::Error::InvalidArgument {
                op,
                message: format!("eps must be >= 0, got {eps}"),
            });
        }
        let shape = broadcast_shapes(op, self.shape(), other.shape())?;
        let d = normalize_dim(op, dim, shape.len())? as isize;
        let (a, b) = (self.expand(&shape)?, other.expand(&shape)?);
        let unit = |x: &Tensor| -> Result<Tensor> {
            let norm = x.mul(x)?.sum(d, true)?.sqrt()?.clamp(eps, f32::MAX)?;
            x.div(&norm)
        };
        unit(&a)?.mul(&unit(&b)?)?.sum(d, false)
    }
}
