//! The per-device pipeline cache (the shaders themselves are `shader_table.rs`'s table).
//!
//! Every kernel follows one binding convention, so one bind-group layout per input count serves
//! them all: `@binding(0..k)` read-only inputs, `@binding(k)` the read-write output,
//! `@binding(k + 1)` a read-only `array<u32>` of metadata (sizes, offsets, strides, scalars).
//! The WGSL declarations are written from the same lists (`bindings.rs`).
//! Elementwise kernels use 256-thread workgroups on a 2-D grid (see [`grid`]); matmul kernels
//! choose their own workgroup size and 3-D grid through `GpuDevice::launch_workgroups`
//! (`launch.rs`). The params binding has a dynamic offset: one ring buffer per device holds the
//! params of a whole batch.
//!
//! A leaf: [`KernelCache`] owns its locks and takes the `wgpu::Device` as an argument. The cache
//! asks a shader only for [`Shader::source`], [`Shader::inputs`], [`Shader::checked`] and a label, so a new variant
//! (generated WGSL) slots in with its own source string.

use super::contract::OP_OVERRIDE;
pub(crate) use super::contract::WORKGROUP;
pub(crate) use super::shader_table::{compose, GeneratedRef, Shader};
use super::sync::{lock, GlTurn};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

type PipelineKey = (Shader, &'static str, Option<u32>);

/// Bind groups cached before the cache is emptied: a training step reuses the same pooled
/// buffers, so a few hundred entries cover it; cached bind groups keep their buffers alive, so
/// the cache is bounded and emptied by `empty_cache`.
const BIND_GROUPS_KEPT: usize = 512;

/// Inputs, output and params buffer of one bind group.
type BindKey = (usize, Vec<wgpu::Buffer>);

/// Kernel counters of one device (`wgtensor::kernel_stats`).
#[derive(Default)]
pub(crate) struct KernelCounters {
    pub dispatches: AtomicU64,
    pub submits: AtomicU64,
    pub fused_kernels: AtomicU64,
    pub pipelines_compiled: AtomicU64,
    pub bind_groups_created: AtomicU64,
}

impl KernelCounters {
    pub(crate) fn all(&self) -> [&AtomicU64; 5] {
        [
            &self.dispatches,
            &self.submits,
            &self.fused_kernels,
            &self.pipelines_compiled,
            &self.bind_groups_created,
        ]
    }

    /// Counts one distinct fused kernel compiled (a generated program of more than one op).
    pub(crate) fn note_fused_kernel(&self) {
        self.fused_kernels.fetch_add(1, Ordering::Relaxed);
    }
}

/// Compiled modules, layouts, pipelines and bind groups of one device, built on first use.
/// Each map has its own lock, held only for a lookup or an insert (never across a wgpu call
/// that may wait).
pub(crate) struct KernelCache {
    modules: Mutex<HashMap<Shader, wgpu::ShaderModule>>,
    layouts: Mutex<HashMap<(usize, bool), (wgpu::BindGroupLayout, wgpu::PipelineLayout)>>,
    /// The layout of `@group(1)`, the error word of shaders that read ids.
    error_layout: std::sync::OnceLock<wgpu::BindGroupLayout>,
    pipelines: Mutex<HashMap<PipelineKey, wgpu::ComputePipeline>>,
    binds: Mutex<HashMap<BindKey, wgpu::BindGroup>>,
    pub(crate) counters: KernelCounters,
    /// `WGTENSOR_DISABLE_SHADER_F16=1` when the device opened: f16 kernels take the unpacking
    /// path even where the adapter offers `SHADER_F16` (to test that path on any adapter).
    pub(crate) f16_disabled: bool,
    /// The device runs on wgpu's GL backend: a pipeline build takes the GL turn
    /// (`sync::GlTurn`), since linking the program needs the GL context.
    gl: bool,
}

impl KernelCache {
    pub(crate) fn new(gl: bool) -> Self {
        KernelCache {
            modules: Mutex::default(),
            layouts: Mutex::default(),
            error_layout: std::sync::OnceLock::new(),
            pipelines: Mutex::default(),
            binds: Mutex::default(),
            counters: KernelCounters::default(),
            f16_disabled: std::env::var("WGTENSOR_DISABLE_SHADER_F16").is_ok_and(|v| v == "1"),
            gl,
        }
    }
}

/// The panic message of a caught panic, for the error that replaces it.
pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

impl KernelCache {
    /// The layout of the error word's bind group (`@group(1) @binding(0)`, read-write).
    pub(crate) fn error_layout(&self, dev: &wgpu::Device) -> &wgpu::BindGroupLayout {
        self.error_layout.get_or_init(|| {
            dev.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some("wgtensor::id_errors"),
                entries: &[wgpu::BindGroupLayoutEntry {
                    binding: 0,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    // One word per checking launch, chosen by the dynamic offset.
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Storage { read_only: false },
                        has_dynamic_offset: true,
                        min_binding_size: None,
                    },
                    count: None,
                }],
            })
        })
    }

    /// The bind-group and pipeline layout for kernels with `inputs` read-only inputs (and the
    /// error word as a second group when `checked`).
    pub(crate) fn layout(
        &self,
        dev: &wgpu::Device,
        inputs: usize,
        checked: bool,
    ) -> (wgpu::BindGroupLayout, wgpu::PipelineLayout) {
        if checked {
            // The same group-0 layout as unchecked kernels (so the cached bind groups fit
            // both), plus the error word.
            let (bgl, _) = self.layout(dev, inputs, false);
            let errors = self.error_layout(dev).clone();
            return lock(&self.layouts)
                .entry((inputs, true))
                .or_insert_with(|| {
                    let pl = dev.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                        label: Some("wgtensor::layout_checked"),
                        bind_group_layouts: &[Some(&bgl), Some(&errors)],
                        immediate_size: 0,
                    });
                    (bgl.clone(), pl)
                })
                .clone();
        }
        lock(&self.layouts)
            .entry((inputs, false))
            .or_insert_with(|| {
                let storage =
                    |binding: u32, read_only: bool, dynamic: bool| wgpu::BindGroupLayoutEntry {
                        binding,
                        visibility: wgpu::ShaderStages::COMPUTE,
                        ty: wgpu::BindingType::Buffer {
                            ty: wgpu::BufferBindingType::Storage { read_only },
                            has_dynamic_offset: dynamic,
                            min_binding_size: None,
                        },
                        count: None,
                    };
                let k = inputs as u32;
                let mut entries: Vec<_> = (0..k).map(|b| storage(b, true, false)).collect();
                entries.push(storage(k, false, false));
                // The params: a window of the batch's params ring, placed per dispatch.
                entries.push(storage(k + 1, true, true));
                let bgl = dev.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                    label: Some("wgtensor::layout"),
                    entries: &entries,
                });
                let pl = dev.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                    label: Some("wgtensor::layout"),
                    bind_group_layouts: &[Some(&bgl)],
                    immediate_size: 0,
                });
                (bgl, pl)
            })
            .clone()
    }

    /// The pipeline of `key`, compiled on first use inside its own error scopes. A wgpu error,
    /// or a panic from the backend (wgpu's GL layer panics when it cannot lock its context), is
    /// returned as a message.
    pub(crate) fn pipeline(
        &self,
        dev: &wgpu::Device,
        key: PipelineKey,
    ) -> std::result::Result<wgpu::ComputePipeline, String> {
        if let Some(p) = lock(&self.pipelines).get(&key) {
            return Ok(p.clone());
        }
        let (shader, entry, op_code) = key;
        let (_, layout) = self.layout(dev, shader.inputs(), shader.checked());
        let label = format!("{}::{}", shader.file(), entry);
        let built = catch_unwind(AssertUnwindSafe(|| {
            let _turn = GlTurn::take(self.gl);
            let validation = dev.push_error_scope(wgpu::ErrorFilter::Validation);
            let internal = dev.push_error_scope(wgpu::ErrorFilter::Internal);
            let module = lock(&self.modules)
                .entry(shader)
                .or_insert_with(|| {
                    let desc = wgpu::ShaderModuleDescriptor {
                        label: Some(shader.file()),
                        source: wgpu::ShaderSource::Wgsl(shader.source().into()),
                    };
                    // The matmul shaders are built without the counter naga adds to every
                    // loop against infinite loops (a counter update and a branch per K step:
                    // 512x512 on llvmpipe, alternating runs, 14.7-15.9 ms against 16.2-16.4 ms
                    // with it). Bounds checks and integer-division guards stay on. The other
                    // shaders keep the counters: no gain was measured for them.
                    let mut checks = wgpu::ShaderRuntimeChecks::checked();
                    checks.force_loop_bounding = shader.bounded_loops();
                    // SAFETY: wgpu requires shaders built without loop bounding to have no
                    // infinite loop. The matmul shaders are wgtensor's own; each loop runs from
                    // a start to a bound taken from its params (a K chunk of at most 16,384, a
                    // tile edge, a batch rank) or a constant, by a fixed positive step, and
                    // every one is run on every adapter by tests/ops/matmul.rs.
                    unsafe { dev.create_shader_module_trusted(desc, checks) }
                })
                .clone();
            let constants: Vec<(&str, f64)> = op_code
                .map(|c| (OP_OVERRIDE, c as f64))
                .into_iter()
                .collect();
            let p = dev.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(&label),
                layout: Some(&layout),
                module: &module,
                entry_point: Some(entry),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants: &constants,
                    // Every shader writes each workgroup array slot before any invocation
                    // reads it (tile loads stage zeros past the edges themselves). Zeroing
                    // costs a pass over workgroup memory and a barrier per workgroup: on the GL
                    // backend a 1024-row softmax took 90 ms with it and 19 ms without.
                    zero_initialize_workgroup_memory: false,
                },
                cache: None,
            });
            let internal = pollster::block_on(internal.pop());
            let validation = pollster::block_on(validation.pop());
            match validation.or(internal) {
                Some(e) => Err(e.to_string()),
                None => Ok(p),
            }
        }));
        let pipeline = match built {
            Ok(r) => r?,
            Err(p) => return Err(format!("building {label} panicked: {}", panic_message(&*p))),
        };
        self.counters
            .pipelines_compiled
            .fetch_add(1, Ordering::Relaxed);
        if let Shader::Generated(g) = shader {
            if g.0.fused {
                self.counters.note_fused_kernel();
            }
        }
        // Two threads may race to build the same pipeline; both results are equivalent.
        lock(&self.pipelines).insert(key, pipeline.clone());
        Ok(pipeline)
    }

    /// The bind group of `buffers` (inputs, output, params) for kernels with `inputs` inputs,
    /// reused when the same buffers come back. `params_size` is the bound window of the params
    /// buffer (read at a dynamic offset).
    pub(crate) fn bind_group(
        &self,
        dev: &wgpu::Device,
        inputs: usize,
        buffers: &[&wgpu::Buffer],
        params_size: u64,
        cache: bool,
    ) -> wgpu::BindGroup {
        let key: BindKey = (inputs, buffers.iter().map(|b| (*b).clone()).collect());
        if cache {
            if let Some(b) = lock(&self.binds).get(&key) {
                return b.clone();
            }
        }
        let (bgl, _) = self.layout(dev, inputs, false);
        let (params, data) = buffers.split_last().expect("output and params");
        let mut entries: Vec<wgpu::BindGroupEntry> = data
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: b.as_entire_binding(),
            })
            .collect();
        entries.push(wgpu::BindGroupEntry {
            binding: data.len() as u32,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: params,
                offset: 0,
                size: wgpu::BufferSize::new(params_size),
            }),
        });
        let bind = dev.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("wgtensor::bind"),
            layout: &bgl,
            entries: &entries,
        });
        self.counters
            .bind_groups_created
            .fetch_add(1, Ordering::Relaxed);
        if cache {
            let mut binds = lock(&self.binds);
            if binds.len() >= BIND_GROUPS_KEPT {
                binds.clear();
            }
            binds.insert(key, bind.clone());
        }
        bind
    }

    /// Drops the cached bind group of `buffers`, if any (one whose creation raised an error).
    pub(crate) fn forget_bind_group(&self, inputs: usize, buffers: &[&wgpu::Buffer]) {
        let key: BindKey = (inputs, buffers.iter().map(|b| (*b).clone()).collect());
        lock(&self.binds).remove(&key);
    }

    /// Drops every cached bind group (they keep their buffers alive).
    pub(crate) fn clear_bind_groups(&self) {
        lock(&self.binds).clear();
    }
}

/// What a dispatch binds, whichever launch records it ([`Launch`], or a row kernel's
/// `rows::RowLaunch` that picks its entry): the shader's `OP` override, its buffers and params.
#[derive(Clone, Copy)]
pub(crate) struct Bindings<'a> {
    /// Value of the shader's `override OP: u32`, for shaders that select an op with it.
    pub op_code: Option<u32>,
    pub inputs: &'a [&'a wgpu::Buffer],
    pub output: &'a wgpu::Buffer,
    pub meta: &'a [u32],
}

/// One dispatch: which kernel, its buffers and metadata, and how many threads.
pub(crate) struct Launch<'a> {
    pub shader: Shader,
    pub entry: &'static str,
    pub bind: Bindings<'a>,
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
