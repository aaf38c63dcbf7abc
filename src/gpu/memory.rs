//! The caching allocator: freed tensor buffers go to a size-bucketed pool and are reused, so a
//! training loop that allocates the same shapes every step stops calling into the driver
//! (PyTorch's CUDA caching allocator, with its statistics).

use super::buffer::GpuBuffer;
use super::device::GpuDevice;
use crate::{Error, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Byte counters of one device. `allocated` counts the (4-byte padded) bytes of live tensors,
/// exactly; `reserved` counts every buffer wgtensor holds from the driver, live or cached, at
/// its bucket size.
#[derive(Default)]
pub(crate) struct MemStats {
    pub allocated: AtomicU64,
    pub reserved: AtomicU64,
    pub peak: AtomicU64,
    pub allocations: AtomicU64,
    pub cache_hits: AtomicU64,
    pub ooms: AtomicU64,
}

/// Free buffers by bucket size.
#[derive(Default)]
pub(crate) struct Pool {
    free: HashMap<u64, Vec<wgpu::Buffer>>,
    cached: u64,
}

/// Bucket sizes: powers of two up to 1 MiB (small tensors come in many shapes), then whole 2 MiB
/// steps, so the waste stays under 2 MiB per large tensor while equal shapes share a bucket.
/// Never above what one binding or one buffer may hold.
pub(crate) fn bucket(size: u64, limits: &wgpu::Limits) -> u64 {
    const MIB: u64 = 1 << 20;
    let b = if size <= MIB {
        size.next_power_of_two().max(256)
    } else {
        size.div_ceil(2 * MIB) * (2 * MIB)
    };
    let cap = if size <= limits.max_storage_buffer_binding_size {
        limits
            .max_storage_buffer_binding_size
            .min(limits.max_buffer_size)
    } else {
        limits.max_buffer_size
    };
    b.min(cap).max(size)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl GpuDevice {
    /// A buffer of `capacity` bytes: from the pool if one is free, else from the driver (with one
    /// retry after emptying the cache when the driver is out of memory). Returns the buffer and
    /// whether it is fresh from the driver (zero-filled) rather than reused (stale data).
    pub(crate) fn obtain(
        &self,
        op: &'static str,
        size: u64,
        capacity: u64,
    ) -> Result<(wgpu::Buffer, bool)> {
        let stats = &self.0.mem;
        if let Some(b) = lock(&self.0.pool).take(capacity) {
            stats.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok((b, false));
        }
        let create = || {
            self.scoped(op, size, || {
                self.0.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(op),
                    size: capacity,
                    // STORAGE for kernels; COPY_SRC for readback; COPY_DST for uploads and clears;
                    // on unified memory also MAP_WRITE/MAP_READ: transfers map the buffer itself.
                    usage: wgpu::BufferUsages::STORAGE
                        | wgpu::BufferUsages::COPY_SRC
                        | wgpu::BufferUsages::COPY_DST
                        | if self.0.unified {
                            wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::MAP_READ
                        } else {
                            wgpu::BufferUsages::empty()
                        },
                    mapped_at_creation: false,
                })
            })
        };
        let buffer = match create() {
            Err(Error::OutOfMemory { .. }) => {
                stats.ooms.fetch_add(1, Ordering::Relaxed);
                // Cached buffers are the first thing to give back, as PyTorch does.
                self.empty_cache();
                create().map_err(|e| self.with_memory_numbers(e))?
            }
            other => other?,
        };
        stats.reserved.fetch_add(capacity, Ordering::Relaxed);
        stats.allocations.fetch_add(1, Ordering::Relaxed);
        Ok((buffer, true))
    }

    /// Fills in the allocator's numbers on an out-of-memory error.
    fn with_memory_numbers(&self, e: Error) -> Error {
        match e {
            Error::OutOfMemory {
                op,
                device,
                adapter,
                requested,
                limit,
                ..
            } => Error::OutOfMemory {
                op,
                device,
                adapter,
                requested,
                allocated: self.0.mem.allocated.load(Ordering::Relaxed),
                reserved: self.0.mem.reserved.load(Ordering::Relaxed),
                limit,
            },
            other => other,
        }
    }

    /// Counts a live tensor buffer of `size` bytes.
    pub(crate) fn count_alloc(&self, size: u64) {
        let now = self.0.mem.allocated.fetch_add(size, Ordering::Relaxed) + size;
        self.0.mem.peak.fetch_max(now, Ordering::Relaxed);
    }

    /// Takes back a tensor buffer: pooled, or released when the device is gone.
    pub(crate) fn release(&self, buf: &GpuBuffer) {
        self.0.mem.allocated.fetch_sub(buf.size, Ordering::Relaxed);
        if self.is_lost() {
            self.0
                .mem
                .reserved
                .fetch_sub(buf.capacity, Ordering::Relaxed);
            return;
        }
        // Work recorded but not yet submitted may still read this buffer; `retire` keeps it out
        // of the pool until that work is submitted (queue order then protects it).
        self.retire(buf.capacity, buf.buffer.clone());
    }

    /// Returns buffers whose last use has been submitted to the pool.
    pub(crate) fn pool_return(&self, buffers: Vec<(u64, wgpu::Buffer)>) {
        if buffers.is_empty() {
            return;
        }
        let mut pool = lock(&self.0.pool);
        for (capacity, b) in buffers {
            pool.cached += capacity;
            pool.free.entry(capacity).or_default().push(b);
        }
    }

    /// Releases every cached buffer to the driver (`torch.cuda.empty_cache()`).
    pub(crate) fn empty_cache(&self) {
        // Retired buffers become poolable once pending work is submitted.
        let _ = self.flush("empty_cache");
        self.empty_staging();
        // Upload staging chunks are rebuilt on demand; ones still copying stay alive in wgpu.
        self.lock_pending().belt = None;
        let freed = {
            let mut pool = lock(&self.0.pool);
            pool.free.clear();
            std::mem::take(&mut pool.cached)
        };
        self.0.mem.reserved.fetch_sub(freed, Ordering::Relaxed);
    }

    pub(crate) fn cached_bytes(&self) -> u64 {
        lock(&self.0.pool).cached
    }
}

impl Pool {
    fn take(&mut self, capacity: u64) -> Option<wgpu::Buffer> {
        let b = self.free.get_mut(&capacity)?.pop()?;
        self.cached -= capacity;
        Some(b)
    }
}

#[cfg(test)]
mod tests {
    use super::bucket;

    #[test]
    fn buckets_round_up_within_limits() {
        let l = wgpu::Limits {
            max_buffer_size: 1 << 30,
            max_storage_buffer_binding_size: 128 << 20,
            ..wgpu::Limits::default()
        };
        assert_eq!(bucket(4, &l), 256);
        assert_eq!(bucket(1024, &l), 1024);
        assert_eq!(bucket(1025, &l), 2048);
        assert_eq!(bucket(3 << 20, &l), 4 << 20);
        // Just under the binding limit: never rounded past it.
        assert_eq!(bucket((128 << 20) - 4, &l), 128 << 20);
        // Larger than a binding (chunked tensors): rounded, but within max_buffer_size.
        assert_eq!(bucket((200 << 20) + 4, &l), 202 << 20);
        assert_eq!(bucket((1 << 30) - 4, &l), 1 << 30);
    }
}
