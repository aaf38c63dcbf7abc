//! Where tensor data lives: host vectors or GPU buffers.

pub(crate) use crate::cpu::storage::CpuStorage;
use crate::gpu::GpuBuffer;

/// The data behind a tensor. Views share one `Storage` through an `Arc`.
#[derive(Debug)]
pub(crate) enum Storage {
    Cpu(CpuStorage),
    Gpu(GpuBuffer),
}

impl Drop for Storage {
    fn drop(&mut self) {
        // GPU buffers account for themselves; host data is counted here and in
        // `Tensor::from_parts`, the one place a `Storage` becomes a tensor's.
        match self {
            Storage::Cpu(s) => crate::cpu::alloc::cpu_free(s.size_in_bytes() as u64),
            Storage::Gpu(_) => {}
        }
    }
}
