//! GPU elementwise ops: dispatches of `shaders/fill.wgsl`, `unary.wgsl` and `binary.wgsl`.
//! Inputs arrive validated (shapes broadcast, dtypes checked, same device) from `tensor.rs`.

use super::buffer::GpuBuffer;
use super::device::GpuDevice;
use super::kernels::{Launch, Shader};
use super::params::{check_u32, views};
use crate::ops::{BinaryOp, UnaryOp};
use crate::shape::Layout;
use crate::Result;

impl GpuDevice {
    /// `fill` (`value`) or `arange` (`start + i * step`) into a new buffer of `n` f32.
    pub(crate) fn fill(
        &self,
        op: &'static str,
        n: usize,
        a: f32,
        step: Option<f32>,
    ) -> Result<GpuBuffer> {
        check_u32(op, &Layout::contiguous(&[n]))?;
        let out = self.alloc_uninit(op, n as u64 * 4)?;
        let mut meta = vec![n as u32, a.to_bits()];
        let entry = match step {
            Some(s) => {
                meta.push(s.to_bits());
                "arange"
            }
            None => "fill",
        };
        self.launch(
            op,
            Launch {
                shader: Shader::Fill,
                entry,
                op_code: None,
                inputs: &[],
                output: &out.buffer,
                meta: &meta,
                threads: n as u64,
            },
        )?;
        Ok(out)
    }

    /// `op(x)` over the view `layout` of `src`, packed into a new buffer.
    pub(crate) fn unary(&self, op: UnaryOp, src: &GpuBuffer, layout: &Layout) -> Result<GpuBuffer> {
        let name = op.name();
        check_u32(name, layout)?;
        let n = layout.numel();
        let out = self.alloc_uninit(name, n as u64 * 4)?;
        let contiguous = layout.is_contiguous();
        let mut meta = vec![n as u32, 0, layout.offset as u32];
        views(&mut meta, &[layout]);
        self.launch(
            name,
            Launch {
                shader: Shader::Unary,
                entry: if contiguous { "contiguous" } else { "strided" },
                op_code: Some(op.code()),
                inputs: &[&src.buffer],
                output: &out.buffer,
                meta: &meta,
                threads: n as u64,
            },
        )?;
        Ok(out)
    }

    /// `op(a, b)` over two views broadcast to one shape, packed into a new buffer.
    pub(crate) fn binary(
        &self,
        op: BinaryOp,
        a: &GpuBuffer,
        la: &Layout,
        b: &GpuBuffer,
        lb: &Layout,
    ) -> Result<GpuBuffer> {
        let name = op.name();
        check_u32(name, la)?;
        check_u32(name, lb)?;
        let n = la.numel();
        let out = self.alloc_uninit(name, n as u64 * 4)?;
        let contiguous = la.is_contiguous() && lb.is_contiguous();
        let mut meta = vec![n as u32, 0, la.offset as u32, lb.offset as u32];
        views(&mut meta, &[la, lb]);
        self.launch(
            name,
            Launch {
                shader: Shader::Binary,
                entry: if contiguous { "contiguous" } else { "strided" },
                op_code: Some(op.code()),
                inputs: &[&a.buffer, &b.buffer],
                output: &out.buffer,
                meta: &meta,
                threads: n as u64,
            },
        )?;
        Ok(out)
    }

    /// `op(x, s)`, or `op(s, x)` when `scalar_first`, over the view `layout` of `src`.
    pub(crate) fn scalar(
        &self,
        op: BinaryOp,
        src: &GpuBuffer,
        layout: &Layout,
        s: f32,
        scalar_first: bool,
    ) -> Result<GpuBuffer> {
        let name = op.scalar_name();
        check_u32(name, layout)?;
        let n = layout.numel();
        let out = self.alloc_uninit(name, n as u64 * 4)?;
        let contiguous = layout.is_contiguous();
        let mut meta = vec![
            n as u32,
            0,
            layout.offset as u32,
            scalar_first as u32,
            s.to_bits(),
        ];
        views(&mut meta, &[layout]);
        self.launch(
            name,
            Launch {
                shader: Shader::Binary,
                entry: if contiguous {
                    "scalar_contiguous"
                } else {
                    "scalar_strided"
                },
                op_code: Some(op.code()),
                // Both read-only slots hold the input: the layout wants two, the scalar is in meta.
                inputs: &[&src.buffer, &src.buffer],
                output: &out.buffer,
                meta: &meta,
                threads: n as u64,
            },
        )?;
        Ok(out)
    }
}
