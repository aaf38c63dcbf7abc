//! The backend interface: every op the tensor layer asks of a device, listed once, as
//! candle's `BackendStorage` does. The CPU implements it for its host data
//! (`src/cpu/backend.rs`), the GPU for its buffers (`src/gpu/backend.rs`), and the tensor
//! layer's dispatch point (`src/tensor/dispatch.rs`) is the only code that matches on where a
//! tensor's data lives: it picks the implementation and calls it. Algorithm choices that depend
//! on the device (a matrix-vector kernel or gemm, which GPU kernel, the precision of an f16
//! product) are made behind the trait, so a kernel change touches only its backend.
//!
//! Here, in the base layer below both backends, so that neither backend names the other nor
//! anything above it; the descriptors the ops take (layouts, `geometry`) live at this level too.
//! Families move behind the trait one at a time; the ones still dispatched by the tensor layer
//! are listed by `tests/runtime/layers/tensor_backend.rs`.

use super::geometry::{AdamStep, BnGeom, CeSpec, DecodeDims, Geom, PoolGeom, Rows};
use super::program::Program;
use super::{BinaryOp, CmpOp, ReduceOp, RowOp, UnaryOp};
use crate::shape::Layout;
use crate::{DType, QType, Result};
use half::f16;

/// A matrix product as the tensor layer validated it: the operands' views brought to
/// `[..batch, M, K]` and `[..batch, K, N]` with identical (broadcast) batch dims.
pub(crate) struct MatmulSpec<'a> {
    pub la: &'a Layout,
    pub lb: &'a Layout,
    /// The operands' dtype (f32 or f16; the tensor layer refuses the others).
    pub dtype: DType,
    /// A kernel named by `Tensor::matmul_with_kernel` (validated against
    /// the GPU's kernel names; a backend with one kernel ignores it); `None` for the backend's own choice.
    pub kernel: Option<&'static str>,
    /// Whether f16 products may accumulate in f16 (`set_f16_accumulation`).
    pub f16_accumulate: bool,
}

/// One norm of the row-op table (layer_norm or rms_norm) over `nrows` rows of `len > 0`
/// elements, as the tensor layer validated it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NormSpec {
    pub row: RowOp,
    pub nrows: usize,
    pub len: usize,
    pub eps: f32,
}

/// A norm's gradients: `dx`, and the weight and bias gradients `[len]` when asked for.
pub(crate) type NormGrads<S> = (S, Option<(S, S)>);

/// Ids a kernel reads (`index_select`, `gather`, `scatter_add`): `count` packed ids from element
/// `offset` of their storage, i32 when `signed`, else u32.
#[derive(Clone, Copy, Debug)]
pub(crate) struct IdsView {
    pub offset: usize,
    pub count: usize,
    pub signed: bool,
}

impl IdsView {
    /// The ids' storage `s` with this view's offset, count and signedness, as a kernel takes
    /// them.
    pub(crate) fn of<'a, S>(&self, s: &'a S) -> (&'a S, usize, usize, bool) {
        (s, self.offset, self.count, self.signed)
    }
}

/// Where a scatter-add sends its contributions: contribution `k` (`k` unravelled over `shape`,
/// the index's shape) goes to the row (of `r` floats) of the base at `k`'s coordinates, strides
/// `out_strides` counted in rows, with the one of dim `d` replaced by `ids[k]`, which must lie
/// in `0..bound`.
pub(crate) struct ScatterSpec<'a> {
    pub shape: &'a [usize],
    pub d: usize,
    pub out_strides: &'a [usize],
    pub bound: usize,
    pub r: usize,
}

/// A fused cross-entropy as the tensor layer validated it: `n > 0` rows of `c` packed f32
/// logits from element `offset` of their storage, against `n` class targets (each in `0..c` or
/// `spec.ignore`).
pub(crate) struct CeRows<'a> {
    pub n: usize,
    pub c: usize,
    pub offset: usize,
    pub spec: &'a CeSpec,
}

/// A view an op reads: a backend's storage and the layout that sees it.
pub(crate) type View<'a, S> = (&'a S, &'a Layout);

/// The packed ids an op picks with (`index_select`, `gather`, `scatter_add`, a quantized row
/// gather): their storage, the view of it, and the op's name, which a bad id's error names.
pub(crate) struct OpIds<'a, S> {
    pub op: &'static str,
    pub ids: &'a S,
    pub view: &'a IdsView,
}

// By hand: a derive would ask `S: Copy` of the storage, where only references are copied.
impl<S> Clone for OpIds<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<S> Copy for OpIds<'_, S> {}

/// A norm's optional affine parameters, `(weight, bias)`, each packed when given.
pub(crate) type Affine<'a, S> = (Option<&'a S>, Option<&'a S>);

/// A reduction as the tensor layer validated it: `op` of each row of `rows`, read through
/// `layout` (the view `rows` was built from) of a storage of `dtype`.
pub(crate) struct ReduceCall<'a> {
    pub op: ReduceOp,
    pub dtype: DType,
    pub layout: &'a Layout,
    pub rows: &'a Rows,
}

/// A cross-entropy backward pass as the tensor layer validated it: the logits' targets and
/// rows as in the forward pass, its packed statistics `stats` and the packed per-row upstream
/// gradient `g`.
pub(crate) struct CeBackward<'a, S> {
    pub targets: OpIds<'a, S>,
    pub ce: &'a CeRows<'a>,
    pub stats: View<'a, S>,
    pub g: View<'a, S>,
}

/// A `cat` as the tensor layer validated it: the views `parts` (one dtype, `dtype`) joined
/// along `d` into a packed tensor of `out_shape`.
pub(crate) struct Cat<'a, S> {
    pub parts: &'a [View<'a, S>],
    pub d: usize,
    pub out_shape: &'a [usize],
    pub dtype: DType,
}

/// A gather as the tensor layer validated it: elements of the f32 view `layout` picked along
/// dim `d` by `ids`; without `index_shape` whole rows of dim `d` (`index_select`), with it one
/// element per id (`torch.gather`, the output of that shape).
pub(crate) struct Gather<'a, S> {
    pub layout: &'a Layout,
    pub d: usize,
    pub ids: OpIds<'a, S>,
    pub index_shape: Option<&'a [usize]>,
}

/// A scatter-add as the tensor layer validated it: the packed values `vals` added to the
/// packed view `base` of the receiver where `spec` sends them by `ids`.
pub(crate) struct Scatter<'a, S> {
    pub base: &'a Layout,
    pub ids: OpIds<'a, S>,
    pub vals: View<'a, S>,
    pub spec: &'a ScatterSpec<'a>,
}

/// A generated elementwise program to run (a fused chain, or one op): `program` over its
/// inputs `views`, each broadcast to `shape` (the output's, whose elements it fills), with the
/// scalar params `scalars` (canonical bits), errors naming `name`. One struct for every runner
/// of a program, as they all take these together.
pub(crate) struct ProgramCall<'a, S> {
    pub name: &'static str,
    pub program: &'a Program,
    pub views: &'a [View<'a, S>],
    pub scalars: &'a [u32],
    pub shape: &'a [usize],
}

impl<S> ProgramCall<'_, S> {
    /// The output's element count.
    pub(crate) fn n(&self) -> usize {
        self.shape.iter().product()
    }
}

/// A scalar already converted to the tensor's dtype (f16 keeps the f32: math runs in f32).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Scalar {
    F(f32),
    I(i32),
    U(u32),
}

impl Scalar {
    /// The canonical bits `shaders/typed.wgsl` expects for this scalar.
    pub(crate) fn bits(self) -> u32 {
        match self {
            Scalar::F(x) => x.to_bits(),
            Scalar::I(x) => x as u32,
            Scalar::U(x) => x,
        }
    }
}

/// The ops a backend runs on its own storage type. Every method takes the operands' storage
/// and backend-neutral descriptors and returns new storage of the same backend. A method with a
/// default answers `None` (no kernel of its own: the caller composes the op from others), so a
/// backend implements only the ops it has kernels for.
pub(crate) trait BackendStorage: Sized {
    /// The product `spec` describes, with the dtype the result holds: the operands' dtype, or
    /// f32 when the backend accumulated an f16 product in f32 and leaves the one rounding to f16
    /// to the caller. `None` when the backend has no kernel for the operands' dtype: the caller
    /// then multiplies f32 copies and rounds the product once.
    fn matmul(&self, rhs: &Self, spec: &MatmulSpec) -> Result<Option<(Self, DType)>>;

    /// `self · rhs + bias` for f32 operands in one pass (a linear layer), `bias` the `N` values
    /// of one output row starting at `bias_offset`; `None` when the backend has no fused
    /// kernel (the caller then runs the product and the add, with the same bits).
    fn matmul_bias(
        &self,
        _rhs: &Self,
        _spec: &MatmulSpec,
        _bias: &Self,
        _bias_offset: usize,
    ) -> Result<Option<Self>> {
        Ok(None)
    }

    /// `x · wᵀ` for f32 rows `x` (`self`) and an f16 weight `w` seen through `spec.lb` as `wᵀ`,
    /// with the bits of rounding the rows to f16, multiplying in f16 and rounding the product
    /// back to f32 (a layer with f16 weights on f32 activations), without the f16 tensors in
    /// between; `None` when the backend has no such kernel for these layouts.
    #[cfg_attr(not(feature = "models"), allow(dead_code))]
    fn matmul_t_f16_weight(&self, _w: &Self, _spec: &MatmulSpec) -> Result<Option<Self>> {
        Ok(None)
    }

    /// The name of the kernel [`BackendStorage::matmul`] would run for `spec`.
    fn matmul_kernel_name(&self, spec: &MatmulSpec) -> &'static str;

    /// The softmax-family row op `op` over dim `d` of the f32 view `layout`, into a packed
    /// tensor of its shape; `None` for another dtype.
    fn softmax(&self, op: RowOp, layout: &Layout, d: usize) -> Result<Option<Self>>;

    /// `conv2d` of the packed f32 `self` `[n, c, h, w]` by the packed `weight` plus the packed
    /// `bias`, into a packed `[n, o, oh, ow]` output, by the backend's own algorithm for `geo`
    /// (the CPU: direct or unfolded + gemm; a GPU: the implicit GEMM); `None` when it has none
    /// for this geometry (the caller composes a gather and a matmul).
    fn conv2d(&self, weight: &Self, bias: Option<&Self>, geo: &Geom) -> Result<Option<Self>>;

    /// The input gradient of [`BackendStorage::conv2d`] from the packed output gradient `self`;
    /// `None` when the backend has no kernel for it.
    fn conv2d_input_grad(&self, _weight: &Self, _geo: &Geom) -> Result<Option<Self>> {
        Ok(None)
    }

    /// The weight gradient of [`BackendStorage::conv2d`] from the packed output gradient `self`
    /// and the packed input `x`; `None` when the backend has no kernel for it.
    fn conv2d_weight_grad(&self, _x: &Self, _geo: &Geom) -> Result<Option<Self>> {
        Ok(None)
    }

    /// The bias gradient (the output gradient `self` summed per channel); `None` when the
    /// backend has no kernel for it.
    fn conv2d_bias_grad(&self, _geo: &Geom) -> Result<Option<Self>> {
        Ok(None)
    }

    /// Max pooling of the packed f32 `self`: the maxima and their plane offsets; `None` when the
    /// backend has no kernel (the caller takes the maxima of gathered windows).
    fn max_pool2d(&self, _geo: &PoolGeom) -> Result<Option<(Self, Vec<u32>)>> {
        Ok(None)
    }

    /// The input gradient of [`BackendStorage::max_pool2d`] from the packed output gradient
    /// `self` and the offsets it returned.
    fn max_pool2d_backward(&self, _idx: &[u32], _geo: &PoolGeom) -> Result<Option<Self>> {
        Ok(None)
    }

    /// `op(self)` over the view `layout` into a packed tensor of its shape (any dtype the op
    /// takes); `None` where the backend runs elementwise ops only as generated programs.
    fn unary(&self, _op: UnaryOp, _layout: &Layout) -> Result<Option<Self>> {
        Ok(None)
    }

    /// `op(self, rhs)` over the views `la` and `lb` of one (broadcast) shape; `None` as for
    /// [`BackendStorage::unary`].
    fn binary(
        &self,
        _op: BinaryOp,
        _la: &Layout,
        _rhs: &Self,
        _lb: &Layout,
    ) -> Result<Option<Self>> {
        Ok(None)
    }

    /// `op(self, s)` (or `op(s, self)` when `first`) over the view `layout`; `None` as for
    /// [`BackendStorage::unary`].
    fn scalar(
        &self,
        _op: BinaryOp,
        _layout: &Layout,
        _s: Scalar,
        _first: bool,
    ) -> Result<Option<Self>> {
        Ok(None)
    }

    /// GELU's input gradient `g · gelu'(x)` in one pass for f32 `self` (`x`) and `g`, views of
    /// one shape, into a packed tensor; `None` where the backend composes it from other ops.
    fn gelu_backward(&self, _lx: &Layout, _g: &Self, _lg: &Layout) -> Result<Option<Self>> {
        Ok(None)
    }

    /// A packed copy of the view `layout` in `dtype` (the same dtype: a strided copy); `None`
    /// where the backend converts only in generated programs.
    fn convert(&self, _layout: &Layout, _dtype: DType) -> Result<Option<Self>> {
        Ok(None)
    }

    /// `self OP rhs` over the views `la` and `lb` as a packed u8 mask; `None` as for
    /// [`BackendStorage::convert`].
    fn compare(&self, _op: CmpOp, _la: &Layout, _rhs: &Self, _lb: &Layout) -> Result<Option<Self>> {
        Ok(None)
    }

    /// `self OP s` over the view `la` as a packed u8 mask; `None` as for
    /// [`BackendStorage::convert`].
    fn compare_scalar(&self, _op: CmpOp, _la: &Layout, _s: Scalar) -> Result<Option<Self>> {
        Ok(None)
    }

    /// `self` clamped to `[lo, hi]` over the view `layout`; `None` as for
    /// [`BackendStorage::convert`].
    fn clamp(&self, _layout: &Layout, _lo: Scalar, _hi: Scalar) -> Result<Option<Self>> {
        Ok(None)
    }

    /// `on_true` where the u8 mask `self` is non-zero, else `on_false`, over views of one
    /// shape; `None` for a mask of another dtype, or as for [`BackendStorage::convert`].
    fn where_cond(
        &self,
        _lm: &Layout,
        _on_true: (&Self, &Layout),
        _on_false: (&Self, &Layout),
    ) -> Result<Option<Self>> {
        Ok(None)
    }

    /// The reduction `r.op` of each row of `r.rows` (read from `self` through `r.layout`, the
    /// view `rows` was built from) into a packed tensor of one value per row: `r.dtype` for
    /// value reductions, U32 positions for argmax/argmin. `dtype` is f32, or i32/u32 for the ops
    /// that take integers (sums and products wrap); `None` for a dtype the backend has no
    /// kernel for.
    fn reduce(&self, r: &ReduceCall) -> Result<Option<Self>>;

    /// The norm `spec.row` of the packed f32 `[nrows, len]` data `self`, scaled by the weight and
    /// shifted by the bias of `affine` (packed, `len` f32 each) when given, into a packed tensor
    /// of the same shape; `None` for another dtype.
    fn norm(&self, spec: &NormSpec, affine: Affine<'_, Self>) -> Result<Option<Self>>;

    /// The gradients of [`BackendStorage::norm`] for the f32 input `self` (seen through `lx`)
    /// from the output gradient `g` (same shape), with the weight the forward pass used: packed
    /// `dx`, and with `want_wb` the weight and bias gradients. `None` where the backend has no
    /// kernel for them (the caller composes them from other ops).
    fn norm_backward(
        &self,
        _lx: &Layout,
        _g: (&Self, &Layout),
        _weight: Option<(&Self, &Layout)>,
        _spec: &NormSpec,
        _want_wb: bool,
    ) -> Result<Option<NormGrads<Self>>> {
        Ok(None)
    }

    /// Checks the ids `view` of `self` against `bound` where the backend can read them without
    /// waiting (the CPU: `Error::IndexOutOfRange` naming `op`); a backend whose kernels check
    /// ids as they run (a GPU, reporting a bad id at the next synchronizing call) answers
    /// `Ok(())`. For an op whose output is empty, so that no kernel runs.
    fn check_ids(&self, op: &'static str, view: &IdsView, bound: usize) -> Result<()>;

    /// Elements of the f32 view `g.layout` of `self` picked along dim `g.d` by the packed ids
    /// `g.ids`, into a packed tensor: without `g.index_shape` whole rows of dim `d`
    /// (`index_select`, dim `d` of the output the ids' count), with it `torch.gather` (element
    /// `i` of the output, of that shape, is the view's element at `i`'s coordinates with the
    /// one of dim `d` replaced by `ids[i]`). Ids are checked against `layout.shape[d]` as for
    /// [`BackendStorage::check_ids`]; `None` for a dtype the backend has no kernel for.
    fn gather(&self, g: &Gather<'_, Self>) -> Result<Option<Self>>;

    /// A packed copy of the packed f32 view `s.base` of `self` (rows of `s.spec.r`) with the
    /// packed values `s.vals` (the ids' count contributions of `spec.r` floats) added where
    /// `s.spec` sends them, each target's contributions summed in position order first (the
    /// same bits on every backend). Ids are checked against `spec.bound` as for
    /// [`BackendStorage::check_ids`]; `None` for a dtype the backend has no kernel for.
    fn scatter_add(&self, s: &Scatter<'_, Self>) -> Result<Option<Self>>;

    /// `cat` of the views `c.parts` (one dtype, `c.dtype`) along `c.d` into a packed tensor of
    /// `c.out_shape`. An associated function, as its operands are a list. `None` where the
    /// backend has no kernel for the dtype (the caller widens 16- and 8-bit parts to 32 bits,
    /// joins them and narrows the result back, exactly).
    fn cat(c: &Cat<'_, Self>) -> Result<Option<Self>>;

    /// The packed views `parts` (of `dtype`) back to back in one packed tensor by plain
    /// copies, which no binding limit bounds: a `cat` along dim 0 whose result or operands are
    /// past what one kernel binds. Every part but the last is a whole number of 4-byte words.
    /// `None` where [`BackendStorage::cat`] has no such limit (the CPU).
    fn assemble(
        _op: &'static str,
        _parts: &[(&Self, &Layout)],
        _dtype: DType,
    ) -> Result<Option<Self>> {
        Ok(None)
    }

    /// Per-row statistics `[loss[n], valid[n], lse[n]]` (packed f32 `[3, n]`) of the logits
    /// `self` that `ce` describes, against the packed targets `targets`. A target outside
    /// `0..c` that is not the ignored class is `Error::IndexOutOfRange` where the backend reads
    /// targets without waiting (the CPU), else reported by the kernel at the next
    /// synchronizing call (a GPU). `None` for logits that are not f32.
    fn cross_entropy(&self, targets: OpIds<'_, Self>, ce: &CeRows) -> Result<Option<Self>>;

    /// The gradient (packed f32 `[n, c]`) of [`BackendStorage::cross_entropy`]'s logits from
    /// its packed statistics `b.stats` and the packed per-row upstream gradient `b.g` (`n`
    /// f32), targets checked as there; `None` for operands that are not f32.
    fn cross_entropy_backward(&self, b: &CeBackward<'_, Self>) -> Result<Option<Self>>;

    /// Decode attention (one query position per head over the first `dims.len` positions of a
    /// KV cache, one pass with an online softmax) of the packed f32 query `self`
    /// `[heads, head_dim]` over the packed caches `k` and `v` `[capacity, kv_heads, head_dim]`,
    /// each read from element 0 of its storage, into a packed `[heads, head_dim]`; `None` for
    /// operands that are not f32.
    fn attention_decode(&self, k: &Self, v: &Self, dims: &DecodeDims) -> Result<Option<Self>>;

    /// Overwrites `len` bytes of `self` from byte `at` with the first `len` bytes of the packed
    /// `src` (one dtype), in place: a KV cache append, which copies one position, not the
    /// cache. `at` and `len` are whole 4-byte words.
    fn write_bytes(&mut self, at: usize, src: &Self, len: usize) -> Result<()>;

    /// Whether [`BackendStorage::adam_step`] can ever answer: asked before the operands' data
    /// is read, as reading a GPU tensor's data runs its pending fused program, which would stop
    /// the op-by-op formula fusing with it.
    const FUSED_ADAM: bool;

    /// One Adam update in one pass of the parameter `self` (seen through `lp`) with the
    /// gradient `grad` and the previous moments `[m, v]` (`None` on the first step), all f32 of
    /// one shape: packed `[parameter, m, v]`, with the bits of the op-by-op formula. `None`
    /// where the backend has no fused step for these operands (a GPU, whose op-by-op formula
    /// fuses into one program anyway; on the CPU, operands that are not f32 or moments that
    /// are not packed): the caller then runs the formula.
    fn adam_step(
        &self,
        lp: &Layout,
        grad: View<Self>,
        moments: Option<[View<Self>; 2]>,
        hyper: &AdamStep,
    ) -> Result<Option<[Self; 3]>>;

    /// A new storage holding `len` bytes of `self` from byte `start` (both whole 4-byte
    /// words), by a plain copy that no binding limit bounds: the part of a buffer past one
    /// binding that a block of rows spans. `None` where no binding limit applies (the CPU).
    fn copy_bytes(&self, op: &'static str, start: u64, len: u64) -> Result<Option<Self>>;

    /// Whether the convolution family (conv2d with its three gradients, max pooling with its
    /// gradient, batch norm) runs as this backend's own kernels, recorded for autograd as one
    /// node each: asked from the device before any operand's data is read (reading a GPU
    /// tensor's data runs its pending fused program). A backend without them (a GPU) answers
    /// `false` and the tensor layer composes those ops from gathers, matmuls and reductions,
    /// asking only [`BackendStorage::conv2d`] for an implicit-GEMM forward.
    const OWN_CONV: bool;

    /// Batch norm of the packed f32 `self` `[geo.n, geo.c, geo.hw]` per channel, with the
    /// packed running `(mean, var)` as `stats` (eval mode; `None`: the batch's own, training)
    /// and the packed per-channel `weight` and `bias` when given; `None` where the backend has
    /// no kernel (see [`BackendStorage::OWN_CONV`]) or an operand is not f32.
    fn batch_norm(
        &self,
        _geo: &BnGeom,
        _stats: Option<(&Self, &Self)>,
        _affine: Affine<'_, Self>,
        _eps: f32,
    ) -> Result<Option<BnForward<Self>>> {
        Ok(None)
    }

    /// The gradients `[dx, dweight, dbias]` (packed; the last two `[spec.geo.c]`) of
    /// [`BackendStorage::batch_norm`] of the packed input `self` from the packed output
    /// gradient `g`, with the packed `weight` when the forward pass had one.
    fn batch_norm_backward(
        &self,
        _g: &Self,
        _weight: Option<&Self>,
        _spec: &BnBackward,
    ) -> Result<Option<[Self; 3]>> {
        Ok(None)
    }
}

/// What [`BackendStorage::batch_norm_backward`] needs of the forward pass besides the operands:
/// its geometry, the per-channel `mean` and `std` it used, and whether those were the batch's
/// own (`train`) rather than the running statistics. One descriptor for the trait, the dispatch
/// point and the tensor layer, which all pass them together.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BnBackward<'a> {
    pub geo: &'a BnGeom,
    pub mean: &'a [f32],
    pub std: &'a [f32],
    pub train: bool,
}

/// What [`BackendStorage::batch_norm`] returns: the packed output, and per channel the mean,
/// the biased variance and the standard deviation it used, as host values (autograd keeps the
/// mean and deviation for the backward pass; `nn::BatchNorm2d` folds mean and variance into
/// its running statistics).
pub(crate) struct BnForward<S> {
    pub y: S,
    pub mean: Vec<f32>,
    pub var: Vec<f32>,
    pub std: Vec<f32>,
}

/// What a device makes without reading a tensor (candle's `BackendDevice`): new storage of its
/// backend for the creation ops, which have no operand to dispatch on. Implemented by the CPU's
/// `cpu::backend::CpuDevice` and by `GpuDevice`.
pub(crate) trait BackendDevice {
    /// The storage this device's data lives in.
    type Storage: BackendStorage;

    /// A packed tensor holding `bytes`, the little-endian bytes of elements of `dtype`.
    fn upload(&self, op: &'static str, bytes: &[u8], dtype: DType) -> Result<Self::Storage>;

    /// `n` zeros of `dtype`.
    fn zeros(&self, op: &'static str, n: usize, dtype: DType) -> Result<Self::Storage>;

    /// `n` elements of `dtype`, all `value` (an integer value arrives truncated and in range).
    fn filled(&self, op: &'static str, n: usize, value: f64, dtype: DType)
        -> Result<Self::Storage>;

    /// The f32 `start + f32(i) * step` for `i` in `0..n`; `None` where the backend builds it as
    /// a generated program (the caller composes one with the same formula).
    fn arange(&self, n: usize, start: f32, step: f32) -> Result<Option<Self::Storage>>;

    /// `n` f32 draws of `dist` from the counter-based stream at `(seed, offset)`; `None` as for
    /// [`BackendDevice::arange`] (the program's `Expr::Random` draws the same values).
    fn random(
        &self,
        dist: super::program::Dist,
        seed: u64,
        offset: u64,
        n: usize,
    ) -> Result<Option<Self::Storage>>;

    /// Runs the generated program `call` over views of this device's storage into a new packed
    /// tensor of the program's output dtype: a GPU as one generated kernel (in blocks of rows
    /// past one binding), the host in one blocked pass calling the op-by-op kernels' scalar
    /// functions (the same bits).
    fn run_fused(&self, call: &ProgramCall<Self::Storage>) -> Result<Self::Storage>;

    /// What one kernel binds and one buffer holds on this device (a GPU's
    /// `max_storage_buffer_binding_size` and `max_buffer_size`), or `None` where no such limit
    /// applies (the CPU): ops past `binding` run in blocks of rows (`tensor/chunked.rs`).
    fn bind_limits(&self) -> Option<BindLimits>;
}

/// One row range of a quantized matrix, `row0..row0 + rows`: its scales plane (f16,
/// `QType::scale_halfs` per block) and body plane (u8, `QType::body_bytes` per block), each
/// packed from element 0 of its storage (`S`: a backend's storage, or the tensor layer's
/// tensors before it picks one).
pub(crate) struct QPart<'a, S> {
    pub row0: usize,
    pub rows: usize,
    pub scales: &'a S,
    pub body: &'a S,
}

/// A `[rows, cols]` matrix of `qtype` blocks (along `cols`) as its row ranges, in row order,
/// with no gaps: a matrix whose body plane passes one binding is split by rows.
pub(crate) struct QMatrix<'a, S> {
    pub qtype: QType,
    pub shape: [usize; 2],
    pub parts: Vec<QPart<'a, S>>,
}

/// The quantized-matrix ops (`QTensor`'s), asked of the device that holds the matrix: a
/// matrix's parts are several storages, and an empty matrix has none to dispatch on.
pub(crate) trait QuantDevice: BackendDevice {
    /// Whether [`QuantDevice::quant_matvec_group`] can ever answer: asked before the
    /// activations' data is read, as reading a GPU tensor's data runs its pending fused
    /// program.
    const GROUPED_MATVEC: bool = false;

    /// One part's planes as this device keeps weights, which live as long as the model.
    fn quant_planes(
        &self,
        op: &'static str,
        scales: Vec<f16>,
        body: Vec<u8>,
    ) -> Result<[Self::Storage; 2]>;

    /// The matrix in f32, packed `[rows, cols]` (ggml's dequantization, bit for bit).
    fn quant_dequantize(
        &self,
        op: &'static str,
        mat: &QMatrix<Self::Storage>,
    ) -> Result<Self::Storage>;

    /// `x @ W^T` for `m` packed f32 rows of `cols` from element `x.1` of `x.0`, packed
    /// `[m, rows]` f32. `integer` allows rounding the activations to 8-bit blocks where the
    /// backend has integer dot products (`set_quantized_activations`).
    fn quant_matmul_t(
        &self,
        op: &'static str,
        mat: &QMatrix<Self::Storage>,
        x: (&Self::Storage, usize),
        m: usize,
        integer: bool,
    ) -> Result<Self::Storage>;

    /// Rows `ids` of the matrix, dequantized, packed `[count, cols]` f32; ids checked against
    /// the row count as for [`BackendStorage::check_ids`].
    fn quant_gather_rows(
        &self,
        mat: &QMatrix<Self::Storage>,
        ids: OpIds<'_, Self::Storage>,
    ) -> Result<Self::Storage>;

    /// `x @ W^T` for one packed f32 row `x` (from element `x.1` of `x.0`) against every matrix
    /// of `mats` (one block type and `cols`), with the activations rounded to 8-bit blocks
    /// once for all of them: one packed f32 result per matrix, with the bits of
    /// [`QuantDevice::quant_matmul_t`] with `integer`. `None` where the backend has no such
    /// pass (see [`QuantDevice::GROUPED_MATVEC`]).
    fn quant_matvec_group(
        &self,
        _op: &'static str,
        _mats: &[QMatrix<Self::Storage>],
        _x: (&Self::Storage, usize),
    ) -> Result<Option<Vec<Self::Storage>>> {
        Ok(None)
    }
}

/// A device's binding limits (see [`BackendDevice::bind_limits`]), in bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BindLimits {
    pub binding: u64,
    pub max_buffer: u64,
}

/// Dropout drawn from the global Philox stream: element `(b, i, j)` of the probabilities is
/// kept when `uniform(words(seed, offset, (b * L + i) * S + j)[0]) >= p`, the mask
/// `Tensor::rand(&[.., L, S]).ge_scalar(p)` would give, so the fused and composed paths drop
/// the same elements and a replay from the same generator state drops them again.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dropout {
    /// The probability of dropping an element.
    pub p: f32,
    /// The Philox key and first counter drawn for this call.
    pub seed: u64,
    pub offset: u64,
}
