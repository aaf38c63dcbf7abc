//! What the autotuner chose on a device ([`autotune_report`]). See `docs/gpu.md`, "Autotuning"
//! section: kernel variants are timed on the adapter itself on the second call of each shape
//! class, and the winners persist in `autotune.json` under the user's cache directory
//! (`WGTENSOR_CACHE_DIR` overrides; `WGTENSOR_AUTOTUNE=off|on|force`).

use crate::device::Device;

/// Whether GPU kernel choices keep results bit-identical (on by default; PyTorch keeps its
/// cuDNN benchmark mode off for the same reason). With it on, the same input gives the same bits
/// on one adapter, on the first call and every later one, in every process, with an empty or a
/// populated autotune cache: the autotuner only chooses among kernels that compute each result
/// with the same operations in the same order (matmul's k-ordered FMA kernels); reductions,
/// softmax, layer_norm and cross_entropy keep their heuristic variant. With it off, every
/// variant may be chosen by timing (a faster one may sum in another order, so a result's last
/// bits can change between the first call of a shape class and later ones, and between
/// processes). `WGTENSOR_NONDETERMINISTIC=1` turns it off for a process; this setter overrides
/// the variable. Process-wide; the CPU has one kernel per op and is unaffected.
/// See `docs/reliability.md`, "Determinism".
///
/// ```
/// use wgtensor::{Device, Tensor};
/// assert!(wgtensor::deterministic());
/// let x = Tensor::rand(&[4096, 3], &Device::best())?;
/// let a = x.sum(0, false)?.to_vec::<f32>()?;
/// let b = x.sum(0, false)?.to_vec::<f32>()?;
/// assert_eq!(a, b);
/// wgtensor::set_deterministic(false); // opt in to variants that sum in other orders
/// wgtensor::set_deterministic(true);
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub fn set_deterministic(on: bool) {
    crate::gpu::autotune::set_deterministic(Some(on));
}

/// Whether kernel choices keep results bit-identical ([`set_deterministic`]; true unless it was
/// turned off or `WGTENSOR_NONDETERMINISTIC=1`).
pub fn deterministic() -> bool {
    crate::gpu::autotune::deterministic()
}

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
