//! Tensor buffers: allocation within the adapter's limits through the caching allocator
//! (`memory.rs`), and their return to it.

use super::device::GpuDevice;
use crate::{Error, Result};
use std::sync::atomic::Ordering;

/// Copies and `write_buffer` need lengths and offsets that are multiples of 4 bytes
/// (`wgpu::COPY_BUFFER_ALIGNMENT`), so every size is padded up to it.
pub(crate) const ALIGN: u64 = wgpu::COPY_BUFFER_ALIGNMENT;

pub(crate) fn pad4(n: u64) -> u64 {
    n.div_ceil(ALIGN) * ALIGN
}

/// A storage buffer holding one tensor's elements. Dropping it returns the buffer to the
/// device's caching allocator (see `memory.rs`).
pub(crate) struct GpuBuffer {
    pub(crate) buffer: wgpu::Buffer,
    /// Bytes the tensor uses, padded to 4: what `memory_allocated` counts.
    pub(crate) size: u64,
    /// Bytes of the underlying buffer (its pool bucket): what `memory_reserved` counts.
    pub(crate) capacity: u64,
    pub(crate) device: GpuDevice,
    /// The application's buffer (`Tensor::from_wgpu_buffer`): never pooled or reused.
    pub(crate) adopted: bool,
}

impl Drop for GpuBuffer {
    fn drop(&mut self) {
        // The next tensor in this buffer does not inherit this one's pending id checks.
        self.device.0.errors.forget(&self.buffer);
        if self.adopted {
            self.device
                .0
                .mem
                .allocated
                .fetch_sub(self.size, Ordering::Relaxed);
            return;
        }
        // Takes no batch lock: a drop may happen while a recording holds it.
        self.device.release(self.size, self.capacity, &self.buffer);
    }
}

impl std::fmt::Debug for GpuBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GpuBuffer({} of {} bytes on {})",
            self.size,
            self.capacity,
            self.device.label()
        )
    }
}

impl GpuDevice {
    /// A zero-filled tensor buffer of at least `bytes` bytes for `op`.
    ///
    /// Sizes are checked against the adapter's limits before wgpu sees them, so an oversized
    /// request is a typed error, never a wgpu validation error. Empty tensors get a small buffer
    /// that is never bound to a dispatch.
    pub(crate) fn alloc(&self, op: &'static str, bytes: u64) -> Result<GpuBuffer> {
        let (buf, fresh) = self.alloc_inner(op, bytes, false)?;
        if !fresh {
            // Reused buffers hold a previous tensor's bytes; fresh ones are zeroed by wgpu.
            self.record(op, |enc| enc.clear_buffer(&buf.buffer, 0, None))?;
        }
        Ok(buf)
    }

    /// A tensor buffer whose contents are unspecified, for outputs that a kernel or an upload
    /// overwrites completely. Never combine with a clear: `write_buffer` data lands before the
    /// pending encoder's commands, so a recorded clear would wipe it.
    pub(crate) fn alloc_uninit(&self, op: &'static str, bytes: u64) -> Result<GpuBuffer> {
        Ok(self.alloc_inner(op, bytes, false)?.0)
    }

    /// Like [`alloc_uninit`](Self::alloc_uninit) with a capacity of exactly the padded size
    /// (no bucket rounding): for long-lived weights, whose reserved bytes must stay those of
    /// the file (quantized matrices). Freed, it is pooled like any buffer of its size.
    pub(crate) fn alloc_exact_uninit(&self, op: &'static str, bytes: u64) -> Result<GpuBuffer> {
        Ok(self.alloc_inner(op, bytes, true)?.0)
    }

    /// `Error::BufferTooLarge` when `bytes` (already a whole number of 4-byte words) exceed one
    /// buffer of this adapter: for ops that check a result's size before they build anything
    /// on the host for it (an index map, a block plan), as `alloc` would refuse it later.
    pub(crate) fn check_buffer_size(&self, op: &'static str, bytes: u64) -> Result<()> {
        let limit = self.0.limits.max_buffer_size;
        if bytes > limit {
            return Err(Error::BufferTooLarge {
                op,
                device: self.label().to_string(),
                adapter: self.adapter_name(),
                bytes,
                limit,
                limit_name: "max_buffer_size",
            });
        }
        Ok(())
    }

    fn alloc_inner(&self, op: &'static str, bytes: u64, exact: bool) -> Result<(GpuBuffer, bool)> {
        // wgpu errors raised from here on are wgtensor's (see `Inside`).
        let _inside = super::device::Inside::enter();
        self.check(op)?;
        let size = pad4(bytes);
        let limits = &self.0.limits;
        let too_large = |limit: u64, limit_name| Error::BufferTooLarge {
            op,
            device: self.label().to_string(),
            adapter: self.adapter_name(),
            bytes: size,
            limit,
            limit_name,
        };
        if size > limits.max_buffer_size {
            return Err(too_large(limits.max_buffer_size, "max_buffer_size"));
        }
        // Larger than one binding is fine: such tensors are processed in blocks (see
        // `tensor/chunked.rs`); larger than one buffer is refused above.
        let capacity = if exact {
            size.max(ALIGN)
        } else {
            super::memory::bucket(size.max(ALIGN), limits)
        };
        let (buffer, fresh) = self.obtain(op, size, capacity)?;
        self.count_alloc(size);
        Ok((
            GpuBuffer {
                buffer,
                size,
                capacity,
                device: self.clone(),
                adopted: false,
            },
            fresh,
        ))
    }

    /// The application's `buffer` as a tensor buffer of `bytes` bytes (checked by the caller):
    /// counted as allocated while the tensor lives, never returned to the pool.
    pub(crate) fn adopt(&self, buffer: &wgpu::Buffer, bytes: u64) -> GpuBuffer {
        let size = pad4(bytes);
        self.count_alloc(size);
        GpuBuffer {
            buffer: buffer.clone(),
            size,
            capacity: 0,
            device: self.clone(),
            adopted: true,
        }
    }

    /// The largest tensor buffer a kernel can bind whole.
    pub(crate) fn binding_limit(&self) -> u64 {
        self.0.limits.max_storage_buffer_binding_size
    }

    /// A new buffer holding `len` bytes copied from byte `offset` of `src` (no kernel, so no
    /// binding limit applies). Offsets and lengths are multiples of 4.
    pub(crate) fn extract(
        &self,
        op: &'static str,
        src: &GpuBuffer,
        offset: u64,
        len: u64,
    ) -> Result<GpuBuffer> {
        let out = self.alloc_uninit(op, len)?;
        if len > 0 {
            self.record(op, |enc| {
                enc.copy_buffer_to_buffer(&src.buffer, offset, &out.buffer, 0, pad4(len))
            })?;
            self.0.errors.propagate(&[&src.buffer], &out.buffer, None);
        }
        Ok(out)
    }

    /// Copies the first `len` bytes of `src` to byte `at` of `dst`, recorded in the pending
    /// batch (after the work already recorded, so earlier kernels read `dst` as it was).
    /// `at` and `len` are multiples of 4.
    #[cfg_attr(not(feature = "models"), allow(dead_code))]
    pub(crate) fn copy_into(
        &self,
        op: &'static str,
        src: &GpuBuffer,
        dst: &GpuBuffer,
        at: u64,
        len: u64,
    ) -> Result<()> {
        if !at.is_multiple_of(ALIGN)
            || !len.is_multiple_of(ALIGN)
            || at + len > dst.size
            || len > src.size
        {
            return Err(Error::InvalidArgument {
                op,
                message: format!(
                    "a copy of {len} bytes to byte {at} of a {}-byte buffer (a wgtensor bug)",
                    dst.size
                ),
            });
        }
        if len > 0 {
            self.record(op, |enc| {
                enc.copy_buffer_to_buffer(&src.buffer, 0, &dst.buffer, at, len)
            })?;
            self.0.errors.propagate(&[&src.buffer], &dst.buffer, None);
        }
        Ok(())
    }

    /// One buffer holding `parts` back to back (each a whole number of 4-byte words).
    pub(crate) fn assemble(
        &self,
        op: &'static str,
        parts: &[(&GpuBuffer, u64)],
    ) -> Result<GpuBuffer> {
        // Copies move whole words: every part but the last must be a whole number of words
        // (callers size their blocks so); the last one's padding lands in the output's padding.
        if let Some((_, len)) = parts.iter().rev().skip(1).find(|(_, len)| len % ALIGN != 0) {
            return Err(Error::InvalidArgument {
                op,
                message: format!(
                    "a block of {len} bytes is not a whole number of 4-byte words (a wgtensor bug)"
                ),
            });
        }
        let total: u64 = parts.iter().map(|(_, len)| len).sum();
        let out = self.alloc_uninit(op, total)?;
        self.record(op, |enc| {
            let mut at = 0;
            for (b, len) in parts {
                if *len > 0 {
                    enc.copy_buffer_to_buffer(&b.buffer, 0, &out.buffer, at, pad4(*len));
                }
                at += len;
            }
        })?;
        let sources: Vec<&wgpu::Buffer> = parts.iter().map(|(b, _)| &b.buffer).collect();
        self.0.errors.propagate(&sources, &out.buffer, None);
        Ok(out)
    }

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
        if let Some(b) = self.0.pool.take(capacity) {
            stats.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok((b, false));
        }
        let create = || {
            self.scoped(op, size, || {
                super::memory::create(&self.0.device, op, capacity, self.0.unified)
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
    pub(crate) fn release(&self, size: u64, capacity: u64, buffer: &wgpu::Buffer) {
        self.0.mem.allocated.fetch_sub(size, Ordering::Relaxed);
        if self.is_lost() {
            self.0.mem.reserved.fetch_sub(capacity, Ordering::Relaxed);
            return;
        }
        // Work recorded but not yet submitted may still read this buffer; `retire` keeps it out
        // of the pool until that work is submitted (queue order then protects it).
        if let Some(free) = self.0.batch.retire(capacity, buffer.clone()) {
            self.0.pool.put(vec![free]);
        }
    }

    /// Releases every cached buffer to the driver (`torch.cuda.empty_cache()`).
    pub(crate) fn empty_cache(&self) {
        // Retired buffers become poolable once pending work is submitted.
        let _ = self.flush("empty_cache");
        // Upload staging chunks are rebuilt on demand; ones still copying stay alive in wgpu.
        let belt = self.0.batch.lock().belt.take();
        // Buffers go back to the driver here, which on GL takes the context.
        let _turn = self.gl_turn();
        drop(belt);
        self.0.staging.clear();
        // Cached bind groups keep their buffers alive.
        self.0.kernels.clear_bind_groups();
        let freed = self.0.pool.clear();
        self.0.mem.reserved.fetch_sub(freed, Ordering::Relaxed);
    }

    pub(crate) fn cached_bytes(&self) -> u64 {
        self.0.pool.cached()
    }
}
