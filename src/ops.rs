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
    /// Truncated remainder (WGSL `%`, C `fmod`): the result has the sign of the dividend.
    Rem,
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
            BinaryOp::Rem => "rem",
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
            BinaryOp::Rem => "rem_scalar",
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
        BinaryOp::Rem => rem_f32(a, b),
    }
}

/// WGSL's float `%`: `a - b * trunc(a / b)`, the formula the shaders evaluate (not the exact
/// `fmod`, which differs by rounding when the quotient is large). `x % 0` is NaN.
#[inline]
pub(crate) fn rem_f32(a: f32, b: f32) -> f32 {
    a - b * (a / b).trunc()
}

impl UnaryOp {
    /// Ops defined only for floats (integer tensors get `UnsupportedDType`).
    pub(crate) fn float_only(self) -> bool {
        !matches!(
            self,
            UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu | UnaryOp::Copy
        )
    }
}

impl BinaryOp {
    /// Ops defined only for floats (integer tensors get `UnsupportedDType`).
    pub(crate) fn float_only(self) -> bool {
        self == BinaryOp::Pow
    }
}

/// Integer element types with WGSL semantics: wrapping `+ - * neg`, and a divisor of 0 (or
/// `MIN / -1` for signed types) replaced by 1, so `x / 0 == x`, `MIN / -1 == MIN`, `x % 0 == 0`
/// and `MIN % -1 == 0` (what naga emits for every backend, and what the shaders spell out).
pub(crate) trait IntElem: Copy + Ord + Send + Sync + 'static {
    const ZERO: Self;
    const ONE: Self;
    fn wadd(self, b: Self) -> Self;
    fn wsub(self, b: Self) -> Self;
    fn wmul(self, b: Self) -> Self;
    fn wneg(self) -> Self;
    fn wabs(self) -> Self;
    /// The divisor WGSL actually divides by.
    fn guard(self, b: Self) -> Self;
    fn wdiv(self, b: Self) -> Self;
    fn wrem(self, b: Self) -> Self;
}

macro_rules! int_elem {
    ($t:ty, $neg:expr, $abs:expr, $bad:expr) => {
        impl IntElem for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            #[inline]
            fn wadd(self, b: Self) -> Self {
                self.wrapping_add(b)
            }
            #[inline]
            fn wsub(self, b: Self) -> Self {
                self.wrapping_sub(b)
            }
            #[inline]
            fn wmul(self, b: Self) -> Self {
                self.wrapping_mul(b)
            }
            #[inline]
            fn wneg(self) -> Self {
                $neg(self)
            }
            #[inline]
            fn wabs(self) -> Self {
                $abs(self)
            }
            #[inline]
            fn guard(self, b: Self) -> Self {
                if b == 0 || $bad(self, b) {
                    1
                } else {
                    b
                }
            }
            #[inline]
            fn wdiv(self, b: Self) -> Self {
                self / self.guard(b)
            }
            #[inline]
            fn wrem(self, b: Self) -> Self {
                self % self.guard(b)
            }
        }
    };
}

int_elem!(
    i32,
    |x: i32| x.wrapping_neg(),
    |x: i32| x.wrapping_abs(),
    |a: i32, b: i32| a == i32::MIN && b == -1
);
int_elem!(
    u32,
    |x: u32| x.wrapping_neg(),
    |x: u32| x,
    |_: u32, _: u32| false
);

/// `op(x)` on an integer (`op` is not float-only).
#[inline]
pub(crate) fn apply_unary_int<T: IntElem>(op: UnaryOp, x: T) -> T {
    match op {
        UnaryOp::Neg => x.wneg(),
        UnaryOp::Abs => x.wabs(),
        UnaryOp::Relu => x.max(T::ZERO),
        _ => x,
    }
}

/// `op(a, b)` on integers (`op` is not float-only).
#[inline]
pub(crate) fn apply_binary_int<T: IntElem>(op: BinaryOp, a: T, b: T) -> T {
    match op {
        BinaryOp::Add => a.wadd(b),
        BinaryOp::Sub => a.wsub(b),
        BinaryOp::Mul => a.wmul(b),
        BinaryOp::Div => a.wdiv(b),
        BinaryOp::Rem => a.wrem(b),
        BinaryOp::Maximum => a.max(b),
        BinaryOp::Minimum => a.min(b),
        BinaryOp::Pow => a,
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
