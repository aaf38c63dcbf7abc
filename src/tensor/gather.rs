//! index_select (the gather behind `nn::Embedding`): validate the ids, then dispatch to
//! `cpu/gather.rs` or `gpu/gather.rs`.

use super::Tensor;
use crate::shape::normalize_dim;
use crate::storage::{CpuStorage, Storage};
use crate::{cpu, DType, Error, Result};

const OP: &str = "index_select";

impl Tensor {
    /// The entries of `self` at positions `ids` along `dim` (PyTorch's `index_select`): the
    /// result has `self`'s shape with `shape[dim]` replaced by `ids.len()`, and its slice `k`
    /// along `dim` is slice `ids[k]` of `self`. Ids may repeat and come in any order.
    ///
    /// `ids` is a 1-D U32 or I32 tensor on the same device; `self` is f32 (any view).
    ///
    /// Every id is checked before anything runs, so a bad id is an error, never garbage. For ids
    /// on a GPU that check reads them back: one wait for the ids' producer and `4 * ids.len()`
    /// bytes of transfer per call (token ids are small next to the rows they select).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when an id is negative or `>= shape[dim]` (the message names the
    /// id, its position and the size), when `ids` is not 1-D, when `dim` is out of range or
    /// `self` is 0-d; [`Error::DeviceMismatch`] when `ids` lives on another device;
    /// [`Error::InvalidArgument`] for ids that are not U32/I32 (the message says how to convert
    /// them); [`Error::UnsupportedDType`] for a table that is not f32.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let d = Device::best();
    /// let table = Tensor::from_vec(vec![0f32, 1.0, 10.0, 11.0, 20.0, 21.0], &[3, 2], &d)?;
    /// let ids = Tensor::from_vec(vec![2u32, 0, 2], &[3], &d)?;
    /// let rows = table.index_select(0, &ids)?;
    /// assert_eq!(rows.shape(), &[3, 2]);
    /// assert_eq!(rows.to_vec::<f32>()?, vec![20.0, 21.0, 0.0, 1.0, 20.0, 21.0]);
    /// let cols = table.index_select(-1, &Tensor::from_vec(vec![1i32], &[1], &d)?)?;
    /// assert_eq!(cols.to_vec::<f32>()?, vec![1.0, 11.0, 21.0]);
    /// assert!(table.index_select(0, &Tensor::from_vec(vec![3u32], &[1], &d)?).is_err());
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn index_select(&self, dim: isize, ids: &Tensor) -> Result<Tensor> {
        let out = self.index_select_untracked(dim, ids)?;
        Ok(crate::autograd::shape::index_select(self, dim, ids, out))
    }

    fn index_select_untracked(&self, dim: isize, ids: &Tensor) -> Result<Tensor> {
        if self.device() != ids.device() {
            return Err(Error::DeviceMismatch {
                op: OP,
                lhs: self.device().to_string(),
                rhs: ids.device().to_string(),
            });
        }
        if !matches!(ids.dtype(), DType::U32 | DType::I32) {
            // Not the generic "convert to F32" advice: ids must become integers.
            return Err(Error::InvalidArgument {
                op: OP,
                message: format!(
                    "ids must be U32 or I32 class/row indices, got {}; convert them with \
                     .to_dtype(DType::U32)",
                    ids.dtype()
                ),
            });
        }
        self.require_f32(OP)?;
        if self.ndim() == 0 {
            return Err(Error::InvalidArgument {
                op: OP,
                message: "the tensor is 0-d; index_select needs at least 1 dim (reshape to [1])"
                    .into(),
            });
        }
        if ids.ndim() != 1 {
            return Err(Error::InvalidArgument {
                op: OP,
                message: format!(
                    "ids must be 1-D, got shape {:?}; flatten them first (nn::Embedding \
                     accepts ids of any shape)",
                    ids.shape()
                ),
            });
        }
        let d = normalize_dim(OP, dim, self.ndim())?;
        let host_ids = self.checked_ids(d, ids)?;
        let mut shape = self.shape().to_vec();
        shape[d] = host_ids.len();
        if shape.contains(&0) {
            return Tensor::zeros(&shape, self.dtype(), self.device());
        }
        let storage = match (self.storage()?, ids.storage()?) {
            (Storage::Cpu(_), _) => Storage::Cpu(CpuStorage::F32(cpu::gather::index_select(
                self.cpu_f32(OP)?,
                self.layout(),
                d,
                &host_ids,
            )?)),
            (Storage::Gpu(b), Storage::Gpu(i)) if ids.is_contiguous() => {
                Storage::Gpu(b.device.index_select(
                    OP,
                    b,
                    self.layout(),
                    d,
                    (i, ids.layout().offset, host_ids.len()),
                )?)
            }
            (Storage::Gpu(b), _) => {
                // A strided view of ids: upload the packed copy already on the host.
                let packed = b.device.upload(OP, bytemuck::cast_slice(&host_ids))?;
                Storage::Gpu(b.device.index_select(
                    OP,
                    b,
                    self.layout(),
                    d,
                    (&packed, 0, host_ids.len()),
                )?)
            }
        };
        Ok(self.derived(storage, &shape))
    }

    /// The ids on the host as u32, each checked against `shape[d]`.
    fn checked_ids(&self, d: usize, ids: &Tensor) -> Result<Vec<u32>> {
        let size = self.shape()[d];
        let bad = |k: usize, id: i64| Error::InvalidArgument {
            op: OP,
            message: format!(
                "id {id} at position {k} is out of range for dim {d} of size {size} \
                 (tensor shape {:?}); ids must lie in 0..{size}",
                self.shape()
            ),
        };
        let host: Vec<u32> = match ids.dtype() {
            DType::I32 => ids
                .to_vec::<i32>()?
                .into_iter()
                .enumerate()
                .map(|(k, id)| u32::try_from(id).map_err(|_| bad(k, id as i64)))
                .collect::<Result<_>>()?,
            _ => ids.to_vec::<u32>()?,
        };
        if let Some((k, &id)) = host
            .iter()
            .enumerate()
            .find(|&(_, &id)| id as usize >= size)
        {
            return Err(bad(k, id as i64));
        }
        Ok(host)
    }
}
