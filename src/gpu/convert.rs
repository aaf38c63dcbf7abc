//! GPU dtype conversion and the elementwise kernels of the non-f32 dtypes: dispatches of
//! `shaders/typed.wgsl` (every adapter; f16 unpacked to f32) and `shaders/typed_f16.wgsl`
//! (native f16 where `SHADER_F16` is enabled). Inputs arrive validated from `src/tensor/`.

use super::buffer::GpuBuffer;
use super::device::GpuDevice;
use super::kernels::{Launch, Shader};
use super::params::{check_u32, extend, w};
use crate::cpu::compare::CmpOp;
use crate::ops::{BinaryOp, UnaryOp};
use crate::shape::Layout;
use crate::{DType, Result};

/// The dtype codes of `shaders/typed.wgsl`.
pub(crate) fn dtype_code(d: DType) -> u32 {
    match d {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::I32 => 2,
        DType::U32 => 3,
        DType::U8 => 4,
    }
}

/// Elements per 32-bit word of the output: a thread writes one whole word.
fn per_word(d: DType) -> usize {
    4 / d.size_in_bytes()
}

/// One dispatch of a typed kernel.
struct Typed<'a> {
    entry: &'static str,
    code: u32,
    /// dtype of view 0 (`a`), of views 1-2 (`b`, `c`), and of the output.
    dtypes: [DType; 3],
    views: &'a [(&'a GpuBuffer, &'a Layout)],
    scalars: [u32; 2],
    flags: u32,
}

impl GpuDevice {
    fn typed(&self, name: &'static str, t: Typed<'_>) -> Result<GpuBuffer> {
        for (_, l) in t.views {
            check_u32(name, l)?;
        }
        let [da, db, dout] = t.dtypes;
        let first = t.views[0];
        let n = first.1.numel();
        let out = self.alloc_uninit(name, (n * dout.size_in_bytes()) as u64)?;
        let view = |k: usize| t.views.get(k).copied().unwrap_or(first);
        let (v0, v1, v2) = (view(0), view(1), view(2));
        let mut params = vec![
            w(n),
            0,
            w(v0.1.offset),
            w(v1.1.offset),
            w(v2.1.offset),
            t.scalars[0],
            t.scalars[1],
            t.flags,
        ];
        if [v0, v1, v2].iter().any(|(_, l)| !l.is_contiguous()) {
            params[1] = w(v0.1.shape.len());
            extend(&mut params, &v0.1.shape);
            for (_, l) in [v0, v1, v2] {
                extend(&mut params, &l.strides);
            }
        }
        let native = dout == DType::F16
            && da == DType::F16
            && matches!(t.entry, "unary" | "binary" | "scalar")
            && self.native_f16();
        let op_code = t.code | dtype_code(da) << 8 | dtype_code(db) << 12 | dtype_code(dout) << 16;
        self.launch(
            name,
            Launch {
                shader: if native {
                    Shader::TypedF16
                } else {
                    Shader::Typed
                },
                entry: t.entry,
                op_code: Some(op_code),
                inputs: &[&v0.0.buffer, &v1.0.buffer, &v2.0.buffer],
                output: &out.buffer,
                meta: &params,
                threads: n.div_ceil(per_word(dout)) as u64,
            },
        )?;
        Ok(out)
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
        self.typed(
            "to_dtype",
            Typed {
                entry: "convert",
                code: 0,
                dtypes: [from, from, to],
                views: &[(src, layout)],
                scalars: [0, 0],
                flags: 0,
            },
        )
    }

    /// `op(x)` for a non-f32 dtype.
    pub(crate) fn typed_unary(
        &self,
        op: UnaryOp,
        dtype: DType,
        src: &GpuBuffer,
        layout: &Layout,
    ) -> Result<GpuBuffer> {
        self.typed(
            op.name(),
            Typed {
                entry: "unary",
                code: op.code(),
                dtypes: [dtype; 3],
                views: &[(src, layout)],
                scalars: [0, 0],
                flags: 0,
            },
        )
    }

    /// `op(a, b)` for a non-f32 dtype, over two views broadcast to one shape.
    pub(crate) fn typed_binary(
        &self,
        op: BinaryOp,
        dtype: DType,
        a: (&GpuBuffer, &Layout),
        b: (&GpuBuffer, &Layout),
    ) -> Result<GpuBuffer> {
        self.typed(
            op.name(),
            Typed {
                entry: "binary",
                code: op.code(),
                dtypes: [dtype; 3],
                views: &[a, b],
                scalars: [0, 0],
                flags: 0,
            },
        )
    }

    /// `op(x, s)` (or `op(s, x)`) for a non-f32 dtype; `s` is canonical bits (f32 bits for
    /// f16, the integer's bits otherwise).
    pub(crate) fn typed_scalar(
        &self,
        op: BinaryOp,
        dtype: DType,
        src: (&GpuBuffer, &Layout),
        s: u32,
        scalar_first: bool,
    ) -> Result<GpuBuffer> {
        self.typed(
            op.scalar_name(),
            Typed {
                entry: "scalar",
                code: op.code(),
                dtypes: [dtype; 3],
                views: &[src],
                scalars: [s, 0],
                flags: u32::from(scalar_first),
            },
        )
    }

    /// `a OP b` (or `a OP s` when `b` is `None`) into a U8 mask, for a non-f32 dtype.
    pub(crate) fn typed_compare(
        &self,
        op: CmpOp,
        dtype: DType,
        a: (&GpuBuffer, &Layout),
        b: std::result::Result<(&GpuBuffer, &Layout), u32>,
    ) -> Result<GpuBuffer> {
        let (entry, name) = match b {
            Ok(_) => ("compare", op.name()),
            Err(_) => ("compare_scalar", op.scalar_name()),
        };
        let views = match b {
            Ok(b) => vec![a, b],
            Err(_) => vec![a],
        };
        self.typed(
            name,
            Typed {
                entry,
                code: op.code(),
                dtypes: [dtype, dtype, DType::U8],
                views: &views,
                scalars: [b.err().unwrap_or(0), 0],
                flags: 0,
            },
        )
    }

    /// `min(max(x, lo), hi)` for a non-f32 dtype (bounds as canonical bits).
    pub(crate) fn typed_clamp(
        &self,
        dtype: DType,
        src: (&GpuBuffer, &Layout),
        lo: u32,
        hi: u32,
    ) -> Result<GpuBuffer> {
        self.typed(
            "clamp",
            Typed {
                entry: "clamp_values",
                code: 0,
                dtypes: [dtype; 3],
                views: &[src],
                scalars: [lo, hi],
                flags: 0,
            },
        )
    }

    /// `mask ? on_true : on_false` for values of any dtype (the f32 path is `where_cond`).
    pub(crate) fn typed_where(
        &self,
        dtype: DType,
        mask: (&GpuBuffer, &Layout),
        on_true: (&GpuBuffer, &Layout),
        on_false: (&GpuBuffer, &Layout),
    ) -> Result<GpuBuffer> {
        self.typed(
            "where_cond",
            Typed {
                entry: "where_cond",
                code: 0,
                dtypes: [DType::U8, dtype, dtype],
                views: &[mask, on_true, on_false],
                scalars: [0, 0],
                flags: 0,
            },
        )
    }
}
