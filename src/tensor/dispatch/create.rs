//! The creation ops' dispatch: which device makes a new tensor's data (`BackendDevice`), from
//! the device alone, as they read no operand.

use super::{backend, Backend};
use crate::cpu::backend::CpuDevice;
use crate::ops::backend::BackendDevice;
use crate::ops::program::Dist;
use crate::storage::{CpuStorage, Storage};
use crate::{DType, Device, Result, WithDType};

/// Runs `$body` with `$d` bound to `$device`'s `BackendDevice` (`backend`, `Backend` and
/// `CpuDevice` in scope where it is used); both arms give one type.
macro_rules! on_device {
    ($device:expr, |$d:ident| $body:expr) => {
        match backend($device) {
            Backend::Cpu => {
                let $d = &CpuDevice;
                $body
            }
            Backend::Gpu($d) => $body,
        }
    };
}
pub(super) use on_device;

/// Runs `$body` as [`on_device`] does and wraps its storage (or the storage in its `Option`)
/// as `Storage`.
macro_rules! make {
    ($device:expr, |$d:ident| $body:expr) => {
        on_device!($device, |$d| $body.map(Into::into))
    };
}

/// The elements `data` on `device`: on the CPU the vector itself (no copy), on a GPU uploaded.
pub(crate) fn from_vec<T: WithDType>(
    op: &'static str,
    data: Vec<T>,
    device: &Device,
) -> Result<Storage> {
    match backend(device) {
        Backend::Cpu => Ok(CpuStorage::from_vec(data).into()),
        Backend::Gpu(g) => {
            Ok(BackendDevice::upload(g, op, bytemuck::cast_slice(&data), T::DTYPE)?.into())
        }
    }
}

/// The elements `data` copied onto `device` (on a GPU straight from the caller's memory into
/// the upload: no intermediate vector).
pub(crate) fn from_slice<T: WithDType>(
    op: &'static str,
    data: &[T],
    device: &Device,
) -> Result<Storage> {
    match backend(device) {
        Backend::Cpu => from_vec(op, data.to_vec(), device),
        Backend::Gpu(g) => {
            Ok(BackendDevice::upload(g, op, bytemuck::cast_slice(data), T::DTYPE)?.into())
        }
    }
}

/// `n` zeros of `dtype` on `device`.
pub(crate) fn zeros(op: &'static str, n: usize, dtype: DType, device: &Device) -> Result<Storage> {
    make!(device, |d| BackendDevice::zeros(d, op, n, dtype))
}

/// `n` elements of `dtype`, all `value`, on `device`.
pub(crate) fn filled(
    op: &'static str,
    n: usize,
    value: f64,
    dtype: DType,
    device: &Device,
) -> Result<Storage> {
    make!(device, |d| BackendDevice::filled(d, op, n, value, dtype))
}

/// `arange`'s `n` values on `device`, or `None` to compose (see `BackendDevice::arange`).
pub(crate) fn arange(n: usize, start: f32, step: f32, device: &Device) -> Result<Option<Storage>> {
    make!(device, |d| BackendDevice::arange(d, n, start, step)
        .map(|s| s.map(Into::into)))
}

/// `n` draws of `dist` on `device`, or `None` to compose (see `BackendDevice::random`).
pub(crate) fn random(
    dist: Dist,
    seed: u64,
    offset: u64,
    n: usize,
    device: &Device,
) -> Result<Option<Storage>> {
    make!(device, |d| BackendDevice::random(d, dist, seed, offset, n)
        .map(|s| s.map(Into::into)))
}
