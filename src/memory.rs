//! Memory statistics and cache control (PyTorch's `torch.cuda.memory_allocated` and friends).

use crate::cpu::alloc::{CPU_ALLOCATED, CPU_PEAK, CPU_POOLED};
use crate::device::DeviceInner;
use crate::Device;
use std::sync::atomic::Ordering;

/// Bytes occupied by live tensors on `device`, exactly (GPU sizes padded to 4 bytes).
///
/// ```
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::best();
/// let before = wgtensor::memory_allocated(&dev);
/// let t = Tensor::zeros(&[256], DType::F32, &dev)?;
/// // Other threads may allocate too; on a quiet device this grows by exactly 1024 bytes.
/// assert!(wgtensor::memory_allocated(&dev) >= before + 1024 || dev.is_cpu());
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub fn memory_allocated(device: &Device) -> u64 {
    match &device.0 {
        DeviceInner::Cpu => CPU_ALLOCATED.load(Ordering::Relaxed),
        DeviceInner::Gpu(g) => g.0.mem.allocated.load(Ordering::Relaxed),
    }
}

/// Bytes wgtensor holds from the driver on `device`: live tensors plus the caching allocator's
/// free buffers, at bucket size. On the CPU: live tensors plus the freed f32 buffers kept for
/// reuse (16 KiB or more each, 256 MiB at most; [`empty_cache`] frees them).
///
/// ```
/// let reserved = wgtensor::memory_reserved(&wgtensor::Device::best());
/// # let _ = reserved;
/// ```
pub fn memory_reserved(device: &Device) -> u64 {
    match &device.0 {
        DeviceInner::Cpu => {
            CPU_ALLOCATED.load(Ordering::Relaxed) + CPU_POOLED.load(Ordering::Relaxed)
        }
        DeviceInner::Gpu(g) => g.0.mem.reserved.load(Ordering::Relaxed),
    }
}

/// The peak of [`memory_allocated`] since start or the last [`reset_peak_memory_stats`].
///
/// ```
/// let dev = wgtensor::Device::cpu();
/// assert!(wgtensor::max_memory_allocated(&dev) >= wgtensor::memory_allocated(&dev));
/// ```
pub fn max_memory_allocated(device: &Device) -> u64 {
    match &device.0 {
        DeviceInner::Cpu => CPU_PEAK.load(Ordering::Relaxed),
        DeviceInner::Gpu(g) => g.0.mem.peak.load(Ordering::Relaxed),
    }
}

/// Restarts peak tracking from the current [`memory_allocated`].
///
/// ```
/// let dev = wgtensor::Device::cpu();
/// wgtensor::reset_peak_memory_stats(&dev);
/// ```
pub fn reset_peak_memory_stats(device: &Device) {
    match &device.0 {
        DeviceInner::Cpu => {
            CPU_PEAK.store(CPU_ALLOCATED.load(Ordering::Relaxed), Ordering::Relaxed)
        }
        DeviceInner::Gpu(g) => {
            g.0.mem
                .peak
                .store(g.0.mem.allocated.load(Ordering::Relaxed), Ordering::Relaxed)
        }
    }
}

/// Returns every cached (free) buffer to the driver (`torch.cuda.empty_cache()`). Live tensors
/// are untouched. On the CPU, frees the freed tensor buffers kept for reuse.
///
/// ```
/// wgtensor::empty_cache(&wgtensor::Device::best());
/// ```
pub fn empty_cache(device: &Device) {
    match &device.0 {
        DeviceInner::Cpu => crate::cpu::alloc::empty_pool(),
        DeviceInner::Gpu(g) => g.empty_cache(),
    }
}

/// A readable table of the statistics above (`torch.cuda.memory_summary()`).
///
/// ```
/// println!("{}", wgtensor::memory_summary(&wgtensor::Device::cpu()));
/// ```
pub fn memory_summary(device: &Device) -> String {
    let mib = |b: u64| format!("{:>12.3} MiB", b as f64 / (1 << 20) as f64);
    let mut rows = vec![
        ("allocated (live tensors)", mib(memory_allocated(device))),
        ("peak allocated", mib(max_memory_allocated(device))),
        ("reserved (tensors + cache)", mib(memory_reserved(device))),
    ];
    let extra;
    if let DeviceInner::Gpu(g) = &device.0 {
        let m = &g.0.mem;
        extra = [
            ("cached (free, reusable)", mib(g.cached_bytes())),
            (
                "driver allocations",
                format!("{:>16}", m.allocations.load(Ordering::Relaxed)),
            ),
            (
                "cache hits",
                format!("{:>16}", m.cache_hits.load(Ordering::Relaxed)),
            ),
            (
                "out-of-memory retries",
                format!("{:>16}", m.ooms.load(Ordering::Relaxed)),
            ),
        ];
        rows.extend(extra.iter().cloned());
    }
    let mut out = format!("memory summary for {device} ({})\n", device.name());
    for (k, v) in rows {
        out.push_str(&format!("  {k:<28}{v}\n"));
    }
    out
}

/// Host-device traffic of one device since start or [`reset_transfer_stats`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TransferStats {
    /// Uploads (`.to(&gpu)`, `from_vec` on a GPU).
    pub uploads: u64,
    /// Bytes uploaded.
    pub upload_bytes: u64,
    /// Tensors read back (`.cpu()`, `to_vec`, `read_all`).
    pub downloads: u64,
    /// Bytes read back.
    pub download_bytes: u64,
    /// Time spent waiting for readbacks.
    pub wait_time: std::time::Duration,
    /// Uploads of exactly the bytes just read back (the tight-loop pitfall; counted while
    /// [`warn_on_transfer_churn`] is on).
    pub round_trips: u64,
    /// Uploads written straight into the mapped tensor buffer (unified memory, 256 KiB and up).
    pub direct_uploads: u64,
    /// Readbacks that mapped the tensor buffer itself (unified memory), skipping the copy into
    /// a staging buffer.
    pub direct_downloads: u64,
}

/// Transfer counters of `device` (all zero for the CPU, which has nothing to transfer).
///
/// ```
/// use wgtensor::{Device, Tensor};
/// let dev = Device::best();
/// let t = Tensor::ones(&[256], wgtensor::DType::F32, &Device::cpu())?.to(&dev)?;
/// let stats = wgtensor::transfer_stats(&dev);
/// assert!(dev.is_cpu() || stats.upload_bytes >= 1024);
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub fn transfer_stats(device: &Device) -> TransferStats {
    match &device.0 {
        DeviceInner::Cpu => TransferStats::default(),
        DeviceInner::Gpu(g) => {
            let t = &g.0.transfers;
            TransferStats {
                uploads: t.uploads.load(Ordering::Relaxed),
                upload_bytes: t.upload_bytes.load(Ordering::Relaxed),
                downloads: t.downloads.load(Ordering::Relaxed),
                download_bytes: t.download_bytes.load(Ordering::Relaxed),
                wait_time: std::time::Duration::from_nanos(t.wait_nanos.load(Ordering::Relaxed)),
                round_trips: t.churn.load(Ordering::Relaxed),
                direct_uploads: t.direct_uploads.load(Ordering::Relaxed),
                direct_downloads: t.direct_downloads.load(Ordering::Relaxed),
            }
        }
    }
}

/// Zeroes the transfer counters of `device`.
///
/// ```
/// wgtensor::reset_transfer_stats(&wgtensor::Device::best());
/// ```
pub fn reset_transfer_stats(device: &Device) {
    if let DeviceInner::Gpu(g) = &device.0 {
        let t = &g.0.transfers;
        for c in [
            &t.uploads,
            &t.upload_bytes,
            &t.downloads,
            &t.download_bytes,
            &t.wait_nanos,
            &t.churn,
            &t.direct_uploads,
            &t.direct_downloads,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

/// Kernel launches and submits of one device since start or [`reset_kernel_stats`]: what the
/// host paid to get work onto the GPU.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Kernel dispatches recorded.
    pub dispatches: u64,
    /// Batches submitted to the queue (ops are recorded lazily and submitted at a readback, at
    /// `synchronize`, or every 64 ops).
    pub submits: u64,
    /// Distinct fused kernels compiled.
    pub fused_kernels: u64,
    /// Compute pipelines compiled (each kernel once per device; stops growing in a steady loop).
    pub pipelines_compiled: u64,
    /// Bind groups created (repeated launches on the same buffers reuse theirs).
    pub bind_groups_created: u64,
}

/// Kernel counters of `device` (all zero for the CPU, which launches no kernels).
///
/// ```
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::best();
/// let x = Tensor::ones(&[256], DType::F32, &dev)?;
/// dev.synchronize()?;
/// wgtensor::reset_kernel_stats(&dev);
/// let y = x.add_scalar(1.0)?.mul_scalar(2.0)?;
/// assert_eq!(y.to_vec::<f32>()?[0], 4.0);
/// let s = wgtensor::kernel_stats(&dev);
/// if dev.is_gpu() {
///     assert_eq!((s.dispatches, s.submits), (2, 1)); // two kernels, one batch
/// } else {
///     assert_eq!(s, wgtensor::KernelStats::default());
/// }
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub fn kernel_stats(device: &Device) -> KernelStats {
    match &device.0 {
        DeviceInner::Cpu => KernelStats::default(),
        DeviceInner::Gpu(g) => {
            let [dispatches, submits, fused_kernels, pipelines_compiled, bind_groups_created] =
                g.0.kernels
                    .counters
                    .all()
                    .map(|c| c.load(Ordering::Relaxed));
            KernelStats {
                dispatches,
                submits,
                fused_kernels,
                pipelines_compiled,
                bind_groups_created,
            }
        }
    }
}

/// Zeroes the kernel counters of `device`.
///
/// ```
/// let dev = wgtensor::Device::best();
/// wgtensor::reset_kernel_stats(&dev);
/// assert_eq!(wgtensor::kernel_stats(&dev).dispatches, 0);
/// ```
pub fn reset_kernel_stats(device: &Device) {
    if let DeviceInner::Gpu(g) = &device.0 {
        for c in g.0.kernels.counters.all() {
            c.store(0, Ordering::Relaxed);
        }
    }
}

/// Turns on (or off) a one-time warning (through the `log` crate, level `warn`) when a program
/// keeps reading a tensor back and uploading the same bytes again (the seeds' tight-loop
/// pitfall). Also enabled by the environment variable `WGTENSOR_WARN_TRANSFERS=1`.
///
/// ```
/// wgtensor::warn_on_transfer_churn(true);
/// ```
pub fn warn_on_transfer_churn(on: bool) {
    crate::gpu::staging::WARN_CHURN.store(on, Ordering::Relaxed);
}

/// Budgets set by [`set_memory_budget`], by device string (`"cpu"`, `"gpu:0"`, ...).
static BUDGETS: std::sync::Mutex<Vec<(String, u64)>> = std::sync::Mutex::new(Vec::new());

/// The memory that tensors on `device` may plan to fill, in bytes, if known.
///
/// wgpu does not report how much memory an adapter has, so the budget is, in order: what
/// [`set_memory_budget`] set for this device; the `WGTENSOR_MEMORY_BUDGET` environment variable
/// (bytes, or a number with `K`, `M`, `G`, `KiB`, `MiB` or `GiB`, for every device); the host's
/// memory for the CPU and for adapters that share it (integrated and software GPUs, "unified
/// memory" in [`crate::adapters`]); otherwise `None` (a discrete GPU), where only the driver's
/// refusal of an allocation ([`crate::Error::OutOfMemory`]) tells. Loading a model
/// ([`crate::models::AutoModel::load`], feature `models`) refuses up front a model larger than
/// the budget left.
///
/// ```
/// use wgtensor::Device;
/// let dev = Device::cpu();
/// wgtensor::set_memory_budget(&dev, Some(1 << 30));
/// assert_eq!(wgtensor::memory_budget(&dev), Some(1 << 30));
/// wgtensor::set_memory_budget(&dev, None);
/// ```
pub fn memory_budget(device: &Device) -> Option<u64> {
    let key = device.to_string();
    let set = BUDGETS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|(d, _)| *d == key)
        .map(|&(_, b)| b);
    if set.is_some() {
        return set;
    }
    if let Some(b) = env_budget() {
        return Some(b);
    }
    match &device.0 {
        DeviceInner::Cpu => host_memory(),
        DeviceInner::Gpu(g) if g.0.unified => host_memory(),
        DeviceInner::Gpu(_) => None,
    }
}

/// Sets (or with `None` clears) the memory budget of `device` that [`memory_budget`] reports:
/// for a discrete GPU, whose memory wgpu cannot report, the size of its memory (or the share of
/// it this process may use, as `torch.cuda.set_per_process_memory_fraction` sets for CUDA).
/// Allocations are not capped by it; model loading checks against it before allocating.
///
/// ```
/// use wgtensor::Device;
/// let dev = Device::cpu();
/// wgtensor::set_memory_budget(&dev, Some(8 << 30));
/// assert_eq!(wgtensor::memory_budget(&dev), Some(8 << 30));
/// wgtensor::set_memory_budget(&dev, None);
/// ```
pub fn set_memory_budget(device: &Device, bytes: Option<u64>) {
    let key = device.to_string();
    let mut budgets = BUDGETS.lock().unwrap_or_else(|p| p.into_inner());
    budgets.retain(|(d, _)| *d != key);
    if let Some(b) = bytes {
        budgets.push((key, b));
    }
}

/// `WGTENSOR_MEMORY_BUDGET`, parsed; an unreadable value is ignored with a warning.
fn env_budget() -> Option<u64> {
    let v = std::env::var("WGTENSOR_MEMORY_BUDGET").ok()?;
    let parsed = parse_bytes(&v);
    if parsed.is_none() {
        log::warn!(
            "WGTENSOR_MEMORY_BUDGET={v:?} is not a byte count (e.g. 4GiB, 512M, 1000000); ignored"
        );
    }
    parsed
}

/// `"4GiB"`, `"512M"`, `"1000000"` -> bytes.
fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let num: f64 = num.parse().ok()?;
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1u64,
        "k" | "kb" => 1_000,
        "m" | "mb" => 1_000_000,
        "g" | "gb" => 1_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        _ => return None,
    };
    (num.is_finite() && num >= 0.0).then_some((num * scale as f64) as u64)
}

/// The host's memory (`MemTotal`), where the system tells it.
fn host_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod budget_tests {
    use super::parse_bytes;

    #[test]
    fn byte_counts_parse_with_units() {
        assert_eq!(parse_bytes("1000000"), Some(1_000_000));
        assert_eq!(parse_bytes("4GiB"), Some(4 << 30));
        assert_eq!(parse_bytes(" 512 MiB "), Some(512 << 20));
        assert_eq!(parse_bytes("1.5G"), Some(1_500_000_000));
        assert_eq!(parse_bytes("2k"), Some(2000));
        assert_eq!(parse_bytes("lots"), None);
        assert_eq!(parse_bytes("5 parsecs"), None);
        assert_eq!(parse_bytes(""), None);
    }
}
