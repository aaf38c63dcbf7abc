//! Timing on the device: the autotuner's search loop (`time_candidates`) and opening and closing
//! a profile (`profile.rs` holds the per-device state).

use super::autotune::Found;
use super::buffer::GpuBuffer;
use super::device::GpuDevice;
use super::profile::{KernelSpan, Session, QUERIES};
use super::transfer::ReadPart;
use crate::{Error, Result};

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

    /// Opens a profile; earlier recorded work is submitted first, so it is not counted (the
    /// caller, `Device::profile`, materialises pending fused tensors before).
    pub(crate) fn profile_begin(&self, op: &'static str) -> Result<()> {
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
    /// (one readback) and sums GPU time per kernel. The caller materialises pending fused
    /// tensors first, so they run inside the profile.
    pub(crate) fn profile_finish(&self, op: &'static str) -> Result<Measured> {
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

impl GpuDevice {
    /// Times each candidate on this adapter and returns the fastest with every timing (ms).
    /// `run(k)` records one run of candidate `k`; each is timed to completion: a warm-up
    /// (pipeline compiled, buffers pooled), then the best of three, except that a candidate four
    /// times slower than the best so far is not timed further. A candidate that fails is
    /// skipped. The queue is drained first, so each timing covers only its own runs.
    pub(crate) fn time_candidates<K: Copy>(
        &self,
        op: &'static str,
        candidates: &[K],
        name: impl Fn(K) -> &'static str,
        run: impl Fn(K) -> Result<()>,
    ) -> Result<Option<Found<K>>> {
        self.wait(op, None)?;
        let mut best: Option<(K, f64)> = None;
        let mut timings = Vec::new();
        for &k in candidates {
            let time = |runs: usize| -> Result<f64> {
                let mut fastest = f64::INFINITY;
                for _ in 0..runs {
                    let t = std::time::Instant::now();
                    run(k)?;
                    self.wait(op, None)?;
                    fastest = fastest.min(t.elapsed().as_secs_f64() * 1e3);
                }
                Ok(fastest)
            };
            let Ok(first) = time(1) else { continue };
            let ms = if best.is_some_and(|(_, b)| first > 4.0 * b) {
                first
            } else {
                first.min(time(3)?)
            };
            timings.push((name(k).to_string(), ms));
            if best.is_none_or(|(_, b)| ms < b) {
                best = Some((k, ms));
            }
        }
        Ok(best.map(|(k, _)| (k, timings)))
    }
}
