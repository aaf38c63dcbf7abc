//! Tensor buffers: allocation within the adapter's limits, uploads and readbacks.

use super::device::GpuDevice;
use crate::{Error, Result};

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
}

impl Drop for GpuBuffer {
    fn drop(&mut self) {
        self.device.release(self);
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
        let (buf, fresh) = self.alloc_inner(op, bytes)?;
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
        Ok(self.alloc_inner(op, bytes)?.0)
    }

    fn alloc_inner(&self, op: &'static str, bytes: u64) -> Result<(GpuBuffer, bool)> {
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
        let capacity = super::memory::bucket(size.max(ALIGN), limits);
        let (buffer, fresh) = self.obtain(op, size, capacity)?;
        self.count_alloc(size);
        Ok((
            GpuBuffer {
                buffer,
                size,
                capacity,
                device: self.clone(),
            },
            fresh,
        ))
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
        }
        Ok(out)
    }

    /// One buffer holding `parts` back to back (each a whole number of 4-byte words).
    pub(crate) fn assemble(
        &self,
        op: &'static str,
        parts: &[(&GpuBuffer, u64)],
    ) -> Result<GpuBuffer> {
        let total: u64 = parts.iter().map(|(_, len)| len).sum();
        let out = self.alloc_uninit(op, total)?;
        self.record(op, |enc| {
            let mut at = 0;
            for (b, len) in parts {
                if *len > 0 {
                    enc.copy_buffer_to_buffer(&b.buffer, 0, &out.buffer, at, *len);
                }
                at += len;
            }
        })?;
        Ok(out)
    }
}
