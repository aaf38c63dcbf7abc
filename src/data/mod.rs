//! Data loading in the shape of `torch.utils.data`: a [`Dataset`] of typed samples, a
//! [`TensorDataset`] over in-memory tensors, and a [`DataLoader`] that batches, shuffles with a
//! seed, and prepares the next batches on a worker thread, uploading them to the target device
//! while the current step computes.
//!
//! ```
//! use wgtensor::data::{DataLoader, TensorDataset};
//! use wgtensor::{Device, Tensor};
//! let cpu = Device::cpu();
//! let x = Tensor::arange(0.0, 10.0, 1.0, &cpu)?.reshape(&[5, 2])?;
//! let y = Tensor::from_vec(vec![0u32, 1, 0, 1, 1], &[5], &cpu)?;
//! let mut loader = DataLoader::new(TensorDataset::new(vec![x, y])?, 2, &Device::best())?;
//! let shapes: Vec<Vec<usize>> = loader
//!     .iter()
//!     .map(|b| b.map(|b| b[0].shape().to_vec()))
//!     .collect::<wgtensor::Result<_>>()?;
//! assert_eq!(shapes, vec![vec![2, 2], vec![2, 2], vec![1, 2]]); // the last batch is short
//! # Ok::<(), wgtensor::Error>(())
//! ```

mod loader;

pub use loader::{stack_collate, Batches, DataLoader, LoaderStats};

use crate::{Error, Result, Tensor};

/// A collection of samples addressed by index (PyTorch's map-style `Dataset`). `get` may do
/// real work (decode, augment); the [`DataLoader`] calls it on its worker thread.
///
/// ```
/// use wgtensor::data::Dataset;
/// struct Squares;
/// impl Dataset for Squares {
///     type Item = (f32, f32);
///     fn len(&self) -> usize { 4 }
///     fn get(&self, i: usize) -> wgtensor::Result<(f32, f32)> { Ok((i as f32, (i * i) as f32)) }
/// }
/// assert_eq!(Squares.get(3)?, (3.0, 9.0));
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub trait Dataset: Send + Sync + 'static {
    /// One sample.
    type Item: Send + 'static;

    /// Number of samples.
    fn len(&self) -> usize;

    /// Sample `index` (`0..len()`).
    ///
    /// # Errors
    /// Whatever producing the sample can fail with; an index past the end should be
    /// [`Error::InvalidArgument`].
    fn get(&self, index: usize) -> Result<Self::Item>;

    /// Whether there are no samples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Samples are the rows (dim 0) of tensors of equal length (PyTorch's `TensorDataset`): sample
/// `i` is `[t0[i], t1[i], ...]`, each a `[1, ...]` view (no copy). Keep the tensors on the CPU
/// and let the [`DataLoader`] move batches to the device.
///
/// ```
/// use wgtensor::data::{Dataset, TensorDataset};
/// use wgtensor::{Device, Tensor};
/// let x = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[2, 2], &Device::cpu())?;
/// let ds = TensorDataset::new(vec![x])?;
/// assert_eq!(ds.get(1)?[0].to_vec::<f32>()?, vec![3.0, 4.0]);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct TensorDataset {
    tensors: Vec<Tensor>,
}

impl TensorDataset {
    /// A dataset over `tensors`, which must all have the same size along dim 0.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for no tensors, a 0-d tensor, or lengths that differ.
    pub fn new(tensors: Vec<Tensor>) -> Result<TensorDataset> {
        let op = "TensorDataset::new";
        let bad = |message: String| Error::InvalidArgument { op, message };
        let first = tensors
            .first()
            .ok_or_else(|| bad("needs at least one tensor".into()))?;
        for (i, t) in tensors.iter().enumerate() {
            if t.shape().is_empty() {
                return Err(bad(format!(
                    "tensor {i} is 0-d; samples are rows along dim 0"
                )));
            }
            if t.shape()[0] != first.shape()[0] {
                return Err(bad(format!(
                    "tensor {i} has {} rows (shape {:?}) but tensor 0 has {} (shape {:?}); all \
                     need the same size along dim 0",
                    t.shape()[0],
                    t.shape(),
                    first.shape()[0],
                    first.shape()
                )));
            }
        }
        Ok(TensorDataset { tensors })
    }

    /// The tensors, in order.
    pub fn tensors(&self) -> &[Tensor] {
        &self.tensors
    }
}

impl Dataset for TensorDataset {
    type Item = Vec<Tensor>;

    fn len(&self) -> usize {
        self.tensors[0].shape()[0]
    }

    fn get(&self, index: usize) -> Result<Vec<Tensor>> {
        if index >= self.len() {
            return Err(Error::InvalidArgument {
                op: "TensorDataset::get",
                message: format!("index {index} out of range for {} samples", self.len()),
            });
        }
        self.tensors.iter().map(|t| t.narrow(0, index, 1)).collect()
    }
}
