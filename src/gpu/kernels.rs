//! The one module that embeds `shaders/*.wgsl`, and the per-device pipeline cache.
//!
//! Every kernel follows one binding convention, so one bind-group layout per input count serves
//! them all: `@binding(0..k)` read-only inputs, `@binding(k)` the read-write output,
//! `@binding(k + 1)` a read-only `array<u32>` of metadata (sizes, offsets, strides, scalars).
//! Elementwise kernels use 256-thread workgroups on a 2-D grid (see [`grid`]); matmul kernels
//! choose their own workgroup size and 3-D grid through [`GpuDevice::launch_workgroups`].

use super::codegen::Generated;
use super::device::GpuDevice;
use crate::{Error, Result};
use std::collections::HashMap;
use std::sync::Mutex;
use wgpu::util::DeviceExt;

/// Threads per workgroup in every shader (`@workgroup_size(256)`): a multiple of every vendor's
/// SIMD width (32 on NVIDIA, 64 on AMD, 8-32 on Intel/Apple) and within WebGPU's default limit.
pub(crate) const WORKGROUP: u64 = 256;

/// The hand-written shader files, plus the generated elementwise kernels (`codegen.rs`). Each
/// file is valid WGSL once `shaders/common.wgsl` is prepended (done here, at embed time);
/// `tests/shaders.rs` validates every composed shader with naga.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Shader {
    Fill,
    Reduce,
    Softmax,
    LayerNorm,
    Join,
    Matmul,
    MatmulVec4,
    Gather,
    /// A generated elementwise kernel (one per op chain, dtypes and input packing).
    Generated(GeneratedRef),
}

/// A generated kernel, compared and hashed by address: kernels are interned, so the address
/// identifies the source without hashing it on every launch.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GeneratedRef(pub &'static Generated);

impl PartialEq for GeneratedRef {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.0, other.0)
    }
}

impl Eq for GeneratedRef {}

impl std::hash::Hash for GeneratedRef {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::ptr::hash(self.0, state)
    }
}

/// The helpers every shader shares (`is_nan`, f16 packing, `pow_c`, ...).
pub(crate) const COMMON: &str = include_str!("../../shaders/common.wgsl");

/// `common.wgsl` followed by `body`; `enable` directives of `body` (which WGSL wants before
/// any declaration) go first.
pub(crate) fn compose(body: &str) -> String {
    match body.strip_prefix("enable f16;\n") {
        Some(rest) => format!("enable f16;\n{COMMON}\n{rest}"),
        None => format!("{COMMON}\n{body}"),
    }
}

impl Shader {
    /// Every hand-written shader file, for tests that validate them all.
    #[allow(dead_code)]
    pub(crate) const ALL: [Shader; 8] = [
        Shader::Fill,
        Shader::Reduce,
        Shader::Softmax,
        Shader::LayerNorm,
        Shader::Join,
        Shader::Matmul,
        Shader::MatmulVec4,
        Shader::Gather,
    ];

    pub(crate) fn file(self) -> &'static str {
        match self {
            Shader::Fill => "fill.wgsl",
            Shader::Reduce => "reduce.wgsl",
            Shader::Softmax => "softmax.wgsl",
            Shader::LayerNorm => "layer_norm.wgsl",
            Shader::Join => "join.wgsl",
            Shader::Matmul => "matmul.wgsl",
            Shader::MatmulVec4 => "matmul_vec4.wgsl",
            Shader::Gather => "gather.wgsl",
            Shader::Generated(g) => &g.0.label,
        }
    }

    /// The file as written (without `common.wgsl`).
    pub(crate) fn body(self) -> &'static str {
        match self {
            Shader::Fill => include_str!("../../shaders/fill.wgsl"),
            Shader::Reduce => include_str!("../../shaders/reduce.wgsl"),
            Shader::Softmax => include_str!("../../shaders/softmax.wgsl"),
            Shader::LayerNorm => include_str!("../../shaders/layer_norm.wgsl"),
            Shader::Join => include_str!("../../shaders/join.wgsl"),
            Shader::Matmul => include_str!("../../shaders/matmul.wgsl"),
            Shader::MatmulVec4 => include_str!("../../shaders/matmul_vec4.wgsl"),
            Shader::Gather => include_str!("../../shaders/gather.wgsl"),
            Shader::Generated(g) => &g.0.source,
        }
    }

    /// The source handed to wgpu: `common.wgsl` + the shader.
    pub(crate) fn source(self) -> String {
        compose(self.body())
    }

    /// Read-only input bindings before the output.
    fn inputs(self) -> usize {
        match self {
            Shader::Fill => 0,
            Shader::Matmul | Shader::MatmulVec4 => 2,
            // reduce binds an auxiliary input (softmax's row maxima) beside the data.
            Shader::Reduce => 2,
            Shader::Softmax => 1,
            // The input, weight and bias.
            Shader::LayerNorm => 3,
            Shader::Join => 1,
            // The table and the ids.
            Shader::Gather => 2,
            Shader::Generated(g) => g.0.inputs,
        }
    }
}

type PipelineKey = (Shader, &'static str, Option<u32>);

/// Compiled modules, layouts and pipelines of one device, built on first use.
pub(crate) struct KernelCache {
    modules: Mutex<HashMap<Shader, wgpu::ShaderModule>>,
    layouts: Mutex<HashMap<usize, (wgpu::BindGroupLayout, wgpu::PipelineLayout)>>,
    pipelines: Mutex<HashMap<PipelineKey, wgpu::ComputePipeline>>,
    /// `WGTENSOR_DISABLE_SHADER_F16=1` when the device opened: f16 kernels take the unpacking
    /// path even where the adapter offers `SHADER_F16` (to test that path on any adapter).
    pub(crate) f16_disabled: bool,
}

impl Default for KernelCache {
    fn default() -> Self {
        KernelCache {
            modules: Mutex::default(),
            layouts: Mutex::default(),
            pipelines: Mutex::default(),
            f16_disabled: std::env::var("WGTENSOR_DISABLE_SHADER_F16").is_ok_and(|v| v == "1"),
        }
    }
}

/// One dispatch: which kernel, its buffers and metadata, and how many threads.
pub(crate) struct Launch<'a> {
    pub shader: Shader,
    pub entry: &'static str,
    /// Value of the shader's `override OP: u32`, for shaders that select an op with it.
    pub op_code: Option<u32>,
    pub inputs: &'a [&'a wgpu::Buffer],
    pub output: &'a wgpu::Buffer,
    pub meta: &'a [u32],
    /// Invocations to cover: `ceil(threads / 256)` workgroups are dispatched. Kernels that give
    /// each workgroup one item (`reduce.wgsl::reduce_wg`) pass `items * WORKGROUP`.
    pub threads: u64,
}

/// Splits `workgroups` over a 2-D grid: no dimension may exceed
/// `max_compute_workgroups_per_dimension` (65,535 on most adapters). Shaders flatten it as
/// `(wid.y * nwg.x + wid.x) * 256 + lid` and guard `i >= n`.
pub(crate) fn grid(workgroups: u64, max_per_dim: u32) -> Option<(u32, u32)> {
    let max = max_per_dim.max(1) as u64;
    let x = workgroups.min(max);
    let y = workgroups.div_ceil(x.max(1));
    (y <= max).then_some((x as u32, y as u32))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding a cache lock cannot leave a half-built entry behind (entries are
    // inserted whole), so a poisoned lock is still safe to use.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl GpuDevice {
    /// Whether f16 elementwise kernels run natively (`SHADER_F16` enabled on this device and
    /// not disabled by `WGTENSOR_DISABLE_SHADER_F16=1`).
    pub(crate) fn native_f16(&self) -> bool {
        !self.0.kernels.f16_disabled
            && self
                .0
                .device
                .features()
                .contains(wgpu::Features::SHADER_F16)
    }

    fn layout(&self, inputs: usize) -> (wgpu::BindGroupLayout, wgpu::PipelineLayout) {
        let mut layouts = lock(&self.0.kernels.layouts);
        layouts
            .entry(inputs)
            .or_insert_with(|| {
                let storage = |binding: u32, read_only: bool| wgpu::BindGroupLayoutEntry {
                    binding,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Storage { read_only },
                        has_dynamic_offset: false,
                        min_binding_size: None,
                    },
                    count: None,
                };
                let k = inputs as u32;
                let mut entries: Vec<_> = (0..k).map(|b| storage(b, true)).collect();
                entries.push(storage(k, false));
                entries.push(storage(k + 1, true));
                let bgl =
                    self.0
                        .device
                        .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                            label: Some("wgtensor::layout"),
                            entries: &entries,
                        });
                let pl = self
                    .0
                    .device
                    .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                        label: Some("wgtensor::layout"),
                        bind_group_layouts: &[Some(&bgl)],
                        immediate_size: 0,
                    });
                (bgl, pl)
            })
            .clone()
    }

    fn pipeline(&self, op: &'static str, key: PipelineKey) -> Result<wgpu::ComputePipeline> {
        if let Some(p) = lock(&self.0.kernels.pipelines).get(&key) {
            return Ok(p.clone());
        }
        let (shader, entry, op_code) = key;
        let (_, layout) = self.layout(shader.inputs());
        let label = format!("{}::{}", shader.file(), entry);
        let pipeline = self.scoped(op, 0, || {
            let module = lock(&self.0.kernels.modules)
                .entry(shader)
                .or_insert_with(|| {
                    self.0
                        .device
                        .create_shader_module(wgpu::ShaderModuleDescriptor {
                            label: Some(shader.file()),
                            source: wgpu::ShaderSource::Wgsl(shader.source().into()),
                        })
                })
                .clone();
            let constants: Vec<(&str, f64)> =
                op_code.map(|c| ("OP", c as f64)).into_iter().collect();
            self.0
                .device
                .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(&label),
                    layout: Some(&layout),
                    module: &module,
                    entry_point: Some(entry),
                    compilation_options: wgpu::PipelineCompilationOptions {
                        constants: &constants,
                        zero_initialize_workgroup_memory: true,
                    },
                    cache: None,
                })
        })?;
        // Two threads may race to build the same pipeline; both results are equivalent.
        lock(&self.0.kernels.pipelines).insert(key, pipeline.clone());
        Ok(pipeline)
    }

    /// Records and submits one dispatch. Empty launches (`threads == 0`) do nothing: a
    /// zero-sized binding must never reach wgpu.
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
            .inputs
            .iter()
            .chain([&l.output])
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
        let [x, y, z] = workgroups;
        let pipeline = self.pipeline(op, (l.shader, l.entry, l.op_code))?;
        let (bgl, _) = self.layout(l.shader.inputs());
        let bind = self.scoped(op, 0, || {
            let dev = &self.0.device;
            let meta = dev.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("wgtensor::params"),
                contents: bytemuck::cast_slice(l.meta),
                usage: wgpu::BufferUsages::STORAGE,
            });
            let mut entries: Vec<wgpu::BindGroupEntry> = l
                .inputs
                .iter()
                .enumerate()
                .map(|(i, b)| wgpu::BindGroupEntry {
                    binding: i as u32,
                    resource: b.as_entire_binding(),
                })
                .collect();
            let k = l.inputs.len() as u32;
            entries.push(wgpu::BindGroupEntry {
                binding: k,
                resource: l.output.as_entire_binding(),
            });
            entries.push(wgpu::BindGroupEntry {
                binding: k + 1,
                resource: meta.as_entire_binding(),
            });
            // The bind group keeps the params buffer alive until the batch has run.
            dev.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(op),
                layout: &bgl,
                entries: &entries,
            })
        })?;
        // Recorded into the pending batch; submitted at the next readback, synchronize, or
        // after `FLUSH_EVERY` ops.
        self.record(op, |enc| {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(op),
                timestamp_writes: None,
            });
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bind, &[]);
            pass.dispatch_workgroups(x, y, z);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::grid;

    #[test]
    fn grid_stays_within_limits() {
        assert_eq!(grid(1, 65_535), Some((1, 1)));
        assert_eq!(grid(65_535, 65_535), Some((65_535, 1)));
        assert_eq!(grid(65_536, 65_535), Some((65_535, 2)));
        assert_eq!(grid(65_535 * 65_535 + 1, 65_535), None);
        let (x, y) = grid(1_000_000, 65_535).unwrap();
        assert!(x as u64 * y as u64 >= 1_000_000);
    }
}
