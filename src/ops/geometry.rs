//! The sizes and options of the convolution, pooling, batch-norm and cross-entropy kernels and the
//! fused optimizer step: plain descriptors the tensor layer validates and fills, autograd keeps for the backward pass, and
//! both backends read. Here, beside the op tables, so that none of those layers names a backend's
//! file to pass an operation's geometry along; each backend adds its own methods where it uses them.

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

/// Sizes of one max pooling over `planes` planes of `h x w` (dilation 1; padding at most half
/// the kernel, so every window holds an input element).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolGeom {
    pub planes: usize,
    pub h: usize,
    pub w: usize,
    pub k: [usize; 2],
    pub s: [usize; 2],
    pub p: [usize; 2],
    pub out: [usize; 2],
}

/// What the kernels need to know about the targets.
pub(crate) struct CeSpec {
    pub ignore: Option<i64>,
    pub smoothing: f32,
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
