//! The comparison ops (`eq ne lt le gt ge`). Their kernels are the dtype-generic ones of
//! `cpu/typed.rs` (CPU) and generated ones (`gpu/codegen.rs`).

/// Elementwise comparisons; codes are the `OP` override of `shaders/compare.wgsl`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    pub(crate) fn name(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        }
    }

    /// Name of the tensor-with-scalar form, for error messages.
    pub(crate) fn scalar_name(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq_scalar",
            CmpOp::Ne => "ne_scalar",
            CmpOp::Lt => "lt_scalar",
            CmpOp::Le => "le_scalar",
            CmpOp::Gt => "gt_scalar",
            CmpOp::Ge => "ge_scalar",
        }
    }

    /// Whether the comparison holds for an ordering (`None`: unordered, NaN): false for
    /// every op but `ne`, as IEEE comparisons.
    pub(crate) fn holds(self, o: Option<std::cmp::Ordering>) -> bool {
        use std::cmp::Ordering::{Equal, Greater, Less};
        match self {
            CmpOp::Eq => o == Some(Equal),
            CmpOp::Ne => o != Some(Equal),
            CmpOp::Lt => o == Some(Less),
            CmpOp::Le => matches!(o, Some(Less | Equal)),
            CmpOp::Gt => o == Some(Greater),
            CmpOp::Ge => matches!(o, Some(Greater | Equal)),
        }
    }
}
