//! Whether a model's weights fit its device, checked before the first weight is allocated, so
//! a model too large for the adapter is a typed error naming both sizes instead of a failure
//! halfway through loading (or a driver that gives up on an over-committed device).

use super::gguf::{GgufDType, GgufFile};
use crate::nn::load::Checkpoint;
use crate::{memory_allocated, memory_budget, memory_reserved, DType, Device, Error, Result};

/// Bytes the weights of a safetensors checkpoint take on a device once loaded as `dtype`.
pub(crate) fn hf_bytes(ckpt: &Checkpoint, dtype: DType) -> u64 {
    ckpt.numel_total() * dtype.size_in_bytes() as u64
}

/// Bytes the weights of a GGUF file take on a device: quantized matrices stay packed, the
/// others become `dtype`.
pub(crate) fn gguf_bytes(file: &GgufFile, dtype: DType) -> u64 {
    file.tensor_infos()
        .iter()
        .map(|i| match i.dtype {
            GgufDType::Quantized(_) => i.size_in_bytes() as u64,
            _ => (i.numel() * dtype.size_in_bytes()) as u64,
        })
        .sum()
}

/// [`Error::OutOfMemory`] from `op` when `bytes` (weights, a KV cache, RoPE tables) do not fit
/// in what is left of `device`'s [`memory_budget`]; `Ok` when they fit or the budget is unknown.
pub(crate) fn check(op: &'static str, device: &Device, bytes: u64) -> Result<()> {
    let Some(budget) = memory_budget(device) else {
        return Ok(());
    };
    let allocated = memory_allocated(device);
    if allocated.saturating_add(bytes) <= budget {
        return Ok(());
    }
    let adapter = if device.is_cpu() {
        "host memory".to_string()
    } else {
        device.name()
    };
    Err(Error::OutOfMemory {
        op,
        device: device.to_string(),
        adapter,
        requested: bytes,
        allocated,
        reserved: memory_reserved(device),
        limit: budget,
    })
}
