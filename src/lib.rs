//! # wgtensor
//!
//! PyTorch's device model on every GPU vendor. Tensors live in `wgpu::Buffer`s, WGSL compute
//! shaders do the math, explicit uploads and readbacks play the role of `.to(device)` and
//! `.cpu()`, and a fast native CPU path serves whenever no adapter is found.
//!
//! ```
//! use wgtensor::{Device, Tensor};
//!
//! let (device, why) = Device::best_with_reason();
//! println!("using {device}: {why}");
//! let x = Tensor::randn(&[3, 4], &device)?;          // created directly on the device
//! let w = Tensor::ones(&[4], wgtensor::DType::F32, &Device::cpu())?.to(&device)?; // moved there
//! let y = (&x * &w)?.relu()?;                           // runs where the data is
//! let back = y.cpu()?;                                  // moved back for printing
//! println!("{back}");
//! # Ok::<(), wgtensor::Error>(())
//! ```
//!
//! Autograd follows PyTorch: `requires_grad_(true)` leaves (layer parameters via
//! [`nn::param`]), `backward()`, `grad()`, [`no_grad`]; gradients run on the tensor's device.
//! [`optim`] has SGD, Adam, AdamW and the mixed-precision loss scaler; [`nn`] has the losses and
//! gradient checkpointing.
//!
//! Ops never move data between devices silently: mixing devices is an
//! [`Error::DeviceMismatch`]. Every fallible call returns [`Result`]; wgpu's panicking default
//! error handler is replaced on every device wgtensor opens or wraps.
//!
//! # Layers
//!
//! Files of `src/` import one way, bottom to top; a file may use files of its own layer (with no
//! cycle between files) and of the layers below, never of a layer above.
//! `tests/runtime/layers.rs` reads every `use crate::...`, `super::...` and inline `crate::x::y`
//! path, resolves it to the file that defines the item, and fails on an upward import or a file
//! cycle.
//!
//! 1. **base**: `dtype`, `shape`, `error`, and the op tables of `ops/` (names, dtypes, scalar
//!    functions, WGSL bodies): the backends read the tables, so they sit below them. The tables'
//!    tensor half (gradients, `Tensor` methods) is a macro the tensor layer expands.
//! 2. **backends**: `cpu/` (host kernels, `CpuStorage`, the allocation counters, the Philox
//!    sampler) and `gpu/` (every wgpu call; its own file layering is in `gpu/mod.rs`). They take
//!    slices, layouts and buffers, never tensors. `gpu` may name `cpu` items that define an op
//!    for both (`ReduceOp`, `CmpOp`, the sampler's `Dist`); `cpu` never imports `gpu`.
//! 3. **device**: `device` (`Device` = CPU or one `GpuDevice`), `storage` (`Storage` = host data
//!    or a GPU buffer), `memory` (the statistics API over both backends' counters), `random`
//!    (the global generator's state).
//! 4. **tensor**: `tensor` and `tensor/` (validation and dispatch of every op, lazy fusion,
//!    `Device::synchronize`, which must run pending fused work), `autograd/`, `autotune`,
//!    `profile`. Autograd is in this layer, not above it: every op records its gradient node as
//!    it runs (the op files call `autograd/`'s recording functions, whose formulas call the ops),
//!    and a tensor holds its node, so `Node` and `Meta` are defined in `tensor.rs` beside
//!    `Tensor` and the graph walk and formulas in `autograd/` import only downward.
//! 5. **api**: `nn`, `optim`, `data`, `distributed`, `models`.
//!
//! `lib.rs` is the root: it re-exports the public items and imports from every layer.

/// Builder setters, one per field: `pub fn name(mut self, name: T) -> Self` storing its argument
/// in the field of the same name, each with its rustdoc. The options of the optimizers, the
/// gradient scaler and the samplers are set this way, as PyTorch's keyword arguments are.
/// Defined before the modules so every file sees it without an import.
macro_rules! setters {
    ($($(#[$meta:meta])* $name:ident: $t:ty;)*) => {
        $(
            $(#[$meta])*
            #[must_use]
            pub fn $name(mut self, $name: $t) -> Self {
                self.$name = $name;
                self
            }
        )*
    };
}

mod autograd;
mod autotune;
mod cpu;
pub mod data;
mod device;
pub mod distributed;
mod dtype;
mod error;
mod gpu;
mod memory;
#[cfg(feature = "models")]
pub mod models;
pub mod nn;
mod ops;
pub mod optim;
mod profile;
mod random;
mod shape;
mod storage;
mod tensor;

pub use autograd::{is_grad_enabled, no_grad, no_grad_scope, NoGradGuard};
pub use autotune::{
    autotune_report, deterministic, set_deterministic, AutotuneEntry, AutotuneReport,
};
pub use device::{adapters, gpu_count, gpu_is_available, AdapterSummary, Device};
pub use dtype::{DType, QType, WithDType};
pub use error::{Error, Result};
pub use memory::{
    empty_cache, kernel_stats, max_memory_allocated, memory_allocated, memory_budget,
    memory_reserved, memory_summary, reset_kernel_stats, reset_peak_memory_stats,
    reset_transfer_stats, set_memory_budget, transfer_stats, warn_on_transfer_churn, KernelStats,
    TransferStats,
};
pub use profile::{KernelTime, Profile};
pub use random::{manual_seed, Generator};
pub use tensor::{
    f16_accumulation, quantized_activations, read_all, set_f16_accumulation,
    set_quantized_activations, Conv2dOptions, PadMode, QTensor, Tensor, WgpuBufferView,
};

/// The f16 type of [`DType::F16`] tensors.
pub use half::f16;
/// The wgpu version wgtensor is built on, for applications that share devices and buffers.
pub use wgpu;

/// Hooks that provoke faults on purpose, for wgtensor's own fault-injection tests.
#[doc(hidden)]
pub mod testing {
    use crate::Device;

    pub use crate::ops::testing::*;

    /// Whether this process has enumerated GL adapters (only when asked for: `WGPU_BACKEND`,
    /// a `gl:N` device string, `adapters()`, or when no other backend found an adapter).
    pub fn gl_probed() -> bool {
        crate::gpu::registry::registry().gl_probed()
    }

    /// Lets (`true`, the default) or stops `conv2d` on GPU devices taking the implicit-GEMM
    /// kernel on this thread, and returns the previous setting: tests compare that kernel with
    /// the gather + matmul path it replaces.
    ///
    /// ```
    /// let was = wgtensor::testing::set_conv2d_implicit(false);
    /// assert!(was);
    /// wgtensor::testing::set_conv2d_implicit(was);
    /// ```
    pub fn set_conv2d_implicit(on: bool) -> bool {
        crate::tensor::conv_gpu::set_implicit(on)
    }

    /// Makes "autotuning off" the default of this process when `WGTENSOR_AUTOTUNE` is unset
    /// (the test harness calls it, so test binaries keep kernel choices fixed; the autotuning
    /// tests set the variable).
    pub fn autotune_off_by_default() {
        crate::gpu::autotune::DEFAULT_OFF.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The CPU's Philox value at counter `counter` for `seed`: uniform (`rand`) or, with
    /// `normal`, standard normal (`randn`). Element `e` of the first draw after
    /// `manual_seed(seed)` is at counter `e`; tests check single elements of huge random
    /// tensors against it without drawing the whole stream on the host.
    pub fn philox_at(normal: bool, seed: u64, counter: u64) -> f32 {
        let w = crate::cpu::normal::words(seed, 0, counter);
        if normal {
            crate::cpu::normal::normal(w[0], w[1])
        } else {
            crate::cpu::normal::uniform(w[0])
        }
    }

    /// Makes the next safetensors save on this thread (`save_safetensors`, `save_checkpoint`,
    /// `Module::save_weights`) fail as a full disk would, after writing `bytes` bytes of its
    /// temporary file; the previous file must survive.
    pub fn fail_next_save_after(bytes: usize) {
        crate::nn::io::FAIL_NEXT_SAVE_AFTER.with(|c| c.set(Some(bytes)));
    }

    /// Destroys a GPU device as a driver reset would; later calls must report `DeviceLost`.
    pub fn destroy_device(device: &Device) {
        if let Some(g) = device.as_gpu() {
            g.destroy();
        }
    }

    /// Provokes a wgpu validation error outside every error scope; the next call on the device
    /// must return it as an error instead of panicking.
    pub fn inject_uncaptured_error(device: &Device) {
        if let Some(g) = device.as_gpu() {
            g.inject_uncaptured_error();
        }
    }

    /// Whether f16 elementwise ops on `device` run the native-f16 kernels (`SHADER_F16` on and
    /// `WGTENSOR_DISABLE_SHADER_F16` not `1` when the device opened); false on the CPU.
    pub fn native_f16(device: &Device) -> bool {
        device.as_gpu().is_some_and(|g| g.native_f16())
    }

    /// Forces `scaled_dot_product_attention` (and so `nn::MultiheadAttention`) on this thread
    /// to the `"fused"` kernels (where they apply) or the `"composed"` reference (matmul,
    /// mask, softmax, matmul); `None` returns to the default: fused wherever it applies on the
    /// CPU and on hardware adapters, composed on software adapters unless the score matrices
    /// would pass 256 MiB. False for an unknown name.
    ///
    /// ```
    /// assert!(wgtensor::testing::force_attention(Some("composed")));
    /// assert!(wgtensor::testing::force_attention(None));
    /// assert!(!wgtensor::testing::force_attention(Some("other")));
    /// ```
    pub fn force_attention(mode: Option<&str>) -> bool {
        match mode {
            None => crate::tensor::attention_fused::force(None),
            Some("fused") => crate::tensor::attention_fused::force(Some(true)),
            Some("composed") => crate::tensor::attention_fused::force(Some(false)),
            Some(_) => return false,
        }
        true
    }

    /// Forces the row-kernel variant `name` (`"workgroup_per_row"`, `"invocation_per_row"`)
    /// of softmax and layer_norm on this thread, or with `None` returns to the autotuned
    /// choice; false for an unknown name.
    pub fn force_row_variant(name: Option<&str>) -> bool {
        crate::gpu::rows::force_variant(name)
    }

    /// Forces the first pass of dim reductions to `name` (`"thread_per_chunk"`,
    /// `"workgroup_per_chunk"`, `"subgroup_workgroup_per_chunk"`, `"subgroup_per_chunk"`) on
    /// this thread, or with `None` returns to the autotuned choice; false for an unknown name.
    /// A subgroup variant on a device without subgroups runs the heuristic's kernel (see
    /// [`reduce_variants`]).
    pub fn force_reduce_variant(name: Option<&str>) -> bool {
        crate::gpu::reduce::force_variant(name)
    }

    /// The first-pass variants of dim reductions that `device` runs (the subgroup ones only
    /// where `SUBGROUP` is on); empty on the CPU.
    pub fn reduce_variants(device: &Device) -> Vec<&'static str> {
        device.as_gpu().map_or_else(Vec::new, |g| {
            g.reduce_candidates()
                .into_iter()
                .map(crate::gpu::reduce::FirstPass::name)
                .collect()
        })
    }

    /// Row-kernel dispatches (softmax, log_softmax, layer_norm on a GPU) issued so far by the
    /// calling thread: a test takes the difference around one op.
    pub fn row_dispatches() -> u64 {
        crate::gpu::rows::row_dispatches()
    }

    /// Forces the quantized matrix-vector entry `name` (`"matvec"`: a workgroup per weight row;
    /// `"matvec_serial"`: an invocation per weight row; `"matvec_rows"`: an invocation per 8
    /// weight rows, the default on software adapters) on this thread, or with `None` returns
    /// to the default; false for an unknown name. All three give the same bits.
    pub fn force_quant_matvec(name: Option<&str>) -> bool {
        crate::gpu::quant::force_matvec(name)
    }

    /// Splits quantized matrices created from now on into parts of `rows` rows on every
    /// device (as matrices past one storage binding are split), or with `None` returns to
    /// splitting only at the binding limit. Process-wide.
    pub fn set_quant_part_rows(rows: Option<usize>) {
        crate::tensor::quant_part_rows(rows.unwrap_or(0));
    }

    /// Tensor-data bytes the calling thread has read out of safetensors files so far.
    pub fn safetensors_bytes_read() -> u64 {
        crate::nn::load::bytes_read()
    }

    /// The storage declarations the library writes for each hand-written shader file (from
    /// its `SHADERS` entry: the files declare none) and its number of inputs, by file name.
    pub fn shader_bindings() -> Vec<(&'static str, String, usize)> {
        crate::gpu::shader_table::SHADERS
            .iter()
            .filter(|d| d.label.ends_with(".wgsl"))
            .map(|d| (d.label, d.bindings.wgsl(), d.bindings.inputs.len()))
            .collect()
    }

    /// The declarations the library generates for each hand-written shader file (from
    /// `src/gpu/contract.rs` and its `SHADERS` entry: constants, element type, bindings), by
    /// file name: what a file on disk needs prepended, with `common.wgsl`, to be valid WGSL.
    pub fn shader_declarations() -> Vec<(&'static str, String)> {
        crate::gpu::shader_table::SHADERS
            .iter()
            .filter(|d| d.label.ends_with(".wgsl"))
            .map(|d| (d.label, d.declarations()))
            .collect()
    }

    /// Every hand-written shader file as embedded, by file name, without `common.wgsl` (and
    /// without `ids.wgsl`, which the library prepends to shaders that call `report_bad_id`);
    /// compared with `shaders/*.wgsl` on disk in the tests.
    pub fn shader_files() -> Vec<(&'static str, &'static str)> {
        let mut v: Vec<_> = crate::gpu::kernels::Shader::all()
            .filter(|s| s.file().ends_with(".wgsl"))
            .map(|s| (s.file(), s.raw()))
            .collect();
        v.push(("row_tree.wgsl", crate::gpu::shader_table::ROW_TREE));
        v.push(("row_subgroup.wgsl", crate::gpu::shader_table::ROW_SUBGROUP));
        v.push((
            "reduce_subgroup.wgsl",
            crate::gpu::shader_table::REDUCE_SUBGROUP,
        ));
        v.push(("subgroup.wgsl", crate::gpu::shader_table::SUBGROUP));
        v.push(("row_fold.wgsl", crate::gpu::shader_table::ROW_FOLD));
        v.push(("common.wgsl", crate::gpu::shader_table::COMMON));
        v.push(("ids.wgsl", crate::gpu::shader_table::IDS));
        v.push(("normal.wgsl", crate::gpu::shader_table::NORMAL));
        v.push(("attention.wgsl", crate::gpu::shader_table::ATTENTION));
        v.extend(crate::gpu::shader_table::MATMUL_PARTS);
        v
    }

    /// Every shader as wgpu receives it (`common.wgsl` prepended), by name: the hand-written
    /// files and, for every op of the table in every dtype it supports, the generated kernel
    /// (validated by naga in the tests).
    pub fn shader_sources() -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = crate::gpu::kernels::Shader::all()
            .map(|s| (s.file().to_string(), s.source()))
            .collect();
        for (name, body) in crate::gpu::codegen::catalogue() {
            v.push((name, crate::gpu::kernels::compose(&body)));
        }
        v
    }
}
