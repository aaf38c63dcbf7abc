//! Elementwise programs, the backend-neutral half of lazy fusion: every elementwise op of every
//! dtype (unary, binary, scalar, comparisons, `where`, `clamp`, `to_dtype`, `arange`, random
//! draws) is an [`Expr`] node over input views. The tensor layer records chains of them
//! (`src/tensor/fuse.rs`); a GPU runs a program as one generated WGSL kernel
//! (`src/gpu/codegen.rs`), the CPU as one blocked pass over memory (`src/cpu/fused.rs`). Here,
//! beside the op tables, because both backends read it and neither owns it.

use super::{BinaryOp, CmpOp, UnaryOp};
use crate::DType;

/// Which distribution a random node draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Dist {
    Uniform,
    Normal,
}

/// Index of a node in [`Program::nodes`].
pub(crate) type NodeId = usize;

/// One step of an elementwise program. Operands are earlier nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Expr {
    /// Element `e` of input view `k`.
    Input(usize),
    /// `params` scalar `k`, as canonical bits of the node's dtype (f32 bits for floats).
    Scalar(usize),
    /// The output element's flat index `e` (a U32 node): `arange` and other index-made data.
    Index,
    /// A random F32 drawn by Philox from the seed words (nodes 0, 1) and the first offset words
    /// (nodes 2, 3), at counter `offset + e` (`src/random.rs` is the CPU twin).
    Random(Dist, [NodeId; 4]),
    Unary(UnaryOp, NodeId),
    Binary(BinaryOp, NodeId, NodeId),
    /// 1 or 0 (U8); NaN compares false except for `ne`.
    Compare(CmpOp, NodeId, NodeId),
    /// `mask != 0 ? a : b`.
    Where(NodeId, NodeId, NodeId),
    /// `min(max(x, lo), hi)`, NaN anywhere gives NaN (floats).
    Clamp(NodeId, NodeId, NodeId),
    /// Conversion to the node's dtype with Rust `as` semantics.
    Cast(NodeId),
}

/// An elementwise program: nodes in evaluation order, each with its result dtype; the last node
/// is stored. `inputs` are the dtypes of the bound views, `scalars` the number of scalar params.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub(crate) struct Program {
    pub nodes: Vec<(Expr, DType)>,
    pub inputs: Vec<DType>,
    pub scalars: usize,
}

impl Program {
    pub(crate) fn push(&mut self, e: Expr, dtype: DType) -> NodeId {
        self.nodes.push((e, dtype));
        self.nodes.len() - 1
    }

    pub(crate) fn input(&mut self, dtype: DType) -> NodeId {
        self.inputs.push(dtype);
        self.push(Expr::Input(self.inputs.len() - 1), dtype)
    }

    pub(crate) fn scalar(&mut self, dtype: DType) -> NodeId {
        self.scalars += 1;
        self.push(Expr::Scalar(self.scalars - 1), dtype)
    }

    /// `arange`'s program: `start + f32(e) * step` for element `e`, with the scalars
    /// `[start, step]` (f32 bits).
    pub(crate) fn arange() -> Program {
        let mut p = Program::default();
        let (start, step) = (p.scalar(DType::F32), p.scalar(DType::F32));
        let i = p.push(Expr::Index, DType::U32);
        let f = p.push(Expr::Cast(i), DType::F32);
        let m = p.push(Expr::Binary(BinaryOp::Mul, f, step), DType::F32);
        p.push(Expr::Binary(BinaryOp::Add, start, m), DType::F32);
        p
    }

    pub(crate) fn out_dtype(&self) -> DType {
        self.nodes.last().map_or(DType::F32, |n| n.1)
    }
}
