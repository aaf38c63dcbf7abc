//! GPU `cat`: one dispatch of `shaders/join.wgsl` per input, each copying its (possibly
//! strided) view into its slab of the packed output.

use super::buffer::GpuBuffer;
use super::device::GpuDevice;
use super::kernels::{Bindings, Launch, Shader};
use super::params::{check_u32, extend, w};
use crate::shape::{contiguous_strides, Layout};
use crate::Result;

impl GpuDevice {
    /// Concatenates views of one 4-byte dtype along `dim` into a new buffer of `out_shape`.
    pub(crate) fn cat(
        &self,
        parts: &[(&GpuBuffer, &Layout)],
        dim: usize,
        out_shape: &[usize],
    ) -> Result<GpuBuffer> {
        let total: usize = out_shape.iter().product();
        check_u32("cat", &Layout::contiguous(&[total]))?;
        // The parts tile the output along `dim`: every element is written.
        let out = self.alloc_uninit("cat", total as u64 * 4)?;
        let out_strides = contiguous_strides(out_shape);
        let mut start = 0;
        for (buf, l) in parts {
            check_u32("cat", l)?;
            let n = l.numel();
            let mut params = vec![
                w(n),
                w(l.shape.len()),
                w(l.offset),
                w(start * out_strides[dim]),
            ];
            extend(&mut params, &l.shape);
            extend(&mut params, &l.strides);
            extend(&mut params, &out_strides);
            // `launch` skips empty inputs: a zero-sized dispatch never reaches wgpu.
            self.launch(
                "cat",
                Launch {
                    shader: Shader::Join,
                    entry: "copy_into",
                    bind: Bindings {
                        op_code: None,
                        inputs: &[&buf.buffer],
                        output: &out.buffer,
                        meta: &params,
                    },
                    threads: n as u64,
                },
            )?;
            start += l.shape[dim];
        }
        Ok(out)
    }
}
