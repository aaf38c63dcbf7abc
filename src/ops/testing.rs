//! The op tables as seen by tests (`wgtensor::testing::unary_ops()` and friends): each entry
//! names an op, calls it on tensors and gives its scalar CPU reference, so dtype, fault and f16
//! sweeps iterate the tables instead of hand-kept lists and a new op is swept without editing
//! the tests.

use super::{
    BinaryFn, BinaryOp, BinaryVisitor, CmpOp, IntElem, ReduceOp, RowOp, UnaryFn, UnaryOp,
    UnaryVisitor,
};
use crate::ops::geometry::CeSpec;
use crate::{DType, Result, Tensor};

/// One unary op of the table (`src/ops/mod.rs`).
///
/// ```
/// let exp = wgtensor::testing::unary_ops().into_iter().find(|o| o.name() == "exp").unwrap();
/// assert_eq!(exp.reference(0.0), 1.0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnaryOpInfo(UnaryOp);

/// One binary op of the table (`src/ops/mod.rs`), with its tensor-scalar form.
///
/// ```
/// let add = wgtensor::testing::binary_ops().into_iter().find(|o| o.name() == "add").unwrap();
/// assert_eq!((add.scalar_name(), add.reference(1.0, 2.0)), ("add_scalar", 3.0));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BinaryOpInfo(BinaryOp);

/// One comparison of the table (`src/ops/compare.rs`), with its tensor-scalar form.
///
/// ```
/// let lt = wgtensor::testing::compare_ops().into_iter().find(|o| o.name() == "lt").unwrap();
/// assert!(lt.reference(1.0, 2.0) && !lt.reference(f32::NAN, 2.0));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompareOpInfo(CmpOp);

/// One reduction of the table (`src/ops/reduce.rs`), with its whole-tensor form.
///
/// ```
/// let ops = wgtensor::testing::reduce_ops();
/// let sum = ops.iter().find(|o| o.name() == "sum").unwrap();
/// assert_eq!((sum.all_name(), sum.is_arg()), ("sum_all", false));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReduceOpInfo(ReduceOp);

/// Every reduction, in table order.
pub fn reduce_ops() -> Vec<ReduceOpInfo> {
    ReduceOp::ALL.iter().map(|&o| ReduceOpInfo(o)).collect()
}

impl ReduceOpInfo {
    /// The per-dim method's name (`"sum"`), as errors report it.
    pub fn name(self) -> &'static str {
        self.0.name()
    }

    /// The whole-tensor method's name (`"sum_all"`).
    pub fn all_name(self) -> &'static str {
        self.0.all_name()
    }

    /// Whether it returns U32 indices rather than values.
    pub fn is_arg(self) -> bool {
        self.0.is_arg()
    }

    /// Whether i32 / u32 tensors reduce (wrapping in their dtype).
    pub fn ints(self) -> bool {
        self.0.ints()
    }

    /// Whether the op has a value over no elements (`sum` 0, `prod` 1, `mean` NaN) rather
    /// than an error (`max` of nothing).
    pub fn defined_when_empty(self) -> bool {
        self.0.empty() != super::Empty::Undefined
    }

    /// The reduction over `dim` (`t.sum(dim, keepdim)`).
    pub fn call(self, t: &Tensor, dim: isize, keepdim: bool) -> Result<Tensor> {
        t.reduce_tracked(self.0, Some(dim), keepdim)
    }

    /// The reduction of every element (`t.sum_all()`).
    pub fn call_all(self, t: &Tensor) -> Result<Tensor> {
        t.reduce_tracked(self.0, None, false)
    }
}

/// Every unary elementwise op, in table order.
pub fn unary_ops() -> Vec<UnaryOpInfo> {
    UnaryOp::ALL.iter().map(|&o| UnaryOpInfo(o)).collect()
}

/// Every binary elementwise op, in table order.
pub fn binary_ops() -> Vec<BinaryOpInfo> {
    BinaryOp::ALL.iter().map(|&o| BinaryOpInfo(o)).collect()
}

/// Every comparison, in table order.
pub fn compare_ops() -> Vec<CompareOpInfo> {
    CmpOp::ALL.iter().map(|&o| CompareOpInfo(o)).collect()
}

/// The integer scalar function of an op (`T` is i32 or u32).
struct IntRef<T>(T, T);

impl<T: IntElem> UnaryVisitor for IntRef<T> {
    type Out = T;
    fn visit<F: UnaryFn>(self, _: UnaryOp) -> T {
        F::int(self.0)
    }
}

impl<T: IntElem> BinaryVisitor for IntRef<T> {
    type Out = T;
    fn visit<F: BinaryFn>(self, _: BinaryOp) -> T {
        F::int(self.0, self.1)
    }
}

impl UnaryOpInfo {
    /// The method's name (`"exp"`), as errors report it.
    pub fn name(self) -> &'static str {
        self.0.name()
    }

    /// Defined only for floats: integer tensors get `UnsupportedDType`.
    pub fn float_only(self) -> bool {
        self.0.float_only()
    }

    /// The op on a tensor (`t.exp()`).
    pub fn call(self, t: &Tensor) -> Result<Tensor> {
        t.unary(self.0)
    }

    /// The CPU's f32 result for one value.
    pub fn reference(self, x: f32) -> f32 {
        self.0.apply(x)
    }

    /// The i32 result (WGSL integer semantics), `None` for float-only ops.
    pub fn reference_i32(self, x: i32) -> Option<i32> {
        (!self.float_only()).then(|| self.0.visit(IntRef(x, 0)))
    }

    /// The u32 result (WGSL integer semantics), `None` for float-only ops.
    pub fn reference_u32(self, x: u32) -> Option<u32> {
        (!self.float_only()).then(|| self.0.visit(IntRef(x, 0)))
    }
}

impl BinaryOpInfo {
    /// The method's name (`"add"`), as errors report it.
    pub fn name(self) -> &'static str {
        self.0.name()
    }

    /// The tensor-scalar method's name (`"add_scalar"`).
    pub fn scalar_name(self) -> &'static str {
        self.0.scalar_name()
    }

    /// Defined only for floats: integer tensors get `UnsupportedDType`.
    pub fn float_only(self) -> bool {
        self.0.float_only()
    }

    /// The op on two tensors, with broadcasting (`a.add(&b)`).
    pub fn call(self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        a.binary(b, self.0)
    }

    /// The tensor-scalar form (`t.add_scalar(s)`).
    pub fn call_scalar(self, t: &Tensor, s: f32) -> Result<Tensor> {
        t.scalar(self.0, s, false)
    }

    /// The CPU's f32 result for one pair.
    pub fn reference(self, a: f32, b: f32) -> f32 {
        self.0.apply(a, b)
    }

    /// The i32 result (WGSL integer semantics), `None` for float-only ops.
    pub fn reference_i32(self, a: i32, b: i32) -> Option<i32> {
        (!self.float_only()).then(|| self.0.visit(IntRef(a, b)))
    }

    /// The u32 result (WGSL integer semantics), `None` for float-only ops.
    pub fn reference_u32(self, a: u32, b: u32) -> Option<u32> {
        (!self.float_only()).then(|| self.0.visit(IntRef(a, b)))
    }
}

impl CompareOpInfo {
    /// The method's name (`"lt"`), as errors report it.
    pub fn name(self) -> &'static str {
        self.0.name()
    }

    /// The tensor-scalar method's name (`"lt_scalar"`).
    pub fn scalar_name(self) -> &'static str {
        self.0.scalar_name()
    }

    /// The comparison of two tensors, with broadcasting, as a U8 mask.
    pub fn call(self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        a.compare_op(b, self.0)
    }

    /// The tensor-scalar form (`t.lt_scalar(s)`).
    pub fn call_scalar(self, t: &Tensor, s: f32) -> Result<Tensor> {
        t.compare_scalar_op(s, self.0)
    }

    /// Whether it holds for one pair (IEEE: NaN compares false except in `ne`). Integers
    /// compare exactly as these f32 values when they are exact in f32.
    pub fn reference(self, a: f32, b: f32) -> bool {
        self.0.apply(a, b)
    }

    /// Whether it holds for one pair of integers (any integer dtype, widened to i64).
    pub fn reference_int(self, a: i64, b: i64) -> bool {
        self.0.holds(a.partial_cmp(&b))
    }
}

/// One row op of the table (`src/ops/rows.rs`): softmax, layer_norm, rms_norm, cross-entropy.
///
/// ```
/// use wgtensor::{Device, Tensor};
/// let x = Tensor::randn(&[3, 5], &Device::cpu())?;
/// for op in wgtensor::testing::row_ops() {
///     let (got, want) = (op.call(&x)?.to_vec::<f32>()?, op.composed(&x)?.to_vec::<f32>()?);
///     let tol = op.tolerance();
///     assert!(got.iter().zip(&want).all(|(a, b)| (a - b).abs() <= tol * (1.0 + b.abs())));
/// }
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowOpInfo(RowOp);

/// Every row op, in table order.
pub fn row_ops() -> Vec<RowOpInfo> {
    RowOp::ALL.iter().map(|&o| RowOpInfo(o)).collect()
}

super::row_test_half!();

/// The weight and bias the sweeps give a norm of `x`'s last dim: `1 + k/len` and `k/len - 0.5`
/// (in `x`'s float dtype, on its device).
fn sweep_weight_bias(x: &Tensor) -> Result<(Tensor, Tensor)> {
    let len = x.shape().last().copied().unwrap_or(1);
    let k: Vec<f32> = (0..len).map(|k| k as f32 / len.max(1) as f32).collect();
    let w: Vec<f32> = k.iter().map(|k| 1.0 + k).collect();
    let b: Vec<f32> = k.iter().map(|k| k - 0.5).collect();
    let dt = if x.dtype() == DType::F16 {
        DType::F16
    } else {
        DType::F32
    };
    Ok((
        Tensor::from_vec(w, &[len], x.device())?.to_dtype(dt)?,
        Tensor::from_vec(b, &[len], x.device())?.to_dtype(dt)?,
    ))
}

/// `x` as packed f32 logits `[rows, last dim]` and the targets `r % c` (I32) of its rows.
fn sweep_targets(x: &Tensor) -> Result<(Tensor, Tensor)> {
    let c = x.shape().last().copied().unwrap_or(1);
    let n = x.numel() / c.max(1);
    let logits = x.to_dtype(DType::F32)?.contiguous()?.reshape(&[n, c])?;
    let t: Vec<i32> = (0..n).map(|r| (r % c.max(1)) as i32).collect();
    Ok((logits, Tensor::from_vec(t, &[n], x.device())?))
}

impl RowOpInfo {
    /// The op's name (`"rms_norm"`), as errors report it.
    pub fn name(self) -> &'static str {
        self.0.name()
    }

    /// The op on the rows of `x`'s last dim, with operands derived from its shape: norms get
    /// the weight `1 + k/len` (and layer_norm the bias `k/len - 0.5`) and eps 1e-5;
    /// cross-entropy gives the per-row losses against the targets `row % classes`. The result
    /// has `x`'s dtype.
    pub fn call(self, x: &Tensor) -> Result<Tensor> {
        self.0.sweep(x)
    }

    /// The same result composed of elementwise ops and reductions (the reference).
    pub fn composed(self, x: &Tensor) -> Result<Tensor> {
        self.0.composed(x)
    }

    /// Whether [`call`](Self::call) records a backward: every op with its own `Tensor` method
    /// (generated from the table, with the backward the table routes it to). Cross-entropy's
    /// per-row losses are not: `nn::cross_entropy` records the loss as one node of its own.
    pub fn tracked(self) -> bool {
        self.0.tracked()
    }

    /// The tolerance, absolute and relative (`|got - want| <= tol * (1 + |want|)`), of
    /// [`call`](Self::call) against [`composed`](Self::composed) in f32.
    pub fn tolerance(self) -> f32 {
        self.0.tolerance()
    }
}
