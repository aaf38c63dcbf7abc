//! The elementwise op table: every unary and binary op is declared once, below, with its name,
//! dtype support, CPU function (float and integer), WGSL body (float and integer), gradient and
//! rustdoc. Everything else derives from the table:
//!
//! - the `UnaryOp` / `BinaryOp` enums with `name`, `float_only` and the visitor that gives the CPU
//!   kernels one monomorphised loop per op (`src/cpu/elementwise.rs`);
//! - the WGSL of each op, spliced into generated kernels by `src/gpu/codegen.rs` (one kernel per op
//!   chain and dtype; there is no hand-written switch keyed by numbers);
//! - the backward formula used by `src/autograd/elementwise.rs`;
//! - the public `Tensor` methods (`t.exp()`, `a.add(&b)`, `t.add_scalar(2.0)`), with their docs.
//!
//! The table has two halves because its users sit in two layers: the kernel half (enums, scalar
//! functions, WGSL) is expanded here, below the CPU and GPU backends that read it; the tensor
//! half (gradients and methods) is a macro each table defines (`unary_tensor_half!`,
//! `binary_tensor_half!`) that `src/tensor/elementwise.rs` expands, so this file imports nothing
//! above it while every op is still written once.
//!
//! Adding a unary op is one `unary_ops!` entry and its test. In the WGSL bodies the operands are
//! `x` (and `y`); integer bodies are written once for i32 and u32, naming the type through the
//! closure's `t`.
//! Float bodies of unary ops run after a NaN check (`NaN -> NaN`), as every unary op here
//! propagates NaN.

/// An op table's enum with its `ALL` list and `name()` (the tensor method), and, given a third
/// name per op, one more accessor (`scalar_name`, `all_name`) for the op's other method. Every
/// table below and in `compare.rs` / `reduce.rs` declares its enum through this.
macro_rules! op_enum {
    ($(#[$doc:meta])* $Enum:ident { $($V:ident $method:ident),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub(crate) enum $Enum { $($V,)* }

        impl $Enum {
            /// Every op of the table, for the test sweeps.
            #[allow(dead_code)]
            pub(crate) const ALL: &'static [$Enum] = &[$($Enum::$V,)*];

            /// The tensor method's name (`"add"`), as errors report it.
            pub(crate) fn name(self) -> &'static str {
                match self { $($Enum::$V => stringify!($method),)* }
            }
        }
    };
    (
        $(#[$doc:meta])* $Enum:ident { $($V:ident $method:ident $other:ident),* $(,)? }
        $(#[$odoc:meta])* $accessor:ident
    ) => {
        op_enum!($(#[$doc])* $Enum { $($V $method),* });

        impl $Enum {
            $(#[$odoc])*
            #[allow(dead_code)]
            pub(crate) fn $accessor(self) -> &'static str {
                match self { $($Enum::$V => stringify!($other),)* }
            }
        }
    };
}

pub(crate) mod backend;
mod compare;
pub(crate) mod geometry;
mod host;
pub(crate) mod program;
mod reduce;
mod rows;
pub(crate) mod testing;
pub(crate) use compare::{compare_tensor_half, CmpOp};
pub(crate) use host::*;
pub(crate) use reduce::{reduce_cpu_half, reduce_tensor_half, Empty, ReduceOp};
pub(crate) use rows::{row_method, row_tensor_half, row_test_half, RowFamily, RowOp};

/// The scalar functions of one unary op, as types so that CPU loops monomorphise per op.
pub(crate) trait UnaryFn {
    fn f32(x: f32) -> f32;
    fn int<T: IntElem>(x: T) -> T;
}

/// The scalar functions of one binary op.
pub(crate) trait BinaryFn {
    fn f32(a: f32, b: f32) -> f32;
    fn int<T: IntElem>(a: T, b: T) -> T;
}

/// Runs generic code for the op a runtime `UnaryOp` names (see [`UnaryOp::visit`]).
pub(crate) trait UnaryVisitor {
    type Out;
    fn visit<F: UnaryFn>(self, op: UnaryOp) -> Self::Out;
}

/// Runs generic code for the op a runtime `BinaryOp` names.
pub(crate) trait BinaryVisitor {
    type Out;
    fn visit<F: BinaryFn>(self, op: BinaryOp) -> Self::Out;
}

/// Declares the unary ops. Entry: docs, `Variant method { cpu, wgsl, [int, wgsl_int,] grad }`;
/// ops without `int` are float-only (integer tensors get `UnsupportedDType`).
macro_rules! unary_ops {
    ($(
        $(#[$doc:meta])*
        $V:ident $method:ident {
            cpu: |$x:ident| $cpu:expr,
            wgsl: $wgsl:literal,
            $(int: |$ix:ident| $int:expr, wgsl_int: |$wt:ident| $wgsl_int:expr,)?
            grad: |$gx:ident, $gy:ident, $gg:ident| $grad:expr $(,)?
        }
    )*) => {
        op_enum! {
            /// One-input elementwise ops (declared in `src/ops/mod.rs`).
            UnaryOp { $($V $method),* }
        }

        #[allow(non_snake_case)]
        mod unary_fns {
            #[allow(unused_imports)]
            use super::*;
            $(
                pub(crate) struct $V;
                impl super::UnaryFn for $V {
                    #[inline(always)]
                    fn f32($x: f32) -> f32 { $cpu }
                    #[inline(always)]
                    #[allow(unreachable_code, unused_variables)]
                    fn int<T: IntElem>(x: T) -> T {
                        $(let $ix = x; return $int;)?
                        x
                    }
                }
            )*
        }

        impl UnaryOp {
            /// Defined only for floats (integer tensors get `UnsupportedDType`).
            pub(crate) fn float_only(self) -> bool {
                match self { $(UnaryOp::$V => true $(&& { let _ = stringify!($wgsl_int); false })?,)* }
            }

            /// The WGSL body of `fn(x: f32) -> f32`.
            pub(crate) fn wgsl(self) -> &'static str {
                match self { $(UnaryOp::$V => $wgsl,)* }
            }

            /// The WGSL body of `fn(x: t) -> t` for `t` = `"i32"` or `"u32"`, if the op takes
            /// integers: written from the entry's `wgsl_int`, which names the type through `t`.
            #[allow(unused_variables)]
            pub(crate) fn wgsl_int(self, t: &str) -> Option<String> {
                match self { $(UnaryOp::$V => None $(.or_else(|| { let $wt = t; Some($wgsl_int) }))?,)* }
            }

            /// `f::<the op's functions>()`: one monomorphised instance per op.
            pub(crate) fn visit<V: UnaryVisitor>(self, v: V) -> V::Out {
                match self { $(UnaryOp::$V => v.visit::<unary_fns::$V>(self),)* }
            }

            /// `op(x)` on one f32 (the CPU reference for tests and host-side code).
            #[allow(dead_code)]
            pub(crate) fn apply(self, x: f32) -> f32 {
                match self { $(UnaryOp::$V => <unary_fns::$V as UnaryFn>::f32(x),)* }
            }

        }

        /// The tensor half of the unary table: each op's gradient and its public `Tensor`
        /// method. Expanded by `src/tensor/elementwise.rs`, in the tensor layer, where
        /// `Tensor`, `Result` and the gradient helpers are in scope: this file sits below the
        /// backends (which read the kernel half above) and names no tensor type itself.
        macro_rules! unary_tensor_half { () => {
        impl UnaryOp {
            /// The gradient of `y = op(x)` given the output gradient `g`.
            #[allow(unused_variables)]
            pub(crate) fn grad(self, x: &Tensor, y: &Tensor, g: &Tensor) -> Result<Tensor> {
                match self { $(UnaryOp::$V => { let ($gx, $gy, $gg) = (x, y, g); $grad })* }
            }
        }

        impl Tensor {
            $(
                $(#[$doc])*
                pub fn $method(&self) -> Result<Tensor> {
                    self.unary(UnaryOp::$V)
                }
            )*
        }
        } }
        pub(crate) use unary_tensor_half;
    };
}

/// Declares the binary ops, each with its tensor-scalar form. Entry: docs,
/// `Variant method { scalar: docs scalar_method, cpu, wgsl, [int, wgsl_int,] grad_a, grad_b,
/// grad_scalar }`. `grad_scalar` gets `first`: the scalar is the left operand (`2.0 - &t`).
macro_rules! binary_ops {
    ($(
        $(#[$doc:meta])*
        $V:ident $method:ident {
            scalar: $(#[$sdoc:meta])* $smethod:ident,
            cpu: |$a:ident, $b:ident| $cpu:expr,
            wgsl: $wgsl:literal,
            $(int: |$ia:ident, $ib:ident| $int:expr, wgsl_int: |$wt:ident| $wgsl_int:expr,)?
            grad_a: |$ga:ident, $gb:ident, $go:ident, $gg:ident| $grad_a:expr,
            grad_b: |$ha:ident, $hb:ident, $ho:ident, $hg:ident| $grad_b:expr,
            grad_scalar: |$sx:ident, $ss:ident, $sfirst:ident, $so:ident, $sg:ident| $grad_s:expr $(,)?
        }
    )*) => {
        op_enum! {
            /// Two-input elementwise ops (declared in `src/ops/mod.rs`), also used with a scalar
            /// side.
            BinaryOp { $($V $method $smethod),* }
            /// Name of the tensor-with-scalar form, for error messages.
            scalar_name
        }

        #[allow(non_snake_case)]
        mod binary_fns {
            #[allow(unused_imports)]
            use super::*;
            $(
                pub(crate) struct $V;
                impl super::BinaryFn for $V {
                    #[inline(always)]
                    fn f32($a: f32, $b: f32) -> f32 { $cpu }
                    #[inline(always)]
                    #[allow(unreachable_code, unused_variables)]
                    fn int<T: IntElem>(a: T, b: T) -> T {
                        $(let ($ia, $ib) = (a, b); return $int;)?
                        a
                    }
                }
            )*
        }

        impl BinaryOp {
            pub(crate) fn float_only(self) -> bool {
                match self { $(BinaryOp::$V => true $(&& { let _ = stringify!($wgsl_int); false })?,)* }
            }

            /// The WGSL body of `fn(x: f32, y: f32) -> f32`.
            pub(crate) fn wgsl(self) -> &'static str {
                match self { $(BinaryOp::$V => $wgsl,)* }
            }

            /// The WGSL body of `fn(x: t, y: t) -> t` for `t` = `"i32"` or `"u32"`, if the op
            /// takes integers (see [`UnaryOp::wgsl_int`]).
            #[allow(unused_variables)]
            pub(crate) fn wgsl_int(self, t: &str) -> Option<String> {
                match self { $(BinaryOp::$V => None $(.or_else(|| { let $wt = t; Some($wgsl_int) }))?,)* }
            }

            pub(crate) fn visit<V: BinaryVisitor>(self, v: V) -> V::Out {
                match self { $(BinaryOp::$V => v.visit::<binary_fns::$V>(self),)* }
            }

            /// `op(a, b)` on f32 (the CPU reference for tests and host-side code).
            #[allow(dead_code)]
            pub(crate) fn apply(self, a: f32, b: f32) -> f32 {
                match self { $(BinaryOp::$V => <binary_fns::$V as BinaryFn>::f32(a, b),)* }
            }

        }

        /// The tensor half of the binary table (gradients and public `Tensor` methods),
        /// expanded by `src/tensor/elementwise.rs` as `unary_tensor_half` is.
        macro_rules! binary_tensor_half { () => {
        impl BinaryOp {
            /// Gradient of `o = op(a, b)` for `a`, before summing over broadcast dims.
            #[allow(unused_variables)]
            pub(crate) fn grad_a(self, a: &Tensor, b: &Tensor, o: &Tensor, g: &Tensor) -> Result<Tensor> {
                match self { $(BinaryOp::$V => { let ($ga, $gb, $go, $gg) = (a, b, o, g); $grad_a })* }
            }

            /// Gradient of `o = op(a, b)` for `b`, before summing over broadcast dims.
            #[allow(unused_variables)]
            pub(crate) fn grad_b(self, a: &Tensor, b: &Tensor, o: &Tensor, g: &Tensor) -> Result<Tensor> {
                match self { $(BinaryOp::$V => { let ($ha, $hb, $ho, $hg) = (a, b, o, g); $grad_b })* }
            }

            /// Gradient of `o = op(x, s)` (or `op(s, x)` when `first`) for `x`.
            #[allow(unused_variables)]
            pub(crate) fn grad_scalar(self, x: &Tensor, s: f32, first: bool, o: &Tensor, g: &Tensor) -> Result<Tensor> {
                match self { $(BinaryOp::$V => { let ($sx, $ss, $sfirst, $so, $sg) = (x, s, first, o, g); $grad_s })* }
            }
        }

        impl Tensor {
            $(
                $(#[$doc])*
                ///
                /// # Errors
                /// [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) when the shapes do not
                /// broadcast, [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) /
                /// [`Error::DTypeMismatch`](crate::Error::DTypeMismatch) when the operands differ
                /// (no implicit promotion: convert with [`Tensor::to_dtype`]);
                /// [`Error::UnsupportedDType`](crate::Error::UnsupportedDType) for u8, and for
                /// float-only ops on integers. Integer ops follow WGSL (see [`crate::DType`]);
                /// f16 computes in f32 and rounds once.
                pub fn $method(&self, rhs: &Tensor) -> Result<Tensor> {
                    self.binary(rhs, BinaryOp::$V)
                }

                $(#[$sdoc])*
                pub fn $smethod(&self, s: f32) -> Result<Tensor> {
                    self.scalar(BinaryOp::$V, s, false)
                }
            )*
        }
        } }
        pub(crate) use binary_tensor_half;
    };
}

unary_ops! {
    /// `-self`.
    ///
    /// ```
    /// let t = wgtensor::Tensor::ones(&[1], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.neg()?.to_vec::<f32>()?, vec![-1.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Neg neg {
        cpu: |x| -x,
        wgsl: "return -x;",
        int: |x| x.wneg(), wgsl_int: |t| format!("return {t}(0) - x;"),
        grad: |x, y, g| g.neg(),
    }
    /// `|self|`.
    ///
    /// ```
    /// let t = wgtensor::Tensor::full(&[1], -2.0, wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.abs()?.to_vec::<f32>()?, vec![2.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Abs abs {
        cpu: |x| x.abs(),
        wgsl: "return abs(x);",
        int: |x| x.wabs(), wgsl_int: |t| format!("return select(x, {t}(0) - x, x < {t}(0));"),
        // sign(x) * g; 0 at x == 0 (PyTorch's subgradient).
        grad: |x, y, g| x.gt_scalar(0.0)?.where_cond(g, &masked(&x.lt_scalar(0.0)?, &g.neg()?)?),
    }
    /// `e^self`.
    ///
    /// ```
    /// let t = wgtensor::Tensor::zeros(&[1], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.exp()?.to_vec::<f32>()?, vec![1.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Exp exp {
        cpu: |x| x.exp(),
        wgsl: "return exp(x);",
        grad: |x, y, g| g.mul(y),
    }
    /// Natural logarithm (NaN for negative inputs, -inf at 0).
    ///
    /// ```
    /// let t = wgtensor::Tensor::ones(&[1], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.log()?.to_vec::<f32>()?, vec![0.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Log log {
        cpu: |x| x.ln(),
        wgsl: "if (x < 0.0) { return nan_f32(); } return log(x);",
        grad: |x, y, g| g.div(x),
    }
    /// Square root (NaN for negative inputs).
    ///
    /// ```
    /// let t = wgtensor::Tensor::full(&[1], 9.0, wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.sqrt()?.to_vec::<f32>()?, vec![3.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Sqrt sqrt {
        cpu: |x| x.sqrt(),
        wgsl: "if (x < 0.0) { return nan_f32(); } return sqrt(x);",
        grad: |x, y, g| g.div(y)?.mul_scalar(0.5),
    }
    /// `max(self, 0)`; NaN stays NaN as in PyTorch.
    ///
    /// ```
    /// let t = wgtensor::Tensor::arange(-1.0, 2.0, 1.0, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.relu()?.to_vec::<f32>()?, vec![0.0, 0.0, 1.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Relu relu {
        // PyTorch propagates NaN through relu; `x.max(0.0)` would swallow it.
        cpu: |x| if x > 0.0 || x.is_nan() { x } else { 0.0 },
        wgsl: "return select(0.0, x, x > 0.0);",
        int: |x| x.max(T::ZERO), wgsl_int: |t| format!("return max(x, {t}(0));"),
        grad: |x, y, g| masked(&x.gt_scalar(0.0)?, g),
    }
    /// `1 / (1 + e^-self)`.
    ///
    /// ```
    /// let t = wgtensor::Tensor::zeros(&[1], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.sigmoid()?.to_vec::<f32>()?, vec![0.5]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Sigmoid sigmoid {
        cpu: |x| 1.0 / (1.0 + (-x).exp()),
        wgsl: "return 1.0 / (1.0 + exp(-x));",
        grad: |x, y, g| g.mul(&y.mul(&y.neg()?.add_scalar(1.0)?)?),
    }
    /// Hyperbolic tangent.
    ///
    /// ```
    /// let t = wgtensor::Tensor::zeros(&[1], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.tanh()?.to_vec::<f32>()?, vec![0.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Tanh tanh {
        cpu: |x| x.tanh(),
        // Some drivers evaluate tanh as (e^2x - 1) / (e^2x + 1): inf / inf = NaN for large x.
        wgsl: "return tanh(clamp(x, -15.0, 15.0));",
        grad: |x, y, g| g.mul(&y.mul(y)?.neg()?.add_scalar(1.0)?),
    }
    /// Exact GELU, `x * Φ(x)` (PyTorch's default `approximate='none'`), with erf to within 1.5e-7.
    ///
    /// ```
    /// let t = wgtensor::Tensor::zeros(&[1], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.gelu()?.to_vec::<f32>()?, vec![0.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Gelu gelu {
        // The limit at -inf is 0; the formula alone would give -inf * 0 = NaN.
        cpu: |x| if x == f32::NEG_INFINITY { 0.0 } else {
            0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
        },
        wgsl: "if (bitcast<u32>(x) == 0xff800000u) { return 0.0; }
               return 0.5 * x * (1.0 + erf_approx(x * 0.70710678118654752));",
        grad: |x, y, g| gelu_backward(x, y, g),
    }
    /// `ln(1 + e^self)`, PyTorch's `softplus` (beta 1, threshold 20: `x` itself above 20).
    ///
    /// ```
    /// let t = wgtensor::Tensor::from_vec(vec![0f32, 30.0], &[2], &wgtensor::Device::cpu())?;
    /// let y = t.softplus()?.to_vec::<f32>()?;
    /// assert!((y[0] - std::f32::consts::LN_2).abs() < 1e-7 && y[1] == 30.0);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Softplus softplus {
        cpu: |x| if x > 20.0 { x } else { x.exp().ln_1p() },
        // log1p(e) as log(u) * e / (u - 1) (Goldberg): accurate where 1 + e rounds.
        wgsl: "if (x > 20.0) { return x; }
               let e = exp(x);
               let u = 1.0 + e;
               if (u == 1.0) { return e; }
               return log(u) * e / (u - 1.0);",
        grad: |x, y, g| g.mul(&x.sigmoid()?),
    }
    /// `x * sigmoid(x)`, PyTorch's `silu` (SiLU / swish), the activation of Llama-style MLPs.
    ///
    /// ```
    /// let t = wgtensor::Tensor::from_vec(vec![0f32, 1.0], &[2], &wgtensor::Device::cpu())?;
    /// let y = t.silu()?.to_vec::<f32>()?;
    /// assert!(y[0] == 0.0 && (y[1] - 0.7310586).abs() < 1e-6);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Silu silu {
        // x / (1 + e^-x) rather than x * sigmoid: -inf gives -inf / inf = NaN either way, so
        // the limit 0 is explicit (as PyTorch returns).
        cpu: |x| if x == f32::NEG_INFINITY { 0.0 } else { x / (1.0 + (-x).exp()) },
        wgsl: "if (bitcast<u32>(x) == 0xff800000u) { return 0.0; }
               return x / (1.0 + exp(-x));",
        grad: |x, y, g| {
            // d/dx x*s(x) = s(x) * (1 + x * (1 - s(x)))
            let s = x.sigmoid()?;
            g.mul(&s.mul(&x.mul(&s.neg()?.add_scalar(1.0)?)?.add_scalar(1.0)?)?)
        },
    }
    /// Sine.
    ///
    /// ```
    /// let t = wgtensor::Tensor::zeros(&[1], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.sin()?.to_vec::<f32>()?, vec![0.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Sin sin {
        cpu: |x| x.sin(),
        wgsl: "return sin(x);",
        grad: |x, y, g| g.mul(&x.cos()?),
    }
    /// Cosine.
    ///
    /// ```
    /// let t = wgtensor::Tensor::zeros(&[1], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.cos()?.to_vec::<f32>()?, vec![1.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Cos cos {
        cpu: |x| x.cos(),
        wgsl: "return cos(x);",
        grad: |x, y, g| g.mul(&x.sin()?)?.neg(),
    }
}

binary_ops! {
    /// `self + rhs` with broadcasting.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let d = Device::cpu();
    /// let a = Tensor::from_vec(vec![1f32, 2.0, 3.0], &[3, 1], &d)?;
    /// let b = Tensor::from_vec(vec![10f32, 20.0], &[1, 2], &d)?;
    /// assert_eq!(a.add(&b)?.to_vec::<f32>()?, vec![11.0, 21.0, 12.0, 22.0, 13.0, 23.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Add add {
        scalar:
        /// `self + s`.
        ///
        /// ```
        /// let t = wgtensor::Tensor::ones(&[2], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
        /// assert_eq!(t.add_scalar(2.0)?.to_vec::<f32>()?, vec![3.0, 3.0]);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        add_scalar,
        cpu: |a, b| a + b,
        wgsl: "return x + y;",
        int: |a, b| a.wadd(b), wgsl_int: |t| "return x + y;".into(),
        grad_a: |a, b, o, g| Ok(g.clone()),
        grad_b: |a, b, o, g| Ok(g.clone()),
        grad_scalar: |x, s, first, o, g| Ok(g.clone()),
    }
    /// `self - rhs` with broadcasting.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let a = Tensor::from_vec(vec![5f32, 7.0], &[2], &Device::cpu())?;
    /// assert_eq!(a.sub(&a)?.to_vec::<f32>()?, vec![0.0, 0.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Sub sub {
        scalar:
        /// `self - s`.
        ///
        /// ```
        /// let t = wgtensor::Tensor::ones(&[2], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
        /// assert_eq!(t.sub_scalar(2.0)?.to_vec::<f32>()?, vec![-1.0, -1.0]);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        sub_scalar,
        cpu: |a, b| a - b,
        wgsl: "return x - y;",
        int: |a, b| a.wsub(b), wgsl_int: |t| "return x - y;".into(),
        grad_a: |a, b, o, g| Ok(g.clone()),
        grad_b: |a, b, o, g| g.neg(),
        grad_scalar: |x, s, first, o, g| if first { g.neg() } else { Ok(g.clone()) },
    }
    /// `self * rhs` with broadcasting.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let a = Tensor::from_vec(vec![2f32, 3.0], &[2], &Device::cpu())?;
    /// assert_eq!(a.mul(&a)?.to_vec::<f32>()?, vec![4.0, 9.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Mul mul {
        scalar:
        /// `self * s`.
        ///
        /// ```
        /// let t = wgtensor::Tensor::ones(&[2], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
        /// assert_eq!(t.mul_scalar(3.0)?.to_vec::<f32>()?, vec![3.0, 3.0]);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        mul_scalar,
        cpu: |a, b| a * b,
        wgsl: "return x * y;",
        int: |a, b| a.wmul(b), wgsl_int: |t| "return x * y;".into(),
        grad_a: |a, b, o, g| g.mul(b),
        grad_b: |a, b, o, g| g.mul(a),
        grad_scalar: |x, s, first, o, g| g.mul_scalar(s),
    }
    /// `self / rhs` with broadcasting (IEEE: `x / 0` is ±inf or NaN).
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let a = Tensor::from_vec(vec![1f32, 3.0], &[2], &Device::cpu())?;
    /// let b = Tensor::from_vec(vec![2f32], &[1], &Device::cpu())?;
    /// assert_eq!(a.div(&b)?.to_vec::<f32>()?, vec![0.5, 1.5]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Div div {
        scalar:
        /// `self / s`.
        ///
        /// ```
        /// let t = wgtensor::Tensor::ones(&[2], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
        /// assert_eq!(t.div_scalar(4.0)?.to_vec::<f32>()?, vec![0.25, 0.25]);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        div_scalar,
        cpu: |a, b| a / b,
        wgsl: "return x / y;",
        int: |a, b| a.wdiv(b), wgsl_int: |t| format!("return x / guard_{t}(x, y);"),
        grad_a: |a, b, o, g| g.div(b),
        // d/db a/b = -a/b^2 = -o/b
        grad_b: |a, b, o, g| g.mul(o)?.div(b)?.neg(),
        // d/dx s/x = -s/x^2 = -o/x
        grad_scalar: |x, s, first, o, g| if first { g.mul(o)?.div(x)?.neg() } else { g.div_scalar(s) },
    }
    /// Elementwise maximum; NaN in either operand gives NaN (PyTorch's `torch.maximum`).
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let a = Tensor::from_vec(vec![1f32, 5.0], &[2], &Device::cpu())?;
    /// let b = Tensor::from_vec(vec![3f32, 2.0], &[2], &Device::cpu())?;
    /// assert_eq!(a.maximum(&b)?.to_vec::<f32>()?, vec![3.0, 5.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Maximum maximum {
        scalar:
        /// `max(self, s)`; NaN propagates.
        ///
        /// ```
        /// let t = wgtensor::Tensor::arange(0.0, 3.0, 1.0, &wgtensor::Device::cpu())?;
        /// assert_eq!(t.maximum_scalar(1.0)?.to_vec::<f32>()?, vec![1.0, 1.0, 2.0]);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        maximum_scalar,
        cpu: |a, b| maximum(a, b),
        wgsl: "if (is_nan(x) || is_nan(y)) { return nan_f32(); } return select(y, x, x > y);",
        int: |a, b| a.max(b), wgsl_int: |t| "return max(x, y);".into(),
        grad_a: |a, b, o, g| winner_grad(g, a, Err(b), true),
        grad_b: |a, b, o, g| winner_grad(g, b, Err(a), true),
        grad_scalar: |x, s, first, o, g| winner_grad(g, x, Ok(s), true),
    }
    /// Elementwise minimum; NaN in either operand gives NaN.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let a = Tensor::from_vec(vec![1f32, 5.0], &[2], &Device::cpu())?;
    /// let b = Tensor::from_vec(vec![3f32, 2.0], &[2], &Device::cpu())?;
    /// assert_eq!(a.minimum(&b)?.to_vec::<f32>()?, vec![1.0, 2.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Minimum minimum {
        scalar:
        /// `min(self, s)`; NaN propagates.
        ///
        /// ```
        /// let t = wgtensor::Tensor::arange(0.0, 3.0, 1.0, &wgtensor::Device::cpu())?;
        /// assert_eq!(t.minimum_scalar(1.0)?.to_vec::<f32>()?, vec![0.0, 1.0, 1.0]);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        minimum_scalar,
        cpu: |a, b| minimum(a, b),
        wgsl: "if (is_nan(x) || is_nan(y)) { return nan_f32(); } return select(y, x, x < y);",
        int: |a, b| a.min(b), wgsl_int: |t| "return min(x, y);".into(),
        grad_a: |a, b, o, g| winner_grad(g, a, Err(b), false),
        grad_b: |a, b, o, g| winner_grad(g, b, Err(a), false),
        grad_scalar: |x, s, first, o, g| winner_grad(g, x, Ok(s), false),
    }
    /// `self ** rhs` with C `powf` semantics (negative base with a non-integer exponent is NaN).
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let a = Tensor::from_vec(vec![2f32, -3.0], &[2], &Device::cpu())?;
    /// let b = Tensor::from_vec(vec![3f32, 2.0], &[2], &Device::cpu())?;
    /// assert_eq!(a.pow(&b)?.to_vec::<f32>()?, vec![8.0, 9.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Pow pow {
        scalar:
        /// `self ** s`.
        ///
        /// ```
        /// let t = wgtensor::Tensor::full(&[2], 3.0, wgtensor::DType::F32, &wgtensor::Device::cpu())?;
        /// assert_eq!(t.pow_scalar(2.0)?.to_vec::<f32>()?, vec![9.0, 9.0]);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        pow_scalar,
        cpu: |a, b| a.powf(b),
        wgsl: "return pow_c(x, y);",
        // d/da a^b = b * a^(b-1)
        grad_a: |a, b, o, g| g.mul(&b.mul(&a.pow(&b.sub_scalar(1.0)?)?)?),
        // d/db a^b = a^b ln a; 0 where a == 0 (PyTorch's convention for 0^b).
        grad_b: |a, b, o, g| masked(&a.ne_scalar(0.0)?, &g.mul(o)?.mul(&a.log()?)?),
        // d/dx x^s = s x^(s-1); d/dx s^x = s^x ln s
        grad_scalar: |x, s, first, o, g| if first {
            g.mul(o)?.mul_scalar(s.ln())
        } else {
            g.mul(&x.pow_scalar(s - 1.0)?.mul_scalar(s)?)
        },
    }
    /// Truncated remainder `self % rhs` with broadcasting: WGSL's `%` (C's `fmod`,
    /// PyTorch's `torch.fmod`, not `torch.remainder`), so the result has the sign of `self`.
    /// Integers follow WGSL: `x % 0 == 0` and `i32::MIN % -1 == 0`. Floats compute
    /// `a - b * trunc(a / b)` on every device (`x % 0` is NaN).
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let a = Tensor::from_vec(vec![7i32, -7, 7, 5], &[4], &Device::cpu())?;
    /// let b = Tensor::from_vec(vec![3i32, 3, -3, 0], &[4], &Device::cpu())?;
    /// assert_eq!(a.rem(&b)?.to_vec::<i32>()?, vec![1, -1, 1, 0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Rem rem {
        scalar:
        /// `self % s`, truncated as [`Tensor::rem`].
        ///
        /// ```
        /// let t = wgtensor::Tensor::from_vec(vec![-7i32, 8], &[2], &wgtensor::Device::cpu())?;
        /// assert_eq!(t.rem_scalar(3.0)?.to_vec::<i32>()?, vec![-1, 2]);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        rem_scalar,
        cpu: |a, b| rem_f32(a, b),
        wgsl: "return x - y * trunc(x / y);",
        int: |a, b| a.wrem(b), wgsl_int: |t| format!("return rem_{t}(x, y);"),
        grad_a: |a, b, o, g| Ok(g.clone()),
        // fmod(a, b) = a - b * trunc(a / b): d/db = -trunc(a / b) = -(a - o) / b.
        grad_b: |a, b, o, g| g.mul(&a.sub(o)?.div(b)?)?.neg(),
        // d/dx fmod(s, x) = -trunc(s / x) = -(s - o) / x
        grad_scalar: |x, s, first, o, g| if first {
            g.mul(&o.neg()?.add_scalar(s)?.div(x)?)?.neg()
        } else {
            Ok(g.clone())
        },
    }
}
