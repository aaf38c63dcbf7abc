//! Tensors larger than one GPU binding (`max_storage_buffer_binding_size`: 128 MiB on the
//! software adapter and on many GPUs). A kernel cannot bind such a buffer whole, so an op over it
//! runs on blocks of rows: each block of each operand is copied into a bindable buffer (a plain
//! buffer copy, which has no binding limit), the op runs on the blocks, and the blocks' results
//! are copied back to back into one output buffer. Tensors larger than `max_buffer_size` are
//! refused at allocation with `Error::BufferTooLarge`.

use super::dispatch::blocks as dev;
use super::{Tensor, TensorInner};
use crate::ops::backend::BindLimits;
use crate::shape::{broadcast_shapes, Layout};
use crate::{Device, Error, Result};
use std::sync::Arc;

/// A device that must run an op in blocks of rows, with its binding limits (what
/// [`blocks_needed`] found; a GPU, the only backend with such limits).
#[derive(Clone, Copy)]
pub(crate) struct Blocked<'a> {
    device: &'a Device,
    limits: BindLimits,
}

impl Blocked<'_> {
    /// `Error::BufferTooLarge` of `op` naming this device.
    fn too_large(&self, op: &'static str, bytes: u64, limit: u64, name: &'static str) -> Error {
        dev::buffer_too_large(op, self.device, bytes, limit, name)
    }
}

/// Two operands of a binary op, broadcast together.
pub(crate) enum Broadcast {
    /// They pass one storage binding: the op already ran on row blocks, this is its result.
    Done(Tensor),
    /// The output shape and each operand's layout broadcast to it.
    Layouts(Vec<usize>, Layout, Layout),
}

/// Broadcasts `a` and `b` for the binary op `name`. Past one storage binding the op (`again`,
/// called on each pair of row blocks) runs in blocks here, so the arithmetic ops and the
/// comparisons take one path to their kernels.
pub(crate) fn broadcast_pair(
    name: &'static str,
    a: &Tensor,
    b: &Tensor,
    again: &dyn Fn(&Tensor, &Tensor) -> Result<Tensor>,
) -> Result<Broadcast> {
    let shape = broadcast_shapes(name, a.shape(), b.shape())?;
    if let Some(g) = blocks_needed(&[a, b], shape.iter().product()) {
        let out = map_row_blocks(name, g, &shape, &[a, b], &|t| again(&t[0], &t[1]))?;
        return Ok(Broadcast::Done(out));
    }
    let (la, lb) = (
        a.layout().broadcast_to(&shape),
        b.layout().broadcast_to(&shape),
    );
    Ok(Broadcast::Layouts(shape, la, lb))
}

/// The device that must run `operands` in blocks, if any: one with binding limits (a GPU)
/// whose operand or output (of `out_numel` elements of the operands' dtype) exceeds what one
/// binding holds.
pub(crate) fn blocks_needed<'a>(operands: &[&'a Tensor], out_numel: usize) -> Option<Blocked<'a>> {
    operands.iter().find_map(|&t| {
        let limits = dev::bind_limits(t.device())?;
        let size = t.gpu_bytes()?;
        let limit = limits.binding;
        let out_bytes = out_numel as u64 * t.dtype().size_in_bytes() as u64;
        (size > limit || out_bytes > limit).then_some(Blocked {
            device: t.device(),
            limits,
        })
    })
}

/// `device` as a device that runs ops in blocks, when it has binding limits (a GPU).
pub(crate) fn blocked(device: &Device) -> Option<Blocked<'_>> {
    Some(Blocked {
        device,
        limits: dev::bind_limits(device)?,
    })
}

/// Runs `f` on row blocks of `operands` (each broadcastable to `out_shape`) and joins the
/// blocks' results along dim 0. `f` receives operands of equal shape that each fit one binding,
/// and must return a tensor whose dim 0 is the block's rows.
pub(crate) fn map_row_blocks(
    op: &'static str,
    device: Blocked,
    out_shape: &[usize],
    operands: &[&Tensor],
    f: &dyn Fn(&[Tensor]) -> Result<Tensor>,
) -> Result<Tensor> {
    let limit = device.limits.binding;
    let too_large = |bytes: u64| {
        device.too_large(
            op,
            bytes,
            limit,
            "max_storage_buffer_binding_size (a broadcast or strided operand cannot be split)",
        )
    };
    let esize = operands[0].dtype().size_in_bytes() as u64;
    let numel: usize = out_shape.iter().product();
    // The whole output must fit one buffer: checked before the first block is allocated, so a
    // request that cannot succeed fails at once instead of filling memory block by block.
    let max_buffer = device.limits.max_buffer;
    let total = (numel as u64).saturating_mul(esize);
    if total > max_buffer {
        return Err(device.too_large(op, total, max_buffer, "max_buffer_size"));
    }
    let expanded: Vec<Tensor> = operands
        .iter()
        .map(|t| t.expand(out_shape))
        .collect::<Result<_>>()?;

    // Rows per block: every operand's block span and the output block must fit one binding.
    let rows = out_shape.first().copied().unwrap_or(1);
    let row_elems = numel / rows.max(1);
    let mut per_block = (limit / (row_elems as u64 * esize).max(1)) as usize;
    for t in &expanded {
        let l = t.layout();
        if t.gpu_bytes().is_some_and(|size| size <= limit) {
            continue; // small operands are bound whole, unchanged
        }
        per_block = per_block.min(rows_per_block(l, esize, limit));
    }
    // Every block but the last must fill whole 4-byte words in any result dtype (u8 four per
    // word, f16 two), so that the blocks join with word copies: a multiple of 4 elements.
    let step = 4 / gcd(row_elems.max(1), 4);
    if per_block >= step {
        per_block -= per_block % step;
    }
    if per_block == 0 {
        // One row is too wide: packed operands of the output's shape can be split as 1-D.
        let flat = operands
            .iter()
            .all(|t| t.shape() == out_shape && t.is_contiguous());
        if flat && out_shape.len() > 1 {
            let flat_ops: Vec<Tensor> = operands
                .iter()
                .map(|t| t.reshape(&[numel]))
                .collect::<Result<_>>()?;
            let refs: Vec<&Tensor> = flat_ops.iter().collect();
            let joined = map_row_blocks(op, device, &[numel], &refs, f)?;
            return joined.reshape(out_shape);
        }
        return Err(too_large(
            operands.iter().map(|t| storage_bytes(t)).max().unwrap_or(0),
        ));
    }

    let mut results = Vec::new();
    let mut r0 = 0;
    while r0 < rows {
        let n = per_block.min(rows - r0);
        let block: Vec<Tensor> = expanded
            .iter()
            .map(|t| {
                bindable(op, device, &t.narrow(0, r0, n)?, limit).map_err(|e| match e {
                    Error::BufferTooLarge { bytes, .. } => too_large(bytes),
                    other => other,
                })
            })
            .collect::<Result<_>>()?;
        results.push(f(&block)?.contiguous()?);
        r0 += n;
    }
    join_rows(op, &results)
}

/// How many rows (dim 0) of the view `l` fit one binding; 0 when none can (a broadcast dim 0
/// repeats the whole buffer, or one row alone is too large).
fn rows_per_block(l: &Layout, esize: u64, limit: u64) -> usize {
    let stride0 = l.strides.first().copied().unwrap_or(0) as u64 * esize;
    let rest = (Layout {
        offset: 0,
        ..narrowed_row_layout(l)
    }
    .span() as u64)
        * esize;
    limit.saturating_sub(rest).checked_div(stride0).unwrap_or(0) as usize
}

/// A view of one row (dim 0 dropped), to measure the span the other dims cover.
fn narrowed_row_layout(l: &Layout) -> Layout {
    Layout {
        shape: l.shape.iter().skip(1).copied().collect(),
        strides: l.strides.iter().skip(1).copied().collect(),
        offset: l.offset,
    }
}

fn storage_bytes(t: &Tensor) -> u64 {
    t.gpu_bytes().unwrap_or(0)
}

/// `t` itself if its buffer fits one binding, else a copy of just the bytes its view spans.
fn bindable(op: &'static str, device: Blocked, t: &Tensor, limit: u64) -> Result<Tensor> {
    if t.gpu_bytes().is_none_or(|size| size <= limit) {
        return Ok(t.clone());
    }
    let esize = t.dtype().size_in_bytes() as u64;
    let l = t.layout();
    let start = l.offset as u64 * esize;
    let len = (l.span() as u64).saturating_sub(l.offset as u64) * esize;
    if len > limit || !start.is_multiple_of(4) {
        return Err(device.too_large(op, len, limit, "max_storage_buffer_binding_size"));
    }
    let Some(copy) = dev::copy_bytes(op, t, start, len)? else {
        return Ok(t.clone());
    };
    Ok(Tensor(Arc::new(TensorInner {
        storage: Arc::new(super::cell::StorageCell::ready(copy)),
        layout: Layout {
            offset: 0,
            ..l.clone()
        },
        dtype: t.dtype(),
        device: t.device().clone(),
        autograd: Default::default(),
    })))
}

/// Concatenates contiguous blocks along dim 0 by buffer copies (`BackendStorage::assemble`).
pub(crate) fn join_rows(op: &'static str, blocks: &[Tensor]) -> Result<Tensor> {
    let first = &blocks[0];
    let mut shape = first.shape().to_vec();
    shape[0] = blocks.iter().map(|b| b.shape()[0]).sum();
    let refs: Vec<&Tensor> = blocks.iter().collect();
    let out = super::dispatch::assemble(op, &refs)?.ok_or_else(|| Error::InvalidArgument {
        op,
        message: "row blocks joined on a device without binding limits".into(),
    })?;
    Ok(Tensor::from_parts(
        out,
        &shape,
        first.dtype(),
        first.device().clone(),
    ))
}

/// Runs `f` on blocks of rows (dim 0) of `t`, each copied into a bindable buffer, and joins the
/// results along dim 0 (matmul of a tall matrix, reductions that keep dim 0).
pub(crate) fn map_dim0_blocks(
    op: &'static str,
    device: Blocked,
    t: &Tensor,
    f: &dyn Fn(&Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    let limit = device.limits.binding;
    let per_block = dim0_block_rows(device, t);
    if per_block == 0 {
        return Err(device.too_large(
            op,
            storage_bytes(t),
            limit,
            "max_storage_buffer_binding_size (one row does not fit)",
        ));
    }
    let rows = t.shape()[0];
    let mut results = Vec::new();
    let mut r0 = 0;
    while r0 < rows {
        let n = per_block.min(rows - r0);
        let block = bindable(op, device, &t.narrow(0, r0, n)?, limit)?;
        results.push(f(&block)?.contiguous()?);
        r0 += n;
    }
    join_rows(op, &results)
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Elements per block when a 1-D result of `esize`-byte elements is built in blocks that each
/// fit one binding: a multiple of 4, so every block fills whole words.
pub(crate) fn elems_per_block(device: Blocked, esize: usize) -> usize {
    let per = (device.limits.binding / esize as u64) as usize;
    (per - per % 4).max(4)
}

/// Rows (dim 0) of `t` per block of [`map_dim0_blocks`] (0 when one row does not fit).
pub(crate) fn dim0_block_rows(device: Blocked, t: &Tensor) -> usize {
    let esize = t.dtype().size_in_bytes() as u64;
    rows_per_block(t.layout(), esize, device.limits.binding)
}
