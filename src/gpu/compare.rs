//! GPU comparisons (U8 masks), `clamp` and `where_cond`: dispatches of `shaders/compare.wgsl`
//! and `shaders/where.wgsl`. Inputs arrive validated and broadcast from `src/tensor/compare.rs`.

use super::buffer::GpuBuffer;
use super::device::GpuDevice;
use super::kernels::{Launch, Shader};
use super::params::{check_u32, views, w};
use crate::cpu::compare::CmpOp;
use crate::shape::Layout;
use crate::Result;

impl GpuDevice {
    /// `a OP b` into a new U8 mask; one thread writes one word of 4 mask bytes.
    pub(crate) fn compare(
        &self,
        op: CmpOp,
        a: &GpuBuffer,
        la: &Layout,
        b: &GpuBuffer,
        lb: &Layout,
    ) -> Result<GpuBuffer> {
        let name = op.name();
        check_u32(name, la)?;
        check_u32(name, lb)?;
        let n = la.numel();
        let out = self.alloc(name, n as u64)?;
        let mut params = vec![w(n), 0, w(la.offset), w(lb.offset)];
        views(&mut params, &[la, lb]);
        self.launch(
            name,
            Launch {
                shader: Shader::Compare,
                entry: "compare",
                op_code: Some(op.code()),
                inputs: &[&a.buffer, &b.buffer],
                output: &out.buffer,
                meta: &params,
                threads: n.div_ceil(4) as u64,
            },
        )?;
        Ok(out)
    }

    /// `a OP s` into a new U8 mask.
    pub(crate) fn compare_scalar(
        &self,
        op: CmpOp,
        a: &GpuBuffer,
        la: &Layout,
        s: f32,
    ) -> Result<GpuBuffer> {
        let name = op.scalar_name();
        check_u32(name, la)?;
        let n = la.numel();
        let out = self.alloc(name, n as u64)?;
        let mut params = vec![w(n), 0, w(la.offset), s.to_bits()];
        views(&mut params, &[la]);
        self.launch(
            name,
            Launch {
                shader: Shader::Compare,
                entry: "compare_scalar",
                op_code: Some(op.code()),
                // The scalar lives in params; the second slot repeats the input.
                inputs: &[&a.buffer, &a.buffer],
                output: &out.buffer,
                meta: &params,
                threads: n.div_ceil(4) as u64,
            },
        )?;
        Ok(out)
    }

    /// `min(max(x, lo), hi)` into a new f32 buffer.
    pub(crate) fn clamp(&self, a: &GpuBuffer, la: &Layout, lo: f32, hi: f32) -> Result<GpuBuffer> {
        check_u32("clamp", la)?;
        let n = la.numel();
        let out = self.alloc("clamp", n as u64 * 4)?;
        let mut params = vec![w(n), 0, w(la.offset), lo.to_bits(), hi.to_bits()];
        views(&mut params, &[la]);
        self.launch(
            "clamp",
            Launch {
                shader: Shader::Compare,
                entry: "clamp_values",
                op_code: Some(0),
                inputs: &[&a.buffer, &a.buffer],
                output: &out.buffer,
                meta: &params,
                threads: n as u64,
            },
        )?;
        Ok(out)
    }

    /// `mask ? on_true : on_false` over three views broadcast to one shape (32-bit elements).
    pub(crate) fn where_cond(
        &self,
        mask: (&GpuBuffer, &Layout),
        on_true: (&GpuBuffer, &Layout),
        on_false: (&GpuBuffer, &Layout),
    ) -> Result<GpuBuffer> {
        let name = "where_cond";
        for l in [mask.1, on_true.1, on_false.1] {
            check_u32(name, l)?;
        }
        let n = mask.1.numel();
        let out = self.alloc(name, n as u64 * 4)?;
        let mut params = vec![
            w(n),
            0,
            w(mask.1.offset),
            w(on_true.1.offset),
            w(on_false.1.offset),
        ];
        views(&mut params, &[mask.1, on_true.1, on_false.1]);
        self.launch(
            name,
            Launch {
                shader: Shader::Where,
                entry: "where_cond",
                op_code: None,
                inputs: &[&mask.0.buffer, &on_true.0.buffer, &on_false.0.buffer],
                output: &out.buffer,
                meta: &params,
                threads: n as u64,
            },
        )?;
        Ok(out)
    }
}
