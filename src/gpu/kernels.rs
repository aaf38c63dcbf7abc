//! The one module that embeds `shaders/*.wgsl`, and the per-device pipeline cache.
//!
//! Every kernel follows one binding convention, so one bind-group layout per input count serves
//! them all: `@binding(0..k)` read-only inputs, `@binding(k)` the read-write output,
//! `@binding(k + 1)` a read-only `array<u32>` of metadata (sizes, offsets, strides, scalars).
//! Elementwise kernels use 256-thread workgroups on a 2-D grid (see [`grid`]); matmul kernels
//! choose their own workgroup size and 3-D grid through `GpuDevice::launch_workgroups`
//! (`launch.rs`). The params binding has a dynamic offset: one ring buffer per device holds the
//! params of a whole batch.
//!
//! A leaf: [`KernelCache`] owns its locks and takes the `wgpu::Device` as an argument. The cache
//! asks a shader only for [`Shader::source`], [`Shader::inputs`] and a label, so a new variant
//! (generated WGSL) slots in with its own source string.

use super::codegen::Generated;
use super::sync::lock;
use super::variants::{matmul, matmul_f16, matmul_f16_acc, matmul_vec4};
use crate::ops::{ReduceOp, RowOp};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Threads per workgroup in every shader (`@workgroup_size(256)`): a multiple of every vendor's
/// SIMD width (32 on NVIDIA, 64 on AMD, 8-32 on Intel/Apple) and within WebGPU's default limit.
pub(crate) const WORKGROUP: u64 = 256;

/// The hand-written shader files, plus the generated elementwise kernels (`codegen.rs`). Each
/// file is valid WGSL once `shaders/common.wgsl` is prepended (done here, at embed time);
/// `tests/shaders.rs` validates every composed shader with naga.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Shader {
    Reduce,
    /// reduce.wgsl followed by reduce_subgroup.wgsl's first passes (adapters with `SUBGROUP`).
    ReduceSubgroup,
    Softmax,
    /// softmax.wgsl with its row merge in subgroup operations (adapters with `SUBGROUP`).
    SoftmaxSubgroup,
    LayerNorm,
    Join,
    Matmul,
    /// matmul.wgsl reading f16 operands in place (packed pairs), accumulating in f32.
    MatmulF16,
    /// matmul.wgsl in native f16 (`SHADER_F16`): f16 operands, accumulators and output (the
    /// opt-in of `wgtensor::set_f16_accumulation`).
    MatmulF16Acc,
    MatmulVec4,
    Gather,
    /// The first pass of an f32 sum over a packed row, four elements per load.
    Sum,
    /// scatter_add / index_add: key building, a bitonic sort and ordered segment sums.
    Scatter,
    /// Fused log-softmax + negative log-likelihood, forward and backward.
    CrossEntropy,
    /// Fused attention forward (attention_forward.wgsl + the helpers of attention.wgsl).
    AttentionForward,
    /// Fused attention backward: dq (and dS), dk and dv (attention_backward.wgsl + helpers).
    AttentionBackward,
    /// Block-quantized matrices: matvec/matmul, dequantize and row gather.
    Quant,
    /// Attention of one query position over a KV cache, online softmax in one pass.
    AttentionDecode,
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

/// The error word's binding and helpers, prepended to the shaders that read ids.
#[allow(dead_code)]
pub(crate) const IDS: &str = include_str!("../../shaders/ids.wgsl");

/// `common.wgsl` followed by `body`; `enable` directives of `body` (which WGSL wants before
/// any declaration) go first.
pub(crate) fn compose(body: &str) -> String {
    // Normals are drawn in integer fixed point (bit-identical on every device); its tables
    // only go into the kernels that use them.
    let normal = if body.contains("normal_of(") {
        NORMAL
    } else {
        ""
    };
    // `enable` directives must precede every declaration: hoist them above common.wgsl.
    let mut enables = String::new();
    let mut rest = body;
    while let Some((line, tail)) = rest
        .strip_prefix("enable ")
        .and_then(|r| r.split_once('\n'))
    {
        enables.push_str("enable ");
        enables.push_str(line);
        enables.push('\n');
        rest = tail;
    }
    format!("{enables}{COMMON}\n{normal}\n{rest}")
}

/// A thread's pass over its elements of a row, composed into every row shader.
#[allow(dead_code)]
pub(crate) const ROW_FOLD: &str = include_str!("../../shaders/row_fold.wgsl");

/// The row merge snippets of softmax (without and with subgroup operations).
#[allow(dead_code)]
pub(crate) const ROW_TREE: &str = include_str!("../../shaders/row_tree.wgsl");
#[allow(dead_code)]
pub(crate) const ROW_SUBGROUP: &str = include_str!("../../shaders/row_subgroup.wgsl");

/// reduce.wgsl with the reduction table's part appended (its op codes and per-op cases,
/// `ReduceOp::wgsl`), built on first use.
fn reduce() -> &'static str {
    static SOURCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SOURCE.get_or_init(|| {
        let file = include_str!("../../shaders/reduce.wgsl");
        format!("{file}{}", ReduceOp::wgsl())
    })
}

/// [`reduce`] followed by reduce_subgroup.wgsl's first passes.
fn reduce_subgroup() -> &'static str {
    static SOURCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SOURCE.get_or_init(|| format!("{}{SUBGROUP}{REDUCE_SUBGROUP}", reduce()))
}

/// The fused attention's helpers (composed after attention_forward/backward.wgsl).
#[allow(dead_code)]
pub(crate) const ATTENTION: &str = include_str!("../../shaders/attention.wgsl");

/// `SubgroupInv`, the entry parameter of the kernels that use subgroup operations.
pub(crate) const SUBGROUP: &str = include_str!("../../shaders/subgroup.wgsl");

/// The subgroup first passes of reductions (composed after reduce.wgsl and subgroup.wgsl).
pub(crate) const REDUCE_SUBGROUP: &str = include_str!("../../shaders/reduce_subgroup.wgsl");

/// `normal_of`: standard normals from Philox words in integer fixed point.
pub(crate) const NORMAL: &str = include_str!("../../shaders/normal.wgsl");

/// How the source of a [`ShaderDef`] is assembled after `common.wgsl`.
pub(crate) enum Body {
    /// Files concatenated at compile time ([`wgsl!`]).
    Text(&'static str),
    /// A variant derived from a file by text replacement, built on first use.
    Built(fn() -> &'static str),
}

/// One hand-written kernel: everything the pipeline cache and the tests ask of it.
pub(crate) struct ShaderDef {
    pub shader: Shader,
    /// The file name, as labels and errors report it; a variant of a file names it with its
    /// twist in parentheses (and is then no file of its own).
    pub label: &'static str,
    /// The file as written on disk (for a variant, the file it starts from).
    pub raw: &'static str,
    /// What wgpu compiles after `common.wgsl`.
    pub body: Body,
    /// Read-only input bindings before the output.
    pub inputs: usize,
    /// Whether it reads ids and so binds the device's error word as `@group(1)`.
    pub checked: bool,
    /// Whether naga adds its counter against infinite loops (see [`KernelCache::pipeline`]).
    pub bounded_loops: bool,
}

impl ShaderDef {
    const fn new(shader: Shader, label: &'static str, raw: &'static str, inputs: usize) -> Self {
        ShaderDef {
            shader,
            label,
            raw,
            body: Body::Text(raw),
            inputs,
            checked: false,
            bounded_loops: true,
        }
    }

    /// Compiled as `body` rather than the file alone.
    const fn body(mut self, body: Body) -> Self {
        self.body = body;
        self
    }

    /// Reads ids: `ids.wgsl` goes first and the error word is bound.
    const fn checked(mut self, body: &'static str) -> Self {
        self.body = Body::Text(body);
        self.checked = true;
        self
    }

    /// Built without naga's loop counters.
    const fn unbounded(mut self) -> Self {
        self.bounded_loops = false;
        self
    }
}

/// `shaders/` files concatenated at compile time, in order.
macro_rules! wgsl {
    ($($file:literal),+) => { concat!($(include_str!(concat!("../../shaders/", $file))),+) };
}

/// layer_norm.wgsl after the row merge, with the row-op table's part appended (the norms' op
/// codes and `centered()`, `RowOp::norm_wgsl`), built on first use.
fn norm() -> &'static str {
    static SOURCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SOURCE.get_or_init(|| {
        let file = wgsl!("row_tree.wgsl", "row_fold.wgsl", "layer_norm.wgsl");
        format!("{file}{}", RowOp::norm_wgsl())
    })
}

/// Every hand-written kernel. Row shaders start with a row merge (`row_tree.wgsl`, or
/// `subgroup.wgsl` and `row_subgroup.wgsl` on adapters with `SUBGROUP`) and the row pass
/// (`row_fold.wgsl`); shaders that read ids with `ids.wgsl`;
/// the fused attention's entry points come before their shared helpers.
pub(crate) const SHADERS: [ShaderDef; 18] = [
    // reduce binds an auxiliary input (softmax's row maxima) beside the data.
    ShaderDef::new(Shader::Reduce, "reduce.wgsl", wgsl!("reduce.wgsl"), 2)
        .body(Body::Built(reduce)),
    ShaderDef::new(
        Shader::ReduceSubgroup,
        "reduce.wgsl (subgroups)",
        wgsl!("reduce.wgsl"),
        2,
    )
    .body(Body::Built(reduce_subgroup)),
    ShaderDef::new(Shader::Softmax, "softmax.wgsl", wgsl!("softmax.wgsl"), 1).body(Body::Text(
        wgsl!("row_tree.wgsl", "row_fold.wgsl", "softmax.wgsl"),
    )),
    ShaderDef::new(
        Shader::SoftmaxSubgroup,
        "softmax.wgsl (subgroups)",
        wgsl!("softmax.wgsl"),
        1,
    )
    .body(Body::Text(wgsl!(
        "subgroup.wgsl",
        "row_subgroup.wgsl",
        "row_fold.wgsl",
        "softmax.wgsl"
    ))),
    // The input, weight and bias.
    ShaderDef::new(
        Shader::LayerNorm,
        "layer_norm.wgsl",
        wgsl!("layer_norm.wgsl"),
        3,
    )
    .body(Body::Built(norm)),
    // Logits, targets, per-row log-sum-exp and per-row gradient scale.
    ShaderDef::new(
        Shader::CrossEntropy,
        "cross_entropy.wgsl",
        wgsl!("cross_entropy.wgsl"),
        4,
    )
    .checked(wgsl!(
        "ids.wgsl",
        "row_tree.wgsl",
        "row_fold.wgsl",
        "cross_entropy.wgsl"
    )),
    ShaderDef::new(Shader::Join, "join.wgsl", wgsl!("join.wgsl"), 1),
    ShaderDef::new(Shader::Matmul, "matmul.wgsl", wgsl!("matmul.wgsl"), 2)
        .body(Body::Built(matmul))
        .unbounded(),
    ShaderDef::new(
        Shader::MatmulF16,
        "matmul.wgsl (f16 operands)",
        wgsl!("matmul.wgsl"),
        2,
    )
    .body(Body::Built(matmul_f16))
    .unbounded(),
    ShaderDef::new(
        Shader::MatmulF16Acc,
        "matmul.wgsl (f16 accumulation)",
        wgsl!("matmul.wgsl"),
        2,
    )
    .body(Body::Built(matmul_f16_acc))
    .unbounded(),
    ShaderDef::new(
        Shader::MatmulVec4,
        "matmul_vec4.wgsl",
        wgsl!("matmul_vec4.wgsl"),
        2,
    )
    .body(Body::Built(matmul_vec4))
    .unbounded(),
    // The table and the ids.
    ShaderDef::new(Shader::Gather, "gather.wgsl", wgsl!("gather.wgsl"), 2)
        .checked(wgsl!("ids.wgsl", "gather.wgsl")),
    // Ids or sorted pairs, and the values to add.
    ShaderDef::new(Shader::Scatter, "scatter.wgsl", wgsl!("scatter.wgsl"), 2)
        .checked(wgsl!("ids.wgsl", "scatter.wgsl")),
    ShaderDef::new(Shader::Sum, "sum.wgsl", wgsl!("sum.wgsl"), 1),
    // The packed weights, the per-block scales, and the activations or ids.
    ShaderDef::new(Shader::Quant, "quant.wgsl", wgsl!("quant.wgsl"), 3)
        .checked(wgsl!("ids.wgsl", "quant.wgsl")),
    // The query and the key and value caches.
    ShaderDef::new(
        Shader::AttentionDecode,
        "attention_decode.wgsl",
        wgsl!("attention_decode.wgsl"),
        3,
    ),
    // q, k, v and the mask.
    ShaderDef::new(
        Shader::AttentionForward,
        "attention_forward.wgsl",
        wgsl!("attention_forward.wgsl"),
        4,
    )
    .body(Body::Text(wgsl!(
        "attention_forward.wgsl",
        "attention.wgsl"
    ))),
    // q, k, v, the mask, dO and [lse, D].
    ShaderDef::new(
        Shader::AttentionBackward,
        "attention_backward.wgsl",
        wgsl!("attention_backward.wgsl"),
        6,
    )
    .body(Body::Text(wgsl!(
        "attention_backward.wgsl",
        "attention.wgsl"
    ))),
];

impl Shader {
    /// Every hand-written shader, for tests that validate them all.
    #[allow(dead_code)]
    pub(crate) fn all() -> impl Iterator<Item = Shader> {
        SHADERS.iter().map(|d| d.shader)
    }

    /// The table entry of a hand-written shader (`None` for a generated kernel).
    fn def(self) -> Option<&'static ShaderDef> {
        SHADERS.iter().find(|d| d.shader == self)
    }

    /// The label: the file name of a hand-written shader.
    pub(crate) fn file(self) -> &'static str {
        match (self, self.def()) {
            (Shader::Generated(g), _) => &g.0.label,
            (_, Some(d)) => d.label,
            (_, None) => "unlisted shader",
        }
    }

    /// The file as written on disk (checked shaders without `ids.wgsl`).
    #[allow(dead_code)]
    pub(crate) fn raw(self) -> &'static str {
        self.def().map_or_else(|| self.body(), |d| d.raw)
    }

    /// The shader as compiled, without `common.wgsl` (checked shaders start with `ids.wgsl`).
    pub(crate) fn body(self) -> &'static str {
        match (self, self.def()) {
            (Shader::Generated(g), _) => &g.0.source,
            (
                _,
                Some(ShaderDef {
                    body: Body::Text(t),
                    ..
                }),
            ) => t,
            (
                _,
                Some(ShaderDef {
                    body: Body::Built(f),
                    ..
                }),
            ) => f(),
            (_, None) => "",
        }
    }

    /// The source handed to wgpu: `common.wgsl` + the shader.
    pub(crate) fn source(self) -> String {
        compose(self.body())
    }

    /// Whether the shader reads ids and so binds the device's error word as `@group(1)`.
    pub(crate) fn checked(self) -> bool {
        self.def().is_some_and(|d| d.checked)
    }

    /// Whether naga bounds the shader's loops (every shader but the matmuls).
    fn bounded_loops(self) -> bool {
        self.def().is_none_or(|d| d.bounded_loops)
    }

    /// Read-only input bindings before the output.
    pub(crate) fn inputs(self) -> usize {
        match (self, self.def()) {
            (Shader::Generated(g), _) => g.0.inputs,
            (_, Some(d)) => d.inputs,
            (_, None) => 0,
        }
    }
}

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
}

impl Default for KernelCache {
    fn default() -> Self {
        KernelCache {
            modules: Mutex::default(),
            layouts: Mutex::default(),
            error_layout: std::sync::OnceLock::new(),
            pipelines: Mutex::default(),
            binds: Mutex::default(),
            counters: KernelCounters::default(),
            f16_disabled: std::env::var("WGTENSOR_DISABLE_SHADER_F16").is_ok_and(|v| v == "1"),
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
                    // every one is run on every adapter by tests/matmul.rs.
                    unsafe { dev.create_shader_module_trusted(desc, checks) }
                })
                .clone();
            let constants: Vec<(&str, f64)> =
                op_code.map(|c| ("OP", c as f64)).into_iter().collect();
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

#[cfg(test)]
mod tests {
    use super::{grid, Shader, SHADERS};

    #[test]
    fn each_shader_has_one_table_entry() {
        for (i, d) in SHADERS.iter().enumerate() {
            let first = SHADERS.iter().position(|e| e.shader == d.shader);
            assert_eq!(first, Some(i), "{} is listed twice", d.label);
            assert_eq!(d.shader.file(), d.label);
            assert!(
                d.shader.body().contains(d.raw) || d.label.contains('('),
                "{}",
                d.label
            );
            assert_eq!(d.shader.inputs(), d.inputs);
        }
        assert!(Shader::all().count() == SHADERS.len());
    }

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
