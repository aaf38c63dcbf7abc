//! GPU decode attention: `shaders/attention_decode.wgsl` (one workgroup of 64 invocations per
//! query head; see the shader's header), in passes of at most [`tiles_per_pass`] tiles of 64
//! positions, one dispatch each.

use super::buffer::GpuBuffer;
use super::contract::decode::TILE;
use super::device::GpuDevice;
use super::kernels::{grid, Bindings, Launch, Shader};
use super::params::w;
use crate::ops::geometry::DecodeDims;
use crate::{Error, Result};

/// Invocations per workgroup of attention_decode.wgsl: one per position of a tile.
const WG: u64 = TILE as u64;

/// Loop iterations one invocation may run in one dispatch: under the 65,535 after which
/// lavapipe silently ends an invocation's loops (all its loops counted together).
const LOOP_BUDGET: usize = 60_000;

/// Tiles of 64 positions one pass takes: a tile runs the tile loop once, a dot product over
/// the head, a max over 64 scores, the rescale of 4 accumulators and 64 scores of 4 dims
/// (loop iterations counted as if none were unrolled). The same rule on every adapter; the
/// passes do not change bits.
fn tiles_per_pass(head_dim: usize) -> usize {
    (LOOP_BUDGET / (1 + head_dim + 64 + 4 + 64 * (1 + 4))).max(1)
}

impl GpuDevice {
    /// Decode attention of the packed f32 buffers `q` `[heads, head_dim]` and `k`, `v`
    /// `[capacity, kv_heads, head_dim]`; returns `[heads, head_dim]`.
    pub(crate) fn attention_decode(
        &self,
        q: &GpuBuffer,
        k: &GpuBuffer,
        v: &GpuBuffer,
        d: DecodeDims,
    ) -> Result<GpuBuffer> {
        let op = "attention_decode";
        let per_pass = tiles_per_pass(d.head_dim);
        let passes = d.len.div_ceil(64).div_ceil(per_pass).max(1);
        // Past the outputs, with several passes: each head's m and l between passes.
        let state = if passes > 1 { 2 * d.heads } else { 0 };
        let out = self.alloc(op, (d.heads * d.head_dim + state) as u64 * 4)?;
        let mut params = [
            w(d.heads),
            w(d.kv_heads),
            w(d.head_dim),
            w(d.len),
            d.scale.to_bits(),
            0,
            w(per_pass),
        ];
        let (x, y) = grid(
            d.heads as u64,
            self.0.limits.max_compute_workgroups_per_dimension,
        )
        .ok_or_else(|| Error::InvalidArgument {
            op,
            message: format!("{} heads exceed this adapter's dispatch grid", d.heads),
        })?;
        // In order: each pass continues the state the one before left in `out`.
        for pass in 0..passes {
            params[5] = w(pass * per_pass);
            self.launch_workgroups(
                op,
                Launch {
                    shader: Shader::AttentionDecode,
                    entry: "attention_decode",
                    bind: Bindings {
                        op_code: None,
                        inputs: &[&q.buffer, &k.buffer, &v.buffer],
                        output: &out.buffer,
                        meta: &params,
                    },
                    threads: d.heads as u64 * WG,
                },
                [x, y, 1],
            )?;
        }
        Ok(out)
    }
}
