//! Uploads and readbacks (`.to(&gpu)`, `.cpu()`), with reusable staging buffers, batched
//! readbacks (one submit and one wait for many tensors) and transfer statistics.

use super::buffer::{pad4, GpuBuffer, ALIGN};
use super::device::GpuDevice;
use super::staging::{fingerprint, WARN_CHURN};
use super::sync::lock;
use crate::{Error, Result};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Instant;

/// Uploads from this size on write straight into mapped tensor memory on unified-memory
/// adapters; smaller ones are cheaper through `write_buffer`, which needs no map round trip.
const DIRECT_UPLOAD_MIN: usize = 256 << 10;

/// Upload staging chunk size, and the largest upload that goes through reused staging on
/// adapters without unified memory; larger ones use a one-off staging buffer so the belt does
/// not keep hundreds of MiB of host-visible memory alive.
const BELT_CHUNK: u64 = 4 << 20;
const BELT_MAX_WRITE: u64 = 16 << 20;

/// Readbacks of at most this many tensors map each tensor buffer directly on unified memory;
/// larger batches (`read_all` of many small tensors) are cheaper as one staging copy and one map.
const DIRECT_READ_MAX_PARTS: usize = 8;

/// Two parts of one buffer (views of one storage) cannot both be mapped: such batches stage.
fn distinct_buffers(parts: &[ReadPart<'_>]) -> bool {
    parts
        .iter()
        .enumerate()
        .all(|(i, a)| parts[..i].iter().all(|b| !std::ptr::eq(a.buffer, b.buffer)))
}

/// After this many uploads of exactly the bytes just read back, the churn warning fires.
const CHURN_LIMIT: u64 = 8;

/// One region to read back: `len` bytes at byte `offset` of a tensor buffer.
pub(crate) struct ReadPart<'a> {
    pub buffer: &'a GpuBuffer,
    pub offset: u64,
    pub len: u64,
}

impl GpuDevice {
    /// Uploads `bytes` into a new buffer (`.to(&gpu)`). Returns once the bytes are staged: the
    /// GPU receives them with the next submitted batch, so the host can go on preparing work.
    pub(crate) fn upload(&self, op: &'static str, bytes: &[u8]) -> Result<GpuBuffer> {
        self.upload_into(op, bytes, false)
    }

    /// [`upload`](Self::upload) into a buffer of exactly the padded size (long-lived weights;
    /// see `alloc_exact_uninit`).
    pub(crate) fn upload_exact(&self, op: &'static str, bytes: &[u8]) -> Result<GpuBuffer> {
        self.upload_into(op, bytes, true)
    }

    fn upload_into(&self, op: &'static str, bytes: &[u8], exact: bool) -> Result<GpuBuffer> {
        // wgpu errors raised from here on are wgtensor's (see `Inside`).
        let _inside = super::device::Inside::enter();
        // Transfers are where a device the application destroyed is noticed: one non-blocking
        // poll runs its lost callback (cheap next to the copy; per-op calls do not poll).
        self.poll_once();
        self.check(op)?;
        let buf = if exact {
            self.alloc_exact_uninit(op, bytes.len() as u64)?
        } else {
            self.alloc_uninit(op, bytes.len() as u64)?
        };
        if bytes.is_empty() {
            return Ok(buf);
        }
        if self.0.unified && bytes.len() >= DIRECT_UPLOAD_MIN {
            self.write_mapped(op, &buf, bytes)?;
            let n = &self.0.transfers.direct_uploads;
            n.fetch_add(1, Ordering::Relaxed);
        } else if !self.0.unified && bytes.len() as u64 <= BELT_MAX_WRITE {
            self.write_belt(op, &buf, bytes)?;
        } else {
            self.write_staged(op, &buf, bytes)?;
        }
        let t = &self.0.transfers;
        t.uploads.fetch_add(1, Ordering::Relaxed);
        t.upload_bytes
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        self.note_upload(bytes);
        Ok(buf)
    }

    /// Unified memory: map the tensor's own buffer and copy once. The buffer is not in the
    /// pending batch (fresh, or pooled after its last use was submitted); if submitted work still
    /// uses it, the mapping waits for that work, as wgpu guarantees.
    fn write_mapped(&self, op: &'static str, buf: &GpuBuffer, bytes: &[u8]) -> Result<()> {
        let (tx, rx) = mpsc::channel();
        self.scoped(op, 0, || {
            buf.buffer
                .map_async(wgpu::MapMode::Write, ..buf.size, move |r| {
                    let _ = tx.send(r);
                })
        })?;
        let mapped = self.await_map(op, &rx)?;
        self.check_mapped(op, mapped, "the tensor buffer for upload")?;
        {
            let mut view =
                buf.buffer
                    .get_mapped_range_mut(..buf.size)
                    .map_err(|e| Error::Wgpu {
                        op,
                        device: self.label().to_string(),
                        message: e.to_string(),
                    })?;
            view.slice(..bytes.len()).copy_from_slice(bytes);
            // The padding of odd byte counts reads as zeros, as on the staged path.
            view.slice(bytes.len()..).fill(0);
        }
        // The view is dropped above: unmapping while it lives would panic.
        let _turn = self.gl_turn();
        buf.buffer.unmap();
        Ok(())
    }

    /// Discrete memory: copy into a reused, already-mapped staging chunk and record the copy into
    /// the pending batch. `write_buffer` would allocate (and map) a fresh staging buffer per call.
    fn write_belt(&self, op: &'static str, buf: &GpuBuffer, bytes: &[u8]) -> Result<()> {
        let padded = pad4(bytes.len() as u64);
        let Some(size) = wgpu::BufferSize::new(padded) else {
            return Ok(());
        };
        let dev = &self.0.device;
        let written = self.with_batch(op, |b| {
            let (enc, belt) = b.encoder_and_belt(dev, BELT_CHUNK);
            // The belt asserts on a chunk it cannot map (possible once the device is lost):
            // that becomes an error, and a fresh belt replaces the broken one.
            self.scoped(op, padded, || {
                catch_unwind(AssertUnwindSafe(|| {
                    let mut view = belt.write_buffer(enc, &buf.buffer, 0, size);
                    view.slice(..bytes.len()).copy_from_slice(bytes);
                    // Odd f16/u8 counts: the padding reads as zeros, as on the other paths.
                    view.slice(bytes.len()..).fill(0);
                }))
            })
        })??;
        if written.is_err() {
            // Its chunks go back to the driver, which on GL takes the context.
            let broken = self.0.batch.lock().belt.take();
            let _turn = self.gl_turn();
            drop(broken);
            self.check(op)?;
            return Err(Error::Wgpu {
                op,
                device: self.label().to_string(),
                message: "the upload staging buffer could not be mapped".into(),
            });
        }
        Ok(())
    }

    /// Very large uploads: stage through `queue.write_buffer`, whose one-off staging buffer is
    /// freed after the copy instead of being kept in the belt.
    fn write_staged(&self, op: &'static str, buf: &GpuBuffer, bytes: &[u8]) -> Result<()> {
        let whole = bytes.len() & !(ALIGN as usize - 1);
        self.scoped(op, 0, || {
            // `write_buffer` copies into wgpu's staging memory now and lands before the next
            // submit's commands, which always precede any kernel or readback that uses it.
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
        self.note_written(op, bytes.len() as u64)
    }

    /// Reads several regions back with one submit and one wait; `consume(i, bytes)` receives each
    /// region while the staging buffer is mapped (so the caller copies once, into its own type).
    pub(crate) fn read_many<R>(
        &self,
        op: &'static str,
        parts: &[ReadPart<'_>],
        mut consume: impl FnMut(usize, &[u8]) -> R,
    ) -> Result<Vec<R>> {
        // wgpu errors raised from here on are wgtensor's (see `Inside`).
        let _inside = super::device::Inside::enter();
        self.poll_once();
        self.check(op)?;
        // Each region is copied as whole words to its own 4-aligned slot of one staging buffer.
        let mut slots = Vec::with_capacity(parts.len());
        let mut total = 0u64;
        for p in parts {
            let start = p.offset / ALIGN * ALIGN;
            let size = if p.len == 0 {
                0
            } else {
                pad4(p.offset + p.len) - start
            };
            slots.push((start, size, total));
            total += size;
        }
        // Data that depends on kernels that read ids: their error words travel back behind the
        // data (the same submit and wait), and a recorded bad id fails this call (`ids.rs`).
        // With no parts (`synchronize`): the checks the calling thread launched. Every other
        // pending check rides along, resolved but reported only to its data's readers.
        let relevant = if parts.is_empty() {
            self.0.errors.of_thread()?
        } else {
            self.0
                .errors
                .covering(parts.iter().map(|p| &p.buffer.buffer))?
        };
        let reported = relevant.len();
        let checks = self.0.errors.with_outstanding(relevant);
        if total == 0 && checks.is_empty() {
            return Ok((0..parts.len()).map(|i| consume(i, &[])).collect());
        }
        let began = Instant::now();
        if checks.is_empty()
            && self.0.unified
            && parts.len() <= DIRECT_READ_MAX_PARTS
            && distinct_buffers(parts)
        {
            let result = self.read_direct(op, parts, &mut consume);
            self.count_reads(began, parts);
            if result.is_ok() {
                let n = &self.0.transfers.direct_downloads;
                n.fetch_add(parts.len() as u64, Ordering::Relaxed);
            }
            return result;
        }
        let words = checks.len() as u64 * super::ids::BYTES;
        let needed = total + words;
        let capacity = super::memory::bucket(needed, &self.0.limits).max(needed);
        let staging = self.take_staging(op, capacity)?;
        self.record(op, |enc| {
            for (p, &(start, size, at)) in parts.iter().zip(&slots) {
                if size > 0 {
                    enc.copy_buffer_to_buffer(&p.buffer.buffer, start, &staging, at, size);
                }
            }
            for (k, c) in checks.iter().enumerate() {
                c.copy(enc, &staging, total + k as u64 * super::ids::BYTES);
            }
        })?;
        // A failure from here on leaves the checks pending (their words are not cleared), so
        // the next readback of the data reads them again.
        let index = self.flush(op)?;
        let result = self
            .map_and_consume(op, &staging, needed, index, |view| {
                let mut first = Ok(());
                for (k, c) in checks.iter().enumerate() {
                    let at = (total + k as u64 * super::ids::BYTES) as usize;
                    let r = c.resolve(&view[at..at + super::ids::BYTES as usize]);
                    if k < reported && first.is_ok() && r.is_err() {
                        c.mark_reported();
                        first = r;
                    }
                }
                first?;
                Ok(parts
                    .iter()
                    .zip(&slots)
                    .enumerate()
                    .map(|(i, (p, &(start, _, at)))| {
                        let lo = (at + p.offset - start) as usize;
                        consume(i, &view[lo..lo + p.len as usize])
                    })
                    .collect::<Vec<R>>())
            })
            .and_then(|r| r);
        // A buffer the pool does not keep goes back to the driver (the GL context, on GL).
        let _turn = self.gl_turn();
        if !matches!(result, Err(ref e) if !matches!(e, Error::IndexOutOfRange { .. })) {
            self.0.staging.give(capacity, staging);
        }
        self.count_reads(began, parts);
        result
    }

    fn count_reads(&self, began: Instant, parts: &[ReadPart<'_>]) {
        let t = &self.0.transfers;
        t.wait_nanos
            .fetch_add(began.elapsed().as_nanos() as u64, Ordering::Relaxed);
        t.downloads.fetch_add(parts.len() as u64, Ordering::Relaxed);
        t.download_bytes
            .fetch_add(parts.iter().map(|p| p.len).sum(), Ordering::Relaxed);
    }

    /// Unified memory: maps each tensor buffer itself and hands its bytes to `consume`, skipping
    /// the GPU copy into staging and the second host-visible buffer.
    ///
    /// No lock is held across the wait: the batch is submitted under the batch lock, the buffers
    /// are registered as mapped, and the lock is released. Other threads keep recording
    /// meanwhile; a submit waits until the buffers are unmapped (wgpu rejects a batch that uses
    /// a mapped buffer), and so does a second readback.
    fn read_direct<R>(
        &self,
        op: &'static str,
        parts: &[ReadPart<'_>],
        consume: &mut impl FnMut(usize, &[u8]) -> R,
    ) -> Result<Vec<R>> {
        // Map offsets must be multiples of 8 (`MAP_ALIGNMENT`), lengths multiples of 4.
        let ranges: Vec<(u64, u64)> = parts
            .iter()
            .map(|p| {
                let start = p.offset / wgpu::MAP_ALIGNMENT * wgpu::MAP_ALIGNMENT;
                let end = if p.len == 0 {
                    start
                } else {
                    pad4(p.offset + p.len)
                };
                (start, end)
            })
            .collect();
        let mapped: Vec<wgpu::Buffer> = parts.iter().map(|p| p.buffer.buffer.clone()).collect();
        let q = &self.0.batch;
        let (mut b, unmapped) = q.wait_unmapped(q.lock(), self.timeout(), |b| !b.mapped.is_empty());
        self.unmapped_or_error(op, unmapped)?;
        let (index, retired) = self.submit_locked(op, &mut b);
        if index.is_ok() {
            b.mapped.extend(mapped.iter().cloned());
        }
        drop(b);
        self.0.pool.put(retired);
        let index = index?;
        // Unregisters the buffers on every path out (errors and panics included).
        struct Unmark<'a>(&'a GpuDevice, Vec<wgpu::Buffer>);
        impl Drop for Unmark<'_> {
            fn drop(&mut self) {
                self.0 .0.batch.unmark_mapped(&self.1);
            }
        }
        let _unmark = Unmark(self, mapped);
        // Until then, a submit or readback of this thread (inside the consumer: a `map_read`
        // closure) is an error at once, not a wait for this very mapping.
        let _held = q.hold();
        if index.is_some() {
            // Blocks in the driver until the batch that produced the data is done; the map
            // below then completes at the next poll.
            self.wait(op, index)?;
        }
        let mut receivers = Vec::with_capacity(parts.len());
        let mut status = Ok(());
        for (p, &(start, end)) in parts.iter().zip(&ranges) {
            if end == start {
                receivers.push(None);
                continue;
            }
            let (tx, rx) = mpsc::channel();
            let mapped = self.scoped(op, 0, || {
                p.buffer
                    .buffer
                    .map_async(wgpu::MapMode::Read, start..end, move |r| {
                        let _ = tx.send(r);
                    })
            });
            if let Err(e) = mapped {
                status = Err(e);
                break;
            }
            receivers.push(Some(rx));
        }
        if status.is_ok() {
            for rx in receivers.iter().flatten() {
                match self.await_map(op, rx) {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        // Mapping is the one call that still fails after device loss.
                        status = self.check(op).and(Err(Error::Wgpu {
                            op,
                            device: self.label().to_string(),
                            message: format!("mapping the tensor buffer for readback failed: {e}"),
                        }));
                        break;
                    }
                    Err(e) => {
                        status = Err(e);
                        break;
                    }
                }
            }
        }
        let out =
            status.and_then(|()| {
                parts
                    .iter()
                    .zip(&ranges)
                    .enumerate()
                    .map(|(i, (p, &(start, end)))| {
                        if end == start {
                            return Ok(consume(i, &[]));
                        }
                        let view = p.buffer.buffer.get_mapped_range(start..end).map_err(|e| {
                            Error::Wgpu {
                                op,
                                device: self.label().to_string(),
                                message: e.to_string(),
                            }
                        })?;
                        let lo = (p.offset - start) as usize;
                        Ok(consume(i, &view[lo..lo + p.len as usize]))
                    })
                    .collect::<Result<Vec<R>>>()
            });
        // Every view is dropped above. Unmapping also aborts a map still pending (after a
        // timeout), so the buffer is usable again once `_unmark` drops.
        for (p, rx) in parts.iter().zip(&receivers) {
            if rx.is_some() {
                let _ = self.scoped(op, 0, || p.buffer.buffer.unmap());
            }
        }
        out
    }

    /// Maps `staging` after submission `index`, hands the first `len` bytes to `f`, unmaps.
    fn map_and_consume<R>(
        &self,
        op: &'static str,
        staging: &wgpu::Buffer,
        len: u64,
        index: Option<wgpu::SubmissionIndex>,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        let (tx, rx) = mpsc::channel();
        {
            let _turn = self.gl_turn();
            staging.map_async(wgpu::MapMode::Read, ..len, move |r| {
                let _ = tx.send(r);
            });
        }
        // The map callback runs inside a poll once the copy has finished.
        self.wait(op, index)?;
        let mapped = self.await_map(op, &rx)?;
        self.check_mapped(op, mapped, "the readback buffer")?;
        let out = {
            let view = staging.get_mapped_range(..len).map_err(|e| Error::Wgpu {
                op,
                device: self.label().to_string(),
                message: e.to_string(),
            })?;
            f(&view)
        };
        // The view is dropped above: unmapping while it lives would panic.
        let _turn = self.gl_turn();
        staging.unmap();
        Ok(out)
    }

    /// The error for a failed `map_async` of `what`: the device's own error when it was lost
    /// (mapping is the one call that still fails after device loss), else the map error.
    fn check_mapped(
        &self,
        op: &'static str,
        mapped: std::result::Result<(), wgpu::BufferAsyncError>,
        what: &str,
    ) -> Result<()> {
        if mapped.is_err() {
            self.check(op)?;
            return Err(Error::Wgpu {
                op,
                device: self.label().to_string(),
                message: format!("mapping {what} failed: {mapped:?}"),
            });
        }
        Ok(())
    }

    /// Waits for a `map_async` callback: polls without blocking until it arrives (another
    /// thread's poll may have picked it up and be about to run it), bounded by the timeout.
    fn await_map(
        &self,
        op: &'static str,
        rx: &mpsc::Receiver<std::result::Result<(), wgpu::BufferAsyncError>>,
    ) -> Result<std::result::Result<(), wgpu::BufferAsyncError>> {
        let began = Instant::now();
        loop {
            if let Ok(r) = rx.try_recv() {
                return Ok(r);
            }
            self.poll_once();
            match rx.recv_timeout(std::time::Duration::from_micros(50)) {
                Ok(r) => return Ok(r),
                Err(_) if began.elapsed() < self.timeout() => {}
                Err(_) => {
                    return Err(Error::Timeout {
                        op,
                        device: self.label().to_string(),
                        waited: self.timeout(),
                    })
                }
            }
        }
    }

    fn take_staging(&self, op: &'static str, capacity: u64) -> Result<wgpu::Buffer> {
        if let Some(b) = self.0.staging.take(capacity) {
            return Ok(b);
        }
        self.scoped(op, capacity, || {
            // A separate buffer, because MAP_READ may only be combined with COPY_DST.
            self.0.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("wgtensor::readback"),
                size: capacity,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        })
    }

    /// Remembers what was read back, to recognise it if it comes straight back.
    pub(crate) fn note_read(&self, bytes: &[u8]) {
        if WARN_CHURN.load(Ordering::Relaxed) {
            *lock(&self.0.transfers.last_read) = Some(fingerprint(bytes));
        }
    }

    /// The seeds' tight-loop pitfall: the same data moved back and forth every iteration.
    fn note_upload(&self, bytes: &[u8]) {
        if !WARN_CHURN.load(Ordering::Relaxed) {
            return;
        }
        let t = &self.0.transfers;
        if *lock(&t.last_read) != Some(fingerprint(bytes)) {
            return;
        }
        let n = t.churn.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= CHURN_LIMIT && !t.warned.swap(true, Ordering::Relaxed) {
            // The library prints nothing itself: the application's logger shows this.
            log::warn!(
                "wgtensor: {n} times the same {} bytes were read back from {} and uploaded \
                 to it again; keep the tensor on the device and compute there instead \
                 (disable with wgtensor::warn_on_transfer_churn(false))",
                bytes.len(),
                self.label()
            );
        }
    }
}
