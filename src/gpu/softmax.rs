//! GPU softmax and log_softmax: one dispatch of `shaders/softmax.wgsl`, one workgroup per row
//! (online max/sum, then a write pass), for any row length and any strided view.

use super::buffer::GpuBuffer;
use super::device::GpuDevice;
use super::kernels::{Launch, Shader, WORKGROUP};
use super::params::{check_u32, extend, w};
use crate::shape::Layout;
use crate::Result;
use std::cell::Cell;

thread_local! {
    /// Row-kernel dispatches (softmax, layer_norm) issued by this thread, for the tests'
    /// one-dispatch-per-op checks (`wgtensor::testing::row_dispatches`). Per thread so that
    /// tests running in parallel do not see each other's launches.
    static ROW_DISPATCHES: Cell<u64> = const { Cell::new(0) };
}

/// Row-kernel dispatches issued so far by the calling thread.
pub(crate) fn row_dispatches() -> u64 {
    ROW_DISPATCHES.with(Cell::get)
}

/// Counts one row-kernel dispatch on this thread.
pub(crate) fn count_row_dispatch() {
    ROW_DISPATCHES.with(|c| c.set(c.get() + 1));
}

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
        let n = layout.numel();
        let len = layout.shape[d];
        let nrows = n / len;
        let inner: usize = layout.shape[d + 1..].iter().product();
        // Every element is written by the kernel: no clear.
        let out = self.alloc_uninit(op, n as u64 * 4)?;
        let mut params = vec![
            w(nrows),
            w(len),
            w(inner),
            w(layout.offset),
            w(layout.strides[d]),
            w(layout.shape.len()),
        ];
        extend(&mut params, &layout.shape);
        extend(&mut params, &layout.strides);
        self.launch(
            op,
            Launch {
                shader: if self.subgroups() {
                    Shader::SoftmaxSubgroup
                } else {
                    Shader::Softmax
                },
                entry: "softmax",
                op_code: Some(u32::from(log)),
                inputs: &[&src.buffer],
                output: &out.buffer,
                meta: &params,
                // One workgroup per row.
                threads: nrows as u64 * WORKGROUP,
            },
        )?;
        count_row_dispatch();
        Ok(out)
    }
}
