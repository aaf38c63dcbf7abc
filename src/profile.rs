//! [`Device::profile`]: GPU time per kernel, from timestamp queries.

use crate::{Device, Result};
use std::time::Duration;

/// One kernel's GPU time within a [`Profile`].
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTime {
    /// The shader file and entry point (`"matmul_vec4.wgsl:register_tile"`), or the generated
    /// kernel's name.
    pub kernel: String,
    /// The op that launched it (`"matmul"`, `"add"`, ...).
    pub op: &'static str,
    /// Dispatches timed.
    pub calls: u64,
    /// GPU time summed over those dispatches (between the timestamps written just before and
    /// just after each one).
    pub gpu_time: Duration,
}

/// What [`Device::profile`] measured: kernels by GPU time, longest first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Profile {
    /// Per (kernel, op), longest total first.
    pub kernels: Vec<KernelTime>,
    /// Kernel dispatches made inside the profile.
    pub dispatches: u64,
    /// Dispatches that were timed (all of them up to 2,048 per profile; every one when this
    /// equals `dispatches`).
    pub timed: u64,
    /// Whether the device has timestamp queries inside passes. Without them (the CPU, adapters
    /// without `TIMESTAMP_QUERY_INSIDE_PASSES`) `kernels` is empty and only `dispatches` is
    /// counted.
    pub timestamps: bool,
}

impl Profile {
    /// The summed GPU time of every timed kernel.
    ///
    /// ```
    /// assert_eq!(wgtensor::Profile::default().total(), std::time::Duration::ZERO);
    /// ```
    pub fn total(&self) -> Duration {
        self.kernels.iter().map(|k| k.gpu_time).sum()
    }
}

impl Device {
    /// Runs `f` and reports the GPU time of every kernel it launched on this device (PyTorch's
    /// `torch.profiler` for one device). Work pending before the call is submitted first and
    /// not counted; work `f` leaves pending is run before timing ends. Timing costs two
    /// timestamp writes per dispatch and one readback at the end. On a device without
    /// timestamp queries inside passes (the CPU, some adapters) the result has
    /// `timestamps: false` and no kernels.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let d = Device::best();
    /// let a = Tensor::randn(&[64, 64], &d)?;
    /// let (c, profile) = d.profile(|| a.matmul(&a))?;
    /// assert_eq!(c.shape(), &[64, 64]);
    /// if profile.timestamps {
    ///     assert!(profile.kernels.iter().any(|k| k.op == "matmul"));
    /// }
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// `f`'s error (the profile is closed either way); [`crate::Error::InvalidArgument`] when a
    /// profile of this device is already open; GPU errors of the final readback.
    pub fn profile<R>(&self, f: impl FnOnce() -> Result<R>) -> Result<(R, Profile)> {
        let op = "Device::profile";
        let Some(g) = self.as_gpu().filter(|g| g.can_profile()) else {
            let before = match self.as_gpu() {
                Some(g) => g.dispatch_count(),
                None => 0,
            };
            let r = f()?;
            let dispatches = self.as_gpu().map_or(0, |g| g.dispatch_count() - before);
            return Ok((
                r,
                Profile {
                    dispatches,
                    ..Profile::default()
                },
            ));
        };
        // Pending fused tensors are queued work: what was pending before is not profiled, what
        // `f` leaves pending runs inside the profile. (The tensor layer owns pending work, so the
        // flushes are here, not in `gpu/timing.rs`.)
        crate::tensor::materialize_pending(self)?;
        g.profile_begin(op)?;
        let r = f();
        crate::tensor::materialize_pending(self)?;
        let measured = g.profile_finish(op)?;
        let profile = Profile {
            kernels: measured
                .spans
                .into_iter()
                .map(|s| KernelTime {
                    kernel: s.kernel,
                    op: s.op,
                    calls: s.calls,
                    gpu_time: Duration::from_nanos(s.nanos.round() as u64),
                })
                .collect(),
            dispatches: measured.dispatches,
            timed: measured.timed,
            timestamps: true,
        };
        Ok((r?, profile))
    }
}
