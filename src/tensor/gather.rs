//! index_select (the gather behind `nn::Embedding`) and gather along a dim: validate shapes
//! and dtypes, then ask the backend (`BackendStorage::gather`). Ids are checked against their
//! bound on the CPU before anything runs; on a GPU the kernel checks them and reports a bad id
//! at the next synchronizing call (`Error::IndexOutOfRange`), so nothing waits for them.

use super::dispatch;
use super::Tensor;
use crate::error::check_rank;
use crate::shape::normalize_dim;
use crate::{DType, Error, Result};

const OP: &str = "index_select";

impl Tensor {
    /// The entries of `self` at positions `ids` along `dim` (PyTorch's `index_select`): the
    /// result has `self`'s shape with `shape[dim]` replaced by `ids.len()`, and its slice `k`
    /// along `dim` is slice `ids[k]` of `self`. Ids may repeat and come in any order.
    ///
    /// `ids` is a 1-D U32 or I32 tensor on the same device; `self` is f32 (any view).
    ///
    /// On the CPU an out-of-range id is an error before anything runs. On a GPU the ids are
    /// never read back: the kernel writes zeros where a bad id points and the error comes from
    /// the next call that synchronizes with the device (a readback, `Device::synchronize`), as
    /// CUDA's device-side asserts do, but recoverable: earlier tensors stay intact.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] for an id `< 0` or `>= shape[dim]` (on a GPU, from the next
    /// synchronizing call); [`Error::InvalidArgument`] when `ids` is not 1-D, when `dim` is out
    /// of range or `self` is 0-d, or for ids that are not U32/I32 (the message says how to
    /// convert them); [`Error::DeviceMismatch`] when `ids` lives on another device;
    /// [`Error::UnsupportedDType`] for a table that is not f32.
    ///
    /// ```
    /// use wgtensor::{Device, Error, Tensor};
    /// let d = Device::best();
    /// let table = Tensor::from_vec(vec![0f32, 1.0, 10.0, 11.0, 20.0, 21.0], &[3, 2], &d)?;
    /// let ids = Tensor::from_vec(vec![2u32, 0, 2], &[3], &d)?;
    /// let rows = table.index_select(0, &ids)?;
    /// assert_eq!(rows.shape(), &[3, 2]);
    /// assert_eq!(rows.to_vec::<f32>()?, vec![20.0, 21.0, 0.0, 1.0, 20.0, 21.0]);
    /// let cols = table.index_select(-1, &Tensor::from_vec(vec![1i32], &[1], &d)?)?;
    /// assert_eq!(cols.to_vec::<f32>()?, vec![1.0, 11.0, 21.0]);
    /// let bad = Tensor::from_vec(vec![3u32], &[1], &d)?;
    /// let err = table.index_select(0, &bad).and_then(|t| t.to_vec::<f32>());
    /// assert!(matches!(err, Err(Error::IndexOutOfRange { index: 3, bound: 3, .. })));
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn index_select(&self, dim: isize, ids: &Tensor) -> Result<Tensor> {
        let out = self.index_select_untracked(dim, ids)?;
        Ok(crate::autograd::gather::index_select(self, dim, ids, out))
    }

    pub(crate) fn index_select_untracked(&self, dim: isize, ids: &Tensor) -> Result<Tensor> {
        self.check_ids(OP, ids)?;
        self.require_f32(OP)?;
        if self.ndim() == 0 {
            return Err(Error::InvalidArgument {
                op: OP,
                message: "the tensor is 0-d; index_select needs at least 1 dim (reshape to [1])"
                    .into(),
            });
        }
        // nn::Embedding accepts ids of any shape: it flattens them.
        check_rank(OP, "ids", ids.shape(), 1, "1-D (flatten them first)")?;
        let d = normalize_dim(OP, dim, self.ndim())?;
        let mut shape = self.shape().to_vec();
        shape[d] = ids.numel();
        if shape.contains(&0) {
            // No kernel runs: the ids are still checked where that costs no wait (the CPU).
            dispatch::check_ids(OP, ids, self.shape()[d])?;
            return Tensor::zeros(&shape, self.dtype(), self.device());
        }
        let storage =
            dispatch::gather(OP, self, d, ids, None)?.ok_or_else(|| self.unsupported(OP))?;
        Ok(self.derived(storage, &shape))
    }

    /// `torch.gather`: `out[i][j][k] = self[index[i][j][k]][j][k]` for `dim = 0` (and likewise
    /// for other dims). `index` (U32 or I32, same device) has `self`'s number of dims, and no dim
    /// other than `dim` larger than `self`'s; the result has `index`'s shape. Out-of-range ids
    /// behave as in [`Tensor::index_select`]. Differentiable (the gradient scatter-adds back).
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] (on a GPU from the next synchronizing call);
    /// [`Error::InvalidArgument`] for mismatched dims or sizes, or ids that are not U32/I32;
    /// [`Error::DeviceMismatch`]; [`Error::UnsupportedDType`] for a tensor that is not f32.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let d = Device::best();
    /// let t = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[2, 2], &d)?;
    /// let idx = Tensor::from_vec(vec![0u32, 0, 1, 0], &[2, 2], &d)?;
    /// assert_eq!(t.gather(1, &idx)?.to_vec::<f32>()?, vec![1.0, 1.0, 4.0, 3.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn gather(&self, dim: isize, index: &Tensor) -> Result<Tensor> {
        let out = self.gather_untracked(dim, index)?;
        Ok(crate::autograd::gather::gather(self, dim, index, out))
    }

    fn gather_untracked(&self, dim: isize, index: &Tensor) -> Result<Tensor> {
        const G: &str = "gather";
        self.check_ids(G, index)?;
        self.require_f32(G)?;
        let d = normalize_dim(G, dim, self.ndim().max(1))?;
        same_dims_within(G, index, self, Some(d))?;
        let shape = index.shape().to_vec();
        if shape.contains(&0) {
            return Tensor::zeros(&shape, self.dtype(), self.device());
        }
        let this = if self.ndim() == 0 {
            self.reshape(&[1])?
        } else {
            self.clone()
        };
        let index_shape = shape_or_one(&shape);
        let storage = dispatch::gather(G, &this, d, index, Some(&index_shape))?
            .ok_or_else(|| self.unsupported(G))?;
        Ok(self.derived(storage, &shape))
    }

    /// Device and dtype rules shared by every op that takes ids.
    pub(crate) fn check_ids(&self, op: &'static str, ids: &Tensor) -> Result<()> {
        self.check_device(op, ids)?;
        if !matches!(ids.dtype(), DType::U32 | DType::I32) {
            // Not the generic "convert to F32" advice: ids must become integers.
            return Err(Error::InvalidArgument {
                op,
                message: format!(
                    "ids must be U32 or I32 class/row indices, got {}; convert them with \
                     .to_dtype(DType::U32)",
                    ids.dtype()
                ),
            });
        }
        Ok(())
    }
}

/// `[1]` for a 0-d shape (kernels index at least one dim).
fn shape_or_one(shape: &[usize]) -> Vec<usize> {
    if shape.is_empty() {
        vec![1]
    } else {
        shape.to_vec()
    }
}

/// PyTorch's gather/scatter rule: `index` has `other`'s number of dims and no dim (other than
/// `skip`) larger than `other`'s.
pub(crate) fn same_dims_within(
    op: &'static str,
    index: &Tensor,
    other: &Tensor,
    skip: Option<usize>,
) -> Result<()> {
    let fits = index.ndim() == other.ndim()
        && index
            .shape()
            .iter()
            .zip(other.shape())
            .enumerate()
            .all(|(k, (i, o))| Some(k) == skip || i <= o);
    if fits {
        return Ok(());
    }
    Err(Error::InvalidArgument {
        op,
        message: format!(
            "index shape {:?} must have the {} dims of {:?} and be no larger in any dim{}",
            index.shape(),
            other.ndim(),
            other.shape(),
            skip.map_or(String::new(), |d| format!(" but dim {d}"))
        ),
    })
}
