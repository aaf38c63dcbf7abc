//! The host twins of the table's scalar functions that need more than one line (erf, the WGSL
//! remainder, NaN-propagating max/min) and the integer semantics WGSL gives `+ - * / %`: the CPU
//! kernels call these, and the WGSL in `shaders/common.wgsl` spells out the same rules.

/// erf by Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7; its `exp` within 2 ulp). The same formula runs in
/// `shaders/common.wgsl`, so exact GELU agrees across devices to float rounding.
#[inline(always)]
pub(crate) fn erf(x: f32) -> f32 {
    erf_and_gauss(x).0
}

/// `(erf(x), e^(-x²))`: erf's own Gaussian factor, which GELU's slope reuses as `φ` instead of
/// computing a second `exp`.
#[inline(always)]
fn erf_and_gauss(x: f32) -> (f32, f32) {
    let s = x.signum();
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let poly = t
        * (0.254_829_6
            + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152_1 + t * 1.061_405_4))));
    // `exp_neg`, not libm's `exp`: no call per element, so GELU's loop vectorises.
    let gauss = exp_neg(-a * a);
    (s * (1.0 - poly * gauss), gauss)
}

/// GELU's slope `d/dx x Φ(x) = Φ(x) + x φ(x)`, with `Φ` from the forward's own `erf` and
/// `φ(x) = e^(-x²/2) / √(2π)` the Gaussian factor erf computed on the way (`e^(-z²)` at
/// `z = x / √2`), so one `exp` serves both terms and a loop of it vectorises. The CPU's
/// one-pass GELU backward.
#[inline(always)]
pub(crate) fn gelu_slope(x: f32) -> f32 {
    const INV_SQRT_2PI: f32 = 0.398_942_3;
    let (erf, gauss) = erf_and_gauss(x * std::f32::consts::FRAC_1_SQRT_2);
    let cdf = 0.5 * (1.0 + erf);
    cdf + x * (gauss * INV_SQRT_2PI)
}

/// `exp(x)` for `x <= 0` (softmax's `x - max`), within 2 ulp of `f32::exp` (Cephes `expf`:
/// `x = n ln2 + r`, a degree-6 polynomial in `r`, `2^n` built in the exponent bits). Below
/// -87 the result would be subnormal: 0 is returned (relative to a row sum >= 1 it is nothing).
/// Here, beside `erf`, because the op table's functions call it; the CPU kernels (softmax,
/// attention) use it through `cpu::fast_exp`.
#[inline(always)]
pub(crate) fn exp_neg(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // 1.5 * 2^23: adding it rounds to an integer held in the low mantissa bits.
    const MAGIC: f32 = 12_582_912.0;
    let xc = x.max(-87.0);
    let t = xc * LOG2E + MAGIC;
    let n = t - MAGIC;
    let r = xc - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 1.666_666_5e-1)
        * r
        + 0.5;
    let y = p * r * r + r + 1.0;
    // n in [-126, 0]: 2^n from its biased exponent; the integer is t's low bits.
    let e = (t.to_bits().wrapping_sub(MAGIC.to_bits()) as i32 + 127) as u32;
    let v = y * f32::from_bits(e << 23);
    if x < -87.0 {
        0.0
    } else {
        v
    }
}

/// WGSL's float `%`: `a - b * trunc(a / b)`, the formula the shaders evaluate (not the exact
/// `fmod`, which differs by rounding when the quotient is large). `x % 0` is NaN.
#[inline]
pub(crate) fn rem_f32(a: f32, b: f32) -> f32 {
    a - b * (a / b).trunc()
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

/// Integer element types with WGSL semantics: wrapping `+ - * neg`, and a divisor of 0 (or
/// `MIN / -1` for signed types) replaced by 1, so `x / 0 == x`, `MIN / -1 == MIN`, `x % 0 == 0`
/// and `MIN % -1 == 0` (what naga emits for every backend, and what the shaders spell out).
pub(crate) trait IntElem: Copy + Ord + Send + Sync + 'static {
    const ZERO: Self;
    const ONE: Self;
    const MIN: Self;
    const MAX: Self;
    fn wadd(self, b: Self) -> Self;
    fn wsub(self, b: Self) -> Self;
    fn wmul(self, b: Self) -> Self;
    fn wneg(self) -> Self;
    fn wabs(self) -> Self;
    /// The divisor WGSL actually divides by.
    fn guard(self, b: Self) -> Self;
    fn wdiv(self, b: Self) -> Self {
        self.div_exact(self.guard(b))
    }
    fn wrem(self, b: Self) -> Self {
        self.rem_exact(self.guard(b))
    }
    fn div_exact(self, b: Self) -> Self;
    fn rem_exact(self, b: Self) -> Self;
}

macro_rules! int_elem {
    ($t:ty, $neg:expr, $abs:expr, $bad:expr) => {
        impl IntElem for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            const MIN: Self = <$t>::MIN;
            const MAX: Self = <$t>::MAX;
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
            fn div_exact(self, b: Self) -> Self {
                self / b
            }
            #[inline]
            fn rem_exact(self, b: Self) -> Self {
                self % b
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
