//! The caching allocator: freed tensor buffers go to a size-bucketed pool and are reused, so a
//! training loop that allocates the same shapes every step stops calling into the driver
//! (PyTorch's CUDA caching allocator, with its statistics).

use super::sync::lock;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
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

/// Free buffers by bucket size, behind the pool's own lock (taken alone, never while waiting).
#[derive(Default)]
pub(crate) struct Pool(Mutex<Buckets>);

/// Buffers kept for reuse by their bucket size, and the bytes they hold: the body of this
/// pool and of the readback staging pool (`staging.rs`).
#[derive(Default)]
pub(crate) struct Buckets {
    by_size: HashMap<u64, Vec<wgpu::Buffer>>,
    bytes: u64,
}

impl Buckets {
    /// A kept buffer of exactly `capacity` bytes, if there is one.
    pub(crate) fn take(&mut self, capacity: u64) -> Option<wgpu::Buffer> {
        let b = self.by_size.get_mut(&capacity)?.pop()?;
        self.bytes -= capacity;
        Some(b)
    }

    pub(crate) fn keep(&mut self, capacity: u64, buffer: wgpu::Buffer) {
        self.bytes += capacity;
        self.by_size.entry(capacity).or_default().push(buffer);
    }

    /// How many buffers of `capacity` bytes are kept.
    pub(crate) fn count(&self, capacity: u64) -> usize {
        self.by_size.get(&capacity).map_or(0, Vec::len)
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Drops every kept buffer; returns the bytes released.
    pub(crate) fn clear(&mut self) -> u64 {
        self.by_size.clear();
        std::mem::take(&mut self.bytes)
    }
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

impl Pool {
    /// A cached buffer of exactly `capacity` bytes, if one is free.
    pub(crate) fn take(&self, capacity: u64) -> Option<wgpu::Buffer> {
        lock(&self.0).take(capacity)
    }

    /// Caches buffers whose last use has been submitted.
    pub(crate) fn put(&self, buffers: Vec<(u64, wgpu::Buffer)>) {
        if buffers.is_empty() {
            return;
        }
        let mut f = lock(&self.0);
        for (capacity, b) in buffers {
            f.keep(capacity, b);
        }
    }

    /// Drops every cached buffer; returns the bytes released.
    pub(crate) fn clear(&self) -> u64 {
        lock(&self.0).clear()
    }

    pub(crate) fn cached(&self) -> u64 {
        lock(&self.0).bytes()
    }
}

/// Creates a tensor buffer of `capacity` bytes. STORAGE for kernels; COPY_SRC for readback;
/// COPY_DST for uploads and clears; on unified memory also MAP_WRITE/MAP_READ: transfers map the
/// buffer itself.
pub(crate) fn create(
    dev: &wgpu::Device,
    label: &str,
    capacity: u64,
    unified: bool,
) -> wgpu::Buffer {
    dev.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size: capacity,
        usage: wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_SRC
            | wgpu::BufferUsages::COPY_DST
            | if unified {
                wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::MAP_READ
            } else {
                wgpu::BufferUsages::empty()
            },
        mapped_at_creation: false,
    })
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
