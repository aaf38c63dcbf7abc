//! GPU softmax and log_softmax: the row max and `Σ exp(x - max)` by the multi-pass reductions of
//! `reduce.wgsl`, then one elementwise pass of `shaders/softmax.wgsl`.

use super::buffer::GpuBuffer;
use super::device::GpuDevice;
use super::kernels::{Launch, Shader};
use super::params::{check_u32, extend, w};
use crate::cpu::reduce::{ReduceOp, Rows};
use crate::shape::Layout;
use crate::Result;

impl GpuDevice {
    /// softmax (`log` false) or log_softmax over dim `d` of the non-empty view `layout` of `src`.
    pub(crate) fn softmax(
        &self,
        op: &'static str,
        src: &GpuBuffer,
        layout: &Layout,
        d: usize,
        log: bool,
    ) -> Result<GpuBuffer> {
        check_u32(op, layout)?;
        let rows = Rows::along(layout, d);
        let max = self.reduce(op, ReduceOp::Max, src, layout, &rows)?;
        let sum = self.sum_exp(op, src, layout, &rows, &max)?;
        let n = layout.numel();
        // One thread writes each element.
        let out = self.alloc_uninit(op, n as u64 * 4)?;
        let inner: usize = layout.shape[d + 1..].iter().product();
        let contiguous = layout.is_contiguous();
        let mut params = vec![w(n), 0, w(layout.offset), w(rows.len), w(inner)];
        if !contiguous {
            params[1] = w(layout.shape.len());
            extend(&mut params, &layout.shape);
            extend(&mut params, &layout.strides);
        }
        self.launch(
            op,
            Launch {
                shader: Shader::Softmax,
                entry: "softmax",
                op_code: Some(u32::from(log)),
                inputs: &[&src.buffer, &max.buffer, &sum.buffer],
                output: &out.buffer,
                meta: &params,
                threads: n as u64,
            },
        )?;
        Ok(out)
    }
}
