//! Which backend a device dispatches to: the one match on a device's kind, which the dispatch
//! point's functions start from, and the answers of the public `Tensor::is_cpu` /
//! `Tensor::is_gpu` (PyTorch's `t.is_cuda`), so no file of the tensor layer asks the device
//! itself. Apart from `dispatch.rs`, and naming no tensor, so that `tensor.rs` can ask it
//! without an import cycle.

use crate::device::DeviceInner;
use crate::gpu::GpuDevice;
use crate::Device;

/// Which backend a device dispatches to (for ops that create data rather than read it).
pub(crate) enum Backend<'a> {
    Cpu,
    Gpu(&'a GpuDevice),
}

pub(crate) fn backend(device: &Device) -> Backend<'_> {
    match &device.0 {
        DeviceInner::Cpu => Backend::Cpu,
        DeviceInner::Gpu(g) => Backend::Gpu(g),
    }
}

/// Whether `device` is the CPU.
pub(crate) fn on_cpu(device: &Device) -> bool {
    matches!(backend(device), Backend::Cpu)
}

/// Whether `device` is a GPU (hardware or software adapter).
pub(crate) fn on_gpu(device: &Device) -> bool {
    matches!(backend(device), Backend::Gpu(_))
}
