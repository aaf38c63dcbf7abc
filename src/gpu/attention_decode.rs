//! GPU decode attention: one dispatch of `shaders/attention_decode.wgsl` (one workgroup of 64
//! invocations per query head; see the shader's header).

use super::buffer::GpuBuffer;
use super::device::GpuDevice;
use super::kernels::{grid, Launch, Shader};
use super::params::w;
use crate::cpu::attention_decode::DecodeDims;
use crate::{Error, Result};

/// Invocations per workgroup of attention_decode.wgsl.
const WG: u64 = 64;

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
        let out = self.alloc(op, (d.heads * d.head_dim) as u64 * 4)?;
        let params = [
            w(d.heads),
            w(d.kv_heads),
            w(d.head_dim),
            w(d.len),
            d.scale.to_bits(),
        ];
        let (x, y) = grid(
            d.heads as u64,
            self.0.limits.max_compute_workgroups_per_dimension,
        )
        .ok_or_else(|| Error::InvalidArgument {
            op,
            message: format!("{} heads exceed this adapter's dispatch grid", d.heads),
        })?;
        self.launch_workgroups(
            op,
            Launch {
                shader: Shader::AttentionDecode,
                entry: "attention_decode",
                op_code: None,
                inputs: &[&q.buffer, &k.buffer, &v.buffer],
                output: &out.buffer,
                meta: &params,
                threads: d.heads as u64 * WG,
            },
            [x, y, 1],
        )?;
        Ok(out)
    }
}
