//! Host memory: the byte counters behind `memory_allocated(&Device::cpu())` and the fallible
//! allocation every CPU kernel takes its output from. A leaf of the CPU backend, so the kernels
//! can count and fail cleanly without reaching up to the statistics API (`src/memory.rs`).

use crate::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes held by live CPU tensors (the CPU device reports its tensor bytes too).
pub(crate) static CPU_ALLOCATED: AtomicU64 = AtomicU64::new(0);
/// The peak of [`CPU_ALLOCATED`] since start or the last reset.
pub(crate) static CPU_PEAK: AtomicU64 = AtomicU64::new(0);

/// Counts `bytes` of host data that became a tensor's.
pub(crate) fn cpu_alloc(bytes: u64) {
    let now = CPU_ALLOCATED.fetch_add(bytes, Ordering::Relaxed) + bytes;
    CPU_PEAK.fetch_max(now, Ordering::Relaxed);
}

/// Uncounts `bytes` of host data that a tensor released.
pub(crate) fn cpu_free(bytes: u64) {
    let _ = CPU_ALLOCATED.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        Some(v.saturating_sub(bytes))
    });
}

/// An empty `Vec` with room for `n` elements, or [`Error::OutOfMemory`].
pub(crate) fn try_vec<T>(op: &'static str, n: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
        op,
        device: "cpu".into(),
        adapter: "host memory".into(),
        requested: (n as u64).saturating_mul(std::mem::size_of::<T>() as u64),
        allocated: CPU_ALLOCATED.load(Ordering::Relaxed),
        reserved: CPU_ALLOCATED.load(Ordering::Relaxed),
        limit: isize::MAX as u64,
    })?;
    Ok(v)
}
