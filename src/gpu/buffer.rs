//! Tensor buffers: allocation within the adapter's limits, uploads and readbacks.

use super::device::GpuDevice;
use crate::{Error, Result};
use std::sync::mpsc;

/// Copies and `write_buffer` need lengths and offsets that are multiples of 4 bytes
/// (`wgpu::COPY_BUFFER_ALIGNMENT`), so every size is padded up to it.
const ALIGN: u64 = wgpu::COPY_BUFFER_ALIGNMENT;

fn pad4(n: u64) -> u64 {
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
        // A tensor is bound whole to its kernels, so one binding must be able to hold it.
        if size > limits.max_storage_buffer_binding_size {
            return Err(too_large(
                limits.max_storage_buffer_binding_size,
                "max_storage_buffer_binding_size",
            ));
        }
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

    /// Uploads `bytes` into a new buffer (`.to(&gpu)`).
    pub(crate) fn upload(&self, op: &'static str, bytes: &[u8]) -> Result<GpuBuffer> {
        let buf = self.alloc_uninit(op, bytes.len() as u64)?;
        if bytes.is_empty() {
            return Ok(buf);
        }
        let whole = bytes.len() & !(ALIGN as usize - 1);
        self.scoped(op, 0, || {
            // `write_buffer` stages the data in wgpu's upload ring; it reaches the buffer at the
            // next submit, which always precedes any kernel or readback that uses it.
            if whole > 0 {
                self.0.queue.write_buffer(&buf.buffer, 0, &bytes[..whole]);
            }
            if whole < bytes.len() {
                // The tail (odd f16 or u8 counts) is padded with zeros to a whole word.
                let mut tail = [0u8; ALIGN as usize];
                tail[..bytes.len() - whole].copy_from_slice(&bytes[whole..]);
                self.0.queue.write_buffer(&buf.buffer, whole as u64, &tail);
            }
        })?;
        Ok(buf)
    }

    /// Reads `len` bytes starting at byte `offset` of `src` back to the host (`.cpu()`).
    pub(crate) fn read(
        &self,
        op: &'static str,
        src: &GpuBuffer,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>> {
        if len == 0 {
            return Ok(Vec::new());
        }
        // Copy whole words, then cut out the requested bytes.
        let start = offset / ALIGN * ALIGN;
        let end = pad4(offset + len);
        let size = end - start;
        // A separate buffer, because MAP_READ may only be combined with COPY_DST.
        let staging = self.scoped(op, size, || {
            self.0.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("wgtensor::readback"),
                size,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        })?;
        // The copy joins the pending batch, which is then submitted as a whole.
        self.record(op, |enc| {
            enc.copy_buffer_to_buffer(&src.buffer, start, &staging, 0, size)
        })?;
        let index = self.flush(op)?;
        let (tx, rx) = mpsc::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        // The map callback runs inside a poll once the copy has finished.
        self.wait(op, index)?;
        let mapped = match rx.try_recv() {
            Ok(r) => r,
            // Completed work whose callback has not been delivered yet: one more poll delivers it.
            Err(_) => {
                self.wait(op, None)?;
                rx.try_recv().map_err(|_| Error::Timeout {
                    op,
                    device: self.label().to_string(),
                    waited: self.timeout(),
                })?
            }
        };
        if mapped.is_err() {
            // Mapping is the one call that still fails after device loss.
            self.check(op)?;
            return Err(Error::Wgpu {
                op,
                device: self.label().to_string(),
                message: format!("mapping the readback buffer failed: {mapped:?}"),
            });
        }
        let bytes = {
            let view = staging.get_mapped_range(..).map_err(|e| Error::Wgpu {
                op,
                device: self.label().to_string(),
                message: e.to_string(),
            })?;
            let lo = (offset - start) as usize;
            view[lo..lo + len as usize].to_vec()
        };
        // The view is dropped above: unmapping while it lives would panic.
        staging.unmap();
        Ok(bytes)
    }
}
