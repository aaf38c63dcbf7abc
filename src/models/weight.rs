//! A weight matrix as a model holds it: dense (f32 or f16) or, later, quantized blocks.

use crate::{DType, QTensor, Result, Tensor};

/// A `[rows, cols]` weight matrix used as `x @ Wᵀ` (the layout of `nn.Linear`): dense in f32
/// or f16, or ggml blocks that stay quantized ([`QTensor`]).
///
/// ```
/// use wgtensor::models::Weight;
/// use wgtensor::{Device, Tensor};
/// let d = Device::cpu();
/// let w = Weight::Dense(Tensor::from_vec(vec![1f32, 0.0, 0.0, 2.0, 1.0, 1.0], &[3, 2], &d)?);
/// let x = Tensor::from_vec(vec![3f32, 4.0], &[1, 2], &d)?;
/// assert_eq!(w.matmul_t(&x)?.to_vec::<f32>()?, vec![3.0, 8.0, 7.0]);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub enum Weight {
    /// A dense tensor, f32 or f16.
    Dense(Tensor),
    /// Block-quantized (Q8_0, Q4_0, Q4_K, Q6_K), dequantized inside the matmul.
    Quantized(QTensor),
}

impl Weight {
    /// `x @ Wᵀ` for `x` `[n, cols]` f32: `[n, rows]` f32. With f16 weights the values are those
    /// of the f16 product `x.to_dtype(F16).matmul(&w.t()).to_dtype(F32)` (on the CPU computed
    /// without the f16 tensors in between; the weights are never widened whole).
    ///
    /// # Errors
    /// Shape, dtype and device mismatches of the matmul.
    pub fn matmul_t(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Weight::Dense(w) if w.dtype() == DType::F16 => match x.matmul_t_f16_weight(w)? {
                Some(y) => Ok(y),
                None => x
                    .to_dtype(DType::F16)?
                    .matmul(&w.t()?)?
                    .to_dtype(DType::F32),
            },
            Weight::Dense(w) => x.matmul(&w.t()?),
            Weight::Quantized(q) => q.matmul_t(x),
        }
    }

    /// Rows `ids` of the matrix in f32 (an embedding lookup): `[ids.len, cols]`.
    ///
    /// # Errors
    /// Out-of-range ids; device errors.
    pub fn rows(&self, ids: &[u32]) -> Result<Tensor> {
        match self {
            Weight::Dense(w) if w.dtype() == DType::F32 => {
                match w.index_select(0, &Tensor::from_slice(ids, &[ids.len()], w.device())?) {
                    // A table past one GPU binding is read row by row, as f16 tables are.
                    Err(crate::Error::BufferTooLarge { .. }) => Self::rows_by_views(w, ids),
                    r => r,
                }
            }
            Weight::Dense(w) => Self::rows_by_views(w, ids)?.to_dtype(DType::F32),
            Weight::Quantized(q) => {
                q.gather_rows(&Tensor::from_slice(ids, &[ids.len()], &q.device())?)
            }
        }
    }

    /// Rows `ids` of `w` as narrowed views joined by one `cat` (buffer copies on a GPU, so
    /// tables past one storage binding work too), in `w`'s dtype.
    fn rows_by_views(w: &Tensor, ids: &[u32]) -> Result<Tensor> {
        let rows = ids
            .iter()
            .map(|&i| w.narrow(0, i as usize, 1))
            .collect::<Result<Vec<_>>>()?;
        Tensor::cat(&rows.iter().collect::<Vec<_>>(), 0)
    }

    /// `[rows, cols]`.
    pub fn shape(&self) -> [usize; 2] {
        match self {
            Weight::Dense(w) => {
                let s = w.shape();
                [s[0], s.get(1).copied().unwrap_or(1)]
            }
            Weight::Quantized(q) => q.shape(),
        }
    }

    /// Bytes the weight occupies on its device.
    pub fn size_in_bytes(&self) -> usize {
        match self {
            Weight::Dense(w) => w.numel() * w.dtype().size_in_bytes(),
            Weight::Quantized(q) => q.size_in_bytes(),
        }
    }
}
