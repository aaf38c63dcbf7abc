//! Backward formulas of the elementwise ops (binary with broadcasting, tensor-scalar, unary).

use super::record;
use crate::ops::{BinaryOp, UnaryOp};
use crate::{Result, Tensor};

/// A 0-d constant on `like`'s device, broadcast by the ops that use it.
pub(crate) fn scalar_like(like: &Tensor, v: f32) -> Result<Tensor> {
    Tensor::full(&[], v as f64, like.dtype(), like.device())
}

/// Sums a broadcast gradient back to `shape` (the input's shape before broadcasting): over the
/// leading dims the input did not have, and over the dims where it had size 1.
pub(crate) fn sum_to(g: Tensor, shape: &[usize]) -> Result<Tensor> {
    if g.shape() == shape {
        return Ok(g);
    }
    let lead = g.ndim() - shape.len();
    let mut r = g;
    for _ in 0..lead {
        r = r.sum(0, false)?;
    }
    for (d, &n) in shape.iter().enumerate() {
        if n == 1 && r.shape()[d] != 1 {
            r = r.sum(d as isize, true)?;
        }
    }
    r.reshape(shape)
}

/// `g` where `mask` is set, else 0.
fn masked(mask: &Tensor, g: &Tensor) -> Result<Tensor> {
    mask.where_cond(g, &scalar_like(g, 0.0)?)
}

/// Gradient of `max(a, b)` for the operand `a` (PyTorch: all of it where `a` wins, half on
/// ties). `min` uses the mirrored comparison.
fn winner_grad(g: &Tensor, a: &Tensor, b: &Tensor, max: bool) -> Result<Tensor> {
    let wins = if max { a.gt(b)? } else { a.lt(b)? };
    let tie = a.eq(b)?;
    let half = masked(&tie, &g.mul_scalar(0.5)?)?;
    wins.where_cond(g, &half)
}

fn winner_grad_scalar(g: &Tensor, a: &Tensor, s: f32, max: bool) -> Result<Tensor> {
    let wins = if max {
        a.gt_scalar(s)?
    } else {
        a.lt_scalar(s)?
    };
    let tie = a.eq_scalar(s)?;
    let half = masked(&tie, &g.mul_scalar(0.5)?)?;
    wins.where_cond(g, &half)
}

/// Records `out = a op b` (broadcasting).
pub(crate) fn binary(op: BinaryOp, a: &Tensor, b: &Tensor, out: Tensor) -> Tensor {
    let (a2, b2, o) = (a.clone(), b.clone(), out.clone());
    record(op.name(), out, &[a, b], move |g, needs| {
        let (a, b) = (&a2, &b2);
        let grad_a = |g: &Tensor| -> Result<Tensor> {
            match op {
                BinaryOp::Add | BinaryOp::Sub => Ok(g.clone()),
                BinaryOp::Mul => g.mul(b),
                BinaryOp::Div => g.div(b),
                BinaryOp::Maximum => winner_grad(g, a, b, true),
                BinaryOp::Minimum => winner_grad(g, a, b, false),
                // d/da a^b = b * a^(b-1)
                BinaryOp::Pow => g.mul(&b.mul(&a.pow(&b.sub_scalar(1.0)?)?)?),
                BinaryOp::Rem => Ok(g.clone()),
            }
        };
        let grad_b = |g: &Tensor| -> Result<Tensor> {
            match op {
                BinaryOp::Add => Ok(g.clone()),
                BinaryOp::Sub => g.neg(),
                BinaryOp::Mul => g.mul(a),
                // d/db a/b = -a/b^2 = -out/b
                BinaryOp::Div => g.mul(&o)?.div(b)?.neg(),
                BinaryOp::Maximum => winner_grad(g, b, a, true),
                BinaryOp::Minimum => winner_grad(g, b, a, false),
                // d/db a^b = a^b ln a; 0 where a == 0 (PyTorch's convention for 0^b).
                BinaryOp::Pow => masked(&a.ne_scalar(0.0)?, &g.mul(&o)?.mul(&a.log()?)?),
                // fmod(a, b) = a - b * trunc(a / b): d/db = -trunc(a / b) = -(a - out) / b.
                BinaryOp::Rem => g.mul(&a.sub(&o)?.div(b)?)?.neg(),
            }
        };
        let ga = if needs[0] {
            Some(sum_to(grad_a(g)?, a.shape())?)
        } else {
            None
        };
        let gb = if needs[1] {
            Some(sum_to(grad_b(g)?, b.shape())?)
        } else {
            None
        };
        Ok(vec![ga, gb])
    })
}

/// Records `out = x op s`, or `s op x` when `scalar_first`.
pub(crate) fn scalar(op: BinaryOp, x: &Tensor, s: f32, scalar_first: bool, out: Tensor) -> Tensor {
    let (x2, o) = (x.clone(), out.clone());
    record(op.scalar_name(), out, &[x], move |g, _| {
        let x = &x2;
        let gx = match (op, scalar_first) {
            (BinaryOp::Add, _) => g.clone(),
            (BinaryOp::Sub, false) => g.clone(),
            (BinaryOp::Sub, true) => g.neg()?,
            (BinaryOp::Mul, _) => g.mul_scalar(s)?,
            (BinaryOp::Div, false) => g.div_scalar(s)?,
            // d/dx s/x = -s/x^2 = -out/x
            (BinaryOp::Div, true) => g.mul(&o)?.div(x)?.neg()?,
            (BinaryOp::Maximum, _) => winner_grad_scalar(g, x, s, true)?,
            (BinaryOp::Minimum, _) => winner_grad_scalar(g, x, s, false)?,
            (BinaryOp::Pow, false) => g.mul(&x.pow_scalar(s - 1.0)?.mul_scalar(s)?)?,
            // d/dx s^x = s^x ln s
            (BinaryOp::Pow, true) => g.mul(&o)?.mul_scalar(s.ln())?,
            (BinaryOp::Rem, false) => g.clone(),
            // d/dx fmod(s, x) = -trunc(s / x) = -(s - out) / x
            (BinaryOp::Rem, true) => g.mul(&o.neg()?.add_scalar(s)?.div(x)?)?.neg()?,
        };
        Ok(vec![Some(gx)])
    })
}

/// Records `out = op(x)`.
pub(crate) fn unary(op: UnaryOp, x: &Tensor, out: Tensor) -> Tensor {
    let (x2, o) = (x.clone(), out.clone());
    record(op.name(), out, &[x], move |g, _| {
        let x = &x2;
        let gx = match op {
            UnaryOp::Neg => g.neg()?,
            // sign(x) * g; 0 at x == 0 (PyTorch's subgradient).
            UnaryOp::Abs => x
                .gt_scalar(0.0)?
                .where_cond(g, &masked(&x.lt_scalar(0.0)?, &g.neg()?)?)?,
            UnaryOp::Exp => g.mul(&o)?,
            UnaryOp::Log => g.div(x)?,
            UnaryOp::Sqrt => g.div(&o)?.mul_scalar(0.5)?,
            UnaryOp::Relu => masked(&x.gt_scalar(0.0)?, g)?,
            UnaryOp::Sigmoid => g.mul(&o.mul(&o.neg()?.add_scalar(1.0)?)?)?,
            UnaryOp::Tanh => g.mul(&o.mul(&o)?.neg()?.add_scalar(1.0)?)?,
            UnaryOp::Gelu => g.mul(&gelu_grad(x, &o)?)?,
            UnaryOp::Sin => g.mul(&x.cos()?)?,
            UnaryOp::Cos => g.mul(&x.sin()?)?.neg()?,
            UnaryOp::Copy => g.clone(),
        };
        Ok(vec![Some(gx)])
    })
}

/// d/dx x Φ(x) = Φ(x) + x φ(x). Φ(x) is recovered as gelu(x) / x (the forward's own erf, so
/// CPU and GPU agree with their forwards), with Φ(0) = 1/2.
fn gelu_grad(x: &Tensor, gelu: &Tensor) -> Result<Tensor> {
    let at_zero = x.eq_scalar(0.0)?;
    let cdf = at_zero.where_cond(&scalar_like(x, 0.5)?, &gelu.div(x)?)?;
    let pdf = x
        .mul(x)?
        .mul_scalar(-0.5)?
        .exp()?
        .mul_scalar(1.0 / (2.0 * std::f32::consts::PI).sqrt())?;
    cdf.add(&x.mul(&pdf)?)
}
