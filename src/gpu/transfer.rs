//! Uploads and readbacks (`.to(&gpu)`, `.cpu()`), with reusable staging buffers, batched
//! readbacks (one submit and one wait for many tensors) and transfer statistics.

use super::buffer::{pad4, GpuBuffer, ALIGN};
use super::device::GpuDevice;
use super::queue::Pending;
use crate::{Error, Result};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::Instant;

/// Staging buffers kept per size bucket, and in total: reuse is the pinned-memory analog, but a
/// program that once read a huge tensor should not keep that much host-visible memory forever.
const STAGING_PER_BUCKET: usize = 4;
const STAGING_MAX_BYTES: u64 = 256 << 20;

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

/// Whether to warn about data moved back and forth (`wgtensor::warn_on_transfer_churn`).
pub(crate) static WARN_CHURN: AtomicBool = AtomicBool::new(false);

/// Transfer counters of one device.
#[derive(Default)]
pub(crate) struct TransferCounters {
    pub uploads: AtomicU64,
    pub upload_bytes: AtomicU64,
    pub downloads: AtomicU64,
    pub download_bytes: AtomicU64,
    pub wait_nanos: AtomicU64,
    pub churn: AtomicU64,
    pub direct_uploads: AtomicU64,
    pub direct_downloads: AtomicU64,
    warned: AtomicBool,
    /// Length and a cheap fingerprint of the last bytes read back, to spot them coming back.
    last_read: Mutex<Option<(usize, u64)>>,
}

/// Reusable MAP_READ buffers by bucket size.
#[derive(Default)]
pub(crate) struct StagingPool {
    free: HashMap<u64, Vec<wgpu::Buffer>>,
    bytes: u64,
}

/// FNV-1a over the length, the first and the last 256 bytes: enough to tell "the same tensor
/// again" in a loop, cheap enough to run on every transfer.
fn fingerprint(bytes: &[u8]) -> (usize, u64) {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let head = &bytes[..bytes.len().min(256)];
    let tail = &bytes[bytes.len().saturating_sub(256)..];
    for &b in head.iter().chain(tail) {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    (bytes.len(), h)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

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
        let buf = self.alloc_uninit(op, bytes.len() as u64)?;
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
        if mapped.is_err() {
            self.check(op)?;
            return Err(Error::Wgpu {
                op,
                device: self.label().to_string(),
                message: format!("mapping the tensor buffer for upload failed: {mapped:?}"),
            });
        }
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
        let flush_now = {
            let mut p = self.lock_pending();
            let Pending {
                encoder, belt, ops, ..
            } = &mut *p;
            let belt = belt.get_or_insert_with(|| {
                wgpu::util::StagingBelt::new(self.0.device.clone(), BELT_CHUNK)
            });
            let enc = self.batch_encoder(encoder);
            // The belt asserts on a chunk it cannot map (possible once the device is lost):
            // that becomes an error, and a fresh belt replaces the broken one.
            let written = self.scoped(op, padded, || {
                catch_unwind(AssertUnwindSafe(|| {
                    let mut view = belt.write_buffer(enc, &buf.buffer, 0, size);
                    view.slice(..bytes.len()).copy_from_slice(bytes);
                    // Odd f16/u8 counts: the padding reads as zeros, as on the other paths.
                    view.slice(bytes.len()..).fill(0);
                }))
            })?;
            if written.is_err() {
                p.belt = None;
                self.check(op)?;
                return Err(Error::Wgpu {
                    op,
                    device: self.label().to_string(),
                    message: "the upload staging buffer could not be mapped".into(),
                });
            }
            *ops += 1;
            *ops >= super::queue::FLUSH_EVERY
        };
        if flush_now {
            self.flush(op)?;
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
        if total == 0 {
            return Ok((0..parts.len()).map(|i| consume(i, &[])).collect());
        }
        let began = Instant::now();
        if self.0.unified && parts.len() <= DIRECT_READ_MAX_PARTS && distinct_buffers(parts) {
            let result = self.read_direct(op, parts, &mut consume);
            self.count_reads(began, parts);
            if result.is_ok() {
                let n = &self.0.transfers.direct_downloads;
                n.fetch_add(parts.len() as u64, Ordering::Relaxed);
            }
            return result;
        }
        let capacity = super::memory::bucket(total, &self.0.limits).max(total);
        let staging = self.take_staging(op, capacity)?;
        self.record(op, |enc| {
            for (p, &(start, size, at)) in parts.iter().zip(&slots) {
                if size > 0 {
                    enc.copy_buffer_to_buffer(&p.buffer.buffer, start, &staging, at, size);
                }
            }
        })?;
        let index = self.flush(op)?;
        let result = self.map_and_consume(op, &staging, total, index, |view| {
            parts
                .iter()
                .zip(&slots)
                .enumerate()
                .map(|(i, (p, &(start, _, at)))| {
                    let lo = (at + p.offset - start) as usize;
                    consume(i, &view[lo..lo + p.len as usize])
                })
                .collect::<Vec<R>>()
        });
        if result.is_ok() {
            self.give_staging(capacity, staging);
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
    /// The pending lock is held from the submit to the unmap. A batch that uses a mapped buffer
    /// is rejected at submit, so no thread may record or submit on this device meanwhile; the
    /// lock also keeps two readbacks from mapping one buffer at once.
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
        let mut pending = self.lock_pending();
        let (index, retired) = self.submit_locked(op, &mut pending);
        self.pool_return(retired);
        let index = index?;
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
        // timeout), so the buffer is usable again once the lock is released.
        for (p, rx) in parts.iter().zip(&receivers) {
            if rx.is_some() {
                let _ = self.scoped(op, 0, || p.buffer.buffer.unmap());
            }
        }
        drop(pending);
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
        staging.map_async(wgpu::MapMode::Read, ..len, move |r| {
            let _ = tx.send(r);
        });
        // The map callback runs inside a poll once the copy has finished.
        self.wait(op, index)?;
        let mapped = self.await_map(op, &rx)?;
        if mapped.is_err() {
            // Mapping is the one call that still fails after device loss.
            self.check(op)?;
            return Err(Error::Wgpu {
                op,
                device: self.label().to_string(),
                message: format!("mapping the readback buffer failed: {mapped:?}"),
            });
        }
        let out = {
            let view = staging.get_mapped_range(..len).map_err(|e| Error::Wgpu {
                op,
                device: self.label().to_string(),
                message: e.to_string(),
            })?;
            f(&view)
        };
        // The view is dropped above: unmapping while it lives would panic.
        staging.unmap();
        Ok(out)
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
        {
            let mut pool = lock(&self.0.staging);
            if let Some(b) = pool.free.get_mut(&capacity).and_then(Vec::pop) {
                pool.bytes -= capacity;
                return Ok(b);
            }
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

    fn give_staging(&self, capacity: u64, buffer: wgpu::Buffer) {
        let mut pool = lock(&self.0.staging);
        let held = pool.free.get(&capacity).map_or(0, Vec::len);
        if held < STAGING_PER_BUCKET && pool.bytes + capacity <= STAGING_MAX_BYTES {
            pool.free.entry(capacity).or_default().push(buffer);
            pool.bytes += capacity;
        }
    }

    /// Drops cached staging buffers (part of `empty_cache`).
    pub(crate) fn empty_staging(&self) {
        let mut pool = lock(&self.0.staging);
        pool.free.clear();
        pool.bytes = 0;
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
            eprintln!(
                "wgtensor warning: {n} times the same {} bytes were read back from {} and uploaded \
                 to it again; keep the tensor on the device and compute there instead \
                 (disable with wgtensor::warn_on_transfer_churn(false))",
                bytes.len(),
                self.label()
            );
        }
    }
}
