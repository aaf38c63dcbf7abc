//! CPU kernels for the dtypes other than f32, and dtype conversion: the oracle for
//! `shaders/typed.wgsl`. f16 computes in f32 and rounds once (as the shaders do); i32 / u32 use
//! the WGSL integer semantics of [`crate::ops::IntElem`].

use super::reduce::{ReduceOp, Rows};
use super::storage::CpuStorage;
use super::strided::{map1, map2, walk};
use crate::ops::CmpOp;
use crate::ops::IntElem;
use crate::shape::Layout;
use crate::{DType, Result};
use half::f16;

pub(crate) use crate::ops::backend::Scalar;

fn h(x: f32) -> f16 {
    f16::from_f32(x)
}

fn unsupported(op: &'static str, s: &CpuStorage) -> crate::Error {
    crate::Error::UnsupportedDType {
        op,
        dtype: dtype_of(s),
        device: "cpu".into(),
    }
}

pub(crate) fn dtype_of(s: &CpuStorage) -> DType {
    match s {
        CpuStorage::F32(_) => DType::F32,
        CpuStorage::F16(_) => DType::F16,
        CpuStorage::I32(_) => DType::I32,
        CpuStorage::U32(_) => DType::U32,
        CpuStorage::U8(_) => DType::U8,
    }
}

/// `a OP b` as a U8 mask, for any dtype (f16 compares exactly as its f32 value).
pub(crate) fn compare(
    op: CmpOp,
    a: &CpuStorage,
    la: &Layout,
    b: &CpuStorage,
    lb: &Layout,
) -> Result<Vec<u8>> {
    let name = op.name();
    let f = |o: Option<std::cmp::Ordering>| u8::from(op.holds(o));
    match (a, b) {
        (CpuStorage::F16(x), CpuStorage::F16(y)) => {
            map2(name, x, la, y, lb, |p, q| f(p.partial_cmp(&q)))
        }
        (CpuStorage::I32(x), CpuStorage::I32(y)) => {
            map2(name, x, la, y, lb, |p, q| f(p.partial_cmp(&q)))
        }
        (CpuStorage::U32(x), CpuStorage::U32(y)) => {
            map2(name, x, la, y, lb, |p, q| f(p.partial_cmp(&q)))
        }
        (CpuStorage::U8(x), CpuStorage::U8(y)) => {
            map2(name, x, la, y, lb, |p, q| f(p.partial_cmp(&q)))
        }
        (CpuStorage::F32(x), CpuStorage::F32(y)) => {
            map2(name, x, la, y, lb, |p, q| f(p.partial_cmp(&q)))
        }
        _ => Err(unsupported(name, a)),
    }
}

/// `a OP s` as a U8 mask.
pub(crate) fn compare_scalar(op: CmpOp, a: &CpuStorage, la: &Layout, s: Scalar) -> Result<Vec<u8>> {
    let name = op.scalar_name();
    let f = |o: Option<std::cmp::Ordering>| u8::from(op.holds(o));
    match (a, s) {
        (CpuStorage::F16(x), Scalar::F(s)) => map1(name, x, la, |p| f(p.to_f32().partial_cmp(&s))),
        (CpuStorage::I32(x), Scalar::I(s)) => map1(name, x, la, |p| f(p.partial_cmp(&s))),
        (CpuStorage::U32(x), Scalar::U(s)) => map1(name, x, la, |p| f(p.partial_cmp(&s))),
        (CpuStorage::U8(x), Scalar::U(s)) => map1(name, x, la, |p| f(u32::from(p).partial_cmp(&s))),
        (CpuStorage::F32(x), Scalar::F(s)) => map1(name, x, la, |p| f(p.partial_cmp(&s))),
        _ => Err(unsupported(name, a)),
    }
}

/// `min(max(x, lo), hi)` (lo > hi gives hi, as PyTorch); NaN in any operand gives NaN.
#[inline(always)]
pub(crate) fn clamp1(x: f32, lo: f32, hi: f32) -> f32 {
    if x.is_nan() || lo.is_nan() || hi.is_nan() {
        return f32::NAN;
    }
    let up = if lo > x { lo } else { x };
    if up > hi {
        hi
    } else {
        up
    }
}

/// `min(max(x, lo), hi)` for F32 / F16 (in f32, NaN propagates), I32 and U32.
pub(crate) fn clamp(src: &CpuStorage, l: &Layout, lo: Scalar, hi: Scalar) -> Result<CpuStorage> {
    let name = "clamp";
    Ok(match (src, lo, hi) {
        (CpuStorage::F32(v), Scalar::F(lo), Scalar::F(hi)) => {
            CpuStorage::F32(map1(name, v, l, |x| clamp1(x, lo, hi))?)
        }
        (CpuStorage::F16(v), Scalar::F(lo), Scalar::F(hi)) => {
            CpuStorage::F16(map1(name, v, l, |x| h(clamp1(x.to_f32(), lo, hi)))?)
        }
        (CpuStorage::I32(v), Scalar::I(lo), Scalar::I(hi)) => {
            CpuStorage::I32(map1(name, v, l, |x| x.max(lo).min(hi))?)
        }
        (CpuStorage::U32(v), Scalar::U(lo), Scalar::U(hi)) => {
            CpuStorage::U32(map1(name, v, l, |x| x.max(lo).min(hi))?)
        }
        _ => return Err(unsupported(name, src)),
    })
}

/// `mask ? on_true : on_false` for values of any dtype.
pub(crate) fn where_cond(
    mask: &[u8],
    lm: &Layout,
    t: &CpuStorage,
    lt: &Layout,
    f: &CpuStorage,
    lf: &Layout,
) -> Result<CpuStorage> {
    fn go<T: Copy + Send + Sync>(
        mask: &[u8],
        lm: &Layout,
        t: &[T],
        lt: &Layout,
        f: &[T],
        lf: &Layout,
    ) -> Result<Vec<T>> {
        let n = lm.numel();
        let mut out = super::alloc::try_vec("where_cond", n)?;
        // Packed or single-element operands (the masks of relu's and friends' gradients, with
        // a 0-d zero): one flat loop, no per-element index walk. Same elements chosen.
        let step = |l: &Layout| {
            if l.is_contiguous() {
                Some(1)
            } else {
                l.strides.iter().all(|&s| s == 0).then_some(0)
            }
        };
        if let (Some(a), Some(b), Some(c)) = (step(lm), step(lt), step(lf)) {
            let (m, p, q) = (&mask[lm.offset..], &t[lt.offset..], &f[lf.offset..]);
            if (a, b, c) == (1, 1, 0) && n > 0 {
                // The gradient mask's case, as a zip the compiler vectorises.
                let z = q[0];
                let pick = |(&m, &p): (&u8, &T)| if m != 0 { p } else { z };
                out.extend(m[..n].iter().zip(&p[..n]).map(pick));
            } else {
                out.extend((0..n).map(|i| if m[i * a] != 0 { p[i * b] } else { q[i * c] }));
            }
            return Ok(out);
        }
        walk(
            &lm.shape,
            [&lm.strides, &lt.strides, &lf.strides],
            [lm.offset, lt.offset, lf.offset],
            0..n,
            |[m, p, q]| out.push(if mask[m] != 0 { t[p] } else { f[q] }),
        );
        Ok(out)
    }
    Ok(match (t, f) {
        (CpuStorage::F32(a), CpuStorage::F32(b)) => CpuStorage::F32(go(mask, lm, a, lt, b, lf)?),
        (CpuStorage::F16(a), CpuStorage::F16(b)) => CpuStorage::F16(go(mask, lm, a, lt, b, lf)?),
        (CpuStorage::I32(a), CpuStorage::I32(b)) => CpuStorage::I32(go(mask, lm, a, lt, b, lf)?),
        (CpuStorage::U32(a), CpuStorage::U32(b)) => CpuStorage::U32(go(mask, lm, a, lt, b, lf)?),
        (CpuStorage::U8(a), CpuStorage::U8(b)) => CpuStorage::U8(go(mask, lm, a, lt, b, lf)?),
        _ => return Err(unsupported("where_cond", t)),
    })
}

/// A value of any dtype, widened for conversion.
#[derive(Clone, Copy)]
enum Wide {
    F(f32),
    I(i32),
    U(u32),
}

fn to_dtype<T: Copy + Sync>(
    v: &[T],
    l: &Layout,
    wide: impl Fn(T) -> Wide + Sync,
    to: DType,
) -> Result<CpuStorage> {
    let op = "to_dtype";
    // Rust `as` casts: float -> int truncates toward zero and saturates, NaN -> 0; int -> int
    // keeps the low bits; int -> float rounds to nearest even.
    Ok(match to {
        DType::F32 => CpuStorage::F32(map1(op, v, l, |x| match wide(x) {
            Wide::F(f) => f,
            Wide::I(i) => i as f32,
            Wide::U(u) => u as f32,
        })?),
        DType::F16 => CpuStorage::F16(map1(op, v, l, |x| match wide(x) {
            Wide::F(f) => h(f),
            // Exact in f32 up to 2^24, far past f16's range: one rounding, as the shader.
            Wide::I(i) => h(i as f32),
            Wide::U(u) => h(u as f32),
        })?),
        DType::I32 => CpuStorage::I32(map1(op, v, l, |x| match wide(x) {
            Wide::F(f) => f as i32,
            Wide::I(i) => i,
            Wide::U(u) => u as i32,
        })?),
        DType::U32 => CpuStorage::U32(map1(op, v, l, |x| match wide(x) {
            Wide::F(f) => f as u32,
            Wide::I(i) => i as u32,
            Wide::U(u) => u,
        })?),
        DType::U8 => CpuStorage::U8(map1(op, v, l, |x| match wide(x) {
            Wide::F(f) => f as u8,
            Wide::I(i) => i as u8,
            Wide::U(u) => u as u8,
        })?),
    })
}

/// The view `l` of `src` converted to `to`, packed row-major.
pub(crate) fn convert(src: &CpuStorage, l: &Layout, to: DType) -> Result<CpuStorage> {
    match src {
        CpuStorage::F32(v) => to_dtype(v, l, Wide::F, to),
        CpuStorage::F16(v) => to_dtype(v, l, |x: f16| Wide::F(x.to_f32()), to),
        CpuStorage::I32(v) => to_dtype(v, l, Wide::I, to),
        CpuStorage::U32(v) => to_dtype(v, l, Wide::U, to),
        CpuStorage::U8(v) => to_dtype(v, l, |x: u8| Wide::U(x as u32), to),
    }
}

/// An integer reduction of every row: sum and prod wrap, max / min, argmax / argmin (first
/// occurrence of the extreme value). Rows are non-empty unless `op` is a sum or product.
pub(crate) fn reduce_int(op: ReduceOp, src: &CpuStorage, rows: &Rows) -> Result<CpuStorage> {
    fn go<T: IntElem>(op: ReduceOp, v: &[T], rows: &Rows) -> (Vec<T>, Vec<u32>) {
        // Value reductions: the table's integer fold.
        if let Some(vals) = op.cpu_int(v, rows) {
            return (vals, Vec::new());
        }
        let mut idx = Vec::new();
        for o in 0..rows.outputs() {
            let base = rows.base(o);
            let at = |r: usize| v[base + r * rows.stride];
            // argmax / argmin: the first occurrence of the extreme value.
            let mut best = 0;
            for r in 1..rows.len {
                let better = if op == ReduceOp::ArgMax {
                    at(r) > at(best)
                } else {
                    at(r) < at(best)
                };
                if better {
                    best = r;
                }
            }
            idx.push(best as u32);
        }
        (Vec::new(), idx)
    }
    let (out, arg) = match src {
        CpuStorage::I32(v) => {
            let (vals, idx) = go(op, v, rows);
            (CpuStorage::I32(vals), idx)
        }
        CpuStorage::U32(v) => {
            let (vals, idx) = go(op, v, rows);
            (CpuStorage::U32(vals), idx)
        }
        _ => return Err(unsupported(op.name(), src)),
    };
    Ok(if op.is_arg() {
        CpuStorage::U32(arg)
    } else {
        out
    })
}
