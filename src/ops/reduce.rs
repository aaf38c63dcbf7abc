//! The reduction table: every reduction is declared once, below, with its two methods and
//! their rustdoc (`sum_all()`, `sum(dim, keepdim)`), its WGSL, whether it returns indices,
//! whether integers reduce, its value over no elements, its CPU folds and its gradient. The
//! rest derives from the entry:
//!
//! - the `ReduceOp` enum with `name`, `is_arg`, `code`, `ints` and `partials`, which the GPU
//!   passes (`src/gpu/reduce.rs`) read;
//! - the WGSL: `wgsl: { code, identity, combine, map }` become the op's `OP_<NAME>` constant
//!   and its cases of `identity()`, `combine(a, b)` and `load_map(v, r)`, appended to
//!   `shaders/reduce.wgsl` (and its subgroup variant) when the library builds the shader
//!   ([`table_wgsl`]); an empty snippet takes code 0's (the sum's) case;
//! - the CPU folds: `f32: [identity, combine, map, finish]` is expanded by `src/cpu/reduce.rs`
//!   into its pairwise and tiled loops (the table's `reduce_cpu_half!`, so every op's loop is
//!   monomorphised and inlined as if written out), and `int: [identity, combine]` (names of
//!   `IntElem`) into the wrapping integer loop; arg reductions have neither (they return
//!   indices, by `cpu::reduce::arg_reduce`);
//! - the public `Tensor` methods with their docs, and the backward formula they record (the
//!   table's `reduce_tensor_half!`, expanded by `src/tensor/reduce.rs`);
//! - the test sweeps (`wgtensor::testing::reduce_ops()`).
//!
//! Adding a reduction is one `reduce_ops!` entry (with its CPU fold and WGSL snippets) and its
//! reference value in `tests/ops/reduce.rs`.

/// The WGSL start of max and argmax: the lowest value of the kind (f32 -inf, i32 MIN, u32 0)
/// with an index no element has, so that any element beats it.
const WGSL_LOWEST: &str =
    "return Acc(select(select(0xff800000u, 0x80000000u, k == 1u), 0u, k == 2u), 0xffffffffu);";
/// The WGSL start of min and argmin: the highest value of the kind.
const WGSL_HIGHEST: &str = "return Acc(select(select(0x7f800000u, 0x7fffffffu, k == 1u), 0xffffffffu, k == 2u), 0xffffffffu);";

/// One op's WGSL, as its table entry declares it.
struct WgslEntry {
    name: &'static str,
    code: u32,
    arg: bool,
    /// Statements returning the neutral `Acc`, with `k` the value kind (0 f32, 1 i32, 2 u32).
    identity: &'static str,
    /// Statements returning `a` combined with `b` (`a` holds the lower indices).
    combine: &'static str,
    /// Statements run on each loaded element's bits `v` (row position `r`) before it is
    /// combined, returning early with the `Acc` they map it to (the first pass only: partials
    /// are combined by the op's `partials`).
    map: &'static str,
}

/// The table's part of `shaders/reduce.wgsl`: the op codes, `is_arg`, and `identity`,
/// `combine` and `load_map` with one case per op that declares a snippet; code 0's snippets
/// are the `default` arms. Written in table order, so the same table gives the same shader.
fn table_wgsl(ops: &[WgslEntry]) -> String {
    use std::fmt::Write;
    let mut s = String::from("\n// The reduction table's part (src/ops/reduce.rs).\n");
    for op in ops {
        let _ = writeln!(
            s,
            "const OP_{}: u32 = {}u;",
            op.name.to_uppercase(),
            op.code
        );
    }
    let args: Vec<String> = ops
        .iter()
        .filter(|op| op.arg)
        .map(|op| format!("op() == OP_{}", op.name.to_uppercase()))
        .collect();
    let args = if args.is_empty() {
        "false".to_string()
    } else {
        args.join(" || ")
    };
    let _ = writeln!(s, "\nfn is_arg() -> bool {{\n    return {args};\n}}");
    let switch = |snippet: fn(&WgslEntry) -> &'static str| {
        let (mut cases, mut default) = (String::new(), String::new());
        for op in ops.iter().filter(|op| !snippet(op).is_empty()) {
            let body = snippet(op);
            if op.code == 0 {
                default = format!("        default: {{\n            {body}\n        }}\n");
            } else {
                let name = op.name.to_uppercase();
                let _ = write!(
                    cases,
                    "        case OP_{name}: {{\n            {body}\n        }}\n"
                );
            }
        }
        format!("    switch op() {{\n{cases}{default}    }}\n")
    };
    let _ = write!(
        s,
        "\nfn identity() -> Acc {{\n    let k = kind();\n{}}}\n",
        switch(|op| op.identity)
    );
    let _ = write!(
        s,
        "\nfn combine(a: Acc, b: Acc) -> Acc {{\n{}}}\n",
        switch(|op| op.combine)
    );
    s.push_str("\nfn load_map(v: u32, r: u32) -> Acc {\n");
    for op in ops.iter().filter(|op| !op.map.is_empty()) {
        let _ = write!(
            s,
            "    if (op() == OP_{}) {{\n        {}\n    }}\n",
            op.name.to_uppercase(),
            op.map
        );
    }
    s.push_str("    return Acc(v, r);\n}\n");
    s
}

/// What a reduction of no elements gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Empty {
    Zeros,
    Ones,
    Nan,
    /// An `InvalidArgument` error (PyTorch raises too).
    Undefined,
}

/// Declares the reductions. Entry: `Variant { all: docs method, dim: docs method, wgsl: { code,
/// identity, combine, map }, arg, ints, empty, partials, f32: [id, combine, map, finish]?,
/// int: [ID, combine]?, grad: [|x, o, g, dim| formula]? }`.
macro_rules! reduce_ops {
    ($(
        $V:ident {
            all: $(#[$adoc:meta])* $all:ident,
            dim: $(#[$ddoc:meta])* $method:ident,
            wgsl: {
                code: $code:literal,
                identity: $wid:expr,
                combine: $wcomb:expr,
                map: $wmap:expr $(,)?
            },
            arg: $arg:literal,
            ints: $ints:literal,
            empty: $empty:ident,
            partials: $partials:ident,
            f32: [$($fid:expr, $fop:expr, $fmap:expr, $fin:expr)?],
            int: [$($iid:ident, $iop:ident)?],
            grad: [$(|$gx:ident, $go:ident, $gg:ident, $gd:ident| $grad:expr)?] $(,)?
        }
    )*) => {
        op_enum! {
            /// Reductions over one dim or every element (declared in `src/ops/reduce.rs`).
            ReduceOp { $($V $method $all),* }
            /// The whole-tensor method's name (`"sum_all"`).
            all_name
        }

        impl ReduceOp {
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

            /// The table's part of `shaders/reduce.wgsl`, appended to it when the library
            /// builds the shader: each op's `OP_<NAME>` code, `is_arg`, and one case per op
            /// in `identity()`, `combine(a, b)` and `load_map(v, r)` (see [`table_wgsl`]).
            pub(crate) fn wgsl() -> String {
                table_wgsl(&[$(WgslEntry {
                    name: stringify!($method),
                    code: $code,
                    arg: $arg,
                    identity: $wid,
                    combine: $wcomb,
                    map: $wmap,
                },)*])
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
            /// The backward formula the op records (`None`: not differentiable): the input
            /// gradient from the input `x`, the output `o` and its gradient `g` (both with the
            /// input's rank: size 1 on the reduced dims) and the reduced dim (`None`: all).
            pub(crate) fn grad(self) -> Option<ReduceGrad> {
                match self {
                    $(ReduceOp::$V => {
                        None $(.or_else(|| Some((
                            |$gx: &Tensor, $go: &Tensor, $gg: &Tensor, $gd: Option<usize>|
                                -> Result<Tensor> { $grad }
                        ) as ReduceGrad)))?
                    })*
                }
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
        // Code 0 is the shader's default op: its cases are the `default` arms, which a mean
        // and softmax's sum of exponentials (`OP_SUM_EXP`) fold with too.
        wgsl: {
            code: 0,
            // -0.0 + x == x for every x, even -0.0; integers start at 0.
            identity: "return Acc(select(0u, 0x80000000u, k == 0u), 0u);",
            // Integer + wraps, and two's complement makes it the same bits for i32 and u32.
            combine: "if (kind() != 0u) { return Acc(a.v + b.v, 0u); }
            return Acc(bitcast<u32>(bitcast<f32>(a.v) + bitcast<f32>(b.v)), 0u);",
            map: "",
        },
        arg: false,
        ints: true,
        empty: Zeros,
        partials: Sum,
        f32: [SUM_ID, add, keep, whole],
        int: [ZERO, wadd],
        grad: [|x, _o, g, _d| g.expand(x.shape())],
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
        wgsl: { code: 0, identity: "", combine: "", map: "" },
        arg: false,
        ints: false,
        empty: Nan,
        partials: Sum,
        f32: [SUM_ID, add, keep, mean_of],
        int: [],
        grad: [|x, _o, g, d| {
            let n = d.map_or(x.numel(), |d| x.shape()[d]);
            g.div_scalar(n as f32)?.expand(x.shape())
        }],
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
        wgsl: {
            code: 1,
            identity: "return Acc(select(1u, 0x3f800000u, k == 0u), 0u);",
            combine: "if (kind() != 0u) { return Acc(a.v * b.v, 0u); }
            return Acc(bitcast<u32>(bitcast<f32>(a.v) * bitcast<f32>(b.v)), 0u);",
            map: "",
        },
        arg: false,
        ints: true,
        empty: Ones,
        partials: Prod,
        f32: [1.0, mul, keep, whole],
        int: [ONE, wmul],
        // `out / x`: an input holding 0 gets a NaN/inf gradient (a documented limit).
        grad: [|x, o, g, _d| g.mul(o)?.div(x)],
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
        wgsl: {
            code: 2,
            identity: WGSL_LOWEST,
            combine: "if (nan_bits(a.v) || (!nan_bits(b.v) && !greater(b.v, a.v))) { return a; }
            return b;",
            map: "",
        },
        arg: false,
        ints: true,
        empty: Undefined,
        partials: Max,
        f32: [f32::NEG_INFINITY, max_nan, keep, whole],
        int: [MIN, max],
        grad: [|x, o, g, d| extreme_grad(x, o, g, d)],
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
        wgsl: {
            code: 3,
            identity: WGSL_HIGHEST,
            combine: "if (nan_bits(a.v) || (!nan_bits(b.v) && !greater(a.v, b.v))) { return a; }
            return b;",
            map: "",
        },
        arg: false,
        ints: true,
        empty: Undefined,
        partials: Min,
        f32: [f32::INFINITY, min_nan, keep, whole],
        int: [MAX, min],
        grad: [|x, o, g, d| extreme_grad(x, o, g, d)],
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
        wgsl: {
            code: 4,
            identity: WGSL_LOWEST,
            combine: "if (arg_better(b, a, true)) { return b; }
            return a;",
            map: "",
        },
        arg: true,
        ints: true,
        empty: Undefined,
        partials: ArgMax,
        f32: [],
        int: [],
        grad: [],
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
        wgsl: {
            code: 5,
            identity: WGSL_HIGHEST,
            combine: "if (arg_better(b, a, false)) { return b; }
            return a;",
            map: "",
        },
        arg: true,
        ints: true,
        empty: Undefined,
        partials: ArgMin,
        f32: [],
        int: [],
        grad: [],
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
        wgsl: {
            code: 7,
            identity: "",
            combine: "",
            map: "if (nan_bits(v)) { return Acc(0u, r); }",
        },
        arg: false,
        ints: false,
        empty: Zeros,
        partials: Sum,
        f32: [SUM_ID, add, |x: f32| if x.is_nan() { 0.0 } else { x }, whole],
        int: [],
        // NaN elements get no gradient.
        grad: [|x, _o, g, _d| x.ne(x)?.where_cond(
            &Tensor::full(&[], 0.0, x.dtype(), x.device())?,
            &g.expand(x.shape())?,
        )],
    }
    CountNonzero {
        all:
        /// How many elements are not zero, as a 0-d tensor of the input's dtype
        /// (`torch.count_nonzero(t)`): NaN counts, -0.0 does not; 0 for an empty tensor.
        /// Counts are exact up to 2^24 in f32 and 2048 in f16 (convert to f32 first beyond).
        ///
        /// # Errors
        /// [`Error::UnsupportedDType`](crate::Error::UnsupportedDType) for integer tensors
        /// (compare with `ne_scalar(0.0)` instead).
        ///
        /// ```
        /// use wgtensor::{Device, Tensor};
        /// let t = Tensor::from_vec(vec![0f32, 2.0, -0.0, f32::NAN], &[4], &Device::cpu())?;
        /// assert_eq!(t.count_nonzero_all()?.to_scalar::<f32>()?, 2.0);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        count_nonzero_all,
        dim:
        /// How many elements along `dim` are not zero (`torch.count_nonzero(t, dim)`).
        ///
        /// # Errors
        /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `dim` is out of range;
        /// [`Error::UnsupportedDType`](crate::Error::UnsupportedDType) for integer tensors.
        ///
        /// ```
        /// use wgtensor::{Device, Tensor};
        /// let t = Tensor::from_vec(vec![1f32, 0.0, 3.0, 4.0], &[2, 2], &Device::cpu())?;
        /// assert_eq!(t.count_nonzero(1, false)?.to_vec::<f32>()?, vec![1.0, 2.0]);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        count_nonzero,
        // A sum of 1 per nonzero element (its first pass maps; the partials are summed).
        wgsl: {
            code: 8,
            identity: "",
            combine: "",
            map: "return Acc(select(0u, 0x3f800000u, (v & 0x7fffffffu) != 0u), r);",
        },
        arg: false,
        ints: false,
        empty: Zeros,
        partials: Sum,
        f32: [SUM_ID, add, |x: f32| if x != 0.0 { 1.0 } else { 0.0 }, whole],
        int: [],
        // A count: not differentiable (PyTorch's is an integer tensor).
        grad: [],
    }
}
