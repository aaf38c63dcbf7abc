//! The row-op table: every op that reads a whole row (of the last dim, or of `dim` for the
//! softmaxes) before it writes one is declared once, below, with its name, its kernel family
//! and op code, the per-op part of its row body, its test tolerance, and how the test sweeps
//! run it and compose it from elementwise ops and reductions. The rest derives from the entry:
//!
//! - the `RowOp` enum with `name`, `family`, `code`, `centered` and `bias`, which the CPU
//!   kernels (`src/cpu/softmax.rs`, `src/cpu/norm.rs`, `src/cpu/cross_entropy.rs`) and the GPU
//!   launches (`src/gpu/rows.rs`, which maps a family to its shader and entry points) read;
//! - the WGSL: each family's shader takes the op's `code` as its `OP` override, and the norm
//!   family's table part (the `OP_<NAME>` constants and `centered()`, [`RowOp::norm_wgsl`]) is
//!   appended to `shaders/layer_norm.wgsl` when the library builds it;
//! - the gradient: the family's backward (`src/autograd/norm.rs`, `src/autograd/reduce.rs`,
//!   `src/tensor/cross_entropy.rs`) reads the same facts (a norm that is not `centered` drops
//!   the mean terms and has no bias);
//! - the test sweeps (`wgtensor::testing::row_ops()`): each entry's `sweep` runs the op on a
//!   tensor and `composed` computes it op by op, within `tolerance` (the table's
//!   `row_test_half!`, expanded by `src/ops/testing.rs` in the tensor layer).
//!
//! A family is one shader (a workgroup-per-row and an invocation-per-row entry, sharing the row
//! merge of `row_tree.wgsl` / `row_subgroup.wgsl`) and one CPU module; its ops differ by code.
//! Adding a row op to a family is one `row_ops!` entry here plus its case in the family's
//! row body (CPU and WGSL) and its `Tensor` method; the sweeps test it with no test edit.

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

/// Declares the row ops. Entry: `Variant { name, family, code, norm: [centered, bias]?,
/// tolerance, sweep: |x| call, composed: |x| reference }`.
macro_rules! row_ops {
    ($(
        $V:ident {
            name: $name:literal,
            family: $fam:ident,
            code: $code:literal,
            norm: [$($centered:literal, $bias:literal)?],
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
                match self { $(RowOp::$V => $name,)* }
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

            /// The test tolerance (absolute and relative) of the op against its composition.
            #[allow(dead_code)]
            pub(crate) fn tolerance(self) -> f32 {
                match self { $(RowOp::$V => $tol,)* }
            }

            /// The norm family's table part of `shaders/layer_norm.wgsl`: each norm's
            /// `OP_<NAME>` constant and `centered()`, in table order.
            pub(crate) fn norm_wgsl() -> String {
                let norms: Vec<RowOp> = Self::ALL
                    .iter()
                    .copied()
                    .filter(|o| o.family() == RowFamily::Norm)
                    .collect();
                let mut s = String::from("\n// The row-op table's part (src/ops/rows.rs).\n");
                for o in &norms {
                    s += &format!("const OP_{}: u32 = {}u;\n", o.name().to_uppercase(), o.code());
                }
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

row_ops! {
    Softmax {
        name: "softmax",
        family: Softmax,
        code: 0,
        norm: [],
        tolerance: 1e-5,
        sweep: |x| x.softmax(-1),
        composed: |x| {
            let e = x.sub(&x.max(-1, true)?)?.exp()?;
            e.div(&e.sum(-1, true)?)
        },
    }
    LogSoftmax {
        name: "log_softmax",
        family: Softmax,
        code: 1,
        norm: [],
        tolerance: 1e-5,
        sweep: |x| x.log_softmax(-1),
        composed: |x| {
            let c = x.sub(&x.max(-1, true)?)?;
            c.sub(&c.exp()?.sum(-1, true)?.log()?)
        },
    }
    LayerNorm {
        name: "layer_norm",
        family: Norm,
        code: 0,
        norm: [true, true],
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
        name: "rms_norm",
        family: Norm,
        code: 1,
        norm: [false, false],
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
        name: "cross_entropy",
        family: CrossEntropy,
        code: 0,
        norm: [],
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
