//! Where tensor data lives: host vectors or GPU buffers.

pub(crate) use crate::cpu::storage::CpuStorage;
use crate::gpu::GpuBuffer;

/// The data behind a tensor. Views share one `Storage` through an `Arc`.
#[derive(Debug)]
pub(crate) enum Storage {
    Cpu(CpuStorage),
    Gpu(GpuBuffer),
}

impl From<CpuStorage> for Storage {
    fn from(s: CpuStorage) -> Storage {
        Storage::Cpu(s)
    }
}

impl From<GpuBuffer> for Storage {
    fn from(b: GpuBuffer) -> Storage {
        Storage::Gpu(b)
    }
}

impl Storage {
    /// The GPU buffer, or `None` for host data.
    pub(crate) fn gpu(&self) -> Option<&GpuBuffer> {
        match self {
            Storage::Cpu(_) => None,
            Storage::Gpu(b) => Some(b),
        }
    }

    /// Bytes of host data (counted by the CPU allocation statistics); `None` for a GPU buffer,
    /// which accounts for itself.
    pub(crate) fn host_bytes(&self) -> Option<u64> {
        match self {
            Storage::Cpu(s) => Some(s.size_in_bytes() as u64),
            Storage::Gpu(_) => None,
        }
    }

    /// Counts host data in the CPU allocation statistics (`memory_allocated`) as it becomes a
    /// tensor's (`Tensor::from_parts`); [`Drop`] uncounts it. A GPU buffer accounts for itself.
    /// Here, beside the drop that undoes it, so the tensor layer does not reach the CPU's
    /// counters.
    pub(crate) fn count_as_tensor(&self) {
        if let Some(bytes) = self.host_bytes() {
            crate::cpu::alloc::cpu_alloc(bytes);
        }
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        // GPU buffers account for themselves; host data is counted here and in
        // `Tensor::from_parts`, the one place a `Storage` becomes a tensor's.
        if let Some(bytes) = self.host_bytes() {
            crate::cpu::alloc::cpu_free(bytes);
        }
        use crate::cpu::alloc::recycle;
        match self {
            Storage::Cpu(CpuStorage::F32(v)) => recycle(std::mem::take(v)),
            Storage::Cpu(CpuStorage::I32(v)) => recycle(std::mem::take(v)),
            Storage::Cpu(CpuStorage::U32(v)) => recycle(std::mem::take(v)),
            _ => {}
        }
    }
}

/// An empty host vector with room for `n` elements, for the layers above to fill themselves
/// (checkpoint and model loaders): allocated through the CPU's counters so
/// `memory_allocated(&Device::cpu())` sees it, and refused as a typed out-of-memory error naming
/// `op` rather than an abort.
pub(crate) fn try_vec<T>(op: &'static str, n: usize) -> crate::Result<Vec<T>> {
    crate::cpu::alloc::try_vec(op, n)
}
