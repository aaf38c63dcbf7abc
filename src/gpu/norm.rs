//! GPU layer_norm: one dispatch of `shaders/layer_norm.wgsl`, one workgroup per row (Welford per
//! thread, Chan merge in workgroup memory, then a write pass).

use super::buffer::GpuBuffer;
use super::device::GpuDevice;
use super::kernels::{Launch, Shader, WORKGROUP};
use super::params::w;
use crate::Result;

impl GpuDevice {
    /// layer_norm of the packed `[nrows, len]` f32 data `src` (`len > 0`); `weight` and `bias`
    /// hold `len` f32 each when given.
    pub(crate) fn layer_norm(
        &self,
        src: &GpuBuffer,
        nrows: usize,
        len: usize,
        weight: Option<&GpuBuffer>,
        bias: Option<&GpuBuffer>,
        eps: f32,
    ) -> Result<GpuBuffer> {
        let op = "layer_norm";
        let out = self.alloc(op, (nrows * len) as u64 * 4)?;
        let flags = u32::from(weight.is_some()) | u32::from(bias.is_some()) << 1;
        // An absent weight or bias binds the input instead (never read: the flag is off).
        let wb = weight.unwrap_or(src);
        let bb = bias.unwrap_or(src);
        let params = [w(nrows), w(len), eps.to_bits(), flags];
        self.launch(
            op,
            Launch {
                shader: Shader::LayerNorm,
                entry: "layer_norm",
                op_code: None,
                inputs: &[&src.buffer, &wb.buffer, &bb.buffer],
                output: &out.buffer,
                meta: &params,
                threads: nrows as u64 * WORKGROUP,
            },
        )?;
        super::softmax::count_row_dispatch();
        Ok(out)
    }
}
