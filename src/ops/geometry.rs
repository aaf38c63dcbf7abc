//! The sizes and options of the reduction, convolution, pooling, batch-norm and cross-entropy
//! kernels and the fused optimizer step: plain descriptors the tensor layer validates and
//! fills, autograd keeps for the backward pass, and both backends read. Here, beside the op
//! tables, so that none of those layers names a backend's file to pass an operation's geometry
//! along; each backend adds its own methods where it uses them.

use crate::shape::Layout;

/// Sizes of one convolution (validated by `Tensor::conv2d`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geom {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub o: usize,
    pub g: usize,
    pub k: [usize; 2],
    pub s: [usize; 2],
    pub p: [usize; 2],
    pub d: [usize; 2],
    pub out: [usize; 2],
}

/// Sizes of one batch norm: `n` images of `c` channels of `hw` elements.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BnGeom {
    pub n: usize,
    pub c: usize,
    pub hw: usize,
}

/// Sizes of one max pooling: the windows of a depthwise convolution (`o = g = c`, so each of
/// the `n * c` planes of `h x w` is pooled on its own; dilation 1; padding at most half the
/// kernel, so every window holds an input element).
pub(crate) type PoolGeom = Geom;

/// What the kernels need to know about the targets.
pub(crate) struct CeSpec {
    pub ignore: Option<i64>,
    pub smoothing: f32,
}

/// Shapes of one decode-attention call (`Tensor::attention_decode`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct DecodeDims {
    /// Query heads.
    pub heads: usize,
    /// Key-value heads (`heads` is a multiple: grouped-query attention).
    pub kv_heads: usize,
    /// Elements per head.
    pub head_dim: usize,
    /// Cached positions attended to (`1..=` the cache's capacity).
    pub len: usize,
    /// Multiplier of the scores (usually `1 / sqrt(head_dim)`).
    pub scale: f32,
}

/// One Adam update's hyperparameters, `step` counted from 1 (the bias corrections' exponent).
#[derive(Clone, Copy, Debug)]
pub(crate) struct AdamStep {
    pub b1: f32,
    pub b2: f32,
    pub lr: f32,
    pub eps: f32,
    pub step: i32,
}

/// A reduction seen as independent rows: row `o` (row-major over `out_shape`) holds the `len`
/// elements at `base(o) + r * stride`. One description serves every device.
#[derive(Clone, Debug)]
pub(crate) struct Rows {
    /// The dims that remain, in output order.
    pub out_shape: Vec<usize>,
    /// The input strides of those dims.
    pub out_strides: Vec<usize>,
    pub offset: usize,
    /// Elements reduced per row.
    pub len: usize,
    /// Storage stride between consecutive elements of a row.
    pub stride: usize,
}

impl Rows {
    /// Reduce dim `d` of a view.
    pub(crate) fn along(l: &Layout, d: usize) -> Rows {
        let mut out_shape = l.shape.clone();
        let mut out_strides = l.strides.clone();
        let len = out_shape.remove(d);
        let stride = out_strides.remove(d);
        Rows {
            out_shape,
            out_strides,
            offset: l.offset,
            len,
            stride,
        }
    }

    /// Reduce every element of a contiguous layout as one row (row-major order, so an arg
    /// reduction returns the flat index).
    pub(crate) fn all(l: &Layout) -> Rows {
        debug_assert!(l.is_contiguous());
        Rows {
            out_shape: Vec::new(),
            out_strides: Vec::new(),
            offset: l.offset,
            len: l.numel(),
            stride: 1,
        }
    }

    /// Number of rows (output elements).
    pub(crate) fn outputs(&self) -> usize {
        self.out_shape.iter().product()
    }

    /// Storage index of row `o`'s first element.
    pub(crate) fn base(&self, o: usize) -> usize {
        let mut rem = o;
        let mut at = self.offset;
        for (&size, &stride) in self.out_shape.iter().zip(&self.out_strides).rev() {
            at += (rem % size) * stride;
            rem /= size;
        }
        at
    }
}
