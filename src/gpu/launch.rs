//! `launch` and `launch_workgroups`: one dispatch recorded into the pending batch's open compute
//! pass, its params appended to the batch's params ring, its bind group reused when the same
//! buffers come back. No error scope per dispatch (one set per submitted batch, in
//! `device.rs`), unless `WGTENSOR_VALIDATE=1`.

use super::device::{GpuDevice, PARAM_WINDOW};
use super::kernels::{grid, Launch, WORKGROUP};
use crate::{Error, Result};
use std::sync::atomic::Ordering;
use wgpu::util::DeviceExt;

impl GpuDevice {
    /// Records one dispatch. Empty launches (`threads == 0`) do nothing: a zero-sized binding
    /// must never reach wgpu.
    pub(crate) fn launch(&self, op: &'static str, l: Launch<'_>) -> Result<()> {
        if l.threads == 0 {
            return Ok(());
        }
        let workgroups = l.threads.div_ceil(WORKGROUP);
        let (x, y) = grid(
            workgroups,
            self.0.limits.max_compute_workgroups_per_dimension,
        )
        .ok_or_else(|| Error::InvalidArgument {
            op,
            message: format!(
                "{} elements exceed the largest dispatch grid of this adapter",
                l.threads
            ),
        })?;
        self.launch_workgroups(op, l, [x, y, 1])
    }

    /// Extension of [`launch`](Self::launch) for kernels with their own `@workgroup_size` and a
    /// 2-D/3-D geometry (matmul: x = column tiles, y = row tiles, z = batch): dispatches exactly
    /// `workgroups`, which the caller derives from the shader's workgroup size. `l.threads` only
    /// says whether there is work at all: 0, or any zero count, dispatches nothing. Callers keep
    /// each count within `max_compute_workgroups_per_dimension` (larger grids are split into
    /// several launches); an oversized count is an error, never a wgpu validation failure.
    pub(crate) fn launch_workgroups(
        &self,
        op: &'static str,
        l: Launch<'_>,
        workgroups: [u32; 3],
    ) -> Result<()> {
        // wgpu errors raised from here on are wgtensor's (see `Inside`).
        let _inside = super::device::Inside::enter();
        if l.threads == 0 || workgroups.contains(&0) {
            return Ok(());
        }
        let max = self.0.limits.max_compute_workgroups_per_dimension;
        if workgroups.iter().any(|&w| w > max) {
            return Err(Error::InvalidArgument {
                op,
                message: format!(
                    "a dispatch of {workgroups:?} workgroups exceeds this adapter's {max} per dimension"
                ),
            });
        }
        // Ops on tensors past one binding run in row blocks (tensor/chunked.rs); anything that
        // still reaches here too large is refused with the limit named, never handed to wgpu.
        let limit = self.0.limits.max_storage_buffer_binding_size;
        if let Some(big) = l
            .bind
            .inputs
            .iter()
            .chain([&l.bind.output])
            .find(|b| b.size() > limit)
        {
            return Err(Error::BufferTooLarge {
                op,
                device: self.label().to_string(),
                adapter: self.adapter_name(),
                bytes: big.size(),
                limit,
                limit_name: "max_storage_buffer_binding_size",
            });
        }
        self.check(op)?;
        let dev = &self.0.device;
        let kernels = &self.0.kernels;
        let pipeline = kernels
            .pipeline(dev, (l.shader, l.entry, l.bind.op_code))
            .map_err(|message| Error::Wgpu {
                op,
                device: self.label().to_string(),
                message: format!("building the kernel {}: {message}", l.shader.file()),
            })?;
        // Params larger than the ring's window get a buffer of their own (never in practice:
        // the largest metadata is a few dozen words).
        let bytes = (l.bind.meta.len() * 4) as u64;
        let own = (bytes > PARAM_WINDOW).then(|| {
            dev.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("wgtensor::params"),
                contents: bytemuck::cast_slice(l.bind.meta),
                usage: wgpu::BufferUsages::STORAGE,
            })
        });
        let (params, window) = match &own {
            Some(b) => (b, bytes),
            None => (&self.0.ring, PARAM_WINDOW),
        };
        let mut buffers: Vec<&wgpu::Buffer> = Vec::with_capacity(l.bind.inputs.len() + 2);
        buffers.extend_from_slice(l.bind.inputs);
        buffers.push(l.bind.output);
        buffers.push(params);
        let make = || kernels.bind_group(dev, l.bind.inputs.len(), &buffers, window, own.is_none());
        let bind = if self.0.validate {
            self.scoped(op, 0, make)?
        } else {
            let bind = make();
            // Device-level errors (an invalid binding) are reported synchronously to the
            // handler: refuse to record the dispatch, so the rest of the batch stays valid, and
            // do not keep the (possibly invalid) bind group.
            if let Err(e) = self.check(op) {
                kernels.forget_bind_group(l.bind.inputs.len(), &buffers);
                return Err(e);
            }
            bind
        };
        // A kernel that reads ids gets an error word of its own; its output (and anything
        // later derived from it) carries the check until a readback resolves it (`ids.rs`).
        let check = l.shader.checked().then(|| self.0.errors.acquire(dev));
        let errors = check.as_ref().map(|(c, _)| {
            (
                c.bind_group(dev, kernels.error_layout(dev)),
                c.dynamic_offset(),
            )
        });
        let align = self.0.param_align;
        let ring_size = self.0.ring.size();
        let [x, y, z] = workgroups;
        // Recorded into the pending batch; submitted at the next readback, synchronize, or
        // after `FLUSH_EVERY` ops.
        self.with_batch(op, |b| {
            if let Some((c, true)) = &check {
                // The word held an earlier check's report.
                self.0.errors.clear(b.encoder(dev), c);
            }
            let offset = if own.is_some() {
                0
            } else {
                let at = b.push_params(l.bind.meta, align);
                if at as u64 + PARAM_WINDOW > ring_size {
                    // `with_batch` submits well before the ring fills; never reached.
                    return Err(Error::InvalidArgument {
                        op,
                        message: "the params ring of this batch is full".into(),
                    });
                }
                at
            };
            let pass = b.pass(dev);
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bind, &[offset]);
            if let Some((e, at)) = &errors {
                pass.set_bind_group(1, e, &[*at]);
            }
            self.0.profiler.around(
                pass,
                || format!("{}:{}", l.shader.file(), l.entry),
                op,
                |pass| pass.dispatch_workgroups(x, y, z),
            );
            Ok(())
        })??;
        self.0
            .errors
            .propagate(l.bind.inputs, l.bind.output, check.as_ref().map(|(c, _)| c));
        let n = &self.0.kernels.counters.dispatches;
        n.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}
