//! `Embedding`: a lookup table of vectors, PyTorch's `nn.Embedding`.

use super::{param, Module};
use crate::{DType, Device, Result, Tensor};

/// A table of `num_embeddings` vectors of size `embedding_dim`, looked up by integer ids
/// (PyTorch's `nn.Embedding`). The weight is initialised from `N(0, 1)` with the crate's seeded
/// generator.
///
/// `forward` takes U32 or I32 ids of any shape, on the table's device, and returns
/// `ids.shape + [embedding_dim]`. On a GPU the ids are never read back: the lookup and its
/// gradient (a deterministic on-device `index_add`) run as kernels, and an id outside
/// `0..num_embeddings` is an [`Error::IndexOutOfRange`] from the next synchronizing call (see
/// [`Tensor::index_select`]); on the CPU it is that error at once.
///
/// [`Error::IndexOutOfRange`]: crate::Error::IndexOutOfRange
///
/// ```
/// use wgtensor::nn::{Embedding, Module};
/// use wgtensor::{Device, Tensor};
/// let device = Device::best();
/// let emb = Embedding::new(10, 4, &device)?;
/// let ids = Tensor::from_vec(vec![1u32, 2, 3, 9, 0, 0], &[2, 3], &device)?;
/// assert_eq!(emb.forward(&ids)?.shape(), &[2, 3, 4]);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Embedding {
    weight: Tensor,
}

impl Embedding {
    /// A new table with `N(0, 1)` entries on `device`.
    ///
    /// # Errors
    /// Device errors (allocation, a lost GPU).
    ///
    /// ```
    /// let emb = wgtensor::nn::Embedding::new(100, 16, &wgtensor::Device::cpu())?;
    /// assert_eq!(emb.weight().shape(), &[100, 16]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn new(num_embeddings: usize, embedding_dim: usize, device: &Device) -> Result<Embedding> {
        let w = Tensor::randn(&[num_embeddings, embedding_dim], &Device::cpu())?.to(device)?;
        Ok(Embedding { weight: param(w) })
    }

    /// A layer around an existing `[num_embeddings, embedding_dim]` f32 table.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `weight` is not 2-D; [`Error::UnsupportedDType`] when it
    /// is not f32.
    ///
    /// [`Error::InvalidArgument`]: crate::Error::InvalidArgument
    /// [`Error::UnsupportedDType`]: crate::Error::UnsupportedDType
    ///
    /// ```
    /// use wgtensor::nn::{Embedding, Module};
    /// use wgtensor::{Device, Tensor};
    /// let d = Device::cpu();
    /// let emb = Embedding::from_weights(Tensor::from_vec(vec![0f32, 0.0, 1.0, 1.0], &[2, 2], &d)?)?;
    /// let out = emb.forward(&Tensor::from_vec(vec![1i32], &[1], &d)?)?;
    /// assert_eq!(out.to_vec::<f32>()?, vec![1.0, 1.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn from_weights(weight: Tensor) -> Result<Embedding> {
        super::check_weight_2d(
            "Embedding::from_weights",
            &weight,
            "[num_embeddings, embedding_dim]",
        )?;
        if weight.dtype() != DType::F32 {
            return Err(weight.unsupported("Embedding::from_weights"));
        }
        Ok(Embedding {
            weight: param(weight),
        })
    }

    /// The table, `[num_embeddings, embedding_dim]`.
    ///
    /// ```
    /// let emb = wgtensor::nn::Embedding::new(5, 2, &wgtensor::Device::cpu())?;
    /// assert_eq!(emb.weight().shape(), &[5, 2]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// Number of rows.
    ///
    /// ```
    /// assert_eq!(wgtensor::nn::Embedding::new(5, 2, &wgtensor::Device::cpu())?.num_embeddings(), 5);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn num_embeddings(&self) -> usize {
        self.weight.shape()[0]
    }

    /// Size of each vector.
    ///
    /// ```
    /// assert_eq!(wgtensor::nn::Embedding::new(5, 2, &wgtensor::Device::cpu())?.embedding_dim(), 2);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn embedding_dim(&self) -> usize {
        self.weight.shape()[1]
    }
}

impl Module for Embedding {
    /// Rows of the table for every id: `ids.shape + [embedding_dim]`.
    ///
    /// # Errors
    /// As [`Tensor::index_select`]: out-of-range ids ([`Error::IndexOutOfRange`], on a GPU from
    /// the next synchronizing call), ids that are not U32/I32, ids on another device.
    ///
    /// [`Error::IndexOutOfRange`]: crate::Error::IndexOutOfRange
    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        let flat = ids.contiguous()?.reshape(&[ids.numel()])?;
        let rows = self.weight.index_select(0, &flat)?;
        let mut shape = ids.shape().to_vec();
        shape.push(self.embedding_dim());
        rows.reshape(&shape)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        vec![("weight".to_string(), self.weight.clone())]
    }

    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        vec![("weight".to_string(), &mut self.weight)]
    }
}
