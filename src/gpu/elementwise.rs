//! GPU elementwise ops of every dtype: each is a [`Program`] run by one generated kernel
//! (`codegen.rs`), plus `fill` / `arange` (`shaders/fill.wgsl`). Inputs arrive validated
//! (shapes broadcast, dtypes checked, same device) from `src/tensor/`.

use super::buffer::GpuBuffer;
use super::codegen::{self, per_word, Expr, Program};
use super::device::GpuDevice;
use super::kernels::{GeneratedRef, Launch, Shader};
use super::params::{check_u32, extend, w};
use crate::cpu::compare::CmpOp;
use crate::ops::{BinaryOp, UnaryOp};
use crate::shape::Layout;
use crate::{DType, Result};

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

    /// Runs `program` over `views` (each already broadcast to the output shape) with the scalar
    /// params `scalars` (canonical bits), into a new packed buffer of the program's dtype.
    pub(crate) fn run_program(
        &self,
        name: &'static str,
        program: &Program,
        views: &[(&GpuBuffer, &Layout)],
        scalars: &[u32],
        n: usize,
    ) -> Result<GpuBuffer> {
        for (_, l) in views {
            check_u32(name, l)?;
        }
        let out_dtype = program.out_dtype();
        let out = self.alloc_uninit(name, (n * out_dtype.size_in_bytes()) as u64)?;
        let mut packed = 0u64;
        for (k, (_, l)) in views.iter().enumerate() {
            if l.is_contiguous() {
                packed |= 1 << k;
            }
        }
        let mut params = vec![w(n), 0];
        params.extend(views.iter().map(|(_, l)| w(l.offset)));
        params.extend_from_slice(scalars);
        if let Some((_, first)) = views.iter().find(|(_, l)| !l.is_contiguous()) {
            params[1] = w(first.shape.len());
            extend(&mut params, &first.shape);
            for (_, l) in views {
                extend(&mut params, &l.strides);
            }
        }
        let kernel = codegen::kernel(program, packed, self.native_f16(), name);
        let inputs: Vec<&wgpu::Buffer> = views.iter().map(|(b, _)| &b.buffer).collect();
        self.launch(
            name,
            Launch {
                shader: Shader::Generated(GeneratedRef(kernel)),
                entry: "main",
                op_code: None,
                inputs: &inputs,
                output: &out.buffer,
                meta: &params,
                threads: n.div_ceil(per_word(out_dtype)) as u64,
            },
        )?;
        Ok(out)
    }

    /// `op(x)` over the view `layout` of `src` (dtype `dtype`).
    pub(crate) fn unary(
        &self,
        op: UnaryOp,
        dtype: DType,
        src: &GpuBuffer,
        layout: &Layout,
    ) -> Result<GpuBuffer> {
        let mut p = Program::default();
        let x = p.input(dtype);
        p.push(Expr::Unary(op, x), dtype);
        self.run_program(op.name(), &p, &[(src, layout)], &[], layout.numel())
    }

    /// `op(a, b)` over two views of `dtype` broadcast to one shape.
    pub(crate) fn binary(
        &self,
        op: BinaryOp,
        dtype: DType,
        a: (&GpuBuffer, &Layout),
        b: (&GpuBuffer, &Layout),
    ) -> Result<GpuBuffer> {
        let mut p = Program::default();
        let (x, y) = (p.input(dtype), p.input(dtype));
        p.push(Expr::Binary(op, x, y), dtype);
        self.run_program(op.name(), &p, &[a, b], &[], a.1.numel())
    }

    /// `op(x, s)`, or `op(s, x)` when `scalar_first`; `s` is canonical bits (f32 bits for
    /// floats: f16 math runs in f32 with the scalar unrounded).
    pub(crate) fn scalar(
        &self,
        op: BinaryOp,
        dtype: DType,
        src: (&GpuBuffer, &Layout),
        s: u32,
        scalar_first: bool,
    ) -> Result<GpuBuffer> {
        let mut p = Program::default();
        let x = p.input(dtype);
        let c = p.scalar(scalar_dtype(dtype));
        let (l, r) = if scalar_first { (c, x) } else { (x, c) };
        p.push(Expr::Binary(op, l, r), dtype);
        self.run_program(op.scalar_name(), &p, &[src], &[s], src.1.numel())
    }

    /// `a OP b` (or `a OP s` when `b` is `Err(bits)`) into a U8 mask.
    pub(crate) fn compare(
        &self,
        op: CmpOp,
        dtype: DType,
        a: (&GpuBuffer, &Layout),
        b: std::result::Result<(&GpuBuffer, &Layout), u32>,
    ) -> Result<GpuBuffer> {
        let mut p = Program::default();
        let x = p.input(dtype);
        let (name, y, views, scalars) = match b {
            Ok(b) => (op.name(), p.input(dtype), vec![a, b], vec![]),
            Err(s) => (
                op.scalar_name(),
                p.scalar(scalar_dtype(dtype)),
                vec![a],
                vec![s],
            ),
        };
        p.push(Expr::Compare(op, x, y), DType::U8);
        self.run_program(name, &p, &views, &scalars, a.1.numel())
    }

    /// `min(max(x, lo), hi)` (bounds as canonical bits).
    pub(crate) fn clamp(
        &self,
        dtype: DType,
        src: (&GpuBuffer, &Layout),
        lo: u32,
        hi: u32,
    ) -> Result<GpuBuffer> {
        let mut p = Program::default();
        let x = p.input(dtype);
        let (a, b) = (p.scalar(scalar_dtype(dtype)), p.scalar(scalar_dtype(dtype)));
        p.push(Expr::Clamp(x, a, b), dtype);
        self.run_program("clamp", &p, &[src], &[lo, hi], src.1.numel())
    }

    /// `mask ? on_true : on_false` for values of any dtype.
    pub(crate) fn where_cond(
        &self,
        dtype: DType,
        mask: (&GpuBuffer, &Layout),
        on_true: (&GpuBuffer, &Layout),
        on_false: (&GpuBuffer, &Layout),
    ) -> Result<GpuBuffer> {
        let mut p = Program::default();
        let (m, a, b) = (p.input(DType::U8), p.input(dtype), p.input(dtype));
        p.push(Expr::Where(m, a, b), dtype);
        self.run_program(
            "where_cond",
            &p,
            &[mask, on_true, on_false],
            &[],
            mask.1.numel(),
        )
    }

    /// The view `layout` of `src` (dtype `from`) converted to `to`, packed row-major. With
    /// `from == to` this is the strided copy behind `contiguous` for every dtype.
    pub(crate) fn convert(
        &self,
        src: &GpuBuffer,
        layout: &Layout,
        from: DType,
        to: DType,
    ) -> Result<GpuBuffer> {
        let mut p = Program::default();
        let x = p.input(from);
        p.push(Expr::Cast(x), to);
        let name = if from == to { "contiguous" } else { "to_dtype" };
        self.run_program(name, &p, &[(src, layout)], &[], layout.numel())
    }
}

/// The dtype of a scalar operand: floats take an unrounded f32 (f16 math runs in f32).
fn scalar_dtype(d: DType) -> DType {
    if d == DType::F16 {
        DType::F32
    } else {
        d
    }
}
