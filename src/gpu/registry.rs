//! Adapter discovery: one wgpu instance per process, adapters ordered and numbered once, each
//! opened at most once and shared.

use super::device::GpuDevice;
use crate::{Error, Result};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, OnceLock};

/// What [`adapters`](crate::adapters) reports about one adapter wgpu found.
#[derive(Clone, Debug)]
pub struct AdapterSummary {
    /// Device strings that reach this adapter, canonical first (`gpu:0`, `gpu`, `cuda:0`, `vulkan:0`).
    pub names: Vec<String>,
    /// `N` of `gpu:N`, or `None` when this adapter is a second view (e.g. GL) of a listed GPU.
    pub gpu_index: Option<usize>,
    /// Adapter name as the driver reports it.
    pub name: String,
    /// PCI vendor id (0x10de NVIDIA, 0x1002 AMD, 0x8086 Intel, 0x10005 Mesa, ...).
    pub vendor: u32,
    /// PCI device id.
    pub device_id: u32,
    /// `vulkan`, `metal`, `dx12` or `gl`.
    pub backend: String,
    /// `DiscreteGpu`, `IntegratedGpu`, `VirtualGpu`, `Cpu` (software) or `Other`.
    pub device_type: String,
    /// Whether this is a software rasteriser such as llvmpipe ([`Device::best`](crate::Device::best) skips these).
    pub is_software: bool,
    /// Driver name and version.
    pub driver: String,
    /// Largest single buffer in bytes.
    pub max_buffer_size: u64,
    /// Largest storage binding in bytes (the largest tensor a kernel can bind whole).
    pub max_storage_buffer_binding_size: u64,
    /// Largest dispatch per grid dimension.
    pub max_compute_workgroups_per_dimension: u32,
    /// Largest workgroup.
    pub max_compute_invocations_per_workgroup: u32,
    /// Whether the adapter computes in f16 natively.
    pub shader_f16: bool,
    /// Largest workgroup memory (`var<workgroup>`) in bytes: what bounds a tiled kernel's tiles.
    pub max_compute_workgroup_storage_size: u32,
    /// Whether the adapter offers subgroup operations (`SUBGROUP`), which row and matrix-vector
    /// kernels use for their reductions.
    pub subgroups: bool,
    /// Smallest and largest subgroup size the driver reports (`(0, 0)` without subgroups).
    pub subgroup_sizes: (u32, u32),
    /// Whether kernels can be timed on the device (`TIMESTAMP_QUERY`).
    pub timestamp_query: bool,
    /// Whether host and GPU share memory and tensor buffers can be mapped
    /// (`MAPPABLE_PRIMARY_BUFFERS`): transfers then skip the staging copy.
    /// `WGTENSOR_DISABLE_UNIFIED_MEMORY=1` turns this off (the discrete-GPU transfer paths).
    pub unified_memory: bool,
}

pub(crate) struct Registry {
    /// Kept alive for the adapters' sake.
    _instance: Option<wgpu::Instance>,
    /// Adapters of every backend but GL (or of the backends `WGPU_BACKEND` names, and GL too
    /// when nothing else was found).
    entries: Vec<Entry>,
    /// GL adapters, enumerated only when asked for (`gl:N`, `adapters()`): probing GL opens an
    /// EGL display, slow and noisy on headless machines. Indices continue after `entries`.
    late: OnceLock<(Option<wgpu::Instance>, Vec<Entry>)>,
    /// Whether `entries` already holds the GL adapters (then `late` stays empty).
    gl_included: bool,
    /// `gpu:N` → index into `entries`.
    gpu: Vec<usize>,
    /// Why discovery itself failed, if it did.
    failure: Option<String>,
}

struct Entry {
    adapter: wgpu::Adapter,
    info: wgpu::AdapterInfo,
    limits: wgpu::Limits,
    features: wgpu::Features,
    /// `N` in `vulkan:N`, `gl:N`, ...: the index among adapters of the same backend.
    backend_index: usize,
    gpu_index: Option<usize>,
    opened: Mutex<Option<GpuDevice>>,
}

/// Preference: discrete, integrated, virtual, software, unknown.
fn type_rank(t: wgpu::DeviceType) -> u8 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Cpu => 3,
        wgpu::DeviceType::Other => 4,
    }
}

/// Native APIs first; GL only where nothing else reaches the device.
fn backend_rank(b: wgpu::Backend) -> u8 {
    match b {
        wgpu::Backend::Vulkan | wgpu::Backend::Metal | wgpu::Backend::Dx12 => 0,
        wgpu::Backend::Gl => 1,
        wgpu::Backend::BrowserWebGpu | wgpu::Backend::Noop => 2,
    }
}

/// Lower-case backend name as used in device strings.
/// Integrated GPUs and software adapters share memory with the host.
fn is_unified(info: &wgpu::AdapterInfo) -> bool {
    matches!(
        info.device_type,
        wgpu::DeviceType::IntegratedGpu | wgpu::DeviceType::Cpu
    )
}

pub(crate) fn backend_name(b: wgpu::Backend) -> &'static str {
    match b {
        wgpu::Backend::Vulkan => "vulkan",
        wgpu::Backend::Metal => "metal",
        wgpu::Backend::Dx12 => "dx12",
        wgpu::Backend::Gl => "gl",
        wgpu::Backend::BrowserWebGpu => "webgpu",
        wgpu::Backend::Noop => "noop",
    }
}

/// Whether two adapters are one physical device seen through two backends. GL renderer strings
/// often extend the Vulkan name ("NVIDIA GeForce RTX 3080/PCIe/SSE2"), hence the prefix test.
fn same_device(a: &wgpu::AdapterInfo, b: &wgpu::AdapterInfo) -> bool {
    let (x, y) = (a.name.to_lowercase(), b.name.to_lowercase());
    a.device_type == b.device_type
        && !x.is_empty()
        && (x.starts_with(&y) || y.starts_with(&x))
        && (a.vendor == 0 || b.vendor == 0 || a.vendor == b.vendor)
}

static REGISTRY: OnceLock<Registry> = OnceLock::new();

pub(crate) fn registry() -> &'static Registry {
    REGISTRY.get_or_init(Registry::discover)
}

impl Registry {
    fn discover() -> Registry {
        // Instance creation and enumeration call into drivers; a broken driver must not take
        // the process down, it only means "no GPU".
        // Honours WGPU_BACKEND (and wgpu's other environment variables). GL is probed only
        // when WGPU_BACKEND asks for it or when no other backend finds an adapter.
        let asked = std::env::var("WGPU_BACKEND").is_ok_and(|v| !v.trim().is_empty());
        let found = catch_unwind(|| {
            let mut desc = instance_descriptor();
            if !asked {
                // Every backend but GL (an empty WGPU_BACKEND counts as unset).
                desc.backends = wgpu::Backends::PRIMARY;
            }
            let gl_included = desc.backends.contains(wgpu::Backends::GL);
            let instance = wgpu::Instance::new(desc);
            let adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
            let real = adapters
                .iter()
                .any(|a| !matches!(a.get_info().backend, wgpu::Backend::Noop));
            // WGPU_BACKEND narrows the search to what it names: no GL fallback then.
            if real || gl_included || asked {
                return (instance, adapters, gl_included || asked);
            }
            // Nothing else: GL is the last resort.
            let (gl, adapters) = gl_adapters();
            (gl.unwrap_or(instance), adapters, true)
        });
        let (instance, adapters, gl_included) = match found {
            Ok(v) => v,
            Err(_) => {
                return Registry {
                    _instance: None,
                    late: OnceLock::new(),
                    gl_included: true,
                    entries: Vec::new(),
                    gpu: Vec::new(),
                    failure: Some("the wgpu instance panicked while enumerating adapters".into()),
                }
            }
        };
        let mut entries = to_entries(adapters);
        // Stable sort: the driver's order breaks ties.
        entries.sort_by_key(|e| (type_rank(e.info.device_type), backend_rank(e.info.backend)));
        let mut gpu = Vec::new();
        for i in 0..entries.len() {
            let backend = entries[i].info.backend;
            entries[i].backend_index = entries[..i]
                .iter()
                .filter(|e| e.info.backend == backend)
                .count();
            let duplicate = gpu
                .iter()
                .any(|&j: &usize| same_device(&entries[j].info, &entries[i].info));
            if !duplicate {
                entries[i].gpu_index = Some(gpu.len());
                gpu.push(i);
            }
        }
        Registry {
            _instance: Some(instance),
            entries,
            late: OnceLock::new(),
            gl_included,
            gpu,
            failure: None,
        }
    }

    /// Entry `i`: the first adapters, then the late GL ones.
    fn entry(&self, i: usize) -> &Entry {
        match self.entries.get(i) {
            Some(e) => e,
            None => &self.late_entries()[i - self.entries.len()],
        }
    }

    /// The GL adapters, enumerated on first use (never when `entries` has them already).
    fn late_entries(&self) -> &[Entry] {
        &self
            .late
            .get_or_init(|| {
                if self.gl_included {
                    return (None, Vec::new());
                }
                let (instance, adapters) = catch_unwind(gl_adapters).unwrap_or((None, Vec::new()));
                let mut late = to_entries(adapters);
                for (k, e) in late.iter_mut().enumerate() {
                    // Numbered among GL adapters; GPU numbers stay those of the first search.
                    e.backend_index = k;
                }
                (instance, late)
            })
            .1
    }

    /// How many entries there are; with `gl`, after enumerating the GL adapters if needed.
    fn len(&self, gl: bool) -> usize {
        if gl {
            self.entries.len() + self.late_entries().len()
        } else {
            self.entries.len() + self.late.get().map_or(0, |l| l.1.len())
        }
    }

    /// Whether GL adapters have been enumerated in this process (a test hook).
    pub(crate) fn gl_probed(&self) -> bool {
        self.gl_included || self.late.get().is_some()
    }

    pub(crate) fn gpu_count(&self) -> usize {
        self.gpu.len()
    }

    /// The device strings that reach entry `i`, canonical first.
    fn names(&self, i: usize) -> Vec<String> {
        let e = self.entry(i);
        let backend = format!("{}:{}", backend_name(e.info.backend), e.backend_index);
        match e.gpu_index {
            Some(g) => {
                let mut v = vec![format!("gpu:{g}"), format!("cuda:{g}"), backend];
                if g == 0 {
                    v.insert(1, "gpu".into());
                }
                v
            }
            None => vec![backend],
        }
    }

    pub(crate) fn summaries(&self) -> Vec<AdapterSummary> {
        (0..self.len(true))
            .map(|i| {
                let e = self.entry(i);
                AdapterSummary {
                    names: self.names(i),
                    gpu_index: e.gpu_index,
                    name: e.info.name.clone(),
                    vendor: e.info.vendor,
                    device_id: e.info.device,
                    backend: backend_name(e.info.backend).to_string(),
                    device_type: format!("{:?}", e.info.device_type),
                    is_software: e.info.device_type == wgpu::DeviceType::Cpu,
                    driver: format!("{} {}", e.info.driver, e.info.driver_info)
                        .trim()
                        .to_string(),
                    max_buffer_size: e.limits.max_buffer_size,
                    max_storage_buffer_binding_size: e.limits.max_storage_buffer_binding_size,
                    max_compute_workgroups_per_dimension: e
                        .limits
                        .max_compute_workgroups_per_dimension,
                    max_compute_invocations_per_workgroup: e
                        .limits
                        .max_compute_invocations_per_workgroup,
                    shader_f16: e.features.contains(wgpu::Features::SHADER_F16),
                    max_compute_workgroup_storage_size: e.limits.max_compute_workgroup_storage_size,
                    subgroups: e.features.contains(wgpu::Features::SUBGROUP),
                    subgroup_sizes: if e.features.contains(wgpu::Features::SUBGROUP) {
                        (e.info.subgroup_min_size, e.info.subgroup_max_size)
                    } else {
                        (0, 0)
                    },
                    timestamp_query: e.features.contains(wgpu::Features::TIMESTAMP_QUERY),
                    unified_memory: is_unified(&e.info)
                        && e.features
                            .contains(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS)
                        && !super::device::unified_memory_disabled(),
                }
            })
            .collect()
    }

    fn none_found(&self) -> String {
        match &self.failure {
            Some(f) => format!("GPU discovery failed ({f})"),
            None => {
                "no GPU adapter was found (wgpu searched Vulkan, Metal, DX12 and GL; WGPU_BACKEND \
                     narrows the search); install a GPU driver (on Linux without a GPU, \
                     `apt-get install mesa-vulkan-drivers` gives a software adapter) or use the CPU"
                    .into()
            }
        }
    }

    fn describe(&self, i: usize) -> String {
        let e = self.entry(i);
        format!(
            "{} = {} ({}, {:?})",
            self.names(i)[0],
            e.info.name,
            backend_name(e.info.backend),
            e.info.device_type
        )
    }

    /// Opens `gpu:index`.
    pub(crate) fn open_gpu(&self, input: &str, index: usize) -> Result<GpuDevice> {
        self.open(self.gpu_entry(input, index)?)
    }

    /// The entry of `gpu:index`, or the error naming how many GPUs exist.
    fn gpu_entry(&self, input: &str, index: usize) -> Result<usize> {
        match self.gpu.get(index) {
            Some(&i) => Ok(i),
            None if self.gpu.is_empty() => Err(Error::GpuUnavailable {
                requested: input.to_string(),
                reason: self.none_found(),
            }),
            None => Err(Error::InvalidDevice {
                input: input.to_string(),
                reason: format!(
                    "index {index} is past the end: {} GPU(s) exist ({})",
                    self.gpu.len(),
                    self.gpu
                        .iter()
                        .map(|&i| self.describe(i))
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            }),
        }
    }

    /// Opens the `index`-th adapter of backend `backend` (`vulkan:N`, `gl:N`, ...).
    pub(crate) fn open_backend(
        &self,
        input: &str,
        backend: &str,
        index: usize,
    ) -> Result<GpuDevice> {
        let matching: Vec<usize> = (0..self.len(backend == "gl"))
            .filter(|&i| backend_name(self.entry(i).info.backend) == backend)
            .collect();
        match matching.get(index) {
            Some(&i) => self.open(i),
            None if matching.is_empty() => Err(Error::GpuUnavailable {
                requested: input.to_string(),
                reason: if self.len(false) == 0 {
                    self.none_found()
                } else {
                    format!(
                        "no {backend} adapter was found; available: {}",
                        (0..self.len(false))
                            .map(|i| self.describe(i))
                            .collect::<Vec<_>>()
                            .join("; ")
                    )
                },
            }),
            None => Err(Error::InvalidDevice {
                input: input.to_string(),
                reason: format!(
                    "index {index} is past the end: {} {backend} adapter(s) exist",
                    matching.len()
                ),
            }),
        }
    }

    /// The first hardware GPU that opens, with the reason for the choice; `None` means the CPU.
    pub(crate) fn best(&self) -> (Option<GpuDevice>, String) {
        let mut failures = Vec::new();
        for &i in &self.gpu {
            if self.entry(i).info.device_type == wgpu::DeviceType::Cpu {
                continue;
            }
            match self.open(i) {
                Ok(d) => return (Some(d), format!("first hardware GPU: {}", self.describe(i))),
                Err(e) => failures.push(format!("{} failed to open: {e}", self.describe(i))),
            }
        }
        let reason = if !failures.is_empty() {
            format!("no GPU could be opened: {}", failures.join("; "))
        } else if self.gpu.is_empty() {
            self.none_found()
        } else {
            let software: Vec<String> = self.gpu.iter().map(|&i| self.describe(i)).collect();
            format!(
                "only software adapters were found ({}); they run GPU kernels on the CPU, slower \
                 than wgtensor's native CPU path; request one explicitly (e.g. `gpu:0`) to use it anyway",
                software.join("; ")
            )
        };
        (None, reason)
    }

    fn open(&self, i: usize) -> Result<GpuDevice> {
        let e = self.entry(i);
        let mut slot = e.opened.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = slot.as_ref() {
            // A lost device is dropped from the registry: opening again ("open the device
            // again", as DeviceLost says) gets a fresh one. Tensors on the old one stay lost.
            if !d.is_lost() {
                return Ok(d.clone());
            }
        }
        let dev = self.request(i, self.names(i)[0].clone())?;
        *slot = Some(dev.clone());
        Ok(dev)
    }

    /// Opens a new, independent wgpu device on the adapter of `gpu:index` (its own queue,
    /// memory pool and statistics), labelled `gpu:index#k` with `k` counting from 1. Never cached:
    /// every call is a new logical device.
    pub(crate) fn open_gpu_logical(&self, index: usize) -> Result<GpuDevice> {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(1);
        let i = self.gpu_entry(&format!("gpu:{index}"), index)?;
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        self.request(i, format!("gpu:{index}#{k}"))
    }

    /// Requests a fresh wgpu device on entry `i`.
    fn request(&self, i: usize, label: String) -> Result<GpuDevice> {
        let e = self.entry(i);
        // Request the adapter's real limits: wgpu's defaults cap buffers at 256 MiB.
        // On unified memory (integrated GPUs, software adapters) tensor buffers can be mapped
        // directly, so uploads skip the staging copy.
        let unified = is_unified(&e.info);
        // Subgroup operations merge row statistics with one barrier instead of a tree.
        // Timestamps inside passes give `Device::profile` its per-kernel GPU times.
        let mut wanted = (wgpu::Features::SHADER_F16
            | wgpu::Features::SUBGROUP
            | wgpu::Features::TIMESTAMP_QUERY
            | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES)
            & e.features;
        if !wanted.contains(wgpu::Features::TIMESTAMP_QUERY) {
            wanted.remove(wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES);
        }
        if unified {
            wanted |= wgpu::Features::MAPPABLE_PRIMARY_BUFFERS & e.features;
        }
        let requested = catch_unwind(AssertUnwindSafe(|| {
            pollster::block_on(e.adapter.request_device(&wgpu::DeviceDescriptor {
                label: Some("wgtensor"),
                required_features: wanted,
                required_limits: e.limits.clone(),
                experimental_features: wgpu::ExperimentalFeatures::disabled(),
                memory_hints: wgpu::MemoryHints::Performance,
                trace: wgpu::Trace::Off,
            }))
        }));
        let (device, queue) = match requested {
            Ok(Ok(dq)) => dq,
            Ok(Err(err)) => {
                return Err(Error::GpuUnavailable {
                    requested: label,
                    reason: format!("{} refused to open: {err}", self.describe(i)),
                })
            }
            Err(_) => {
                return Err(Error::GpuUnavailable {
                    requested: label,
                    reason: format!("{} panicked while opening", self.describe(i)),
                })
            }
        };
        Ok(GpuDevice::new(label, e.info.clone(), device, queue, None))
    }
}

/// Entries for the adapters wgpu found (the no-op backend left out), numbered later.
fn to_entries(adapters: Vec<wgpu::Adapter>) -> Vec<Entry> {
    adapters
        .into_iter()
        .filter(|a| !matches!(a.get_info().backend, wgpu::Backend::Noop))
        .map(|adapter| Entry {
            info: adapter.get_info(),
            limits: adapter.limits(),
            features: adapter.features(),
            adapter,
            backend_index: 0,
            gpu_index: None,
            opened: Mutex::new(None),
        })
        .collect()
}

/// A GL-only instance and its adapters.
fn gl_adapters() -> (Option<wgpu::Instance>, Vec<wgpu::Adapter>) {
    let mut desc = instance_descriptor();
    desc.backends = wgpu::Backends::GL;
    let instance = wgpu::Instance::new(desc);
    let adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::GL));
    (Some(instance), adapters)
}

/// wgpu's instance settings from the environment, plus a memory-budget threshold: where the
/// driver reports a budget (Vulkan's `VK_EXT_memory_budget`, D3D12), creating a buffer past 95%
/// of it fails as out of memory, a typed [`crate::Error::OutOfMemory`], instead of
/// over-committing the device until the driver loses it.
fn instance_descriptor() -> wgpu::InstanceDescriptor {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    desc.memory_budget_thresholds.for_resource_creation = Some(95);
    desc
}
