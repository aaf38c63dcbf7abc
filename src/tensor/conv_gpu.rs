//! The GPU's implicit-GEMM convolution (`gpu/conv.rs`, `shaders/conv2d.wgsl`): one kernel
//! reads the input's windows in place, with no im2col matrix, in place of the gather + matmul
//! that other shapes and dtypes take, and that a weight needing its gradient takes too. Its
//! backward is the gather + matmul composition's (the same ops and order as that path's).

use super::{dispatch, Tensor};
use crate::ops::geometry::Geom;
use crate::{DType, Result};
use std::cell::Cell;
use std::sync::Arc;

thread_local! {
    /// Whether `conv2d` on a GPU may take the implicit-GEMM kernel on this thread (tests turn
    /// it off to compare with the gather + matmul path).
    static IMPLICIT: Cell<bool> = const { Cell::new(true) };
}

/// Lets (`true`, the default) or stops `conv2d` on GPU devices taking the implicit-GEMM
/// kernel on this thread; returns the previous setting.
pub(crate) fn set_implicit(on: bool) -> bool {
    IMPLICIT.with(|c| c.replace(on))
}

/// The cached im2col index map of a convolution's window (`[g * kk * l]` u32 entries, the
/// padding pointing one past the image), built by `conv.rs`.
pub(super) type MapFn = Arc<dyn Fn() -> Result<Tensor> + Send + Sync>;

impl Tensor {
    /// `conv2d` of the 4-d `self` by the backend's own kernel (the implicit GEMM of a GPU, for
    /// the shapes its grid fits) when the operands are f32 tensors of one device, recorded for
    /// autograd as one node with the gather + matmul composition's gradients; `None` otherwise.
    /// The CPU's f32 convolutions never come here (`conv2d_cpu` records its own backward).
    pub(super) fn conv2d_implicit(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        geo: Geom,
        map: MapFn,
    ) -> Result<Option<Tensor>> {
        let f32s = [Some(self), Some(weight), bias]
            .into_iter()
            .flatten()
            .all(|t| t.dtype() == DType::F32 && t.device() == self.device());
        // A weight gradient needs the im2col matrix anyway (`dW = Σ g @ colsᵀ`): the gather +
        // matmul forward makes it once and its backward reuses it, which on software adapters
        // beats this kernel plus a gather in the backward. Input and bias gradients need no
        // im2col matrix, so they come through here.
        let weight_grad = crate::is_grad_enabled() && crate::autograd::tracked(weight);
        if !IMPLICIT.with(Cell::get)
            || weight_grad
            || !f32s
            || self.numel() == 0
            || weight.numel() == 0
        {
            return Ok(None);
        }
        let out = {
            let _guard = crate::no_grad();
            let (x, w) = (self.contiguous()?, weight.contiguous()?);
            let b = bias.map(Tensor::contiguous).transpose()?;
            let Some(storage) = dispatch::conv2d(&x, &w, b.as_ref(), &geo)? else {
                return Ok(None);
            };
            x.derived(storage, &[geo.n, geo.o, geo.out[0], geo.out[1]])
        };
        Ok(Some(record(self, weight, bias, geo, map, out)))
    }
}

/// Records the implicit-GEMM convolution (taken only when the weight needs no gradient) with
/// the gradients of the gather + matmul composition: `dx` = col2im of `Wᵀ @ g` (the gather's
/// backward, an ordered `index_add`), `db` = `g` summed per channel.
fn record(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    geo: Geom,
    map: MapFn,
    out: Tensor,
) -> Tensor {
    // The weight needs no gradient here (its `dw` stays `None`).
    crate::autograd::conv::conv2d_node(x, weight, bias, out, move |xs, ws, g, need| {
        let (n, gr) = (geo.n, geo.g);
        let m = geo.o / gr;
        let kk = geo.c / gr * geo.k[0] * geo.k[1];
        let (l, image) = (geo.out[0] * geo.out[1], geo.c * geo.h * geo.w);
        let mut grads = [None, None, None];
        if need[0] {
            let gm = g.contiguous()?.reshape(&[n, gr, m, l])?;
            let wm = ws.reshape(&[gr, m, kk])?.transpose(-1, -2)?;
            let dcols = wm.matmul(&gm)?.reshape(&[n, gr * kk * l])?;
            let zeros = Tensor::zeros(&[n, image + 1], DType::F32, g.device())?;
            let dx = zeros
                .index_add_untracked(1, &map()?, &dcols)?
                .narrow(1, 0, image)?
                .reshape(xs.shape())?;
            grads[0] = Some(dx);
        }
        grads[2] = need[2].then(|| g.sum_dims(&[0, 2, 3], false)).transpose()?;
        Ok(grads)
    })
}
