//! CPU kernels for elementwise ops: the fallback device and the oracle for the GPU shaders
//! (`shaders/unary.wgsl`, `shaders/binary.wgsl`, `shaders/fill.wgsl`).

use super::strided::{build_vec, try_vec, walk};
use crate::ops::{apply_binary, apply_unary, BinaryOp, UnaryOp};
use crate::shape::Layout;
use crate::Result;

/// `op(x)` for every element of the view `layout` of `src`; the result is packed row-major.
pub(crate) fn unary(op: UnaryOp, src: &[f32], layout: &Layout) -> Result<Vec<f32>> {
    // Monomorphise per op so the hot loop has no `match` per element and can vectorise.
    macro_rules! go {
        ($($v:ident),*) => {
            match op {
                $(UnaryOp::$v => map1(op.name(), src, layout, |x| apply_unary(UnaryOp::$v, x)),)*
            }
        };
    }
    go!(Neg, Abs, Exp, Log, Sqrt, Relu, Sigmoid, Tanh, Gelu, Sin, Cos, Copy)
}

/// `op(a, b)` over two views already broadcast to the same shape.
pub(crate) fn binary(
    op: BinaryOp,
    a: &[f32],
    la: &Layout,
    b: &[f32],
    lb: &Layout,
) -> Result<Vec<f32>> {
    macro_rules! go {
        ($($v:ident),*) => {
            match op {
                $(BinaryOp::$v => map2(op.name(), a, la, b, lb, |x, y| apply_binary(BinaryOp::$v, x, y)),)*
            }
        };
    }
    go!(Add, Sub, Mul, Div, Maximum, Minimum, Pow, Rem)
}

/// `op(x, s)` (or `op(s, x)` when `scalar_first`) for every element of the view.
pub(crate) fn scalar(
    op: BinaryOp,
    src: &[f32],
    layout: &Layout,
    s: f32,
    scalar_first: bool,
) -> Result<Vec<f32>> {
    macro_rules! go {
        ($($v:ident),*) => {
            match (op, scalar_first) {
                $((BinaryOp::$v, false) => map1(op.scalar_name(), src, layout, |x| apply_binary(BinaryOp::$v, x, s)),
                  (BinaryOp::$v, true) => map1(op.scalar_name(), src, layout, |x| apply_binary(BinaryOp::$v, s, x)),)*
            }
        };
    }
    go!(Add, Sub, Mul, Div, Maximum, Minimum, Pow, Rem)
}

/// `start + i * step` for `i in 0..n`, the same formula as `shaders/fill.wgsl::arange`.
pub(crate) fn arange(n: usize, start: f32, step: f32) -> Result<Vec<f32>> {
    build_vec("arange", n, |off, out| {
        for (i, o) in out.iter_mut().enumerate() {
            o.write(start + (off + i) as f32 * step);
        }
    })
}

/// `f(x)` for every element of the view `l` of `src`, packed row-major (any element types).
pub(crate) fn map1<T: Copy + Sync, U: Send>(
    op: &'static str,
    src: &[T],
    l: &Layout,
    f: impl Fn(T) -> U + Sync,
) -> Result<Vec<U>> {
    let n = l.numel();
    if l.is_contiguous() {
        let src = &src[l.offset..l.offset + n];
        return build_vec(op, n, |off, out| {
            let end = off + out.len();
            for (o, &x) in out.iter_mut().zip(&src[off..end]) {
                o.write(f(x));
            }
        });
    }
    build_vec(op, n, |off, out| {
        let mut it = out.iter_mut();
        walk(
            &l.shape,
            [&l.strides],
            [l.offset],
            off,
            off + it.len(),
            |[p]| {
                if let Some(o) = it.next() {
                    o.write(f(src[p]));
                }
            },
        );
    })
}

/// `f(a, b)` over two views broadcast to one shape, packed row-major (any element types).
pub(crate) fn map2<T: Copy + Sync, U: Send>(
    op: &'static str,
    a: &[T],
    la: &Layout,
    b: &[T],
    lb: &Layout,
    f: impl Fn(T, T) -> U + Sync,
) -> Result<Vec<U>> {
    let n = la.numel();
    if la.is_contiguous() && lb.is_contiguous() {
        let a = &a[la.offset..la.offset + n];
        let b = &b[lb.offset..lb.offset + n];
        return build_vec(op, n, |off, out| {
            let end = off + out.len();
            for ((o, &x), &y) in out.iter_mut().zip(&a[off..end]).zip(&b[off..end]) {
                o.write(f(x, y));
            }
        });
    }
    build_vec(op, n, |off, out| {
        let mut it = out.iter_mut();
        walk(
            &la.shape,
            [&la.strides, &lb.strides],
            [la.offset, lb.offset],
            off,
            off + it.len(),
            |[p, q]| {
                if let Some(o) = it.next() {
                    o.write(f(a[p], b[q]));
                }
            },
        );
    })
}

/// Gathers any view into a packed row-major `Vec` (dtype-agnostic: used for every dtype).
pub(crate) fn contiguous<T: Copy + Send + Sync>(src: &[T], l: &Layout) -> Result<Vec<T>> {
    let op = "contiguous";
    let n = l.numel();
    if l.is_contiguous() {
        let mut v = try_vec("contiguous", n)?;
        v.extend_from_slice(&src[l.offset..l.offset + n]);
        return Ok(v);
    }
    build_vec(op, n, |off, out| {
        let mut it = out.iter_mut();
        walk(
            &l.shape,
            [&l.strides],
            [l.offset],
            off,
            off + it.len(),
            |[p]| {
                if let Some(o) = it.next() {
                    o.write(src[p]);
                }
            },
        );
    })
}
