//! The pending batch (a leaf: it owns its lock and takes the wgpu device as an argument).
//!
//! Ops are recorded into one pending command encoder per device and submitted in batches (at a
//! readback, at `synchronize`, or every `FLUSH_EVERY` ops), instead of one `queue.submit` per
//! op, which costs tens of microseconds each. Dispatches go into one open compute pass; the pass
//! ends only when a copy, clear or upload must be recorded, or at submit. Kernel params of the
//! whole batch are appended to one host buffer that is written into the params ring right before
//! the submit (see `launch.rs`).

use super::sync::lock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Ops recorded before a submit is forced: enough to amortise the submit, few enough that the GPU
/// starts working while the host is still recording.
pub(crate) const FLUSH_EVERY: usize = 64;

/// Ops recorded before a submit is forced while submits are deferred
/// ([`Queue::defer_submits`]: a decode step recorded whole, then submitted once). The params
/// ring holds this many dispatches.
pub(crate) const DEFERRED_FLUSH_EVERY: usize = 2048;

/// Uploaded bytes staged by `write_buffer` before a submit is forced, so that a loop of uploads
/// without ops or readbacks does not pile up staging memory.
pub(crate) const FLUSH_WRITTEN_BYTES: u64 = 64 << 20;

/// Distinct op names remembered per batch, for the error message of a failed submit.
const NAMES_KEPT: usize = 16;

thread_local! {
    /// The queues (by address) whose buffers the calling thread holds mapped.
    static HOLDING: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Ends a [`Queue::hold`].
pub(crate) struct Held(usize);

impl Drop for Held {
    fn drop(&mut self) {
        HOLDING.with(|h| {
            let mut h = h.borrow_mut();
            if let Some(i) = h.iter().rposition(|&q| q == self.0) {
                h.remove(i);
            }
        });
    }
}

/// How [`Queue::wait_unmapped`] ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Unmapped {
    Ready,
    TimedOut,
    /// The calling thread holds the mapping it would wait for.
    HeldByCaller,
}

/// The commands recorded since the last submit.
#[derive(Default)]
pub(crate) struct Batch {
    encoder: Option<wgpu::CommandEncoder>,
    /// The open compute pass of `encoder` (it keeps the encoder locked until dropped).
    pass: Option<wgpu::ComputePass<'static>>,
    pub(crate) ops: usize,
    /// Distinct names of the ops recorded, in order (at most `NAMES_KEPT`).
    names: Vec<&'static str>,
    /// Bytes written with `queue.write_buffer` since the last submit: they reach the GPU only
    /// with a submit, so `flush` submits (an empty batch if need be) while any are waiting.
    pub(crate) written: u64,
    /// This batch's kernel params, at the dynamic offsets its dispatches were recorded with.
    pub(crate) params: Vec<u8>,
    /// Reused, persistently mapped upload staging (the pinned-memory analog) for adapters
    /// without unified memory: chunks are written on the host, copied by the pending batch and
    /// mapped again once that batch is done. Created on the first upload.
    pub(crate) belt: Option<wgpu::util::StagingBelt>,
    /// Tensor buffers a direct readback has mapped. wgpu rejects a submit that uses a mapped
    /// buffer, so no batch is submitted while this is non-empty (see `Queue::wait_unmapped`).
    pub(crate) mapped: Vec<wgpu::Buffer>,
}

/// What `Batch::take` hands to the submitter.
pub(crate) struct Taken {
    pub encoder: Option<wgpu::CommandEncoder>,
    pub written: u64,
    pub params: Vec<u8>,
    pub names: Vec<&'static str>,
}

impl Batch {
    fn open(&mut self, dev: &wgpu::Device) -> &mut wgpu::CommandEncoder {
        self.encoder.get_or_insert_with(|| {
            dev.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("wgtensor::batch"),
            })
        })
    }

    /// The batch's encoder for a copy, clear or upload: ends the open compute pass first.
    pub(crate) fn encoder(&mut self, dev: &wgpu::Device) -> &mut wgpu::CommandEncoder {
        self.pass = None;
        self.open(dev)
    }

    /// The encoder and the upload belt (created on first use with `chunk`-byte chunks).
    pub(crate) fn encoder_and_belt(
        &mut self,
        dev: &wgpu::Device,
        chunk: u64,
    ) -> (&mut wgpu::CommandEncoder, &mut wgpu::util::StagingBelt) {
        self.pass = None;
        let belt = self
            .belt
            .get_or_insert_with(|| wgpu::util::StagingBelt::new(dev.clone(), chunk));
        let enc = self.encoder.get_or_insert_with(|| {
            dev.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("wgtensor::batch"),
            })
        });
        (enc, belt)
    }

    /// The open compute pass, begun on first use.
    pub(crate) fn pass(&mut self, dev: &wgpu::Device) -> &mut wgpu::ComputePass<'static> {
        if self.pass.is_none() {
            let pass = self
                .open(dev)
                .begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("wgtensor::ops"),
                    timestamp_writes: None,
                })
                .forget_lifetime();
            self.pass = Some(pass);
        }
        self.pass.as_mut().expect("set above")
    }

    pub(crate) fn is_open(&self) -> bool {
        self.encoder.is_some()
    }

    /// Counts one recorded op; returns whether the batch is due for a submit.
    pub(crate) fn count(&mut self, op: &'static str, deferred: bool) -> bool {
        self.ops += 1;
        if self.names.len() < NAMES_KEPT && !self.names.contains(&op) {
            self.names.push(op);
        }
        self.ops
            >= if deferred {
                DEFERRED_FLUSH_EVERY
            } else {
                FLUSH_EVERY
            }
    }

    /// Appends `words` to the params at the next multiple of `align`; returns their offset.
    pub(crate) fn push_params(&mut self, words: &[u32], align: usize) -> u32 {
        let at = self.params.len().div_ceil(align) * align;
        self.params.resize(at, 0);
        self.params.extend_from_slice(bytemuck::cast_slice(words));
        at as u32
    }

    /// Ends the pass and takes everything that a submit needs.
    pub(crate) fn take(&mut self) -> Taken {
        self.pass = None;
        self.ops = 0;
        Taken {
            encoder: self.encoder.take(),
            written: std::mem::take(&mut self.written),
            params: std::mem::take(&mut self.params),
            names: std::mem::take(&mut self.names),
        }
    }
}

/// The pending batch of one device, its lock, and the buffers freed while it was open.
#[derive(Default)]
pub(crate) struct Queue {
    batch: Mutex<Batch>,
    /// Signalled whenever `Batch::mapped` shrinks.
    unmapped: Condvar,
    /// Mirrors `batch.encoder.is_some()` for `retire`, which must not take the batch lock (a
    /// buffer may be dropped while the batch lock is held, inside a recording).
    open: AtomicBool,
    /// Buffers freed while the pending encoder may still use them. They are pooled only after
    /// the encoder is submitted: a `queue.write_buffer` into a reused buffer lands before the
    /// next submit's commands, so reusing one that unsubmitted commands read would corrupt them.
    retired: Mutex<Vec<(u64, wgpu::Buffer)>>,
    /// Open [`Queue::defer_submits`] scopes (any thread's).
    deferring: std::sync::atomic::AtomicUsize,
}

/// Ends a [`Queue::defer_submits`] scope.
pub(crate) struct Deferred<'a>(&'a Queue);

impl Drop for Deferred<'_> {
    fn drop(&mut self) {
        self.0.deferring.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Queue {
    /// Until the guard drops, ops do not force a submit every [`FLUSH_EVERY`] (only every
    /// [`DEFERRED_FLUSH_EVERY`]): work whose length the caller knows (a decode step) goes to the
    /// GPU in one submit, at its readback. Readbacks, `synchronize` and large uploads still
    /// submit.
    pub(crate) fn defer_submits(&self) -> Deferred<'_> {
        self.deferring.fetch_add(1, Ordering::SeqCst);
        Deferred(self)
    }

    /// Whether a [`Queue::defer_submits`] scope is open.
    pub(crate) fn deferred(&self) -> bool {
        self.deferring.load(Ordering::SeqCst) > 0
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Batch> {
        lock(&self.batch)
    }

    /// Marks the batch open before a recording (call with the batch lock held).
    pub(crate) fn mark_open(&self) {
        self.open.store(true, Ordering::SeqCst);
    }

    /// Records whether the batch holds an encoder (call with the batch lock held).
    pub(crate) fn note_open(&self, b: &Batch) {
        self.open.store(b.is_open(), Ordering::SeqCst);
    }

    /// Waits (releasing the lock) until no buffer is mapped. Never waits for a mapping the
    /// calling thread itself holds (a readback or submit inside a `map_read` closure): that
    /// would last until the timeout, so it is [`Unmapped::HeldByCaller`] at once.
    pub(crate) fn wait_unmapped<'a>(
        &'a self,
        mut b: MutexGuard<'a, Batch>,
        timeout: Duration,
        busy: impl Fn(&Batch) -> bool,
    ) -> (MutexGuard<'a, Batch>, Unmapped) {
        let deadline = Instant::now() + timeout;
        while busy(&b) {
            if self.held_here() {
                return (b, Unmapped::HeldByCaller);
            }
            let now = Instant::now();
            if now >= deadline {
                return (b, Unmapped::TimedOut);
            }
            // Short slices: a mapping thread that died without unmapping is caught by the deadline.
            let slice = (deadline - now).min(Duration::from_millis(50));
            b = self
                .unmapped
                .wait_timeout(b, slice)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        (b, Unmapped::Ready)
    }

    /// Notes, until the guard drops, that the calling thread holds buffers of this queue's
    /// device mapped (a direct readback running its consumer).
    pub(crate) fn hold(&self) -> Held {
        let me = self as *const Queue as usize;
        HOLDING.with(|h| h.borrow_mut().push(me));
        Held(me)
    }

    fn held_here(&self) -> bool {
        let me = self as *const Queue as usize;
        HOLDING.with(|h| h.borrow().contains(&me))
    }

    /// Forgets mapped `buffers` and wakes waiting submitters.
    pub(crate) fn unmark_mapped(&self, buffers: &[wgpu::Buffer]) {
        let mut b = self.lock();
        b.mapped.retain(|m| !buffers.contains(m));
        drop(b);
        self.unmapped.notify_all();
    }

    /// Parks a freed buffer until the open batch is submitted; returns it when no batch is open
    /// (it may then be pooled at once: every command using it has been submitted).
    pub(crate) fn retire(
        &self,
        capacity: u64,
        buffer: wgpu::Buffer,
    ) -> Option<(u64, wgpu::Buffer)> {
        if self.open.load(Ordering::SeqCst) {
            lock(&self.retired).push((capacity, buffer));
            None
        } else {
            Some((capacity, buffer))
        }
    }

    /// The parked buffers, once the batch they were parked for has been submitted.
    pub(crate) fn take_retired(&self) -> Vec<(u64, wgpu::Buffer)> {
        std::mem::take(&mut *lock(&self.retired))
    }
}
