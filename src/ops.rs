//! The elementwise op vocabulary shared by both backends.
//!
//! Each op has a numeric code that the WGSL shaders receive as the pipeline-overridable constant
//! `OP`, and a scalar CPU twin (`apply`) that is both the CPU kernel and the test oracle. The
//! codes must match the `switch` arms in `shaders/unary.wgsl` and `shaders/binary.wgsl`.

/// One-input elementwise ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum UnaryOp {
    Neg,
    Abs,
    Exp,
    Log,
    Sqrt,
    Relu,
    Sigmoid,
    Tanh,
    Gelu,
    Sin,
    Cos,
    /// Identity: materialises a strided view into a packed buffer.
    Copy,
}

impl UnaryOp {
    pub(crate) fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Abs => "abs",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Relu => "relu",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Gelu => "gelu",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Copy => "contiguous",
        }
    }

    /// The `OP` override constant of `shaders/unary.wgsl`.
    pub(crate) fn code(self) -> u32 {
        self as u32
    }
}

/// Two-input elementwise ops (also used with a scalar as one side).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Maximum,
    Minimum,
    Pow,
}

impl BinaryOp {
    pub(crate) fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
            BinaryOp::Pow => "pow",
        }
    }

    /// Name of the tensor-with-scalar form, for error messages.
    pub(crate) fn scalar_name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add_scalar",
            BinaryOp::Sub => "sub_scalar",
            BinaryOp::Mul => "mul_scalar",
            BinaryOp::Div => "div_scalar",
            BinaryOp::Maximum => "maximum_scalar",
            BinaryOp::Minimum => "minimum_scalar",
            BinaryOp::Pow => "pow_scalar",
        }
    }

    /// The `OP` override constant of `shaders/binary.wgsl`.
    pub(crate) fn code(self) -> u32 {
        self as u32
    }
}

/// erf by Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7). The same formula runs in
/// `shaders/unary.wgsl`, so exact GELU agrees across devices to float rounding.
#[inline]
pub(crate) fn erf(x: f32) -> f32 {
    let s = x.signum();
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let poly = t
        * (0.254_829_6
            + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152_1 + t * 1.061_405_4))));
    s * (1.0 - poly * (-a * a).exp())
}

#[inline]
pub(crate) fn apply_unary(op: UnaryOp, x: f32) -> f32 {
    match op {
        UnaryOp::Neg => -x,
        UnaryOp::Abs => x.abs(),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        // PyTorch propagates NaN through relu; `x.max(0.0)` would swallow it.
        UnaryOp::Relu => {
            if x > 0.0 || x.is_nan() {
                x
            } else {
                0.0
            }
        }
        UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnaryOp::Tanh => x.tanh(),
        // Exact (erf) GELU, PyTorch's default `approximate='none'`.
        // The limit at -inf is 0; the formula alone would give -inf * 0 = NaN.
        UnaryOp::Gelu if x == f32::NEG_INFINITY => 0.0,
        UnaryOp::Gelu => 0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2)),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Copy => x,
    }
}

#[inline]
pub(crate) fn apply_binary(op: BinaryOp, a: f32, b: f32) -> f32 {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Maximum => maximum(a, b),
        BinaryOp::Minimum => minimum(a, b),
        BinaryOp::Pow => a.powf(b),
    }
}

/// PyTorch's `maximum`: NaN in either operand gives NaN (`f32::max` would drop it).
#[inline]
pub(crate) fn maximum(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if a > b {
        a
    } else {
        b
    }
}

/// PyTorch's `minimum`: NaN in either operand gives NaN.
#[inline]
pub(crate) fn minimum(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if a < b {
        a
    } else {
        b
    }
}
