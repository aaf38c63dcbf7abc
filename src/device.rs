//! Devices: `torch.device` for every GPU vendor.

use crate::gpu::{self, registry::registry, GpuDevice};
use crate::{Error, Result};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Where tensors live and ops run: the native CPU or one GPU adapter.
///
/// Cheap to clone; clones of a GPU device share one wgpu device, queue and pipeline cache. Two
/// devices are equal when they are the same opened device.
///
/// Device strings (see [`FromStr`](#impl-FromStr-for-Device)): `cpu`, `gpu`, `gpu:N`, `cuda`,
/// `cuda:N` (alias of `gpu:N` for PyTorch habits), `vulkan[:N]`, `metal[:N]`, `dx12[:N]`,
/// `gl[:N]` (index within that backend) and `auto` (= [`Device::best`]).
///
/// ```
/// use wgtensor::Device;
/// // The seeds' `device = "cuda" if torch.cuda.is_available() else "cpu"`:
/// let device = Device::best();
/// println!("running on {device}");
/// let cpu: Device = "cpu".parse()?;
/// assert!(cpu.is_cpu());
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Device(pub(crate) DeviceInner);

#[derive(Clone, PartialEq, Eq)]
pub(crate) enum DeviceInner {
    Cpu,
    Gpu(GpuDevice),
}

pub use crate::gpu::registry::AdapterSummary;

/// Whether at least one GPU adapter (hardware or software) can be reached.
///
/// ```
/// let device = if wgtensor::gpu_is_available() { "gpu" } else { "cpu" };
/// let device: wgtensor::Device = device.parse()?;
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub fn gpu_is_available() -> bool {
    gpu_count() > 0
}

/// Number of GPUs reachable as `gpu:N`. One physical GPU seen through two backends counts once.
///
/// ```
/// for i in 0..wgtensor::gpu_count() {
///     println!("{}", wgtensor::Device::gpu(i)?);
/// }
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub fn gpu_count() -> usize {
    registry().gpu_count()
}

/// Every adapter wgpu found, in `gpu:N` order, then the second views (GL) of listed GPUs.
///
/// ```
/// for a in wgtensor::adapters() {
///     println!("{:?}: {} ({}, {})", a.names, a.name, a.backend, a.device_type);
/// }
/// ```
pub fn adapters() -> Vec<AdapterSummary> {
    registry().summaries()
}

impl Device {
    /// The native CPU device.
    pub fn cpu() -> Device {
        Device(DeviceInner::Cpu)
    }

    /// `gpu:index`, opened on first use and shared afterwards.
    ///
    /// # Errors
    /// [`Error::GpuUnavailable`] when no GPU exists, [`Error::InvalidDevice`] when `index` is
    /// past the end (the message names how many exist).
    ///
    /// ```
    /// match wgtensor::Device::gpu(0) {
    ///     Ok(d) => println!("opened {d}"),
    ///     Err(e) => println!("no GPU: {e}"),
    /// }
    /// ```
    pub fn gpu(index: usize) -> Result<Device> {
        let d = registry().open_gpu(&format!("gpu:{index}"), index)?;
        Ok(Device(DeviceInner::Gpu(d)))
    }

    /// A new logical device on the adapter of `gpu:index`: its own wgpu device, queue, memory
    /// pool and statistics, unequal to [`Device::gpu`]`(index)` and to every other logical device.
    /// Displayed as `gpu:index#k` (`k` = 1, 2, ... in opening order); that string does not parse
    /// back (a device string names a shared device, and each call here opens a new one).
    ///
    /// Useful to run independent work side by side on one adapter, and to test multi-device code
    /// (such as [`crate::nn::DataParallel`]) on a machine with one GPU.
    ///
    /// # Errors
    /// As [`Device::gpu`].
    ///
    /// ```
    /// use wgtensor::Device;
    /// if let (Ok(a), Ok(b)) = (Device::gpu(0), Device::gpu_logical(0)) {
    ///     assert_ne!(a, b); // same adapter, two devices: tensors must be moved between them
    ///     assert!(b.to_string().starts_with("gpu:0#"));
    /// }
    /// ```
    pub fn gpu_logical(index: usize) -> Result<Device> {
        let d = registry().open_gpu_logical(index)?;
        Ok(Device(DeviceInner::Gpu(d)))
    }

    /// The best device: `WGTENSOR_DEVICE` if set, else the first hardware GPU (discrete, then
    /// integrated, then virtual), else the CPU. Software adapters are never picked; never panics.
    /// A `WGTENSOR_DEVICE` that does not parse is ignored with a `log` warning naming it (and
    /// [`Device::best_with_reason`] says so); `WGTENSOR_DEVICE=cpu` never looks for GPUs.
    ///
    /// ```
    /// let device = wgtensor::Device::best();
    /// assert!(device.is_cpu() || device.is_gpu());
    /// ```
    pub fn best() -> Device {
        Device::best_with_reason().0
    }

    /// [`Device::best`] and a sentence saying why it was chosen (for logs and examples).
    ///
    /// ```
    /// let (device, why) = wgtensor::Device::best_with_reason();
    /// println!("using {device}: {why}");
    /// ```
    pub fn best_with_reason() -> (Device, String) {
        let mut prefix = String::new();
        if let Ok(v) = std::env::var("WGTENSOR_DEVICE") {
            let v = v.trim().to_string();
            if !v.is_empty() && !v.eq_ignore_ascii_case("auto") {
                match v.parse::<Device>() {
                    Ok(d) => return (d, format!("WGTENSOR_DEVICE={v} selects it")),
                    Err(e) => {
                        // Not silent: the reason says it, and so does the log.
                        log::warn!(
                            "WGTENSOR_DEVICE={v} is not a device string and is ignored: {e}"
                        );
                        prefix = format!("WGTENSOR_DEVICE={v} ignored ({e}); ")
                    }
                }
            }
        }
        let (gpu, reason) = registry().best();
        let device = match gpu {
            Some(g) => Device(DeviceInner::Gpu(g)),
            None => Device::cpu(),
        };
        (device, prefix + &reason)
    }

    /// Wraps a wgpu device and queue the application already owns (a renderer, bevy, egui), so
    /// tensors and the application's own passes share buffers without copies.
    ///
    /// wgpu has one uncaptured-error handler per device (its default panics), so wgtensor
    /// installs its own and a device-lost callback on `device`. Errors are sorted by who made
    /// the call: those of wgtensor's calls surface from wgtensor as `Err`; the application's
    /// own (its passes, buffers, pipelines) never fail a wgtensor call and go to a `log` error
    /// line. To keep receiving them, pass your handler to
    /// [`Device::from_wgpu_with_error_handler`] instead (a handler set on the device earlier
    /// is replaced: wgpu has no way to chain to it).
    ///
    /// ```no_run
    /// # async fn demo(adapter: wgpu::Adapter, device: wgpu::Device, queue: wgpu::Queue) {
    /// let dev = wgtensor::Device::from_wgpu(&adapter, device, queue);
    /// let t = wgtensor::Tensor::ones(&[4], wgtensor::DType::F32, &dev).unwrap();
    /// let view = t.wgpu_buffer().unwrap(); // bind view.buffer at view.offset in your own pass
    /// # }
    /// ```
    pub fn from_wgpu(adapter: &wgpu::Adapter, device: wgpu::Device, queue: wgpu::Queue) -> Device {
        Device(DeviceInner::Gpu(gpu::wrap(adapter, device, queue, None)))
    }

    /// [`Device::from_wgpu`], with `handler` receiving the wgpu errors of the application's own
    /// calls on the device (what `device.on_uncaptured_error(handler)` would have received);
    /// wgtensor's own errors still surface from wgtensor calls as `Err`.
    ///
    /// ```no_run
    /// # async fn demo(adapter: wgpu::Adapter, device: wgpu::Device, queue: wgpu::Queue) {
    /// use std::sync::Arc;
    /// let dev = wgtensor::Device::from_wgpu_with_error_handler(
    ///     &adapter,
    ///     device,
    ///     queue,
    ///     Arc::new(|e: wgpu::Error| eprintln!("my renderer: {e}")),
    /// );
    /// # }
    /// ```
    pub fn from_wgpu_with_error_handler(
        adapter: &wgpu::Adapter,
        device: wgpu::Device,
        queue: wgpu::Queue,
        handler: std::sync::Arc<dyn Fn(wgpu::Error) + Send + Sync>,
    ) -> Device {
        Device(DeviceInner::Gpu(gpu::wrap(
            adapter,
            device,
            queue,
            Some(handler),
        )))
    }

    /// Whether this is the CPU.
    pub fn is_cpu(&self) -> bool {
        matches!(self.0, DeviceInner::Cpu)
    }

    /// Whether this is a GPU (hardware or software adapter).
    pub fn is_gpu(&self) -> bool {
        matches!(self.0, DeviceInner::Gpu(_))
    }

    /// The adapter's name (`cpu` for the CPU).
    ///
    /// ```
    /// assert_eq!(wgtensor::Device::cpu().name(), "cpu");
    /// ```
    pub fn name(&self) -> String {
        match &self.0 {
            DeviceInner::Cpu => "cpu".into(),
            DeviceInner::Gpu(g) => g.0.info.name.clone(),
        }
    }

    /// Waits until the device has finished the work submitted so far (this thread's uploads
    /// included) and reports only this thread's errors: unlike [`Device::synchronize`] it
    /// neither runs other threads' pending fused work nor takes their errors. What a
    /// data-loader worker needs to hand over a resident batch.
    pub(crate) fn wait_own_work(&self, op: &'static str) -> Result<()> {
        match &self.0 {
            DeviceInner::Cpu => Ok(()),
            DeviceInner::Gpu(g) => g.wait(op, None),
        }
    }

    /// Sets how long a wait for this GPU may take before [`Error::Timeout`] (default 120 s).
    /// No effect on the CPU.
    ///
    /// ```
    /// wgtensor::Device::cpu().set_timeout(std::time::Duration::from_secs(5));
    /// ```
    pub fn set_timeout(&self, timeout: Duration) {
        if let DeviceInner::Gpu(g) = &self.0 {
            g.set_timeout(timeout);
        }
    }

    /// The underlying wgpu device and queue, to record the application's own work on them.
    ///
    /// ```
    /// assert!(wgtensor::Device::cpu().wgpu().is_none());
    /// ```
    pub fn wgpu(&self) -> Option<(&wgpu::Device, &wgpu::Queue)> {
        match &self.0 {
            DeviceInner::Cpu => None,
            DeviceInner::Gpu(g) => Some((&g.0.device, &g.0.queue)),
        }
    }

    /// The GPU behind this device, or an error naming `op` for CPU devices.
    pub(crate) fn as_gpu(&self) -> Option<&GpuDevice> {
        match &self.0 {
            DeviceInner::Cpu => None,
            DeviceInner::Gpu(g) => Some(g),
        }
    }
}

const VALID_FORMS: &str =
    "valid forms: cpu, gpu, gpu:N, cuda, cuda:N, vulkan[:N], metal[:N], dx12[:N], gl[:N], auto";

impl FromStr for Device {
    type Err = Error;

    /// Parses a device string; see [`Device`] for the grammar.
    fn from_str(s: &str) -> Result<Device> {
        let input = s.trim().to_ascii_lowercase();
        let bad = |why: String| Error::InvalidDevice {
            input: s.to_string(),
            reason: format!("{why}; {VALID_FORMS}"),
        };
        let (kind, index) = match input.split_once(':') {
            Some((k, i)) => {
                let n = i.parse::<usize>().map_err(|_| {
                    if i.contains('#') {
                        bad(format!(
                            "{i:?} names a logical device, which has no device string (each \
                             Device::gpu_logical call opens a new one); keep the Device value"
                        ))
                    } else {
                        bad(format!("{i:?} is not a device index (a number such as 0)"))
                    }
                })?;
                (k, Some(n))
            }
            None => (input.as_str(), None),
        };
        match kind {
            "cpu" if index.is_none() || index == Some(0) => Ok(Device::cpu()),
            "auto" if index.is_none() => Ok(Device::best()),
            "gpu" | "cuda" => {
                let i = index.unwrap_or(0);
                let d = registry().open_gpu(s.trim(), i)?;
                Ok(Device(DeviceInner::Gpu(d)))
            }
            "vulkan" | "metal" | "dx12" | "gl" => {
                let d = registry().open_backend(s.trim(), kind, index.unwrap_or(0))?;
                Ok(Device(DeviceInner::Gpu(d)))
            }
            "cpu" => Err(bad("there is one cpu device, `cpu` (or `cpu:0`)".into())),
            "auto" => Err(bad("`auto` takes no device index".into())),
            _ => Err(bad(format!("{kind:?} is not a device kind"))),
        }
    }
}

impl fmt::Display for Device {
    /// Canonical form: `cpu`, `gpu:0`, `gl:0` (a GL view of a listed GPU), `wgpu:0` (wrapped),
    /// `gpu:0#1` (a logical device from [`Device::gpu_logical`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            DeviceInner::Cpu => f.write_str("cpu"),
            DeviceInner::Gpu(g) => f.write_str(g.label()),
        }
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            DeviceInner::Cpu => f.write_str("Device(cpu)"),
            DeviceInner::Gpu(g) => write!(f, "Device({g:?})"),
        }
    }
}

impl Default for Device {
    /// The CPU, as in PyTorch.
    fn default() -> Device {
        Device::cpu()
    }
}
