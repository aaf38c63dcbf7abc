//! The comparison table: every comparison is declared once, below, with its name, its scalar
//! form, the orderings it holds for (the CPU loop), its WGSL operator and its rustdoc. The rest
//! derives from the entry:
//!
//! - the `CmpOp` enum with `name`, `scalar_name` and `holds`, which the dtype-generic CPU loops
//!   of `src/cpu/typed.rs` call per element;
//! - the WGSL expression spliced into generated kernels by `src/gpu/codegen.rs`, with the NaN
//!   result taken from `holds(None)` (so CPU and GPU agree on unordered operands by
//!   construction);
//! - the public `Tensor` methods (`a.lt(&b)`, `t.lt_scalar(1.0)`), expanded by
//!   `src/tensor/compare.rs` from the table's `compare_tensor_half!`;
//! - the test sweeps (`wgtensor::testing::compare_ops()`).
//!
//! Adding a comparison is one `compare_ops!` entry.

use std::cmp::Ordering::{self, Equal, Greater, Less};

/// Declares the comparisons. Entry: docs, `Variant method scalar_method { holds, wgsl }`;
/// `holds` gets the ordering of the operands (`None`: unordered, a NaN operand).
macro_rules! compare_ops {
    ($(
        $(#[$doc:meta])*
        $V:ident $method:ident $smethod:ident {
            holds: |$o:ident| $holds:expr,
            wgsl: $wgsl:literal $(,)?
        }
    )*) => {
        op_enum! {
            /// Elementwise comparisons into U8 masks (declared in `src/ops/compare.rs`).
            CmpOp { $($V $method $smethod),* }
            /// Name of the tensor-with-scalar form, for error messages.
            scalar_name
        }

        impl CmpOp {
            /// Whether the comparison holds for an ordering (`None`: unordered, NaN).
            #[inline(always)]
            pub(crate) fn holds(self, o: Option<Ordering>) -> bool {
                match self { $(CmpOp::$V => { let $o = o; $holds })* }
            }

            /// The WGSL operator (`a OP b` on two values of one compute type).
            pub(crate) fn wgsl(self) -> &'static str {
                match self { $(CmpOp::$V => $wgsl,)* }
            }
        }

        /// The tensor half of the comparison table (the public `Tensor` methods), expanded by
        /// `src/tensor/compare.rs` in the tensor layer: this file sits below the backends, which
        /// read the kernel half above (see `src/ops/mod.rs`).
        macro_rules! compare_tensor_half { () => {
        impl Tensor {
            $(
                $(#[$doc])*
                ///
                /// The result is a [`DType::U8`](crate::DType::U8) mask (1 true, 0 false) of the
                /// broadcast shape. IEEE rules: comparisons with NaN are false, except `ne`,
                /// which is true.
                ///
                /// # Errors
                /// [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) when the shapes do not
                /// broadcast; [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) /
                /// [`Error::DTypeMismatch`](crate::Error::DTypeMismatch) when the operands
                /// differ. Every dtype compares (f16 exactly as its f32 value); a scalar on an
                /// integer tensor must be an integer in range, else
                /// [`Error::InvalidArgument`](crate::Error::InvalidArgument).
                pub fn $method(&self, rhs: &Tensor) -> Result<Tensor> {
                    self.compare_op(rhs, CmpOp::$V)
                }

                #[doc = concat!("[`Tensor::", stringify!($method), "`] against one scalar.")]
                ///
                /// ```
                /// use wgtensor::{DType, Device, Tensor};
                /// let t = Tensor::arange(0.0, 3.0, 1.0, &Device::cpu())?;
                #[doc = concat!("let m = t.", stringify!($smethod), "(1.0)?;")]
                /// assert_eq!((m.dtype(), m.shape()), (DType::U8, &[3][..]));
                /// # Ok::<(), wgtensor::Error>(())
                /// ```
                pub fn $smethod(&self, rhs: f32) -> Result<Tensor> {
                    self.compare_scalar_op(rhs, CmpOp::$V)
                }
            )*
        }
        } }
        pub(crate) use compare_tensor_half;
    };
}

compare_ops! {
    /// `self == rhs` elementwise, with broadcasting.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let a = Tensor::from_vec(vec![1f32, 2.0, f32::NAN], &[3], &Device::cpu())?;
    /// let b = Tensor::from_vec(vec![1f32, 5.0, f32::NAN], &[3], &Device::cpu())?;
    /// assert_eq!(a.eq(&b)?.to_vec::<u8>()?, vec![1, 0, 0]);
    /// assert_eq!(a.eq_scalar(2.0)?.to_vec::<u8>()?, vec![0, 1, 0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Eq eq eq_scalar { holds: |o| o == Some(Equal), wgsl: "==" }
    /// `self != rhs` elementwise, with broadcasting.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let a = Tensor::from_vec(vec![1f32, f32::NAN], &[2], &Device::cpu())?;
    /// assert_eq!(a.ne(&a)?.to_vec::<u8>()?, vec![0, 1]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Ne ne ne_scalar { holds: |o| o != Some(Equal), wgsl: "!=" }
    /// `self < rhs` elementwise, with broadcasting.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let a = Tensor::from_vec(vec![1f32, 2.0, 3.0], &[3, 1], &Device::cpu())?;
    /// let b = Tensor::from_vec(vec![2f32, 3.0], &[1, 2], &Device::cpu())?;
    /// assert_eq!(a.lt(&b)?.to_vec::<u8>()?, vec![1, 1, 0, 1, 0, 0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Lt lt lt_scalar { holds: |o| o == Some(Less), wgsl: "<" }
    /// `self <= rhs` elementwise, with broadcasting.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let a = Tensor::from_vec(vec![1f32, 2.0, 3.0], &[3], &Device::cpu())?;
    /// assert_eq!(a.le_scalar(2.0)?.to_vec::<u8>()?, vec![1, 1, 0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Le le le_scalar { holds: |o| matches!(o, Some(Less | Equal)), wgsl: "<=" }
    /// `self > rhs` elementwise, with broadcasting.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let a = Tensor::from_vec(vec![1f32, 2.0, 3.0], &[3], &Device::cpu())?;
    /// assert_eq!(a.gt_scalar(2.0)?.to_vec::<u8>()?, vec![0, 0, 1]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Gt gt gt_scalar { holds: |o| o == Some(Greater), wgsl: ">" }
    /// `self >= rhs` elementwise, with broadcasting.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let a = Tensor::from_vec(vec![1f32, 2.0, 3.0], &[3], &Device::cpu())?;
    /// let b = Tensor::from_vec(vec![2f32], &[1], &Device::cpu())?;
    /// assert_eq!(a.ge(&b)?.to_vec::<u8>()?, vec![0, 1, 1]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    Ge ge ge_scalar { holds: |o| matches!(o, Some(Greater | Equal)), wgsl: ">=" }
}

impl CmpOp {
    /// `op(a, b)` on f32 (the CPU reference for the test sweeps).
    #[allow(dead_code)]
    pub(crate) fn apply(self, a: f32, b: f32) -> bool {
        self.holds(a.partial_cmp(&b))
    }
}
