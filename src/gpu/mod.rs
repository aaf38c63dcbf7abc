//! The wgpu backend. Every wgpu call in wgtensor lives under this module: adapter discovery
//! (`registry`), one opened device with error capture and loss tracking (`device`), buffers and
//! transfers (`buffer`), the embedded shaders and pipeline cache (`kernels`), the generated elementwise kernels
//! (`codegen`), and one file per op family that records dispatches (`elementwise`, ...).

pub(crate) mod buffer;
pub(crate) mod codegen;
pub(crate) mod device;
pub(crate) mod elementwise;
pub(crate) mod gather;
pub(crate) mod join;
pub(crate) mod kernels;
pub(crate) mod matmul;
pub(crate) mod memory;
pub(crate) mod norm;
pub(crate) mod params;
pub(crate) mod queue;
pub(crate) mod reduce;
pub(crate) mod registry;
pub(crate) mod softmax;
pub(crate) mod transfer;

pub(crate) use buffer::GpuBuffer;
pub(crate) use device::GpuDevice;

/// Wraps a device and queue that the application opened itself.
pub(crate) fn wrap(adapter: &wgpu::Adapter, device: wgpu::Device, queue: wgpu::Queue) -> GpuDevice {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let label = format!("wgpu:{}", NEXT.fetch_add(1, Ordering::Relaxed));
    GpuDevice::new(label, adapter.get_info(), device, queue)
}
