//! GPU `index_select` and `gather` by `shaders/gather.wgsl`: one thread per output element. Ids
//! are not checked on the host: the kernel writes zeros for an out-of-range id and reports it
//! to the device's error word (`ids.rs`), so no launch waits for the ids' producer.

use super::buffer::GpuBuffer;
use super::device::GpuDevice;
use super::ids;
use super::kernels::{Bindings, Launch, Shader};
use super::params::{check_u32, extend, w};
use crate::shape::Layout;
use crate::Result;

/// Packed ids on the device: `(buffer, first element, count, signed)`.
pub(crate) type Ids<'a> = (&'a GpuBuffer, usize, usize, bool);

impl GpuDevice {
    /// Elements of the f32 view `layout` of `src` picked along dim `d` by the ids. Without
    /// `index_shape`, `index_select`: whole rows of dim `d`, the output the view's shape with
    /// dim `d` the ids' count. With it, `torch.gather`: element `i` of the output (of that
    /// shape) is the view's element at `i`'s coordinates with the one of dim `d` replaced by
    /// `ids[i]`.
    pub(crate) fn gather(
        &self,
        op: &'static str,
        src: &GpuBuffer,
        layout: &Layout,
        d: usize,
        ids: Ids<'_>,
        index_shape: Option<&[usize]>,
    ) -> Result<GpuBuffer> {
        let (ids, ids_offset, count, signed) = ids;
        let mut rows_shape = Vec::new();
        let (out_shape, mode) = match index_shape {
            Some(s) => (s, 1),
            None => {
                rows_shape.extend_from_slice(&layout.shape);
                rows_shape[d] = count;
                (&rows_shape[..], 0)
            }
        };
        check_u32(op, layout)?;
        check_u32(op, &Layout::contiguous(out_shape))?;
        let n: usize = out_shape.iter().product();
        // Every element is written (a value or zero).
        let out = self.alloc_uninit(op, n as u64 * 4)?;
        let mut params = vec![
            w(n),
            w(layout.shape.len()),
            w(layout.offset),
            w(d),
            w(ids_offset),
            w(layout.shape[d]),
            ids::code(op, signed),
            mode,
        ];
        extend(&mut params, out_shape);
        extend(&mut params, &layout.strides);
        self.launch(
            op,
            Launch {
                shader: Shader::Gather,
                entry: "gather",
                bind: Bindings {
                    op_code: None,
                    inputs: &[&src.buffer, &ids.buffer],
                    output: &out.buffer,
                    meta: &params,
                },
                threads: n as u64,
            },
        )?;
        Ok(out)
    }
}
