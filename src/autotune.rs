//! What the autotuner chose on a device ([`autotune_report`]). See `docs/gpu.md`, "Autotuning"
//! section: kernel variants are timed on the adapter itself on the second call of each shape
//! class, and the winners persist in `autotune.json` under the user's cache directory
//! (`WGTENSOR_CACHE_DIR` overrides; `WGTENSOR_AUTOTUNE=off|on|force`).

use crate::device::Device;

/// One shape class of one kernel family and the variant it runs.
#[derive(Clone, Debug, PartialEq)]
pub struct AutotuneEntry {
    /// The kernel family (`matmul`).
    pub family: String,
    /// The shape class (sizes bucketed to powers of two, batched, vec4-aligned).
    pub class: String,
    /// The variant used (a name [`crate::Tensor::matmul_with_kernel`] accepts).
    pub variant: String,
    /// `heuristic` (not tuned yet), `tuned` (timed in this process) or `cache` (from the file).
    pub source: &'static str,
    /// Milliseconds per run of each candidate, for classes tuned in this process.
    pub timings_ms: Vec<(String, f64)>,
}

/// The autotuner's state on one device.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AutotuneReport {
    /// Candidate searches run in this process (0 when every class came from the cache).
    pub searches: u64,
    /// The cache file read and written (`None`: no cache directory could be found).
    pub cache_file: Option<std::path::PathBuf>,
    /// Every shape class met so far, by family and class.
    pub entries: Vec<AutotuneEntry>,
}

/// The kernel variants chosen on `device` so far, where they came from, and the timings of the
/// searches run in this process. Empty on the CPU (one kernel per op).
///
/// ```
/// use wgtensor::{autotune_report, Device, Tensor};
/// let d = Device::best();
/// let a = Tensor::ones(&[8, 8], wgtensor::DType::F32, &d)?;
/// a.matmul(&a)?.to_vec::<f32>()?;
/// let report = autotune_report(&d);
/// assert_eq!(report.entries.is_empty(), d.is_cpu());
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub fn autotune_report(device: &Device) -> AutotuneReport {
    let Some(g) = device.as_gpu() else {
        return AutotuneReport::default();
    };
    let tuner = &g.0.tuner;
    AutotuneReport {
        searches: tuner.searches.load(std::sync::atomic::Ordering::Relaxed),
        cache_file: crate::gpu::autotune::cache_file(),
        entries: tuner
            .report()
            .into_iter()
            .map(|(key, c)| {
                let (family, class) = key.split_once('/').unwrap_or(("", &key));
                AutotuneEntry {
                    family: family.to_string(),
                    class: class.to_string(),
                    variant: c.variant,
                    source: c.source.name(),
                    timings_ms: c.timings_ms,
                }
            })
            .collect(),
    }
}
