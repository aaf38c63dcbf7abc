//! GPU time per kernel (`Device::profile`): while a profile is open, every dispatch is bracketed
//! by two timestamp writes inside its compute pass (`TIMESTAMP_QUERY_INSIDE_PASSES`); closing
//! the profile resolves the queries into a buffer and reads it back once.
//!
//! Lock order: the profiler's lock is taken inside the batch lock (by `launch`) and alone
//! (by `begin`/`finish`); it is never held while taking another lock.

use super::buffer::GpuBuffer;
use super::device::GpuDevice;
use super::transfer::ReadPart;
use crate::{Error, Result};
use std::sync::Mutex;

/// Timestamps per query set: wgpu's limit (`QUERY_SET_MAX_QUERIES`), two per dispatch.
const QUERIES: u32 = 4096;

/// One kernel's share of a profile.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct KernelSpan {
    pub kernel: String,
    pub op: &'static str,
    pub calls: u64,
    pub nanos: f64,
}

/// The dispatches recorded so far in an open profile.
struct Session {
    set: wgpu::QuerySet,
    /// (kernel label, op, first query index) per timed dispatch.
    spans: Vec<(String, &'static str, u32)>,
    /// Dispatches seen, timed or not (past `QUERIES / 2` they are counted only).
    dispatches: u64,
}

/// The per-device profiler: `None` while no profile is open.
#[derive(Default)]
pub(crate) struct Profiler(Mutex<Option<Session>>);

impl Profiler {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Session>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Called by `launch` with the batch lock held: brackets one dispatch when a profile is
    /// open (and has room).
    pub(crate) fn around(
        &self,
        pass: &mut wgpu::ComputePass<'static>,
        kernel: impl FnOnce() -> String,
        op: &'static str,
        dispatch: impl FnOnce(&mut wgpu::ComputePass<'static>),
    ) {
        let mut s = self.lock();
        let Some(s) = s.as_mut() else {
            drop(s);
            return dispatch(pass);
        };
        s.dispatches += 1;
        let at = s.spans.len() as u32 * 2;
        if at + 2 > QUERIES {
            return dispatch(pass);
        }
        pass.write_timestamp(&s.set, at);
        dispatch(pass);
        pass.write_timestamp(&s.set, at + 1);
        s.spans.push((kernel(), op, at));
    }
}

/// What [`GpuDevice::profile_finish`] measured.
pub(crate) struct Measured {
    pub spans: Vec<KernelSpan>,
    pub dispatches: u64,
    pub timed: u64,
}

impl GpuDevice {
    /// Kernel dispatches so far (for a profile without timestamps).
    pub(crate) fn dispatch_count(&self) -> u64 {
        self.0
            .kernels
            .counters
            .dispatches
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether this device records timestamps inside compute passes.
    pub(crate) fn can_profile(&self) -> bool {
        self.0.device.features().contains(
            wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES,
        )
    }

    /// Opens a profile; earlier pending work is submitted first, so it is not counted.
    pub(crate) fn profile_begin(&self, op: &'static str) -> Result<()> {
        crate::tensor::materialize_pending(self)?;
        self.flush(op)?;
        let mut s = self.0.profiler.lock();
        if s.is_some() {
            return Err(Error::InvalidArgument {
                op,
                message: format!(
                    "a profile of {} is already open (profiles do not nest)",
                    self.label()
                ),
            });
        }
        let set = self.0.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("wgtensor::profile"),
            ty: wgpu::QueryType::Timestamp,
            count: QUERIES,
        });
        *s = Some(Session {
            set,
            spans: Vec::new(),
            dispatches: 0,
        });
        Ok(())
    }

    /// Closes the open profile: runs what is pending, resolves the timestamps, reads them back
    /// (one readback) and sums GPU time per kernel.
    pub(crate) fn profile_finish(&self, op: &'static str) -> Result<Measured> {
        // Fused chains still pending run inside the profile.
        crate::tensor::materialize_pending(self)?;
        let Some(s) = self.0.profiler.lock().take() else {
            return Err(Error::InvalidArgument {
                op,
                message: "no profile is open".into(),
            });
        };
        let n = s.spans.len() as u32 * 2;
        let mut measured = Measured {
            spans: Vec::new(),
            dispatches: s.dispatches,
            timed: s.spans.len() as u64,
        };
        if n == 0 {
            return Ok(measured);
        }
        let bytes = n as u64 * 8;
        let resolve = self.0.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("wgtensor::profile resolve"),
            size: bytes,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let out: GpuBuffer = self.alloc_uninit(op, bytes)?;
        self.record(op, |enc| {
            enc.resolve_query_set(&s.set, 0..n, &resolve, 0);
            enc.copy_buffer_to_buffer(&resolve, 0, &out.buffer, 0, bytes);
        })?;
        let ticks: Vec<u64> = self
            .read_many(
                op,
                &[ReadPart {
                    buffer: &out,
                    offset: 0,
                    len: bytes,
                }],
                |_, b| bytemuck::pod_collect_to_vec::<u8, u64>(b),
            )?
            .pop()
            .unwrap_or_default();
        let period = self.0.queue.get_timestamp_period() as f64;
        let mut by_kernel: Vec<KernelSpan> = Vec::new();
        for (kernel, op, at) in s.spans {
            let (t0, t1) = (
                ticks.get(at as usize).copied().unwrap_or(0),
                ticks.get(at as usize + 1).copied().unwrap_or(0),
            );
            let nanos = t1.saturating_sub(t0) as f64 * period;
            match by_kernel
                .iter_mut()
                .find(|k| k.kernel == kernel && k.op == op)
            {
                Some(k) => {
                    k.calls += 1;
                    k.nanos += nanos;
                }
                None => by_kernel.push(KernelSpan {
                    kernel,
                    op,
                    calls: 1,
                    nanos,
                }),
            }
        }
        by_kernel.sort_by(|a, b| b.nanos.total_cmp(&a.nanos));
        measured.spans = by_kernel;
        Ok(measured)
    }
}
