//! One opened wgpu device: it composes the leaf types (allocator, pending batch, staging, kernel
//! cache), captures errors, tracks loss, records into and submits the pending batch, and waits
//! with timeouts. The layering and lock rules are in the module doc of `src/gpu/mod.rs`.
//!
//! wgpu's defaults are hostile to a library: the uncaptured-error handler panics, a lost device
//! goes quiet, and `poll` can panic. Everything here exists to turn those into `Result`s.

use super::kernels::{panic_message, KernelCache};
use super::memory::{MemStats, Pool};
use super::queue::{Batch, Queue, FLUSH_WRITTEN_BYTES};
use super::staging::{StagingPool, TransferCounters};
use super::sync::GlTurn;
use crate::{Error, Result};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes of the params window each dispatch binds (256 words: far above any kernel's metadata;
/// larger params get a buffer of their own).
pub(crate) const PARAM_WINDOW: u64 = 1024;

/// Length of one blocking poll: waits are sliced so that a deadline is noticed promptly.
const POLL_SLICE: Duration = Duration::from_millis(50);

/// Longest pause between two non-blocking polls of a wait on the GL backend (the pauses grow
/// from a few microseconds to this): a blocking poll there would hold the GL context, and with
/// it every other thread's pipeline builds, uploads and readbacks, for the whole slice.
const GL_POLL_PAUSE_MAX: Duration = Duration::from_millis(2);

/// `WGTENSOR_VALIDATE=1`: every op runs inside its own error scopes, so a wgpu error names the
/// exact op that caused it (slower: each scope pop is a round trip into wgpu).
pub(crate) fn validate_each_op() -> bool {
    std::env::var("WGTENSOR_VALIDATE").is_ok_and(|v| v == "1")
}

/// Default wait for the GPU before [`Error::Timeout`]: generous, because a software adapter can
/// take seconds on large tensors, yet finite, so a hung driver cannot hang the caller.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// `WGTENSOR_DISABLE_UNIFIED_MEMORY=1`: transfers take the discrete-GPU paths on every adapter.
pub(crate) fn unified_memory_disabled() -> bool {
    std::env::var("WGTENSOR_DISABLE_UNIFIED_MEMORY").is_ok_and(|v| v == "1")
}

/// A GPU device opened by wgtensor (or wrapped from the application). Cheap to clone; clones
/// share the wgpu device, queue, pipeline cache and statistics.
#[derive(Clone)]
pub(crate) struct GpuDevice(pub(crate) Arc<Inner>);

pub(crate) struct Inner {
    /// Canonical device string (`gpu:0`, `gl:0`, `wgpu:0` for wrapped devices).
    pub label: String,
    pub info: wgpu::AdapterInfo,
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub limits: wgpu::Limits,
    /// Tensor buffers are mappable (`MAPPABLE_PRIMARY_BUFFERS`, unified memory): uploads write
    /// straight into them.
    pub unified: bool,
    pub health: Arc<Health>,
    pub kernels: KernelCache,
    pub mem: MemStats,
    pub pool: Pool,
    pub batch: Queue,
    pub transfers: TransferCounters,
    pub staging: StagingPool,
    /// The params ring: each batch's kernel params, written just before its submit and read by
    /// its dispatches at dynamic offsets.
    pub ring: wgpu::Buffer,
    /// Where kernels that read ids record an out-of-range id, and which buffers depend on
    /// those records (`ids.rs`).
    pub errors: super::ids::IdChecks,
    /// Kernel variants chosen by timing them on this adapter (`autotune.rs`).
    pub tuner: super::autotune::Tuner,
    /// Per-kernel GPU time while `Device::profile` runs (`profile.rs`).
    pub profiler: super::profile::Profiler,
    /// `min_storage_buffer_offset_alignment`: where params windows may start.
    pub param_align: usize,
    /// `WGTENSOR_VALIDATE=1` when the device opened.
    pub validate: bool,
    timeout_ns: AtomicU64,
    /// Held around each `device.poll` (a wait polls in short slices, holding it per slice):
    /// wgpu-core 30 asserts ("If the queue is empty, the current submission index ...") when two
    /// threads poll one device at once, so polls take turns. Nothing else takes this lock, so
    /// recording and submitting never wait for it.
    poll_lock: std::sync::Mutex<()>,
}

/// State written from wgpu's callbacks, which may run on any thread.
#[derive(Default)]
pub(crate) struct Health {
    lost: AtomicBool,
    lost_reason: Mutex<String>,
    /// Errors that escaped every error scope, with the thread whose wgtensor call raised them
    /// (wgpu reports them synchronously, on that thread). Each is reported (and cleared) at
    /// that thread's next sync point, never at another thread's: a data-loader worker must not
    /// take the training thread's errors.
    uncaptured: Mutex<Vec<(std::thread::ThreadId, String)>>,
    /// Whether `uncaptured` is non-empty: the per-op check reads only this.
    any_uncaptured: AtomicBool,
}

impl Health {
    pub(crate) fn mark_lost(&self, reason: String) {
        if let Ok(mut r) = self.lost_reason.lock() {
            if r.is_empty() {
                *r = reason;
            }
        }
        self.lost.store(true, Ordering::SeqCst);
    }
}

/// An application's handler for the wgpu errors of its own calls on a device it shares with
/// wgtensor (`Device::from_wgpu_with_error_handler`).
pub(crate) type AppErrorHandler = Arc<dyn Fn(wgpu::Error) + Send + Sync>;

thread_local! {
    /// Depth of wgtensor calls on this thread that use wgpu: wgpu reports a call's uncaptured
    /// errors synchronously, on the calling thread, so an error seen while this is non-zero is
    /// wgtensor's own.
    static IN_WGTENSOR: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Marks the calling thread as inside a wgtensor call until dropped.
pub(crate) struct Inside;

impl Inside {
    pub(crate) fn enter() -> Inside {
        IN_WGTENSOR.with(|d| d.set(d.get() + 1));
        Inside
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        IN_WGTENSOR.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

impl GpuDevice {
    /// Wraps an opened device: installs the error handler and the loss callback. `app` is
    /// `Some` for a device the application shares (`Device::from_wgpu*`): its errors stay its
    /// own (`app` handler, or a log line), and only errors of wgtensor's calls are recorded.
    pub(crate) fn new(
        label: String,
        info: wgpu::AdapterInfo,
        device: wgpu::Device,
        queue: wgpu::Queue,
        app: Option<Option<AppErrorHandler>>,
    ) -> GpuDevice {
        let health = Arc::new(Health::default());
        // The default handler panics; ours records wgtensor's errors so its next call returns
        // them, and hands the application's to the application.
        let h = health.clone();
        let shared_label = label.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            let ours = IN_WGTENSOR.with(|d| d.get() > 0);
            match &app {
                Some(Some(handler)) if !ours => return handler(e),
                Some(None) if !ours => {
                    return log::error!(
                        "wgpu error from the application's own work on {shared_label} (not \
                         wgtensor's; pass a handler to Device::from_wgpu_with_error_handler): {e}"
                    )
                }
                _ => {}
            }
            if let Ok(mut v) = h.uncaptured.lock() {
                v.push((std::thread::current().id(), e.to_string()));
            }
            h.any_uncaptured.store(true, Ordering::SeqCst);
        }));
        // After loss wgpu reports nothing more (buffer creation and submit "succeed"), so our
        // own flag is the only reliable signal; every sync point checks it.
        let h = health.clone();
        device.set_device_lost_callback(move |reason, msg| {
            h.mark_lost(if msg.is_empty() {
                format!("{reason:?}")
            } else {
                format!("{reason:?}: {msg}")
            });
        });
        let limits = device.limits();
        // WGTENSOR_DISABLE_UNIFIED_MEMORY=1 takes the discrete-GPU transfer paths on any adapter
        // (how CI covers them on the software adapter).
        let unified = device
            .features()
            .contains(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS)
            && !unified_memory_disabled();
        if std::env::var("WGTENSOR_WARN_TRANSFERS").is_ok_and(|v| v == "1") {
            super::staging::WARN_CHURN.store(true, Ordering::Relaxed);
        }
        let param_align = (limits.min_storage_buffer_offset_alignment as usize).max(4);
        // Room for a full batch of dispatches (a deferred one: a whole decode step), each window
        // at an aligned offset.
        let ring_size =
            (super::queue::DEFERRED_FLUSH_EVERY as u64 + 1) * (PARAM_WINDOW + param_align as u64);
        let gl = info.backend == wgpu::Backend::Gl;
        let (ring, errors) = {
            let _turn = GlTurn::take(gl);
            let ring = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("wgtensor::params"),
                size: ring_size,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            (
                ring,
                super::ids::IdChecks::new(&device, param_align as u64, gl),
            )
        };
        let tuner = super::autotune::Tuner::new(&info);
        GpuDevice(Arc::new(Inner {
            errors,
            tuner,
            profiler: Default::default(),
            label,
            info,
            device,
            queue,
            limits,
            unified,
            health,
            kernels: KernelCache::new(gl),
            mem: MemStats::default(),
            pool: Pool::default(),
            batch: Queue::default(),
            transfers: TransferCounters::default(),
            staging: StagingPool::default(),
            ring,
            param_align,
            validate: validate_each_op(),
            timeout_ns: AtomicU64::new(DEFAULT_TIMEOUT.as_nanos() as u64),
            poll_lock: std::sync::Mutex::new(()),
        }))
    }

    pub(crate) fn label(&self) -> &str {
        &self.0.label
    }

    /// `name (backend)` of the adapter, for error messages.
    pub(crate) fn adapter_name(&self) -> String {
        format!("{}, {:?}", self.0.info.name, self.0.info.backend)
    }

    /// Whether this device runs on wgpu's GL backend, whose one context per adapter every
    /// wgpu call takes in turn (`sync::GlTurn`).
    pub(crate) fn is_gl(&self) -> bool {
        self.0.info.backend == wgpu::Backend::Gl
    }

    /// This thread's turn on the GL context (`sync::GlTurn`), taken around each wgpu call that
    /// touches it; a no-op on other backends.
    pub(crate) fn gl_turn(&self) -> GlTurn {
        GlTurn::take(self.is_gl())
    }

    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_nanos(self.0.timeout_ns.load(Ordering::Relaxed))
    }

    pub(crate) fn set_timeout(&self, t: Duration) {
        self.0.timeout_ns.store(
            t.as_nanos().clamp(1, u64::MAX as u128) as u64,
            Ordering::Relaxed,
        );
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.0.health.lost.load(Ordering::SeqCst)
    }

    fn lost_error(&self, op: &'static str) -> Error {
        let reason = self
            .0
            .health
            .lost_reason
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default();
        Error::DeviceLost {
            op,
            device: self.0.label.clone(),
            reason,
        }
    }

    /// The sync-point check: a lost device, or errors that escaped every scope since the last
    /// check, become an error for `op`. Uncaptured errors are reported once, then cleared, so the
    /// device stays usable afterwards.
    pub(crate) fn check(&self, op: &'static str) -> Result<()> {
        if self.is_lost() {
            return Err(self.lost_error(op));
        }
        if !self.0.health.any_uncaptured.load(Ordering::SeqCst) {
            return Ok(());
        }
        let me = std::thread::current().id();
        let pending: Vec<String> = match self.0.health.uncaptured.lock() {
            Ok(mut v) => {
                let (mine, others): (Vec<_>, Vec<_>) = std::mem::take(&mut *v)
                    .into_iter()
                    .partition(|(t, _)| *t == me);
                self.0
                    .health
                    .any_uncaptured
                    .store(!others.is_empty(), Ordering::SeqCst);
                *v = others;
                mine.into_iter().map(|(_, e)| e).collect()
            }
            Err(_) => Vec::new(),
        };
        if !pending.is_empty() {
            return Err(self.lost_or(Error::Wgpu {
                op,
                device: self.0.label.clone(),
                message: format!(
                    "{} error(s) escaped wgtensor's error scopes since the last call: {}",
                    pending.len(),
                    pending.join("; ")
                ),
            }));
        }
        Ok(())
    }

    /// `e`, or `DeviceLost` when the device turns out to be gone: a device the application
    /// destroyed only reports its loss at the next poll, and the validation errors of calls
    /// made meanwhile ("Buffer is invalid") are symptoms of that loss, not errors of their own.
    pub(crate) fn lost_or(&self, e: Error) -> Error {
        let op = match &e {
            Error::Wgpu { op, .. } => *op,
            _ => return e,
        };
        if !self.is_lost() {
            self.poll_once();
        }
        if self.is_lost() {
            if let Ok(mut v) = self.0.health.uncaptured.lock() {
                v.clear();
                self.0.health.any_uncaptured.store(false, Ordering::SeqCst);
            }
            return self.lost_error(op);
        }
        e
    }

    /// Runs `f` inside OutOfMemory, Validation and Internal error scopes and turns anything they
    /// catch into an error for `op`. `requested` is the allocation size reported on OOM.
    /// Used for buffer creation and submits; ops themselves run unscoped unless
    /// `WGTENSOR_VALIDATE=1`.
    pub(crate) fn scoped<T>(
        &self,
        op: &'static str,
        requested: u64,
        f: impl FnOnce() -> T,
    ) -> Result<T> {
        self.check(op)?;
        self.capture(op, requested, f)
    }

    /// `scoped` without the check of earlier errors first (a submit runs even when an unrelated
    /// error is waiting to be reported, so valid work is not dropped).
    fn capture<T>(&self, op: &'static str, requested: u64, f: impl FnOnce() -> T) -> Result<T> {
        // wgpu errors raised from here on are wgtensor's (see `Inside`).
        let _inside = Inside::enter();
        let dev = &self.0.device;
        // Scopes are thread-local guards and must be popped in reverse order.
        let oom = dev.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = dev.push_error_scope(wgpu::ErrorFilter::Validation);
        let internal = dev.push_error_scope(wgpu::ErrorFilter::Internal);
        let value = {
            let _turn = self.gl_turn();
            f()
        };
        let internal = pollster::block_on(internal.pop());
        let validation = pollster::block_on(validation.pop());
        let oom = pollster::block_on(oom.pop());
        if self.is_lost() {
            return Err(self.lost_error(op));
        }
        if oom.is_some() {
            return Err(Error::OutOfMemory {
                op,
                device: self.0.label.clone(),
                adapter: self.adapter_name(),
                requested,
                allocated: self.0.mem.allocated.load(Ordering::Relaxed),
                reserved: self.0.mem.reserved.load(Ordering::Relaxed),
                limit: self.0.limits.max_buffer_size,
            });
        }
        if let Some(e) = validation.or(internal) {
            return Err(Error::Wgpu {
                op,
                device: self.0.label.clone(),
                message: e.to_string(),
            });
        }
        Ok(value)
    }

    /// Defers the every-`FLUSH_EVERY`-ops submit until the guard drops (`Device::one_submit`).
    pub(crate) fn defer_submits(&self) -> super::queue::Deferred<'_> {
        self.0.batch.defer_submits()
    }

    /// Runs `f` on the pending batch (under the batch lock) and counts one op; submits when the
    /// batch is due. With `WGTENSOR_VALIDATE=1`, `f` runs inside its own error scopes.
    pub(crate) fn with_batch<R>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut Batch) -> R,
    ) -> Result<R> {
        // wgpu errors raised from here on are wgtensor's (see `Inside`).
        let _inside = Inside::enter();
        let q = &self.0.batch;
        let (r, due) = {
            let mut b = q.lock();
            // Open before recording: a buffer dropped meanwhile must be parked, not pooled.
            q.mark_open();
            let r = if self.0.validate {
                self.scoped(op, 0, || f(&mut b))
            } else {
                Ok(f(&mut b))
            };
            q.note_open(&b);
            let ring_full = b.params.len() as u64 + 2 * (PARAM_WINDOW + self.0.param_align as u64)
                > self.0.ring.size();
            let due = b.count(op, q.deferred()) || ring_full;
            (r?, due)
        };
        if due {
            self.flush(op)?;
        }
        Ok(r)
    }

    /// Records `op`'s copies or clears into the pending encoder (the open compute pass ends).
    pub(crate) fn record(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut wgpu::CommandEncoder),
    ) -> Result<()> {
        // wgpu errors raised from here on are wgtensor's (see `Inside`).
        let _inside = Inside::enter();
        let dev = &self.0.device;
        self.with_batch(op, |b| f(b.encoder(dev)))
    }

    /// Submits the pending batch, if any; returns the index of that submission.
    pub(crate) fn flush(&self, op: &'static str) -> Result<Option<wgpu::SubmissionIndex>> {
        // wgpu errors raised from here on are wgtensor's (see `Inside`).
        let _inside = Inside::enter();
        // The batch lock is held until the submit is done. Otherwise another thread could find
        // nothing pending while this batch is taken but not yet submitted, and then map a
        // readback buffer this batch copies into, or pool a buffer this batch still reads.
        let q = &self.0.batch;
        let (b, unmapped) = q.wait_unmapped(q.lock(), self.timeout(), |b| {
            !b.mapped.is_empty() && b.is_open()
        });
        self.unmapped_or_error(op, unmapped)?;
        let mut b = b;
        let (index, retired) = self.submit_locked(op, &mut b);
        drop(b);
        self.0.pool.put(retired);
        index
    }

    /// `flush` for a caller that holds the batch lock and has waited for mapped buffers;
    /// returns the buffers that became poolable (hand them to `Pool::put` after unlocking).
    pub(crate) fn submit_locked(
        &self,
        op: &'static str,
        b: &mut Batch,
    ) -> (
        Result<Option<wgpu::SubmissionIndex>>,
        Vec<(u64, wgpu::Buffer)>,
    ) {
        let taken = b.take();
        // Staging chunks written for this batch are unmapped before it is submitted and
        // recalled (mapped again, asynchronously) after.
        if let Some(belt) = b.belt.as_mut() {
            let _turn = self.gl_turn();
            belt.finish();
        }
        let queue = &self.0.queue;
        // One set of error scopes per batch: encoder errors (wgpu 26+) surface at finish and
        // submit, so both run inside them.
        let index = match taken.encoder {
            Some(enc) => self
                .capture(op, 0, || {
                    if !taken.params.is_empty() {
                        // Lands before this submit's commands, after every earlier batch.
                        queue.write_buffer(&self.0.ring, 0, &taken.params);
                    }
                    self.submit_guarded([enc.finish()])
                })
                .map(Some)
                .map_err(|e| self.batch_error(e, &taken.names)),
            // Staged uploads only move with a submit.
            None if taken.written > 0 => self.capture(op, 0, || self.submit_guarded([])).map(Some),
            None => Ok(None),
        };
        if let Ok(Some(_)) = &index {
            let n = &self.0.kernels.counters.submits;
            n.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(belt) = b.belt.as_mut() {
            let _turn = self.gl_turn();
            belt.recall();
        }
        self.0.batch.note_open(b);
        // Taken under the batch lock: nothing can be recorded meanwhile, so every parked buffer
        // was last used by a batch submitted by now.
        (index, self.0.batch.take_retired())
    }

    /// Names the ops of a failed batch in its error.
    fn batch_error(&self, e: Error, names: &[&'static str]) -> Error {
        match self.lost_or(e) {
            Error::Wgpu {
                op,
                device,
                message,
            } => Error::Wgpu {
                op,
                device,
                message: format!(
                    "{message} (in a submitted batch of ops: {}; its results are lost; \
                     WGTENSOR_VALIDATE=1 checks each op as it is recorded)",
                    names.join(", ")
                ),
            },
            other => other,
        }
    }

    /// Counts bytes staged by `write_buffer`; submits once enough are waiting.
    pub(crate) fn note_written(&self, op: &'static str, bytes: u64) -> Result<()> {
        let flush_now = {
            let mut b = self.0.batch.lock();
            b.written += bytes.max(1);
            b.written >= FLUSH_WRITTEN_BYTES
        };
        if flush_now {
            self.flush(op)?;
        }
        Ok(())
    }

    /// The error for a wait on mapped buffers that did not end in `Ready`.
    pub(crate) fn unmapped_or_error(
        &self,
        op: &'static str,
        how: super::queue::Unmapped,
    ) -> Result<()> {
        use super::queue::Unmapped;
        match how {
            Unmapped::Ready => Ok(()),
            Unmapped::TimedOut => Err(self.timeout_error(op)),
            Unmapped::HeldByCaller => Err(Error::InvalidArgument {
                op,
                message: format!(
                    "GPU work on {} must be submitted, but this thread holds one of its \
                     buffers mapped inside a `map_read` closure (nothing can be submitted until \
                     the closure returns); read the data with `to_vec` inside the closure's \
                     caller instead, or do this work after `map_read` returns",
                    self.label()
                ),
            }),
        }
    }

    pub(crate) fn timeout_error(&self, op: &'static str) -> Error {
        Error::Timeout {
            op,
            device: self.0.label.clone(),
            waited: self.timeout(),
        }
    }

    /// `queue.submit` under the poll lock. wgpu-core 30's submit triages finished work itself
    /// (an internal non-blocking poll); if that runs while another thread's wait slice has just
    /// timed out and read a fence value, the waiting thread then finds the queue empty with the
    /// fence "behind" and asserts ("If the queue is empty, the current submission index ..."),
    /// which loses the device. Serialising submits with polls closes that window; a submit waits
    /// at most one poll slice.
    fn submit_guarded<I>(&self, buffers: I) -> wgpu::SubmissionIndex
    where
        I: IntoIterator<Item = wgpu::CommandBuffer>,
    {
        let _gl = self.gl_turn();
        let _turn = self.0.poll_lock.lock().unwrap_or_else(|p| p.into_inner());
        self.0.queue.submit(buffers)
    }

    /// Blocks until `index` (or all submitted work) finishes, or the timeout passes. Holds no
    /// lock. Polls in short slices (the GL backend can only wait while it holds its context).
    pub(crate) fn wait(
        &self,
        op: &'static str,
        index: Option<wgpu::SubmissionIndex>,
    ) -> Result<()> {
        // wgpu errors raised from here on are wgtensor's (see `Inside`).
        let _inside = Inside::enter();
        let index = match index {
            Some(i) => i,
            // "Everything" includes work still in the pending batch. With nothing pending, an
            // empty submit gives an index behind all earlier work: a wait for "the last
            // submission" (`submission_index: None`) races with another thread's submit in
            // wgpu-core 30 (it may find the queue empty while the fence is behind, and assert).
            None => match self.flush(op)? {
                Some(i) => i,
                None => self.submit_guarded([]),
            },
        };
        let index = Some(index);
        let deadline = Instant::now() + self.timeout();
        let gl = self.is_gl();
        let mut pause = Duration::from_micros(5);
        loop {
            // On GL a poll asks the fence without waiting (a zero timeout) and the thread
            // pauses outside every lock: a blocking poll holds the GL context (and the turn)
            // until the work finishes or the slice ends. Elsewhere the driver waits, in slices.
            let slice = if gl {
                Duration::ZERO
            } else {
                deadline
                    .saturating_duration_since(Instant::now())
                    .min(POLL_SLICE)
            };
            // wgpu 30 sends some poll failures (a device lost mid-wait) to a panicking handler,
            // and its GL layer panics when it cannot lock the adapter's context.
            let polled = {
                let _gl = GlTurn::take(gl);
                let _turn = self.0.poll_lock.lock().unwrap_or_else(|p| p.into_inner());
                catch_unwind(AssertUnwindSafe(|| {
                    self.0.device.poll(wgpu::PollType::Wait {
                        submission_index: index.clone(),
                        timeout: Some(slice),
                    })
                }))
            };
            match polled {
                Ok(Ok(_)) => return self.check(op),
                Ok(Err(wgpu::PollError::Timeout)) if Instant::now() < deadline => {
                    if gl {
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(GL_POLL_PAUSE_MAX);
                    }
                }
                Ok(Err(wgpu::PollError::Timeout)) => return Err(self.timeout_error(op)),
                Ok(Err(e)) => {
                    return Err(self.lost_or(Error::Wgpu {
                        op,
                        device: self.0.label.clone(),
                        message: e.to_string(),
                    }));
                }
                Err(p) => return Err(self.poll_panicked(op, &*p)),
            }
        }
    }

    /// A panic inside `poll`: the GL layer's context lock is a (retryable) error; anything else
    /// means the device is gone.
    fn poll_panicked(&self, op: &'static str, p: &(dyn std::any::Any + Send)) -> Error {
        let msg = panic_message(p);
        if self.0.info.backend == wgpu::Backend::Gl && !self.is_lost() {
            log::warn!(
                "wgtensor: wgpu's GL backend panicked while polling {}: {msg}",
                self.0.label
            );
            return Error::Wgpu {
                op,
                device: self.0.label.clone(),
                message: format!(
                    "wgpu's GL backend panicked while waiting ({msg}); another thread may hold \
                     the GL context: retry, or use one device from one thread"
                ),
            };
        }
        self.0
            .health
            .mark_lost(format!("device poll panicked: {msg}"));
        self.lost_error(op)
    }

    /// Runs ready callbacks without blocking (guarded like `wait`). When another thread is
    /// polling right now, that poll runs the same callbacks: this one is skipped.
    pub(crate) fn poll_once(&self) {
        // A thread busy in the GL context (possibly running a long submit) will poll or has
        // submitted: skip rather than wait for it.
        let Some(_gl) = GlTurn::try_take(self.is_gl()) else {
            return;
        };
        let Ok(_turn) = self.0.poll_lock.try_lock() else {
            return;
        };
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| {
            self.0.device.poll(wgpu::PollType::Poll)
        })) {
            let _ = self.poll_panicked("poll", &*p);
        }
    }

    /// Whether row kernels merge with subgroup operations (`SUBGROUP` enabled on this device,
    /// unless `WGTENSOR_DISABLE_SUBGROUPS=1`, which tests the workgroup-tree path anywhere).
    pub(crate) fn subgroups(&self) -> bool {
        self.0.device.features().contains(wgpu::Features::SUBGROUP)
            && !std::env::var("WGTENSOR_DISABLE_SUBGROUPS").is_ok_and(|v| v == "1")
    }

    /// Whether f16 elementwise kernels run natively (`SHADER_F16` enabled on this device and
    /// not disabled by `WGTENSOR_DISABLE_SHADER_F16=1`).
    pub(crate) fn native_f16(&self) -> bool {
        !self.0.kernels.f16_disabled
            && self
                .0
                .device
                .features()
                .contains(wgpu::Features::SHADER_F16)
    }

    /// Test hook: destroys the wgpu device, as a driver reset would.
    pub(crate) fn destroy(&self) {
        let _gl = self.gl_turn();
        self.0.device.destroy();
        // Destroy fires the loss callback asynchronously; a poll delivers it promptly.
        let _turn = self.0.poll_lock.lock().unwrap_or_else(|p| p.into_inner());
        let _ = catch_unwind(AssertUnwindSafe(|| {
            self.0.device.poll(wgpu::PollType::Poll)
        }));
        self.0
            .health
            .mark_lost("Destroyed: device destroyed".into());
    }

    /// Test hook: provokes a validation error outside every scope (a buffer mapped at creation
    /// whose size is not a multiple of 4, invalid on every adapter), which the default handler
    /// would turn into a panic.
    pub(crate) fn inject_uncaptured_error(&self) {
        // An error of wgtensor's own work that escaped every scope.
        let _inside = Inside::enter();
        let _gl = self.gl_turn();
        let _ = self.0.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("wgtensor::invalid-on-purpose"),
            size: 3,
            usage: wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: true,
        });
    }
}

impl PartialEq for GpuDevice {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for GpuDevice {}

impl std::fmt::Debug for GpuDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.0.label, self.adapter_name())
    }
}
