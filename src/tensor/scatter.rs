//! scatter_add and index_add (the gradient of gather and index_select, and so of
//! `nn::Embedding`): validate, then ask the backend (`BackendStorage::scatter_add`). Both are
//! deterministic: each target sums its contributions in position order on every device (no
//! float atomics), so the CPU and every GPU give the same bits.

use super::dispatch;
use super::gather::same_dims_within;
use super::Tensor;
use crate::ops::backend::ScatterSpec;
use crate::shape::{normalize_dim, Layout};
use crate::{Error, Result};

impl Tensor {
    /// `torch.scatter_add`: a copy of `self` where, for every position `p` of `index`,
    /// `src[p]` is added at `p`'s coordinates with the one of `dim` replaced by `index[p]`
    /// (`out[index[i][j]][j] += src[i][j]` for `dim = 0`). `index` (U32/I32) and `src` have
    /// `self`'s number of dims; `index` is no larger than `src` in any dim and no larger than
    /// `self` in any dim but `dim`. Repeated targets add up, in position order on every
    /// device. Differentiable in `self` and `src`.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] for an index outside `0..self.shape[dim]` (on a GPU from the
    /// next synchronizing call; that contribution is dropped); [`Error::InvalidArgument`] for
    /// mismatched dims or sizes; [`Error::DeviceMismatch`]; [`Error::UnsupportedDType`] for
    /// tensors that are not f32.
    ///
    /// ```
    /// use wgtensor::{DType, Device, Tensor};
    /// let d = Device::best();
    /// let base = Tensor::zeros(&[3], DType::F32, &d)?;
    /// let idx = Tensor::from_vec(vec![0u32, 2, 0, 2], &[4], &d)?;
    /// let src = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[4], &d)?;
    /// assert_eq!(base.scatter_add(0, &idx, &src)?.to_vec::<f32>()?, vec![4.0, 0.0, 6.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn scatter_add(&self, dim: isize, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        const OP: &str = "scatter_add";
        self.check_ids(OP, index)?;
        self.check_pair(OP, src)?;
        self.require_f32(OP)?;
        let d = normalize_dim(OP, dim, self.ndim().max(1))?;
        same_dims_within(OP, index, self, Some(d))?;
        same_dims_within(OP, index, src, None)?;
        // The values that take part: src narrowed to the index's shape, packed.
        let mut vals = src.clone();
        for (k, &n) in index.shape().iter().enumerate() {
            if vals.shape()[k] != n {
                vals = vals.narrow(k as isize, 0, n)?;
            }
        }
        let shape = index.shape().to_vec();
        let strides = Layout::contiguous(self.shape()).strides;
        let bound = self.shape().get(d).copied().unwrap_or(1);
        let spec = ScatterSpec {
            shape: &shape,
            d,
            out_strides: &strides,
            bound,
            r: 1,
        };
        let out = self.add_rows(OP, index, &spec, &vals)?;
        let out = out.reshape(self.shape())?;
        Ok(crate::autograd::gather::scatter_add(
            self, d, index, src, out,
        ))
    }

    /// `torch.index_add`: a copy of `self` where slice `k` of `src` along `dim` is added to
    /// slice `ids[k]` (`src` has `self`'s shape with `shape[dim] = ids.len()`). Repeated ids add
    /// up in order, the same on every device. This is the gradient of
    /// [`Tensor::index_select`], and so how `nn::Embedding` learns on a GPU without a readback.
    /// Differentiable in `self` and `src`.
    ///
    /// # Errors
    /// As [`Tensor::scatter_add`]; `ids` must be 1-D.
    ///
    /// ```
    /// use wgtensor::{DType, Device, Tensor};
    /// let d = Device::best();
    /// let table = Tensor::zeros(&[3, 2], DType::F32, &d)?;
    /// let ids = Tensor::from_vec(vec![2u32, 0, 2], &[3], &d)?;
    /// let rows = Tensor::from_vec(vec![1f32, 1.0, 2.0, 2.0, 3.0, 3.0], &[3, 2], &d)?;
    /// let out = table.index_add(0, &ids, &rows)?;
    /// assert_eq!(out.to_vec::<f32>()?, vec![2.0, 2.0, 0.0, 0.0, 4.0, 4.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn index_add(&self, dim: isize, ids: &Tensor, src: &Tensor) -> Result<Tensor> {
        let out = self.index_add_untracked(dim, ids, src)?;
        Ok(crate::autograd::gather::index_add(self, dim, ids, src, out))
    }

    pub(crate) fn index_add_untracked(
        &self,
        dim: isize,
        ids: &Tensor,
        src: &Tensor,
    ) -> Result<Tensor> {
        const OP: &str = "index_add";
        self.check_ids(OP, ids)?;
        self.check_pair(OP, src)?;
        self.require_f32(OP)?;
        if self.ndim() == 0 || ids.ndim() != 1 {
            return Err(Error::InvalidArgument {
                op: OP,
                message: format!(
                    "needs a tensor of at least 1 dim and 1-D ids, got shapes {:?} and {:?}",
                    self.shape(),
                    ids.shape()
                ),
            });
        }
        let d = normalize_dim(OP, dim, self.ndim())?;
        let mut want = self.shape().to_vec();
        want[d] = ids.numel();
        if src.shape() != want {
            return Err(Error::InvalidArgument {
                op: OP,
                message: format!(
                    "src must have shape {want:?} (the tensor's {:?} with dim {d} of size \
                     ids.len() = {}), got {:?}",
                    self.shape(),
                    ids.numel(),
                    src.shape()
                ),
            });
        }
        // Rows along `dim` first, so each id names one packed row of r floats.
        let (base, vals) = if d == 0 {
            (self.clone(), src.clone())
        } else {
            (
                self.transpose(0, d as isize)?,
                src.transpose(0, d as isize)?,
            )
        };
        let bound = self.shape()[d];
        let r = self.numel().checked_div(bound).unwrap_or(0);
        let spec = ScatterSpec {
            shape: &[ids.numel()],
            d: 0,
            out_strides: &[1],
            bound,
            r,
        };
        let out = base.add_rows(OP, ids, &spec, &vals)?;
        let moved = out.reshape(base.shape())?;
        if d == 0 {
            Ok(moved)
        } else {
            moved.transpose(0, d as isize)?.contiguous()
        }
    }

    /// A packed copy of `self` (as `[bound, r]` rows) with `vals` (`[ids.len(), r]`) added
    /// where `spec` sends them by the ids (see `BackendStorage::scatter_add`). Untracked.
    fn add_rows(
        &self,
        op: &'static str,
        ids: &Tensor,
        spec: &ScatterSpec,
        vals: &Tensor,
    ) -> Result<Tensor> {
        let base = self.contiguous()?;
        let vals = vals.contiguous()?;
        let storage = dispatch::scatter_add(op, &base, ids, &vals, spec)?
            .ok_or_else(|| base.unsupported(op))?;
        Ok(base.derived(storage, base.shape()))
    }
}
