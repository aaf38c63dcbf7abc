//! The row-op table: every op that reads a whole row (of the last dim, or of `dim` for the
//! softmaxes) before it writes one is declared once, below, with its name, its kernel family
//! and op code, the per-op part of its row body, its test tolerance, and how the test sweeps
//! run it and compose it from elementwise ops and reductions. The rest derives from the entry:
//!
//! - the `RowOp` enum with `name`, `family`, `code`, `centered` and `bias`, which the CPU
//!   kernels (`src/cpu/softmax.rs`, `src/cpu/norm.rs`, `src/cpu/cross_entropy.rs`) and the GPU
//!   launches (`src/gpu/rows.rs`, which maps a family to its shader and entry points) read;
//! - the WGSL: each family's shader takes the op's `code` as its `OP` override and names the
//!   codes by the `OP_<NAME>` constants of [`RowOp::codes_wgsl`], appended to
//!   `shaders/softmax.wgsl` when the library builds it; the norm family's part adds
//!   `centered()` ([`RowOp::norm_wgsl`]) for `shaders/layer_norm.wgsl`;
//! - the public `Tensor` method with its rustdoc, in the signature of the entry's kind, and
//!   the backward it records: a softmax-family op's `grad` formula, or the norm family's
//!   backward (`src/autograd/norm.rs`), which reads the entry's facts (a norm that is not
//!   `centered` drops the mean terms and has no bias) (the table's `row_tensor_half!`,
//!   expanded by `src/tensor/rows.rs`);
//! - the test sweeps (`wgtensor::testing::row_ops()`): each entry's `sweep` runs the op on a
//!   tensor and `composed` computes it op by op, within `tolerance` (the table's
//!   `row_test_half!`, expanded by `src/ops/testing.rs` in the tensor layer).
//!
//! A family is one shader (a workgroup-per-row and an invocation-per-row entry, sharing the row
//! merge of `row_tree.wgsl` / `row_subgroup.wgsl`) and one CPU module; its ops differ by code.
//! Adding a row op to a family is one `row_ops!` entry here plus its case in the family's
//! row body (the CPU module's and the WGSL shader's); the sweeps (values, f16, faults and
//! gradients) test it with no test edit.

/// The kernel family of a row op: one shader and one CPU module, the op's code selecting its
/// variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum RowFamily {
    /// Max and sum of exponentials per row (`shaders/softmax.wgsl`, `src/cpu/softmax.rs`).
    Softmax,
    /// Welford statistics per row, then a scaled write (`shaders/layer_norm.wgsl`,
    /// `src/cpu/norm.rs`).
    Norm,
    /// Log-sum-exp per row against a target (`shaders/cross_entropy.wgsl`,
    /// `src/cpu/cross_entropy.rs`).
    CrossEntropy,
}

/// A fact an entry may omit (`[]`, false) or state (`[true]`).
const fn flag(given: &[bool]) -> bool {
    matches!(given, [true])
}

/// Declares the row ops. Entry: `Variant { docs method: kind, family, code, norm: [centered,
/// bias]?, grad: [|y, g, dim| formula]?, tolerance, sweep: |x| call, composed: |x| reference }`.
///
/// `kind` is the `Tensor` method's signature, generated with the entry's docs by
/// [`row_method!`]: `dim` (`fn(&self, dim: isize)`, the softmax family, whose backward is the
/// entry's `grad` from the output `y`, its gradient `g` and the dim), `weight_bias`
/// (`fn(&self, weight, bias, eps)`) and `weight` (`fn(&self, weight, eps)`, a 0-d tensor being
/// one row of one element): the norm family, whose backward is the family's
/// (`src/autograd/norm.rs`) selected by the `norm` facts; `none`: no method (the table's op is
/// an internal kernel of a method written elsewhere, as cross-entropy's of `nn::cross_entropy`).
macro_rules! row_ops {
    ($(
        $V:ident {
            $(#[$doc:meta])*
            $name:ident: $kind:ident,
            family: $fam:ident,
            code: $code:literal,
            norm: [$($centered:literal, $bias:literal)?],
            grad: [$(|$gy:ident, $gg:ident, $gd:ident| $grad:expr)?],
            tolerance: $tol:expr,
            sweep: |$sx:ident| $sweep:expr,
            composed: |$cx:ident| $composed:expr $(,)?
        }
    )*) => {
        /// The row ops (declared in `src/ops/rows.rs`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub(crate) enum RowOp { $($V,)* }

        impl RowOp {
            /// Every row op, for the test sweeps.
            #[allow(dead_code)]
            pub(crate) const ALL: &'static [RowOp] = &[$(RowOp::$V,)*];

            /// The method's name (`"softmax"`), as errors and the profiler report it.
            pub(crate) fn name(self) -> &'static str {
                match self { $(RowOp::$V => stringify!($name),)* }
            }

            /// The kernel family (shader and CPU module) the op runs in.
            #[allow(dead_code)]
            pub(crate) fn family(self) -> RowFamily {
                match self { $(RowOp::$V => RowFamily::$fam,)* }
            }

            /// The `OP` override of the family's shader (and the CPU's variant).
            pub(crate) fn code(self) -> u32 {
                match self { $(RowOp::$V => $code,)* }
            }

            /// For a norm: whether rows are centred on their mean first (layer_norm) or only
            /// scaled by their root mean square (rms_norm). False outside the norm family.
            pub(crate) fn centered(self) -> bool {
                match self { $(RowOp::$V => flag(&[$($centered)?]),)* }
            }

            /// For a norm: whether it takes a bias beside its weight.
            #[allow(dead_code)]
            pub(crate) fn bias(self) -> bool {
                match self { $(RowOp::$V => flag(&[$($bias)?]),)* }
            }

            /// Whether the op's `Tensor` method (generated from the table) records a backward.
            #[allow(dead_code)]
            pub(crate) fn tracked(self) -> bool {
                match self { $(RowOp::$V => stringify!($kind) != "none",)* }
            }

            /// The test tolerance (absolute and relative) of the op against its composition.
            #[allow(dead_code)]
            pub(crate) fn tolerance(self) -> f32 {
                match self { $(RowOp::$V => $tol,)* }
            }

            /// The op codes of `family` as WGSL: one `const OP_<NAME>: u32` per op, in table
            /// order, which the family's shader compares its `OP` override with.
            pub(crate) fn codes_wgsl(family: RowFamily) -> String {
                let mut s = String::from("\n// The row-op table's part (src/ops/rows.rs).\n");
                for o in Self::ALL.iter().filter(|o| o.family() == family) {
                    s += &format!("const OP_{}: u32 = {}u;\n", o.name().to_uppercase(), o.code());
                }
                s
            }

            /// The norm family's table part of `shaders/layer_norm.wgsl`: each norm's
            /// `OP_<NAME>` constant ([`RowOp::codes_wgsl`]) and `centered()`.
            pub(crate) fn norm_wgsl() -> String {
                let norms: Vec<RowOp> = Self::ALL
                    .iter()
                    .copied()
                    .filter(|o| o.family() == RowFamily::Norm)
                    .collect();
                let mut s = Self::codes_wgsl(RowFamily::Norm);
                let centred: Vec<String> = norms
                    .iter()
                    .filter(|o| o.centered())
                    .map(|o| format!("OP == OP_{}", o.name().to_uppercase()))
                    .collect();
                let centred = if centred.is_empty() { "false".to_string() } else { centred.join(" || ") };
                s += &format!("\nfn centered() -> bool {{\n    return {centred};\n}}\n");
                s
            }
        }

        /// The tensor half of the table: each op's public `Tensor` method with its docs and
        /// the backward it records, expanded by `src/tensor/rows.rs` in the tensor layer
        /// (which defines the families' entry points `row_dim` and `norm` the methods call).
        macro_rules! row_tensor_half { () => {
        impl Tensor {
            $(
                $crate::ops::row_method!(
                    $kind $V $name [$(#[$doc])*] [$(|$gy, $gg, $gd| $grad)?]
                );
            )*
        }
        } }
        pub(crate) use row_tensor_half;

        /// The test half of the table (how the sweeps run each op and compose it), expanded
        /// by `src/ops/testing.rs` in the tensor layer.
        macro_rules! row_test_half { () => {
        impl RowOp {
            /// The op on `x` with operands derived from its shape (weights, targets).
            fn sweep(self, x: &Tensor) -> Result<Tensor> {
                match self { $(RowOp::$V => { let $sx = x; $sweep })* }
            }

            /// The same result composed of elementwise ops and reductions.
            fn composed(self, x: &Tensor) -> Result<Tensor> {
                match self { $(RowOp::$V => { let $cx = x; $composed })* }
            }
        }
        } }
        pub(crate) use row_test_half;
    };
}

/// One row op's `Tensor` method, by its signature kind (see [`row_ops!`]): the entry's docs
/// on a method that validates and runs the family's kernel and records the op's backward.
macro_rules! row_method {
    (dim $V:ident $name:ident [$(#[$doc:meta])*] [|$y:ident, $g:ident, $d:ident| $grad:expr]) => {
        $(#[$doc])*
        pub fn $name(&self, dim: isize) -> Result<Tensor> {
            let grad = |$y: &Tensor, $g: &Tensor, $d: isize| -> Result<Tensor> { $grad };
            self.row_dim(RowOp::$V, dim, grad)
        }
    };
    (weight_bias $V:ident $name:ident [$(#[$doc:meta])*] []) => {
        $(#[$doc])*
        pub fn $name(
            &self,
            weight: Option<&Tensor>,
            bias: Option<&Tensor>,
            eps: f32,
        ) -> Result<Tensor> {
            self.norm(RowOp::$V, weight, bias, eps)
        }
    };
    (weight $V:ident $name:ident [$(#[$doc:meta])*] []) => {
        $(#[$doc])*
        pub fn $name(&self, weight: Option<&Tensor>, eps: f32) -> Result<Tensor> {
            if self.ndim() == 0 {
                return self.reshape(&[1])?.$name(weight, eps)?.reshape(&[]);
            }
            self.norm(RowOp::$V, weight, None, eps)
        }
    };
    (none $V:ident $name:ident [] []) => {};
}
pub(crate) use row_method;

row_ops! {
    Softmax {
        /// `exp(x) / Σ exp(x)` along `dim` (`-1` is the last), computed as
        /// `exp(x - max) / Σ exp(x - max)` so large inputs do not overflow. A NaN in a row makes
        /// that row NaN, as in PyTorch.
        ///
        /// # Errors
        /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `dim` is out of range;
        /// [`Error::UnsupportedDType`](crate::Error::UnsupportedDType) for integer tensors. f16
        /// tensors are converted to f32, computed in f32 and rounded once to f16.
        ///
        /// ```
        /// use wgtensor::{Device, Tensor};
        /// let t = Tensor::from_vec(vec![1000f32, 1000.0, 0.0, 0.0], &[2, 2], &Device::cpu())?;
        /// assert_eq!(t.softmax(-1)?.to_vec::<f32>()?, vec![0.5, 0.5, 0.5, 0.5]);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        softmax: dim,
        family: Softmax,
        code: 0,
        norm: [],
        // y = softmax(x): dx = y * (g - sum(g * y))
        grad: [|y, g, dim| y.mul(&g.sub(&g.mul(y)?.sum(dim, true)?)?)],
        tolerance: 1e-5,
        sweep: |x| x.softmax(-1),
        composed: |x| {
            let e = x.sub(&x.max(-1, true)?)?.exp()?;
            e.div(&e.sum(-1, true)?)
        },
    }
    LogSoftmax {
        /// `log(softmax(x))` along `dim`, computed as `(x - max) - log Σ exp(x - max)`: finite
        /// where `softmax(x).log()` would underflow to `-inf`.
        ///
        /// # Errors
        /// As [`Tensor::softmax`].
        ///
        /// ```
        /// use wgtensor::{Device, Tensor};
        /// let t = Tensor::from_vec(vec![0f32, -200.0], &[2], &Device::cpu())?;
        /// let l = t.log_softmax(0)?.to_vec::<f32>()?;
        /// assert_eq!(l[0], 0.0);
        /// assert_eq!(l[1], -200.0);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        log_softmax: dim,
        family: Softmax,
        code: 1,
        norm: [],
        // y = log_softmax(x): dx = g - softmax(x) * sum(g)
        grad: [|y, g, dim| g.sub(&y.exp()?.mul(&g.sum(dim, true)?)?)],
        tolerance: 1e-5,
        sweep: |x| x.log_softmax(-1),
        composed: |x| {
            let c = x.sub(&x.max(-1, true)?)?;
            c.sub(&c.exp()?.sum(-1, true)?.log()?)
        },
    }
    Softmin {
        /// `softmax(-x)` along `dim` (PyTorch's `F.softmin(x, dim)`): the smallest values get
        /// the most weight. Computed as `exp(min - x) / Σ exp(min - x)` so large inputs do not
        /// overflow. A NaN in a row makes that row NaN, as in PyTorch.
        ///
        /// # Errors
        /// As [`Tensor::softmax`].
        ///
        /// ```
        /// use wgtensor::{Device, Tensor};
        /// let t = Tensor::from_vec(vec![0f32, 1000.0, 2.0, 2.0], &[2, 2], &Device::cpu())?;
        /// assert_eq!(t.softmin(-1)?.to_vec::<f32>()?, vec![1.0, 0.0, 0.5, 0.5]);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        softmin: dim,
        family: Softmax,
        code: 2,
        norm: [],
        // y = softmax(-x): dx = -(y * (g - sum(g * y)))
        grad: [|y, g, dim| y.mul(&g.sub(&g.mul(y)?.sum(dim, true)?)?)?.neg()],
        tolerance: 1e-5,
        sweep: |x| x.softmin(-1),
        composed: |x| {
            let n = x.neg()?;
            let e = n.sub(&n.max(-1, true)?)?.exp()?;
            e.div(&e.sum(-1, true)?)
        },
    }
    LayerNorm {
        /// PyTorch's `F.layer_norm(x, (x.shape[-1],), weight, bias, eps)`: each row of the last dim
        /// becomes `(x - mean) / sqrt(var + eps) * weight + bias` (biased variance), in one kernel
        /// (one workgroup per row on a GPU). f16 inputs are computed in f32 and returned in f16;
        /// an f16 weight or bias is widened to f32. Non-contiguous inputs are copied to a packed
        /// layout first. Differentiable in `self`, `weight` and `bias`.
        ///
        /// # Errors
        /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a 0-d tensor or an
        /// `eps` that is negative or not finite;
        /// [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) when `weight` or `bias` is not
        /// `[last dim]`; [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) when they live
        /// on another device; [`Error::UnsupportedDType`](crate::Error::UnsupportedDType) for
        /// integer tensors.
        ///
        /// ```
        /// use wgtensor::{Device, Tensor};
        /// let d = Device::cpu();
        /// let x = Tensor::from_vec(vec![1f32, 3.0], &[1, 2], &d)?;
        /// let b = Tensor::from_vec(vec![10f32, 20.0], &[2], &d)?;
        /// let y = x.layer_norm(None, Some(&b), 0.0)?.to_vec::<f32>()?;
        /// assert_eq!(y, vec![9.0, 21.0]); // mean 2, std 1
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        layer_norm: weight_bias,
        family: Norm,
        code: 0,
        norm: [true, true],
        grad: [],
        tolerance: 1e-4,
        sweep: |x| {
            let (w, b) = sweep_weight_bias(x)?;
            x.layer_norm(Some(&w), Some(&b), 1e-5)
        },
        composed: |x| {
            let (w, b) = sweep_weight_bias(x)?;
            let c = x.sub(&x.mean(-1, true)?)?;
            let rstd = c.mul(&c)?.mean(-1, true)?.add_scalar(1e-5)?.sqrt()?;
            c.div(&rstd)?.mul(&w)?.add(&b)
        },
    }
    // Not centred: x * rsqrt(mean(x²) + eps) * weight (the Llama models' norm).
    RmsNorm {
        /// Root-mean-square normalisation over the last dim (PyTorch's `F.rms_norm(x,
        /// (x.shape[-1],), weight, eps)`): each row becomes `x / sqrt(mean(x²) + eps) * weight`,
        /// in one kernel (one workgroup per row on a GPU, as [`layer_norm`](Self::layer_norm)).
        /// f16 inputs are computed in f32 and returned in f16. A 0-d tensor is one row of one
        /// element. Non-contiguous inputs are copied to a packed layout first. Differentiable in
        /// `self` and `weight`.
        ///
        /// ```
        /// use wgtensor::{Device, Tensor};
        /// let x = Tensor::from_vec(vec![3f32, 4.0], &[1, 2], &Device::best())?;
        /// let y = x.rms_norm(None, 0.0)?.to_vec::<f32>()?;
        /// let r = (12.5f32).sqrt();
        /// assert!((y[0] - 3.0 / r).abs() < 1e-6 && (y[1] - 4.0 / r).abs() < 1e-6);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        ///
        /// # Errors
        /// [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) when `weight` is not
        /// `[last dim]`; [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an `eps`
        /// that is negative or not finite; [`Error::DeviceMismatch`](crate::Error::DeviceMismatch);
        /// [`Error::UnsupportedDType`](crate::Error::UnsupportedDType) for integer tensors.
        rms_norm: weight,
        family: Norm,
        code: 1,
        norm: [false, false],
        grad: [],
        tolerance: 1e-4,
        sweep: |x| x.rms_norm(Some(&sweep_weight_bias(x)?.0), 1e-5),
        composed: |x| {
            let ms = x.mul(x)?.mean(-1, true)?.add_scalar(1e-5)?;
            x.div(&ms.sqrt()?)?.mul(&sweep_weight_bias(x)?.0)
        },
    }
    // The per-row losses (no reduction) of the rows of the last dim against targets `r % c`,
    // computed in f32 and returned in the input's dtype.
    CrossEntropy {
        cross_entropy: none,
        family: CrossEntropy,
        code: 0,
        norm: [],
        grad: [],
        tolerance: 1e-4,
        sweep: |x| {
            let (logits, targets) = sweep_targets(x)?;
            let spec = CeSpec { ignore: None, smoothing: 0.0 };
            let stats = logits.ce_rows(&targets, &spec)?;
            let loss = stats.narrow(0, 0, 1)?.reshape(&[logits.shape()[0]])?;
            loss.to_dtype(x.dtype())
        },
        composed: |x| {
            let (logits, targets) = sweep_targets(x)?;
            let c = logits.shape()[1];
            let onehot = Tensor::arange(0.0, c as f32, 1.0, x.device())?
                .eq(&targets.to_dtype(DType::F32)?.unsqueeze(1)?)?
                .to_dtype(DType::F32)?;
            let m = logits.sub(&logits.max(-1, true)?)?;
            let lsm = m.sub(&m.exp()?.sum(-1, true)?.log()?)?;
            lsm.mul(&onehot)?.sum(-1, false)?.neg()?.to_dtype(x.dtype())
        },
    }
}
