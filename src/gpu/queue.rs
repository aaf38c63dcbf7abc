//! Lazy submission: ops are recorded into one pending command encoder per device and submitted
//! in batches (at a readback, at `synchronize`, or every `FLUSH_EVERY` ops), instead of one
//! `queue.submit` per op, which costs tens of microseconds each.

use super::device::GpuDevice;
use crate::Result;
use std::sync::Mutex;

/// Ops recorded before a submit is forced: enough to amortise the submit, few enough that the GPU
/// starts working while the host is still recording.
pub(crate) const FLUSH_EVERY: usize = 64;

/// Uploaded bytes staged by `write_buffer` before a submit is forced, so that a loop of uploads
/// without ops or readbacks does not pile up staging memory.
pub(crate) const FLUSH_WRITTEN_BYTES: u64 = 64 << 20;

#[derive(Default)]
pub(crate) struct Pending {
    pub(crate) encoder: Option<wgpu::CommandEncoder>,
    pub(crate) ops: usize,
    /// Bytes written with `queue.write_buffer` since the last submit: they reach the GPU only
    /// with a submit, so `flush` submits (an empty batch if need be) while any are waiting.
    written: u64,
    /// Buffers freed while the pending encoder may still use them. They are pooled only after
    /// the encoder is submitted: a `queue.write_buffer` into a reused buffer lands before the
    /// next submit's commands, so reusing one that unsubmitted commands read would corrupt them.
    retired: Vec<(u64, wgpu::Buffer)>,
    /// Reused, persistently mapped upload staging (the pinned-memory analog) for adapters
    /// without unified memory: chunks are written on the host, copied by the pending batch and
    /// mapped again once that batch is done. Created on the first upload.
    pub(crate) belt: Option<wgpu::util::StagingBelt>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl GpuDevice {
    /// Records `op`'s commands into the pending encoder (inside error scopes).
    pub(crate) fn record(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut wgpu::CommandEncoder),
    ) -> Result<()> {
        let flush_now = {
            let mut p = lock(&self.0.pending);
            let Pending { encoder, ops, .. } = &mut *p;
            self.scoped(op, 0, || f(self.batch_encoder(encoder)))?;
            *ops += 1;
            *ops >= FLUSH_EVERY
        };
        if flush_now {
            self.flush(op)?;
        }
        Ok(())
    }

    /// The pending batch's encoder, opened on first use.
    pub(crate) fn batch_encoder<'a>(
        &self,
        slot: &'a mut Option<wgpu::CommandEncoder>,
    ) -> &'a mut wgpu::CommandEncoder {
        slot.get_or_insert_with(|| {
            self.0
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("wgtensor::batch"),
                })
        })
    }

    /// Submits the pending encoder, if any; returns the index of that submission.
    pub(crate) fn flush(&self, op: &'static str) -> Result<Option<wgpu::SubmissionIndex>> {
        // The pending lock is held until the submit is done. Otherwise another thread could
        // find nothing pending while this batch is taken but not yet submitted, and then
        // (a) map a readback buffer this batch copies into, which wgpu rejects, or (b) pool a
        // buffer this batch still reads and `write_buffer` into it, which would land first.
        let mut p = lock(&self.0.pending);
        let (index, retired) = self.submit_locked(op, &mut p);
        drop(p);
        self.pool_return(retired);
        index
    }

    /// Holds the pending lock for the caller: nothing can be recorded or submitted on this
    /// device until the guard drops. Direct readbacks map tensor buffers under it, because a
    /// batch that uses a mapped buffer is rejected at submit.
    pub(crate) fn lock_pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        lock(&self.0.pending)
    }

    /// `flush` for a caller that already holds the pending lock; returns the buffers that
    /// became poolable (hand them to `pool_return`, which takes only the pool lock).
    pub(crate) fn submit_locked(
        &self,
        op: &'static str,
        p: &mut Pending,
    ) -> (
        Result<Option<wgpu::SubmissionIndex>>,
        Vec<(u64, wgpu::Buffer)>,
    ) {
        p.ops = 0;
        let retired = std::mem::take(&mut p.retired);
        let written = std::mem::take(&mut p.written);
        // Staging chunks written for this batch are unmapped before it is submitted and
        // recalled (mapped again, asynchronously) after.
        if let Some(belt) = p.belt.as_mut() {
            belt.finish();
        }
        let index = match p.encoder.take() {
            // Encoder errors (wgpu 26+) surface at finish/submit, so both run inside the scopes.
            Some(enc) => self
                .scoped(op, 0, || self.0.queue.submit([enc.finish()]))
                .map(Some),
            // Staged uploads only move with a submit.
            None if written > 0 => self.scoped(op, 0, || self.0.queue.submit([])).map(Some),
            None => Ok(None),
        };
        if let Some(belt) = p.belt.as_mut() {
            belt.recall();
        }
        (index, retired)
    }

    /// Counts bytes staged by `write_buffer`; submits once enough are waiting.
    pub(crate) fn note_written(&self, op: &'static str, bytes: u64) -> Result<()> {
        let flush_now = {
            let mut p = lock(&self.0.pending);
            p.written += bytes.max(1);
            p.written >= FLUSH_WRITTEN_BYTES
        };
        if flush_now {
            self.flush(op)?;
        }
        Ok(())
    }

    /// Hands a freed buffer to the pool, or parks it until the pending encoder is submitted.
    pub(crate) fn retire(&self, capacity: u64, buffer: wgpu::Buffer) {
        let mut p = lock(&self.0.pending);
        if p.encoder.is_some() {
            p.retired.push((capacity, buffer));
        } else {
            drop(p);
            self.pool_return(vec![(capacity, buffer)]);
        }
    }
}
