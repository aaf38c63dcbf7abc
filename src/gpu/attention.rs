//! GPU fused attention by `shaders/attention_forward.wgsl` and `attention_backward.wgsl`
//! (helpers in `attention.wgsl`): one workgroup per (tile of 64 rows, chunk of 64 output dims,
//! batch), K and V (or Q and dO) staged through workgroup memory 16 rows at a time, on a 2-D
//! grid past 65,535 workgroups. Each kernel writes its outputs packed in one buffer.
//!
//! Each kernel streams keys (or queries) in passes, one dispatch each, of at most `span` rows
//! (see [`span`]): lavapipe silently ends an invocation's loops once they have run 65,535
//! iterations all together (one counter per invocation, over every loop), which one pass over
//! 16,384 keys passed many times over, and drivers may bound how long a dispatch runs. A row's
//! running state waits in the output buffer between passes, in f32, so any number of passes
//! gives the bits of one.

use super::buffer::GpuBuffer;
// Rows per workgroup and output dims per chunk, rows of the streamed loop per step, and where
// the pass index sits in a kernel's params: the shaders read the same constants.
use super::contract::attention::{P_PASS, STEP, TILE};
use super::device::GpuDevice;
use super::kernels::{grid, Bindings, Launch, Shader};
use crate::{Error, Result};

/// A mask read in place: element `(b, i, j)` at `base + batch offset(b) + i row + j col`.
pub(crate) struct GpuMask<'a> {
    pub buffer: &'a GpuBuffer,
    pub base: usize,
    pub row: usize,
    pub col: usize,
    /// Strides over the batch dims (`AttnParams::batch_shape`).
    pub batch_strides: Vec<usize>,
    pub replace: bool,
}

/// Dropout as the kernels draw it (`p`, the kept factor `1 / (1 - p)`, seed, first offset).
pub(crate) struct GpuDropout {
    pub p: f32,
    pub factor: f32,
    pub seed: u64,
    pub offset: u64,
}

/// Sizes and options of one attention.
pub(crate) struct AttnParams<'a> {
    pub batch_shape: Vec<usize>,
    pub dims: (usize, usize, usize, usize, usize),
    pub scale: f32,
    pub causal: bool,
    pub mask: Option<GpuMask<'a>>,
    pub dropout: Option<GpuDropout>,
}

/// Bytes of score matrices past which attention always runs fused (see
/// [`GpuDevice::attention_prefers_fused`]).
pub(crate) const SCORES_BUDGET: u64 = 256 << 20;

/// A tensor's buffer and the element its data starts at.
pub(crate) type Operand<'a> = (&'a GpuBuffer, usize);

/// The largest count the kernels index with u32 (with headroom for the tile padding).
const LIMIT: usize = u32::MAX as usize - (1 << 16);

/// Loop iterations one invocation may run in one dispatch: under lavapipe's 65,535, with room
/// for the loops outside the streamed one (state, results, the mask's batch offset).
const LOOP_BUDGET: usize = 60_000;

/// Loop iterations of `dots` (attention.wgsl) over `dims`, counted as if no loop were
/// unrolled: per chunk of 64 dims, the chunk loop, the 16-row staging and 64 dims of 16 rows.
fn dots_iterations(dims: usize) -> usize {
    dims.div_ceil(64).max(1) * (1 + 16 + 64 * (1 + STEP))
}

/// Loop iterations of `accumulate`: the staging and 16 rows of 64 dims.
const ACCUMULATE_ITERATIONS: usize = 16 + STEP * (1 + 64);

/// Loop iterations of the per-step work on 16 scores (two loops over them, the rescale of 64
/// accumulators, Philox's 10 rounds per dropout factor).
const SCORE_ITERATIONS: usize = 2 * STEP + 64 + STEP * 10;

/// The kernels of one attention.
#[derive(Clone, Copy)]
enum Kernel {
    Forward,
    /// `attn_dq` and `attn_dkv` (the same loops over q, k, v and dO).
    Backward,
}

/// Loop iterations of one step (16 keys or queries) of `kernel`'s streamed loop.
fn step_iterations(kernel: Kernel, e: usize, ev: usize) -> usize {
    match kernel {
        Kernel::Forward => dots_iterations(e) + SCORE_ITERATIONS + ACCUMULATE_ITERATIONS,
        Kernel::Backward => {
            dots_iterations(e) + dots_iterations(ev) + SCORE_ITERATIONS + ACCUMULATE_ITERATIONS
        }
    }
}

/// Rows (keys or queries) one pass of `kernel` streams: whole steps within [`LOOP_BUDGET`];
/// 0 when even one step is past it (head dims in the thousands: the composed path runs them).
/// A rule of the shapes alone, the same on every adapter (passes do not change bits anyway).
fn span(kernel: Kernel, e: usize, ev: usize) -> usize {
    LOOP_BUDGET / step_iterations(kernel, e, ev) * STEP
}

impl AttnParams<'_> {
    /// Whether the kernels can run this problem: every index fits u32 and one step of every
    /// streamed loop fits a pass (see [`span`]); any length does.
    pub(crate) fn supported(&self) -> bool {
        let (b, l, s, e, ev) = self.dims;
        // Checked: sizes whose products overflow are unsupported here (the composite path then
        // reports them as a typed size error), never a wrapped index.
        let prod = |x: usize, y: usize, z: usize| x.checked_mul(y)?.checked_mul(z);
        let big = [
            prod(b, l, s),
            prod(b, l, e.max(ev)),
            prod(b, s, e.max(ev)),
            // The forward's state between passes: 3 words per (chunk, row).
            prod(b * 3, l, ev.div_ceil(TILE)),
        ];
        big.iter().all(|n| n.is_some_and(|n| n < LIMIT))
            && span(Kernel::Forward, e, ev) > 0
            && span(Kernel::Backward, e, ev) > 0
    }

    #[allow(clippy::too_many_arguments)]
    fn words(
        &self,
        tiles: usize,
        chunks: usize,
        aux: usize,
        kchunks: usize,
        offsets: [usize; 5],
        write_ds: bool,
        (span, passes, state): (usize, usize, usize),
    ) -> Vec<u32> {
        let (b, l, s, e, ev) = self.dims;
        let mut flags = u32::from(self.causal);
        let (mut mrow, mut mcol, mut mbase) = (0, 0, 0);
        if let Some(m) = &self.mask {
            flags |= 2 | if m.replace { 4 } else { 0 };
            (mrow, mcol, mbase) = (m.row, m.col, m.base);
        }
        let (mut p, mut factor, mut seed, mut offset) = (0f32, 1f32, 0u64, 0u64);
        if let Some(d) = &self.dropout {
            flags |= 8;
            (p, factor, seed, offset) = (d.p, d.factor, d.seed, d.offset);
        }
        if write_ds {
            flags |= 16;
        }
        let w = |x: usize| x as u32;
        let mut v = vec![
            w(b),
            w(l),
            w(s),
            w(e),
            w(ev),
            self.scale.to_bits(),
            flags,
            p.to_bits(),
            factor.to_bits(),
            seed as u32,
            (seed >> 32) as u32,
            offset as u32,
            (offset >> 32) as u32,
            w(tiles),
            w(chunks),
            w(mrow),
            w(mcol),
            w(mbase),
        ];
        v.extend(offsets.map(w));
        v.extend([w(aux), w(kchunks), w(self.batch_shape.len())]);
        // P_PASS (set per dispatch by `passes`), P_SPAN, P_PASSES, P_STATE.
        v.extend([0, w(span), w(passes), w(state)]);
        v.extend(self.batch_shape.iter().map(|&x| w(x)));
        match &self.mask {
            Some(m) => v.extend(m.batch_strides.iter().map(|&x| w(x))),
            None => v.extend(self.batch_shape.iter().map(|_| 0)),
        }
        v
    }
}

impl GpuDevice {
    /// Whether `scaled_dot_product_attention` of `batch` problems of `l` queries by `s` keys
    /// runs the fused kernels here rather than the composed path (matmul, mask, softmax,
    /// matmul). A fixed rule by size and adapter, so the choice for a shape never changes
    /// within a process:
    /// - fused wherever the `l × s` score matrices would pass [`SCORES_BUDGET`] bytes (or half
    ///   the largest storage binding): the composed path writes them several times over and
    ///   would not fit (16,384 causal positions are 1 GiB of scores per head);
    /// - composed on software adapters (lavapipe, SwiftShader: `DeviceType::Cpu`) below that:
    ///   their matmul kernels vectorise across invocations and run the composed forward 2.2-2.6x
    ///   faster than the fused one, whose per-row loops serialise (measured on lavapipe);
    /// - fused on hardware adapters, where the score matrix's round trips through memory cost
    ///   more than the kernel's serial loops.
    pub(crate) fn attention_prefers_fused(&self, batch: usize, l: usize, s: usize) -> bool {
        let scores = (batch as u64)
            .saturating_mul(l as u64)
            .saturating_mul(s as u64)
            .saturating_mul(4);
        let binding = self.0.limits.max_storage_buffer_binding_size / 2;
        if scores > SCORES_BUDGET.min(binding) {
            return true;
        }
        self.0.info.device_type != wgpu::DeviceType::Cpu
    }

    /// Dispatches passes 0 .. `passes` of a kernel (in order: each continues the state the one
    /// before left in `output`), `meta[P_PASS]` set to each.
    #[allow(clippy::too_many_arguments)]
    fn attention_launch(
        &self,
        op: &'static str,
        (shader, entry): (Shader, &'static str),
        inputs: &[&wgpu::Buffer],
        output: &GpuBuffer,
        meta: &mut [u32],
        workgroups: usize,
        passes: usize,
    ) -> Result<()> {
        let max = self.0.limits.max_compute_workgroups_per_dimension;
        let (x, y) = grid(workgroups as u64, max).ok_or_else(|| Error::InvalidArgument {
            op,
            message: format!("{workgroups} attention tiles exceed this adapter's dispatch grid"),
        })?;
        for pass in 0..passes {
            meta[P_PASS] = pass as u32;
            self.launch_workgroups(
                op,
                Launch {
                    shader,
                    entry,
                    bind: Bindings {
                        op_code: None,
                        inputs,
                        output: &output.buffer,
                        meta,
                    },
                    threads: workgroups as u64,
                },
                [x, y, 1],
            )?;
        }
        Ok(())
    }

    fn mask_buffer<'a>(&'a self, p: &'a AttnParams<'_>) -> &'a wgpu::Buffer {
        p.mask
            .as_ref()
            .map_or(&self.0.errors.dummy, |m| &m.buffer.buffer)
    }

    /// The forward: one buffer `[out (B L Ev), lse (B L)]`.
    pub(crate) fn attention_forward(
        &self,
        op: &'static str,
        p: &AttnParams<'_>,
        [q, k, v]: [Operand<'_>; 3],
    ) -> Result<GpuBuffer> {
        let (b, l, s, e, ev) = p.dims;
        let (tiles, chunks) = (l.div_ceil(TILE), ev.div_ceil(TILE));
        // Keys a tile streams: all of them, or up to its last query when causal.
        let keys = if p.causal { l.min(s) } else { s };
        let span = span(Kernel::Forward, e, ev);
        let passes = keys.div_ceil(span).max(1);
        // Past [out, lse]: m, l and the NaN flag of each (chunk, row) between passes.
        let state = if passes > 1 { chunks * b * l * 3 } else { 0 };
        let out = self.alloc_uninit(op, ((b * l * ev + b * l + state) * 4) as u64)?;
        let mut meta = p.words(
            tiles,
            chunks,
            b * l * ev,
            0,
            [q.1, k.1, v.1, 0, 0],
            false,
            (span, passes, b * l * ev + b * l),
        );
        let inputs = [&q.0.buffer, &k.0.buffer, &v.0.buffer, self.mask_buffer(p)];
        self.attention_launch(
            op,
            (Shader::AttentionForward, "attn_forward"),
            &inputs,
            &out,
            &mut meta,
            tiles * chunks * b,
            passes,
        )?;
        Ok(out)
    }

    /// The backward: `[dq (B L E), dS (B L S) when asked]` and `[dk (B S E), dv (B S Ev)]`
    /// from the upstream gradient `g` and `stats = [lse (B L), D (B L)]`.
    pub(crate) fn attention_backward(
        &self,
        op: &'static str,
        p: &AttnParams<'_>,
        [q, k, v, g, stats]: [Operand<'_>; 5],
        want_ds: bool,
    ) -> Result<(GpuBuffer, GpuBuffer)> {
        let (b, l, s, e, ev) = p.dims;
        let offsets = [q.1, k.1, v.1, g.1, stats.1];
        let inputs = [
            &q.0.buffer,
            &k.0.buffer,
            &v.0.buffer,
            self.mask_buffer(p),
            &g.0.buffer,
            &stats.0.buffer,
        ];
        let span = span(Kernel::Backward, e, ev);
        // One kernel of the backward: its entry, output, grid (row tiles, chunks, and how many
        // of those are dk's before dv's), the output's length, whether it writes dS, passes.
        let run = |entry, out: &GpuBuffer, (tiles, chunks, split), len, ds, passes| {
            let mut meta = p.words(tiles, chunks, len, split, offsets, ds, (span, passes, 0));
            let workgroups = tiles * chunks * b;
            let kernel = (Shader::AttentionBackward, entry);
            self.attention_launch(op, kernel, &inputs, out, &mut meta, workgroups, passes)
        };
        let ds_len = if want_ds { b * l * s } else { 0 };
        let dq = self.alloc_uninit(op, ((b * l * e + ds_len) * 4) as u64)?;
        let (tiles, chunks) = (l.div_ceil(TILE), e.div_ceil(TILE));
        // Keys attn_dq streams (up to a tile's last query when causal); dS is written for
        // every key, the ones past a tile's causal end as zeros, pass by pass.
        let keys = if p.causal && !want_ds { l.min(s) } else { s };
        let passes = keys.div_ceil(span).max(1);
        run(
            "attn_dq",
            &dq,
            (tiles, chunks, 0),
            b * l * e,
            want_ds,
            passes,
        )?;
        let dkv = self.alloc_uninit(op, ((b * s * e + b * s * ev) * 4) as u64)?;
        let (tiles, kchunks) = (s.div_ceil(TILE), e.div_ceil(TILE));
        let chunks = kchunks + ev.div_ceil(TILE);
        let passes = l.div_ceil(span).max(1);
        run(
            "attn_dkv",
            &dkv,
            (tiles, chunks, kchunks),
            b * s * e,
            false,
            passes,
        )?;
        Ok((dq, dkv))
    }
}
