//! Elementwise ops with numpy/PyTorch broadcasting, for every dtype: validate, build a generated
//! program where the device fuses (every GPU; the CPU when fusion is on) or ask the backend's
//! own kernel (`dispatch::unary` and friends), record the gradient. The public methods
//! (`exp`, `add`, `add_scalar`, ...) are generated from the op table in `src/ops/mod.rs`.

use super::chunked::{blocks_needed, broadcast_pair, map_row_blocks, Broadcast};
use super::convert::scalar_dtype;
use super::dispatch;
use super::fuse::Fuser;
use super::Tensor;
use crate::ops::program::Expr;
use crate::ops::{BinaryOp, UnaryOp};
use crate::Result;

impl Tensor {
    /// `op(self)`, recorded for autograd.
    pub(crate) fn unary(&self, op: UnaryOp) -> Result<Tensor> {
        let out = self.unary_untracked(op)?;
        Ok(crate::autograd::elementwise::unary(op, self, out))
    }

    /// `op(self, rhs)` with broadcasting, recorded for autograd.
    pub(crate) fn binary(&self, rhs: &Tensor, op: BinaryOp) -> Result<Tensor> {
        let out = self.binary_untracked(rhs, op)?;
        Ok(crate::autograd::elementwise::binary(op, self, rhs, out))
    }

    /// `op(self, s)` (or `op(s, self)` when `first`), recorded for autograd.
    pub(crate) fn scalar(&self, op: BinaryOp, s: f32, first: bool) -> Result<Tensor> {
        let out = self.scalar_untracked(op, s, first)?;
        Ok(crate::autograd::elementwise::scalar(
            op, self, s, first, out,
        ))
    }

    fn unary_untracked(&self, op: UnaryOp) -> Result<Tensor> {
        self.check_compute(op.name(), op.float_only())?;
        if let Some(g) = blocks_needed(&[self], self.numel()) {
            return map_row_blocks(op.name(), g, self.shape(), &[self], &|b| {
                b[0].unary_untracked(op)
            });
        }
        if let Some(mut f) = Fuser::on(op.name(), self.device(), self.shape())? {
            let x = f.operand(self, self.layout())?;
            let out = f.push(Expr::Unary(op, x), self.dtype());
            return f.finish(op.name(), out, self.device());
        }
        let storage = dispatch::unary(self, op)?.ok_or_else(|| self.unsupported(op.name()))?;
        Ok(self.derived(storage, self.shape()))
    }

    fn binary_untracked(&self, rhs: &Tensor, op: BinaryOp) -> Result<Tensor> {
        let name = op.name();
        self.check_pair(name, rhs)?;
        self.check_compute(name, op.float_only())?;
        let (shape, la, lb) =
            match broadcast_pair(name, self, rhs, &|a, b| a.binary_untracked(b, op))? {
                Broadcast::Done(out) => return Ok(out),
                Broadcast::Layouts(shape, la, lb) => (shape, la, lb),
            };
        if let Some(mut f) = Fuser::on(name, self.device(), &shape)? {
            let (x, y) = (f.operand(self, &la)?, f.operand(rhs, &lb)?);
            let out = f.push(Expr::Binary(op, x, y), self.dtype());
            return f.finish(name, out, self.device());
        }
        let storage =
            dispatch::binary(self, rhs, op, &la, &lb)?.ok_or_else(|| self.unsupported(name))?;
        Ok(self.derived(storage, &shape))
    }

    fn scalar_untracked(&self, op: BinaryOp, s: f32, first: bool) -> Result<Tensor> {
        let name = op.scalar_name();
        self.check_compute(name, op.float_only())?;
        if let Some(g) = blocks_needed(&[self], self.numel()) {
            return map_row_blocks(name, g, self.shape(), &[self], &|b| {
                b[0].scalar_untracked(op, s, first)
            });
        }
        let sv = self.scalar_for(name, s, false)?;
        if let Some(mut f) = Fuser::on(name, self.device(), self.shape())? {
            let x = f.operand(self, self.layout())?;
            let c = f.scalar(sv.bits(), scalar_dtype(self.dtype()));
            let (l, r) = if first { (c, x) } else { (x, c) };
            let out = f.push(Expr::Binary(op, l, r), self.dtype());
            return f.finish(name, out, self.device());
        }
        let storage =
            dispatch::scalar(self, op, sv, first)?.ok_or_else(|| self.unsupported(name))?;
        Ok(self.derived(storage, self.shape()))
    }
}

/// `&a + &b` etc. return `Result<Tensor>`, as shapes or devices may not match.
macro_rules! operators {
    ($($trait:ident $method:ident => $tensor_fn:ident, $scalar_fn:ident, $op:ident;)*) => {$(
        impl std::ops::$trait<&Tensor> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                self.$tensor_fn(rhs)
            }
        }
        impl std::ops::$trait<f32> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: f32) -> Result<Tensor> {
                self.$scalar_fn(rhs)
            }
        }
        impl std::ops::$trait<&Tensor> for f32 {
            type Output = Result<Tensor>;
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                rhs.scalar(BinaryOp::$op, self, true)
            }
        }
    )*};
}

operators! {
    Add add => add, add_scalar, Add;
    Sub sub => sub, sub_scalar, Sub;
    Mul mul => mul, mul_scalar, Mul;
    Div div => div, div_scalar, Div;
    Rem rem => rem, rem_scalar, Rem;
}

impl std::ops::Neg for &Tensor {
    type Output = Result<Tensor>;
    fn neg(self) -> Result<Tensor> {
        Tensor::neg(self)
    }
}

// The public methods and gradients of the op table (`src/ops/mod.rs`), with the helpers its
// gradient formulas call.
crate::ops::unary_tensor_half!();
crate::ops::binary_tensor_half!();

/// `g` where `mask` is set, else 0.
fn masked(mask: &Tensor, g: &Tensor) -> Result<Tensor> {
    mask.where_cond(g, &Tensor::full(&[], 0.0, g.dtype(), g.device())?)
}

/// Gradient of `max(a, b)` (or `min`) for the operand `a` against `b` (a tensor, or a scalar as
/// `Ok`): all of it where `a` wins, half on ties (PyTorch).
fn winner_grad(
    g: &Tensor,
    a: &Tensor,
    b: std::result::Result<f32, &Tensor>,
    max: bool,
) -> Result<Tensor> {
    let (wins, tie) = match (b, max) {
        (Err(b), true) => (a.gt(b)?, a.eq(b)?),
        (Err(b), false) => (a.lt(b)?, a.eq(b)?),
        (Ok(s), true) => (a.gt_scalar(s)?, a.eq_scalar(s)?),
        (Ok(s), false) => (a.lt_scalar(s)?, a.eq_scalar(s)?),
    };
    let half = masked(&tie, &g.mul_scalar(0.5)?)?;
    wins.where_cond(g, &half)
}

/// GELU's input gradient `g · gelu'(x)`. One pass of the backend's kernel where it has one (the
/// CPU, for f32 operands of one shape); elsewhere [`gelu_grad`]'s ops (one fused kernel on a
/// GPU).
fn gelu_backward(x: &Tensor, y: &Tensor, g: &Tensor) -> Result<Tensor> {
    let f32 = |t: &Tensor| t.dtype() == crate::DType::F32;
    if f32(x) && f32(g) && x.shape() == g.shape() {
        if let Some(v) = dispatch::gelu_backward(x, g)? {
            return Ok(g.derived(v, x.shape()));
        }
    }
    g.mul(&gelu_grad(x, y)?)
}

/// d/dx x Φ(x) = Φ(x) + x φ(x). Φ(x) is recovered as gelu(x) / x (the forward's own erf, so
/// CPU and GPU agree with their forwards), with Φ(0) = 1/2.
fn gelu_grad(x: &Tensor, gelu: &Tensor) -> Result<Tensor> {
    let at_zero = x.eq_scalar(0.0)?;
    let half = Tensor::full(&[], 0.5, x.dtype(), x.device())?;
    let cdf = at_zero.where_cond(&half, &gelu.div(x)?)?;
    let pdf = x
        .mul(x)?
        .mul_scalar(-0.5)?
        .exp()?
        .mul_scalar(1.0 / (2.0 * std::f32::consts::PI).sqrt())?;
    cdf.add(&x.mul(&pdf)?)
}
