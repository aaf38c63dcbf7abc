//! What the tensor layer's row blocks (`tensor/chunked.rs`) ask of a device: its binding
//! limits, a copy of the bytes a block spans, and the typed error naming the device.

use super::{backend, data_n, Backend, DataN};
use crate::cpu::backend::CpuDevice;
use crate::ops::backend::{BackendDevice, BackendStorage, BindLimits};
use crate::storage::Storage;
use crate::{Device, Error, Result, Tensor};

/// `device`'s binding limits, or `None` where none applies (see `BackendDevice::bind_limits`).
pub(crate) fn bind_limits(device: &Device) -> Option<BindLimits> {
    match backend(device) {
        Backend::Cpu => CpuDevice.bind_limits(),
        Backend::Gpu(g) => BackendDevice::bind_limits(g),
    }
}

/// `Error::BufferTooLarge` of `op` on `device`: `bytes` past the limit `limit_name`.
pub(crate) fn buffer_too_large(
    op: &'static str,
    device: &Device,
    bytes: u64,
    limit: u64,
    limit_name: &'static str,
) -> Error {
    let (device, adapter) = match backend(device) {
        Backend::Cpu => (device.to_string(), "host".to_string()),
        Backend::Gpu(g) => (g.label().to_string(), g.adapter_name()),
    };
    Error::BufferTooLarge {
        op,
        device,
        adapter,
        bytes,
        limit,
        limit_name,
    }
}

/// `len` bytes of `t`'s storage from byte `start`, copied (see `BackendStorage::copy_bytes`).
pub(crate) fn copy_bytes(
    op: &'static str,
    t: &Tensor,
    start: u64,
    len: u64,
) -> Result<Option<Storage>> {
    Ok(match data_n(op, [t])? {
        DataN::Cpu([s]) => s.copy_bytes(op, start, len)?.map(Storage::from),
        DataN::Gpu([b]) => b.copy_bytes(op, start, len)?.map(Storage::from),
    })
}
