//! GPU fused attention by `shaders/attention_forward.wgsl` and `attention_backward.wgsl`
//! (helpers in `attention.wgsl`): one workgroup per (tile of 64 rows, chunk of 64 output dims,
//! batch), K and V (or Q and dO) staged through workgroup memory 16 rows at a time, on a 2-D
//! grid past 65,535 workgroups. Each dispatch writes its outputs packed in one buffer.

use super::buffer::GpuBuffer;
use super::device::GpuDevice;
use super::kernels::{grid, Launch, Shader};
use crate::{Error, Result};

/// Rows per workgroup (`TILE` in the shader) and output dims per chunk.
const TILE: usize = 64;
/// Rows of the streamed loop per step (`STEP`): the loop runs `n / 16` times.
const STEP: usize = 16;

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

impl AttnParams<'_> {
    /// Whether the kernels can run this problem: every index fits u32 and every streamed loop
    /// stays under lavapipe's 65,535 iterations.
    pub(crate) fn supported(&self) -> bool {
        let (b, l, s, e, ev) = self.dims;
        // Checked: sizes whose products overflow are unsupported here (the composite path then
        // reports them as a typed size error), never a wrapped index.
        let prod = |x: usize, y: usize, z: usize| x.checked_mul(y)?.checked_mul(z);
        let big = [prod(b, l, s), prod(b, l, e.max(ev)), prod(b, s, e.max(ev))];
        big.iter().all(|n| n.is_some_and(|n| n < LIMIT)) && l / STEP < 65_000 && s / STEP < 65_000
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

    fn attention_launch(
        &self,
        op: &'static str,
        (shader, entry): (Shader, &'static str),
        inputs: &[&wgpu::Buffer],
        output: &GpuBuffer,
        meta: &[u32],
        workgroups: usize,
    ) -> Result<()> {
        let max = self.0.limits.max_compute_workgroups_per_dimension;
        let (x, y) = grid(workgroups as u64, max).ok_or_else(|| Error::InvalidArgument {
            op,
            message: format!("{workgroups} attention tiles exceed this adapter's dispatch grid"),
        })?;
        self.launch_workgroups(
            op,
            Launch {
                shader,
                entry,
                op_code: None,
                inputs,
                output: &output.buffer,
                meta,
                threads: workgroups as u64,
            },
            [x, y, 1],
        )
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
        let (b, l, _, _, ev) = p.dims;
        let out = self.alloc_uninit(op, ((b * l * ev + b * l) * 4) as u64)?;
        let (tiles, chunks) = (l.div_ceil(TILE), ev.div_ceil(TILE));
        let meta = p.words(tiles, chunks, b * l * ev, 0, [q.1, k.1, v.1, 0, 0], false);
        let inputs = [&q.0.buffer, &k.0.buffer, &v.0.buffer, self.mask_buffer(p)];
        self.attention_launch(
            op,
            (Shader::AttentionForward, "attn_forward"),
            &inputs,
            &out,
            &meta,
            tiles * chunks * b,
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
        let ds_len = if want_ds { b * l * s } else { 0 };
        let dq = self.alloc_uninit(op, ((b * l * e + ds_len) * 4) as u64)?;
        let (tiles, chunks) = (l.div_ceil(TILE), e.div_ceil(TILE));
        let meta = p.words(tiles, chunks, b * l * e, 0, offsets, want_ds);
        self.attention_launch(
            op,
            (Shader::AttentionBackward, "attn_dq"),
            &inputs,
            &dq,
            &meta,
            tiles * chunks * b,
        )?;
        let dkv = self.alloc_uninit(op, ((b * s * e + b * s * ev) * 4) as u64)?;
        let (tiles, kchunks) = (s.div_ceil(TILE), e.div_ceil(TILE));
        let chunks = kchunks + ev.div_ceil(TILE);
        let meta = p.words(tiles, chunks, b * s * e, kchunks, offsets, false);
        self.attention_launch(
            op,
            (Shader::AttentionBackward, "attn_dkv"),
            &inputs,
            &dkv,
            &meta,
            tiles * chunks * b,
        )?;
        Ok((dq, dkv))
    }
}
