//! GPU layer_norm: one dispatch of `shaders/layer_norm.wgsl`, in one of two autotuned variants:
//! one workgroup per row (Welford per thread, Chan merge in workgroup memory, then a write pass)
//! or one invocation per row (Welford over the row).

use super::buffer::GpuBuffer;
use super::device::GpuDevice;
use super::kernels::{Launch, Shader, WORKGROUP};
use super::params::w;
use super::softmax::RowKernel;
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
        let launch = |k: RowKernel| {
            let (entry, threads) = match k {
                RowKernel::Workgroup => ("layer_norm", nrows as u64 * WORKGROUP),
                RowKernel::PerRow => ("layer_norm_per_row", nrows as u64),
            };
            self.launch(
                op,
                Launch {
                    shader: Shader::LayerNorm,
                    entry,
                    op_code: None,
                    inputs: &[&src.buffer, &wb.buffer, &bb.buffer],
                    output: &out.buffer,
                    meta: &params,
                    threads,
                },
            )
        };
        launch(self.row_kernel("layer_norm", nrows, len, launch)?)?;
        super::softmax::count_row_dispatch();
        Ok(out)
    }
}
