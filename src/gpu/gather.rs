//! GPU `index_select` by `shaders/gather.wgsl`: one thread per output element.

use super::buffer::GpuBuffer;
use super::device::GpuDevice;
use super::kernels::{Launch, Shader};
use super::params::{check_u32, extend, w};
use crate::shape::Layout;
use crate::Result;

impl GpuDevice {
    /// Rows of dim `d` of the f32 view `layout` of `src` picked by `(ids, offset, count)`:
    /// `count` u32 or i32 words (validated by the caller to lie in `0..layout.shape[d]`)
    /// starting at element `offset` of the `ids` buffer.
    pub(crate) fn index_select(
        &self,
        op: &'static str,
        src: &GpuBuffer,
        layout: &Layout,
        d: usize,
        (ids, ids_offset, nids): (&GpuBuffer, usize, usize),
    ) -> Result<GpuBuffer> {
        check_u32(op, layout)?;
        let mut out_shape = layout.shape.clone();
        out_shape[d] = nids;
        check_u32(op, &Layout::contiguous(&out_shape))?;
        let n: usize = out_shape.iter().product();
        let out = self.alloc(op, n as u64 * 4)?;
        let mut params = vec![
            w(n),
            w(layout.shape.len()),
            w(layout.offset),
            w(d),
            w(ids_offset),
            w(layout.shape[d]),
        ];
        extend(&mut params, &out_shape);
        extend(&mut params, &layout.strides);
        self.launch(
            op,
            Launch {
                shader: Shader::Gather,
                entry: "gather",
                op_code: None,
                inputs: &[&src.buffer, &ids.buffer],
                output: &out.buffer,
                meta: &params,
                threads: n as u64,
            },
        )?;
        Ok(out)
    }
}
