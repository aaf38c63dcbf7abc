//! The reduction table: every reduction is declared once, below, with its two methods and
//! their rustdoc (`sum_all()`, `sum(dim, keepdim)`), its op code in `shaders/reduce.wgsl` (and
//! `reduce_subgroup.wgsl`), whether it returns indices, whether integers reduce, its value over
//! no elements and its gradient. The rest derives from the entry:
//!
//! - the `ReduceOp` enum with `name`, `is_arg`, `code`, `ints` and `partials`, which the GPU
//!   passes (`src/gpu/reduce.rs`) read;
//! - the CPU folds: `f32: [identity, combine, map, finish]` is expanded by `src/cpu/reduce.rs`
//!   into its pairwise and tiled loops (the table's `reduce_cpu_half!`, so every op's loop is
//!   monomorphised and inlined as if written out), and `int: [identity, combine]` (names of
//!   `IntElem`) into the wrapping integer loop; arg reductions have neither (they return
//!   indices, by `cpu::reduce::arg_reduce`);
//! - the public `Tensor` methods with their docs, and the autograd node they record (the
//!   table's `reduce_tensor_half!`, expanded by `src/tensor/reduce.rs`);
//! - the WGSL op codes: `shaders/reduce.wgsl` names each code as `const OP_<NAME>: u32`, and
//!   `tests/shaders.rs` checks those constants against this table;
//! - the test sweeps (`wgtensor::testing::reduce_ops()`).
//!
//! Adding a reduction is one `reduce_ops!` entry (with its CPU fold) and its cases in
//! `shaders/reduce.wgsl` (`identity`, `combine`, or a `load` map).

/// What a reduction of no elements gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Empty {
    Zeros,
    Ones,
    Nan,
    /// An `InvalidArgument` error (PyTorch raises too).
    Undefined,
}

/// Declares the reductions. Entry: `Variant { all: docs method, dim: docs method, wgsl_code,
/// arg, ints, empty, partials, f32: [id, combine, map, finish]?, int: [ID, combine]?, grad }`.
macro_rules! reduce_ops {
    ($(
        $V:ident {
            all: $(#[$adoc:meta])* $all:ident,
            dim: $(#[$ddoc:meta])* $method:ident,
            wgsl_code: $code:literal,
            arg: $arg:literal,
            ints: $ints:literal,
            empty: $empty:ident,
            partials: $partials:ident,
            f32: [$($fid:expr, $fop:expr, $fmap:expr, $fin:expr)?],
            int: [$($iid:ident, $iop:ident)?],
            grad: $grad:expr $(,)?
        }
    )*) => {
        /// Reductions over one dim or every element (declared in `src/ops/reduce.rs`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub(crate) enum ReduceOp { $($V,)* }

        impl ReduceOp {
            /// Every reduction, for the test sweeps.
            #[allow(dead_code)]
            pub(crate) const ALL: &'static [ReduceOp] = &[$(ReduceOp::$V,)*];

            /// The per-dim method's name (`"sum"`), as errors report it.
            pub(crate) fn name(self) -> &'static str {
                match self { $(ReduceOp::$V => stringify!($method),)* }
            }

            /// The whole-tensor method's name (`"sum_all"`).
            #[allow(dead_code)]
            pub(crate) fn all_name(self) -> &'static str {
                match self { $(ReduceOp::$V => stringify!($all),)* }
            }

            /// Whether the op returns indices (U32) rather than values.
            pub(crate) fn is_arg(self) -> bool {
                match self { $(ReduceOp::$V => $arg,)* }
            }

            /// Whether i32 / u32 tensors reduce (in their own dtype, wrapping).
            pub(crate) fn ints(self) -> bool {
                match self { $(ReduceOp::$V => $ints,)* }
            }

            /// The op code of `shaders/reduce.wgsl` (its `OP` override is `code | kind << 8`).
            pub(crate) fn code(self) -> u32 {
                match self { $(ReduceOp::$V => $code,)* }
            }

            /// What the op gives over no elements.
            pub(crate) fn empty(self) -> Empty {
                match self { $(ReduceOp::$V => Empty::$empty,)* }
            }

            /// The op that combines partial results (of GPU passes, or of blocks of rows):
            /// a mean's partials are sums.
            pub(crate) fn partials(self) -> ReduceOp {
                match self { $(ReduceOp::$V => ReduceOp::$partials,)* }
            }
        }

        /// The CPU half of the table, expanded by `src/cpu/reduce.rs` (which defines
        /// `value_rows` and `int_rows`, the loops each entry's fold is handed to).
        macro_rules! reduce_cpu_half { () => {
        impl ReduceOp {
            /// The f32 value of every row (`None` for an arg reduction).
            pub(crate) fn cpu_f32(self, src: &[f32], rows: &Rows) -> Option<Vec<f32>> {
                match self {
                    $(ReduceOp::$V => {
                        None $(.or_else(|| Some(value_rows(src, rows, $fid, $fop, $fmap, $fin))))?
                    })*
                }
            }

            /// The wrapping integer value of every row (`None` for an arg reduction or an op
            /// integers do not take).
            pub(crate) fn cpu_int<T: IntElem>(self, src: &[T], rows: &Rows) -> Option<Vec<T>> {
                match self {
                    $(ReduceOp::$V => {
                        None $(.or_else(|| Some(int_rows(src, rows, T::$iid, T::$iop))))?
                    })*
                }
            }
        }
        } }
        pub(crate) use reduce_cpu_half;

        /// The tensor half of the reduction table (the autograd node each op records and the
        /// public `Tensor` methods), expanded by `src/tensor/reduce.rs` in the tensor layer:
        /// this file sits below the backends, which read the kernel half above (see
        /// `src/ops/mod.rs`).
        macro_rules! reduce_tensor_half { () => {
        impl ReduceOp {
            /// The autograd node the op records (`None`: not differentiable).
            pub(crate) fn grad(self) -> Option<Reduction> {
                match self { $(ReduceOp::$V => $grad,)* }
            }
        }

        impl Tensor {
            $(
                $(#[$adoc])*
                pub fn $all(&self) -> Result<Tensor> {
                    self.reduce_tracked(ReduceOp::$V, None, false)
                }

                $(#[$ddoc])*
                pub fn $method(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
                    self.reduce_tracked(ReduceOp::$V, Some(dim), keepdim)
                }
            )*
        }
        } }
        pub(crate) use reduce_tensor_half;
    };
}

reduce_ops! {
    Sum {
        all:
        /// Sum of every element, as a 0-d tensor (`torch.sum(t)`). Pairwise on the CPU and a fixed
        /// tree on the GPU: accurate, and bit-identical from run to run on one device. NaN
        /// propagates; an empty tensor sums to 0.
        ///
        /// # Errors
        /// [`Error::UnsupportedDType`](crate::Error::UnsupportedDType) for u8 tensors (and `mean` of integers); GPU errors.
        /// f16 sums accumulate in f32 and round once; i32 / u32 sums wrap in their dtype.
        ///
        /// ```
        /// use wgtensor::{Device, Tensor};
        /// let t = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[2, 2], &Device::cpu())?;
        /// let s = t.sum_all()?;
        /// assert_eq!(s.shape(), &[] as &[usize]);
        /// assert_eq!(s.to_scalar::<f32>()?, 10.0);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        sum_all,
        dim:
        /// Sum over `dim` (`-1` is the last); `keepdim` keeps it with size 1 (`t.sum(dim, keepdim)`).
        ///
        /// # Errors
        /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `dim` is out of range; [`Error::UnsupportedDType`](crate::Error::UnsupportedDType).
        ///
        /// ```
        /// use wgtensor::{Device, Tensor};
        /// let t = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], &Device::cpu())?;
        /// assert_eq!(t.sum(0, false)?.to_vec::<f32>()?, vec![5.0, 7.0, 9.0]);
        /// assert_eq!(t.sum(-1, true)?.shape(), &[2, 1]);
        /// assert!(t.sum(2, false).is_err());
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        sum,
        wgsl_code: 0,
        arg: false,
        ints: true,
        empty: Zeros,
        partials: Sum,
        f32: [SUM_ID, add, keep, whole],
        int: [ZERO, wadd],
        grad: Some(Reduction::Sum),
    }
    Mean {
        all:
        /// Mean of every element as a 0-d tensor; NaN for an empty tensor (as PyTorch).
        ///
        /// ```
        /// use wgtensor::{Device, Tensor};
        /// let t = Tensor::from_vec(vec![1f32, 2.0, 3.0, 6.0], &[4], &Device::cpu())?;
        /// assert_eq!(t.mean_all()?.to_scalar::<f32>()?, 3.0);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        mean_all,
        dim:
        /// Mean over `dim` (the sum divided by the dim's size).
        ///
        /// # Errors
        /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `dim` is out of range.
        ///
        /// ```
        /// use wgtensor::{Device, Tensor};
        /// let t = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[2, 2], &Device::cpu())?;
        /// assert_eq!(t.mean(1, false)?.to_vec::<f32>()?, vec![1.5, 3.5]);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        mean,
        // A sum on the GPU, divided by the row length in the last pass.
        wgsl_code: 0,
        arg: false,
        ints: false,
        empty: Nan,
        partials: Sum,
        f32: [SUM_ID, add, keep, mean_of],
        int: [],
        grad: Some(Reduction::Mean),
    }
    Prod {
        all:
        /// Product of every element as a 0-d tensor; 1 for an empty tensor.
        ///
        /// ```
        /// use wgtensor::{Device, Tensor};
        /// let t = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[4], &Device::cpu())?;
        /// assert_eq!(t.prod_all()?.to_scalar::<f32>()?, 24.0);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        prod_all,
        dim:
        /// Product over `dim`.
        ///
        /// # Errors
        /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `dim` is out of range.
        ///
        /// ```
        /// use wgtensor::{Device, Tensor};
        /// let t = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[2, 2], &Device::cpu())?;
        /// assert_eq!(t.prod(0, false)?.to_vec::<f32>()?, vec![3.0, 8.0]);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        prod,
        wgsl_code: 1,
        arg: false,
        ints: true,
        empty: Ones,
        partials: Prod,
        f32: [1.0, mul, keep, whole],
        int: [ONE, wmul],
        grad: Some(Reduction::Prod),
    }
    Max {
        all:
        /// Largest element as a 0-d tensor (`torch.max(t)`); NaN if any element is NaN.
        ///
        /// # Errors
        /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an empty tensor (PyTorch raises too).
        ///
        /// ```
        /// use wgtensor::{Device, Tensor};
        /// let t = Tensor::from_vec(vec![1f32, 7.0, -3.0], &[3], &Device::cpu())?;
        /// assert_eq!(t.max_all()?.to_scalar::<f32>()?, 7.0);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        max_all,
        dim:
        /// Largest value over `dim` (PyTorch's `amax`; [`Tensor::argmax`] gives the positions).
        ///
        /// # Errors
        /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `dim` is out of range or has size 0.
        ///
        /// ```
        /// use wgtensor::{Device, Tensor};
        /// let t = Tensor::from_vec(vec![1f32, 9.0, 3.0, 4.0], &[2, 2], &Device::cpu())?;
        /// assert_eq!(t.max(-1, false)?.to_vec::<f32>()?, vec![9.0, 4.0]);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        max,
        wgsl_code: 2,
        arg: false,
        ints: true,
        empty: Undefined,
        partials: Max,
        f32: [f32::NEG_INFINITY, max_nan, keep, whole],
        int: [MIN, max],
        grad: Some(Reduction::Max),
    }
    Min {
        all:
        /// Smallest element as a 0-d tensor; NaN if any element is NaN.
        ///
        /// # Errors
        /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an empty tensor.
        ///
        /// ```
        /// use wgtensor::{Device, Tensor};
        /// let t = Tensor::from_vec(vec![1f32, 7.0, -3.0], &[3], &Device::cpu())?;
        /// assert_eq!(t.min_all()?.to_scalar::<f32>()?, -3.0);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        min_all,
        dim:
        /// Smallest value over `dim` (PyTorch's `amin`).
        ///
        /// # Errors
        /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `dim` is out of range or has size 0.
        ///
        /// ```
        /// use wgtensor::{Device, Tensor};
        /// let t = Tensor::from_vec(vec![1f32, 9.0, 3.0, 4.0], &[2, 2], &Device::cpu())?;
        /// assert_eq!(t.min(0, true)?.to_vec::<f32>()?, vec![1.0, 4.0]);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        min,
        wgsl_code: 3,
        arg: false,
        ints: true,
        empty: Undefined,
        partials: Min,
        f32: [f32::INFINITY, min_nan, keep, whole],
        int: [MAX, min],
        grad: Some(Reduction::Min),
    }
    ArgMax {
        all:
        /// Flat row-major index of the largest element, as a 0-d [`DType::U32`](crate::DType::U32) tensor. Ties give
        /// the first index; NaN counts as the largest value (the first NaN wins), as in PyTorch.
        ///
        /// # Errors
        /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an empty tensor.
        ///
        /// ```
        /// use wgtensor::{Device, Tensor};
        /// let t = Tensor::from_vec(vec![1f32, 7.0, 7.0, 3.0], &[2, 2], &Device::cpu())?;
        /// assert_eq!(t.argmax_all()?.to_scalar::<u32>()?, 1);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        argmax_all,
        dim:
        /// Index of the largest value along `dim`, as [`DType::U32`](crate::DType::U32) (ties: first; NaN: first NaN).
        ///
        /// # Errors
        /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `dim` is out of range or has size 0.
        ///
        /// ```
        /// use wgtensor::{Device, Tensor};
        /// let t = Tensor::from_vec(vec![1f32, 9.0, 3.0, 4.0], &[2, 2], &Device::cpu())?;
        /// assert_eq!(t.argmax(1, false)?.to_vec::<u32>()?, vec![1, 1]);
        /// assert_eq!(t.argmax(0, false)?.to_vec::<u32>()?, vec![1, 0]);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        argmax,
        wgsl_code: 4,
        arg: true,
        ints: true,
        empty: Undefined,
        partials: ArgMax,
        f32: [],
        int: [],
        grad: None,
    }
    ArgMin {
        all:
        /// Flat row-major index of the smallest element (0-d [`DType::U32`](crate::DType::U32)); ties give the first
        /// index, and NaN counts as the smallest value, as in PyTorch.
        ///
        /// # Errors
        /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an empty tensor.
        ///
        /// ```
        /// use wgtensor::{Device, Tensor};
        /// let t = Tensor::from_vec(vec![4f32, 1.0, 1.0], &[3], &Device::cpu())?;
        /// assert_eq!(t.argmin_all()?.to_scalar::<u32>()?, 1);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        argmin_all,
        dim:
        /// Index of the smallest value along `dim`, as [`DType::U32`](crate::DType::U32).
        ///
        /// # Errors
        /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `dim` is out of range or has size 0.
        ///
        /// ```
        /// use wgtensor::{Device, Tensor};
        /// let t = Tensor::from_vec(vec![1f32, 9.0, 3.0, 0.0], &[2, 2], &Device::cpu())?;
        /// assert_eq!(t.argmin(-1, true)?.to_vec::<u32>()?, vec![0, 1]);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        argmin,
        wgsl_code: 5,
        arg: true,
        ints: true,
        empty: Undefined,
        partials: ArgMin,
        f32: [],
        int: [],
        grad: None,
    }
    NanSum {
        all:
        /// Sum of every element treating NaN as 0, as a 0-d tensor (`torch.nansum(t)`): 0 for
        /// an empty tensor or one of only NaN; an infinity still propagates (`inf + -inf` is NaN).
        ///
        /// ```
        /// use wgtensor::{Device, Tensor};
        /// let t = Tensor::from_vec(vec![1f32, f32::NAN, 3.0], &[3], &Device::cpu())?;
        /// assert_eq!(t.nansum_all()?.to_scalar::<f32>()?, 4.0);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        nansum_all,
        dim:
        /// Sum over `dim` treating NaN as 0 (`torch.nansum(t, dim, keepdim)`).
        ///
        /// # Errors
        /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `dim` is out of range;
        /// [`Error::UnsupportedDType`](crate::Error::UnsupportedDType) for integer tensors (use `sum`).
        ///
        /// ```
        /// use wgtensor::{Device, Tensor};
        /// let t = Tensor::from_vec(vec![1f32, f32::NAN, 3.0, 4.0], &[2, 2], &Device::cpu())?;
        /// assert_eq!(t.nansum(1, false)?.to_vec::<f32>()?, vec![1.0, 7.0]);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        nansum,
        // A sum whose first pass reads NaN as 0; the partials are summed plainly.
        wgsl_code: 7,
        arg: false,
        ints: false,
        empty: Zeros,
        partials: Sum,
        f32: [SUM_ID, add, |x: f32| if x.is_nan() { 0.0 } else { x }, whole],
        int: [],
        grad: Some(Reduction::NanSum),
    }
}
