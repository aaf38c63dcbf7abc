//! The one error type of wgtensor.
//!
//! Every fallible public call returns [`Result`]. Messages name the op, the operands, the numbers
//! involved and, where there is one, the fix.

use crate::DType;
use std::time::Duration;

/// `Result<T, wgtensor::Error>`.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong in wgtensor.
///
/// Broken internal invariants are panics with a clear message; everything a user can cause (bad
/// shapes, mixed devices, a missing GPU, out-of-memory, a lost device) is one of these variants.
///
/// ```
/// use wgtensor::{Device, Error, Tensor};
/// let a = Tensor::from_vec(vec![1f32, 2.0, 3.0], &[3], &Device::cpu())?;
/// let b = Tensor::from_vec(vec![1f32, 2.0], &[2], &Device::cpu())?;
/// match a.add(&b) {
///     Err(Error::ShapeMismatch { op, .. }) => assert_eq!(op, "add"),
///     other => panic!("expected a shape mismatch, got {other:?}"),
/// }
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Two operands live on different devices. Ops never move data silently.
    #[error(
        "expected all tensors to be on the same device, but found {lhs} and {rhs} in {op}; \
         move one with .to(&device)"
    )]
    DeviceMismatch {
        op: &'static str,
        lhs: String,
        rhs: String,
    },

    /// Two operands' shapes are incompatible for `op` (broadcasting, matmul inner dims, ...).
    #[error(
        "shape mismatch in {op}: lhs {lhs:?} and rhs {rhs:?} are incompatible ({})",
        shape_rule(.op)
    )]
    ShapeMismatch {
        op: &'static str,
        lhs: Vec<usize>,
        rhs: Vec<usize>,
    },

    /// Two operands have different dtypes. Ops never convert silently; use `.to_dtype()`.
    #[error(
        "dtype mismatch in {op}: lhs is {lhs}, rhs is {rhs}; convert one with .to_dtype() first"
    )]
    DTypeMismatch {
        op: &'static str,
        lhs: DType,
        rhs: DType,
    },

    /// `op` has no kernel for this dtype (yet) on this device.
    #[error("{op} does not support dtype {dtype} on {device}; convert with .to_dtype(DType::F32)")]
    UnsupportedDType {
        op: &'static str,
        dtype: DType,
        device: String,
    },

    /// A device string or index that names no device.
    #[error("invalid device {input:?}: {reason}")]
    InvalidDevice { input: String, reason: String },

    /// A GPU was requested but none (or not that one) can be used.
    #[error("no GPU for {requested}: {reason}")]
    GpuUnavailable { requested: String, reason: String },

    /// The element count of a shape does not fit in `usize` (or the byte count in `u64`).
    #[error("shape {shape:?} has more elements than fit in memory (element count overflows)")]
    ShapeOverflow { shape: Vec<usize> },

    /// A data slice whose length is not the product of the shape.
    #[error("{op}: shape {shape:?} needs {expected} elements but the data has {actual}")]
    DataLength {
        op: &'static str,
        shape: Vec<usize>,
        expected: usize,
        actual: usize,
    },

    /// An argument outside the op's domain (a dim out of range, a negative step, ...).
    #[error("{op}: {message}")]
    InvalidArgument { op: &'static str, message: String },

    /// A single buffer larger than the adapter allows, refused before wgpu sees it.
    #[error(
        "{op}: a buffer of {bytes} bytes exceeds {limit_name} = {limit} bytes on {device} \
         ({adapter}); use smaller tensors or the CPU device"
    )]
    BufferTooLarge {
        op: &'static str,
        device: String,
        adapter: String,
        bytes: u64,
        limit: u64,
        limit_name: &'static str,
    },

    /// The device could not allocate memory, even after emptying wgtensor's cache; or, with
    /// `op` `"AutoModel::load"`, a model's weights (`requested` bytes) exceed what is left of
    /// the device's [`crate::memory_budget`] (`limit`). Otherwise `limit` is the adapter's
    /// largest buffer.
    #[error("{}", oom_text(.op, .device, .adapter, *.requested, *.allocated, *.reserved, *.limit))]
    OutOfMemory {
        op: &'static str,
        device: String,
        adapter: String,
        requested: u64,
        allocated: u64,
        reserved: u64,
        limit: u64,
    },

    /// The GPU device was lost (driver reset, `destroy()`, unplugged). Reopen it to continue.
    #[error("{op} on {device}: the device was lost ({reason}); tensors on it are gone; open the device again")]
    DeviceLost {
        /// The call that found the device lost.
        op: &'static str,
        device: String,
        reason: String,
    },

    /// A wait for the GPU outlasted its timeout. The tensors involved stay valid.
    #[error("{op} on {device} did not finish within {waited:?}; the work is still queued, try again or raise the timeout")]
    Timeout {
        op: &'static str,
        device: String,
        waited: Duration,
    },

    /// A file could not be read or written (weights files, ...).
    #[error("{op}: cannot access {path}: {message}")]
    Io {
        op: &'static str,
        path: String,
        message: String,
    },

    /// A file's contents are not in the expected format (a truncated or corrupt safetensors
    /// file, a dtype wgtensor does not store, ...).
    #[error("{op}: {path} is not a valid file: {message}")]
    Format {
        op: &'static str,
        path: String,
        message: String,
    },

    /// An id was outside `0..bound` (`index_select`, `gather`, `scatter_add`, `index_add`,
    /// `nn::Embedding`, `nn::cross_entropy`). On the CPU it is found before anything runs. On a
    /// GPU the kernel finds it: it writes zeros where the bad id pointed (never reading or
    /// writing outside a tensor) and records the id in an error word of its own. The data it
    /// wrote, and anything later computed from it, is poisoned: every readback of it (`to_vec`,
    /// `to_vec_async`, `map_read`, `read_all`, `.cpu()`, a transfer), on any thread, returns
    /// this error; `Device::synchronize` reports it once to the thread that launched the kernel.
    /// Like CUDA's device-side asserts but recoverable: unrelated tensors stay intact and the
    /// device stays usable.
    #[error(
        "{op}: index {index} is out of range for a dim of size {bound}; ids must lie in \
         0..{bound} (on a GPU this is found by the kernel and reported by every readback of the \
         result and of data computed from it)"
    )]
    IndexOutOfRange {
        op: &'static str,
        index: i64,
        bound: usize,
    },

    /// A collective of [`crate::distributed`] failed on this process (`rank`): a peer did not
    /// take part before the timeout (`WGTENSOR_DIST_TIMEOUT`), the ranks disagreed on the
    /// operands, or MPI reported an error. The process group cannot be trusted afterwards.
    #[error("distributed {op} failed on rank {rank}: {message}")]
    Distributed {
        op: &'static str,
        rank: usize,
        message: String,
    },

    /// Any other error reported by wgpu (validation, internal), captured instead of panicking.
    #[error("wgpu error on {device} in {op}: {message}")]
    Wgpu {
        op: &'static str,
        device: String,
        message: String,
    },
}

/// An [`Error::InvalidArgument`] of `op` (the message names the numbers and the fix).
pub(crate) fn invalid(op: &'static str, message: String) -> Error {
    Error::InvalidArgument { op, message }
}

/// Checks that `name` (of shape `shape`) has `rank` dims; the error shows `layout`, the dims
/// `op` expects (`"[N, C]"`), and the shape it got.
pub(crate) fn check_rank(
    op: &'static str,
    name: &str,
    shape: &[usize],
    rank: usize,
    layout: &str,
) -> Result<()> {
    if shape.len() == rank {
        return Ok(());
    }
    Err(invalid(
        op,
        format!("{name} must be {layout}, got shape {shape:?}"),
    ))
}

/// An [`Error::ShapeMismatch`] of `op` between the shapes `lhs` and `rhs`.
pub(crate) fn mismatch(op: &'static str, lhs: &[usize], rhs: &[usize]) -> Error {
    Error::ShapeMismatch {
        op,
        lhs: lhs.to_vec(),
        rhs: rhs.to_vec(),
    }
}

/// The out-of-memory message: the GPU one names the adapter's buffer limit and suggests the
/// CPU; the CPU one speaks of host memory.
fn oom_text(
    op: &str,
    device: &str,
    adapter: &str,
    requested: u64,
    allocated: u64,
    reserved: u64,
    limit: u64,
) -> String {
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64);
    if op == "AutoModel::load" {
        // The up-front check of a model against the device's budget (`limit` is the budget).
        return format!(
            "out of memory on {device} ({adapter}) in {op}: the model's weights need {} \
             ({requested} bytes) but the device's memory budget is {} with {} already held by \
             tensors; load a quantized (Q4_0, Q8_0) or f16 model, free tensors, load onto the \
             CPU, or raise the budget (wgtensor::set_memory_budget, WGTENSOR_MEMORY_BUDGET) if \
             the device has more memory",
            mib(requested),
            mib(limit),
            mib(allocated)
        );
    }
    if device == "cpu" {
        format!(
            "out of memory on cpu in {op}: tried to allocate {requested} bytes of host memory with \
             {allocated} bytes held by tensors; free tensors you no longer need or use a smaller \
             batch or f16"
        )
    } else {
        format!(
            "out of memory on {device} ({adapter}) in {op}: tried to allocate {requested} bytes \
             with {allocated} bytes allocated by tensors and {reserved} bytes reserved by \
             wgtensor (adapter max_buffer_size {limit}); free tensors you no longer need, use a \
             smaller batch or f16, call wgtensor::empty_cache, or run on the CPU"
        )
    }
}

/// The shape rule `op` checks, for [`Error::ShapeMismatch`] messages.
fn shape_rule(op: &str) -> &'static str {
    match op {
        "matmul" => {
            "matmul needs lhs [.., M, K] and rhs [.., K, N] with the same K, and batch dims that \
             broadcast"
        }
        "Linear::forward" => "the input's last dim must equal the layer's in_features",
        "LayerNorm::forward" => "the input's trailing dims must equal the normalized shape",
        "mse_loss" => "prediction and target must have the same shape",
        "backward_with" | "set_grad" => {
            "a gradient must have the shape of the tensor it belongs to"
        }
        "expand" => "each dim must equal the tensor's, or the tensor's dim must be 1",
        _ => "broadcasting needs each trailing dim to be equal or 1",
    }
}
