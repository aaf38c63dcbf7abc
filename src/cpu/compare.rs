//! CPU comparisons, `where_cond` and `clamp`: the fallback device and the oracle for
//! `shaders/compare.wgsl` and `shaders/where.wgsl`.

use super::strided::{build_vec, walk};
use crate::shape::Layout;
use crate::Result;

/// Elementwise comparisons; codes are the `OP` override of `shaders/compare.wgsl`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    pub(crate) fn name(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        }
    }

    /// Name of the tensor-with-scalar form, for error messages.
    pub(crate) fn scalar_name(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq_scalar",
            CmpOp::Ne => "ne_scalar",
            CmpOp::Lt => "lt_scalar",
            CmpOp::Le => "le_scalar",
            CmpOp::Gt => "gt_scalar",
            CmpOp::Ge => "ge_scalar",
        }
    }

    pub(crate) fn code(self) -> u32 {
        self as u32
    }

    /// Whether the comparison holds for an ordering (`None`: unordered, NaN): false for
    /// every op but `ne`, as IEEE comparisons.
    pub(crate) fn holds(self, o: Option<std::cmp::Ordering>) -> bool {
        use std::cmp::Ordering::{Equal, Greater, Less};
        match self {
            CmpOp::Eq => o == Some(Equal),
            CmpOp::Ne => o != Some(Equal),
            CmpOp::Lt => o == Some(Less),
            CmpOp::Le => matches!(o, Some(Less | Equal)),
            CmpOp::Gt => o == Some(Greater),
            CmpOp::Ge => matches!(o, Some(Greater | Equal)),
        }
    }

    /// IEEE comparison (Rust's operators): NaN compares false, except `!=`.
    #[inline(always)]
    fn apply(self, a: f32, b: f32) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }
}

/// `f(storage indices)` for every element of `K` views already broadcast to one shape, packed
/// row-major.
fn map_views<const K: usize, T: Send>(
    op: &'static str,
    layouts: [&Layout; K],
    f: impl Fn([usize; K]) -> T + Sync,
) -> Result<Vec<T>> {
    let n = layouts[0].numel();
    let base = layouts.map(|l| l.offset);
    if layouts.iter().all(|l| l.is_contiguous()) {
        return build_vec(op, n, |off, out| {
            for (k, o) in out.iter_mut().enumerate() {
                o.write(f(base.map(|b| b + off + k)));
            }
        });
    }
    let strides = layouts.map(|l| l.strides.as_slice());
    build_vec(op, n, |off, out| {
        let mut it = out.iter_mut();
        walk(&layouts[0].shape, strides, base, off, off + it.len(), |p| {
            if let Some(o) = it.next() {
                o.write(f(p));
            }
        });
    })
}

/// `a OP b` as a U8 mask (1 true, 0 false) over two broadcast views.
pub(crate) fn compare(
    op: CmpOp,
    a: &[f32],
    la: &Layout,
    b: &[f32],
    lb: &Layout,
) -> Result<Vec<u8>> {
    map_views(op.name(), [la, lb], |[p, q]| u8::from(op.apply(a[p], b[q])))
}

/// `a OP s` as a U8 mask.
pub(crate) fn compare_scalar(op: CmpOp, a: &[f32], la: &Layout, s: f32) -> Result<Vec<u8>> {
    map_views(op.scalar_name(), [la], |[p]| u8::from(op.apply(a[p], s)))
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

pub(crate) fn clamp(src: &[f32], l: &Layout, lo: f32, hi: f32) -> Result<Vec<f32>> {
    map_views("clamp", [l], |[p]| clamp1(src[p], lo, hi))
}

/// `mask ? on_true : on_false` over three broadcast views.
pub(crate) fn where_cond(
    mask: &[u8],
    lm: &Layout,
    on_true: &[f32],
    lt: &Layout,
    on_false: &[f32],
    lf: &Layout,
) -> Result<Vec<f32>> {
    map_views("where_cond", [lm, lt, lf], |[m, t, f]| {
        if mask[m] != 0 {
            on_true[t]
        } else {
            on_false[f]
        }
    })
}
