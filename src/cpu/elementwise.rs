//! CPU kernels for elementwise ops of every dtype: the fallback device and the oracle for the
//! generated GPU kernels (`src/gpu/codegen.rs`). Each op of the table (`src/ops/mod.rs`) gets its own
//! monomorphised loop through the table's visitors, so the hot loop has no `match` per element.
//! f16 computes in f32 and rounds once; i32 / u32 follow WGSL ([`crate::ops::IntElem`]).

use super::storage::CpuStorage;
use super::strided::{build_vec, map1, map2, zip_slices};
use super::typed::{dtype_of, Scalar};
use crate::ops::{BinaryFn, BinaryOp, BinaryVisitor, UnaryFn, UnaryOp, UnaryVisitor};
use crate::shape::Layout;
use crate::{Error, Result};
use half::f16;

fn unsupported(op: &'static str, s: &CpuStorage) -> Error {
    Error::UnsupportedDType {
        op,
        dtype: dtype_of(s),
        device: "cpu".into(),
    }
}

/// `op(x)` for every element of the view `l` of `src`, packed row-major (`op` valid for the
/// dtype: the tensor layer checks).
pub(crate) fn unary(op: UnaryOp, src: &CpuStorage, l: &Layout) -> Result<CpuStorage> {
    struct V<'a>(&'a CpuStorage, &'a Layout);
    impl UnaryVisitor for V<'_> {
        type Out = Result<CpuStorage>;
        fn visit<F: UnaryFn>(self, op: UnaryOp) -> Result<CpuStorage> {
            let (name, l) = (op.name(), self.1);
            Ok(match self.0 {
                CpuStorage::F32(v) => CpuStorage::F32(map1(name, v, l, F::f32)?),
                CpuStorage::F16(v) => {
                    CpuStorage::F16(map1(name, v, l, |x| f16::from_f32(F::f32(x.to_f32())))?)
                }
                CpuStorage::I32(v) => CpuStorage::I32(map1(name, v, l, F::int)?),
                CpuStorage::U32(v) => CpuStorage::U32(map1(name, v, l, F::int)?),
                s @ CpuStorage::U8(_) => return Err(unsupported(name, s)),
            })
        }
    }
    op.visit(V(src, l))
}

/// `op(a, b)` over two views of one dtype already broadcast to the same shape.
pub(crate) fn binary(
    op: BinaryOp,
    a: &CpuStorage,
    la: &Layout,
    b: &CpuStorage,
    lb: &Layout,
) -> Result<CpuStorage> {
    struct V<'a>([(&'a CpuStorage, &'a Layout); 2]);
    impl BinaryVisitor for V<'_> {
        type Out = Result<CpuStorage>;
        fn visit<F: BinaryFn>(self, op: BinaryOp) -> Result<CpuStorage> {
            let name = op.name();
            let [(a, la), (b, lb)] = self.0;
            Ok(match (a, b) {
                (CpuStorage::F32(x), CpuStorage::F32(y)) => {
                    CpuStorage::F32(map2(name, x, la, y, lb, F::f32)?)
                }
                (CpuStorage::F16(x), CpuStorage::F16(y)) => {
                    CpuStorage::F16(map2(name, x, la, y, lb, |p, q| {
                        f16::from_f32(F::f32(p.to_f32(), q.to_f32()))
                    })?)
                }
                (CpuStorage::I32(x), CpuStorage::I32(y)) => {
                    CpuStorage::I32(map2(name, x, la, y, lb, F::int)?)
                }
                (CpuStorage::U32(x), CpuStorage::U32(y)) => {
                    CpuStorage::U32(map2(name, x, la, y, lb, F::int)?)
                }
                _ => return Err(unsupported(name, a)),
            })
        }
    }
    op.visit(V([(a, la), (b, lb)]))
}

/// `op(x, s)` (or `op(s, x)` when `first`) for every element of the view; `s` is already in
/// the tensor's dtype.
pub(crate) fn scalar(
    op: BinaryOp,
    src: &CpuStorage,
    l: &Layout,
    s: Scalar,
    first: bool,
) -> Result<CpuStorage> {
    struct V<'a>(&'a CpuStorage, &'a Layout, Scalar, bool);
    impl BinaryVisitor for V<'_> {
        type Out = Result<CpuStorage>;
        fn visit<F: BinaryFn>(self, op: BinaryOp) -> Result<CpuStorage> {
            let (name, l) = (op.scalar_name(), self.1);
            // Separate loops for the two operand orders keep the branch out of the loop.
            macro_rules! go {
                ($v:expr, $s:expr, $wrap:expr, $f:expr) => {
                    if self.3 {
                        map1(name, $v, l, |x| $wrap($f($s, x)))?
                    } else {
                        map1(name, $v, l, |x| $wrap($f(x, $s)))?
                    }
                };
            }
            Ok(match (self.0, self.2) {
                (CpuStorage::F32(v), Scalar::F(s)) => CpuStorage::F32(go!(v, s, |r| r, F::f32)),
                (CpuStorage::F16(v), Scalar::F(s)) => CpuStorage::F16(if self.3 {
                    map1(name, v, l, |x| f16::from_f32(F::f32(s, x.to_f32())))?
                } else {
                    map1(name, v, l, |x| f16::from_f32(F::f32(x.to_f32(), s)))?
                }),
                (CpuStorage::I32(v), Scalar::I(s)) => CpuStorage::I32(go!(v, s, |r| r, F::int)),
                (CpuStorage::U32(v), Scalar::U(s)) => CpuStorage::U32(go!(v, s, |r| r, F::int)),
                (src, _) => return Err(unsupported(name, src)),
            })
        }
    }
    op.visit(V(src, l, s, first))
}

/// `start + i * step` for `i in 0..n`, the same formula as the generated GPU `arange` (`src/tensor/create.rs`).
pub(crate) fn arange(n: usize, start: f32, step: f32) -> Result<Vec<f32>> {
    build_vec("arange", n, |off, out| {
        for (i, o) in out.iter_mut().enumerate() {
            o.write(start + (off + i) as f32 * step);
        }
    })
}

/// GELU's input gradient `g · (Φ(x) + x φ(x))` of packed f32 `x` and `g` in one pass
/// (`gelu_slope`), where the table's formula is 11 ops.
pub(crate) fn gelu_backward(x: &[f32], g: &[f32]) -> Result<Vec<f32>> {
    debug_assert_eq!(x.len(), g.len());
    build_vec("gelu backward", x.len(), |off, out| {
        let end = off + out.len();
        zip_slices(&x[off..end], &g[off..end], out, &|x, g| {
            g * crate::ops::gelu_slope(x)
        });
    })
}
