//! One opened wgpu device: error capture, loss tracking, waits with timeouts.
//!
//! wgpu's defaults are hostile to a library: the uncaptured-error handler panics, a lost device
//! goes quiet, and `poll` can panic. Everything here exists to turn those into `Result`s.

use super::kernels::KernelCache;
use super::memory::{MemStats, Pool};
use super::queue::Pending;
use super::transfer::{StagingPool, TransferCounters};
use crate::{Error, Result};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
    pub pool: Mutex<Pool>,
    pub pending: Mutex<Pending>,
    pub transfers: TransferCounters,
    pub staging: Mutex<StagingPool>,
    timeout_ns: AtomicU64,
}

/// State written from wgpu's callbacks, which may run on any thread.
#[derive(Default)]
pub(crate) struct Health {
    lost: AtomicBool,
    lost_reason: Mutex<String>,
    /// Errors that escaped every error scope. Reported (and cleared) at the next sync point.
    uncaptured: Mutex<Vec<String>>,
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

impl GpuDevice {
    /// Wraps an opened device: installs the error handler and the loss callback.
    pub(crate) fn new(
        label: String,
        info: wgpu::AdapterInfo,
        device: wgpu::Device,
        queue: wgpu::Queue,
    ) -> GpuDevice {
        let health = Arc::new(Health::default());
        // The default handler panics; ours records the error so the next call returns it.
        let h = health.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut v) = h.uncaptured.lock() {
                v.push(e.to_string());
            }
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
            super::transfer::WARN_CHURN.store(true, Ordering::Relaxed);
        }
        GpuDevice(Arc::new(Inner {
            label,
            info,
            device,
            queue,
            limits,
            unified,
            health,
            kernels: KernelCache::default(),
            mem: MemStats::default(),
            pool: Mutex::default(),
            pending: Mutex::default(),
            transfers: TransferCounters::default(),
            staging: Mutex::default(),
            timeout_ns: AtomicU64::new(DEFAULT_TIMEOUT.as_nanos() as u64),
        }))
    }

    pub(crate) fn label(&self) -> &str {
        &self.0.label
    }

    /// `name (backend)` of the adapter, for error messages.
    pub(crate) fn adapter_name(&self) -> String {
        format!("{}, {:?}", self.0.info.name, self.0.info.backend)
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

    fn lost_error(&self) -> Error {
        let reason = self
            .0
            .health
            .lost_reason
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default();
        Error::DeviceLost {
            device: self.0.label.clone(),
            reason,
        }
    }

    /// The sync-point check: a lost device, or errors that escaped every scope since the last
    /// check, become an error for `op`. Uncaptured errors are reported once, then cleared, so the
    /// device stays usable afterwards.
    pub(crate) fn check(&self, op: &'static str) -> Result<()> {
        if self.is_lost() {
            return Err(self.lost_error());
        }
        let pending: Vec<String> = match self.0.health.uncaptured.lock() {
            Ok(mut v) => std::mem::take(&mut *v),
            Err(_) => Vec::new(),
        };
        if !pending.is_empty() {
            return Err(Error::Wgpu {
                op,
                device: self.0.label.clone(),
                message: format!(
                    "{} error(s) escaped wgtensor's error scopes since the last call: {}",
                    pending.len(),
                    pending.join("; ")
                ),
            });
        }
        Ok(())
    }

    /// Runs `f` inside OutOfMemory, Validation and Internal error scopes and turns anything they
    /// catch into an error for `op`. `requested` is the allocation size reported on OOM.
    pub(crate) fn scoped<T>(
        &self,
        op: &'static str,
        requested: u64,
        f: impl FnOnce() -> T,
    ) -> Result<T> {
        self.check(op)?;
        let dev = &self.0.device;
        // Scopes are thread-local guards and must be popped in reverse order.
        let oom = dev.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = dev.push_error_scope(wgpu::ErrorFilter::Validation);
        let internal = dev.push_error_scope(wgpu::ErrorFilter::Internal);
        let value = f();
        let internal = pollster::block_on(internal.pop());
        let validation = pollster::block_on(validation.pop());
        let oom = pollster::block_on(oom.pop());
        if self.is_lost() {
            return Err(self.lost_error());
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

    /// Blocks until `index` (or all submitted work) finishes, or the timeout passes.
    pub(crate) fn wait(
        &self,
        op: &'static str,
        index: Option<wgpu::SubmissionIndex>,
    ) -> Result<()> {
        let index = match index {
            Some(i) => Some(i),
            // "Everything" includes work still in the pending encoder.
            None => self.flush(op)?,
        };
        let timeout = self.timeout();
        // wgpu 30 sends some poll failures (a device lost mid-wait) to a panicking handler.
        let polled = catch_unwind(AssertUnwindSafe(|| {
            self.0.device.poll(wgpu::PollType::Wait {
                submission_index: index,
                timeout: Some(timeout),
            })
        }));
        match polled {
            Ok(Ok(_)) => self.check(op),
            Ok(Err(wgpu::PollError::Timeout)) => Err(Error::Timeout {
                op,
                device: self.0.label.clone(),
                waited: timeout,
            }),
            Ok(Err(e)) => Err(Error::Wgpu {
                op,
                device: self.0.label.clone(),
                message: e.to_string(),
            }),
            Err(_) => {
                self.0.health.mark_lost("device poll panicked".into());
                Err(self.lost_error())
            }
        }
    }

    /// Runs ready callbacks without blocking (guarded like `wait`).
    pub(crate) fn poll_once(&self) {
        if catch_unwind(AssertUnwindSafe(|| {
            self.0.device.poll(wgpu::PollType::Poll)
        }))
        .is_err()
        {
            self.0.health.mark_lost("device poll panicked".into());
        }
    }

    /// Test hook: destroys the wgpu device, as a driver reset would.
    pub(crate) fn destroy(&self) {
        self.0.device.destroy();
        // Destroy fires the loss callback asynchronously; a poll delivers it promptly.
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
