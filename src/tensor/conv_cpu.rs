//! The backend's own convolution family (the CPU's today), recorded with its own backward: the
//! backend chooses the kernels (`cpu/backend.rs`: blocked unfold + gemm, or the direct kernels
//! where they fit; two-pass batch norm), in place of the index-map gather the other devices
//! take. Only f32 tensors on a backend whose `BackendStorage::OWN_CONV` holds come here
//! (`dispatch::conv::own_conv`).

use super::{dispatch, Tensor};
use crate::ops::backend::BnBackward;
use crate::ops::geometry::{BnGeom, Geom, PoolGeom};
use crate::storage::Storage;
use crate::{DType, Error, Result};
use std::sync::Arc;

impl Tensor {
    /// Whether `conv2d` of `self` (4-d) and `weight` runs the backend's own kernels.
    pub(super) fn conv2d_on_cpu(&self, weight: &Tensor) -> bool {
        dispatch::conv::own_conv(&[self, weight])
            && self.dtype() == DType::F32
            && weight.dtype() == DType::F32
            && self.numel() > 0
            && weight.numel() > 0
    }

    /// Whether `conv2d`'s `bias` can be added by the backend's own kernel (one f32 tensor on
    /// such a backend).
    pub(super) fn conv2d_bias_on_cpu(bias: Option<&Tensor>) -> bool {
        bias.is_none_or(|b| dispatch::conv::own_conv(&[b]) && b.dtype() == DType::F32)
    }

    /// `conv2d` of the 4-d `self` plus `bias` (checked by
    /// [`Tensor::conv2d_bias_on_cpu`]) on the CPU, recorded for autograd as one node.
    pub(super) fn conv2d_cpu(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        geo: Geom,
    ) -> Result<Tensor> {
        let op = "conv2d";
        let (x, w) = (self.contiguous()?, weight.contiguous()?);
        let b = bias.map(|b| b.contiguous()).transpose()?;
        // The backend chooses the algorithm (direct or unfolded + gemm).
        let y = dispatch::conv2d(&x, &w, b.as_ref(), &geo)?.ok_or_else(|| x.unsupported(op))?;
        let out = self.derived(y, &[geo.n, geo.o, geo.out[0], geo.out[1]]);
        Ok(crate::autograd::conv::conv2d_cpu(
            self, weight, bias, geo, out,
        ))
    }

    /// The gradients of [`Tensor::conv2d_cpu`] for the inputs in `need` (`[x, weight,
    /// bias]`), from the output gradient `g`.
    pub(crate) fn conv2d_cpu_grads(
        x: &Tensor,
        weight: &Tensor,
        g: &Tensor,
        geo: &Geom,
        need: [bool; 3],
    ) -> Result<[Option<Tensor>; 3]> {
        let op = "conv2d backward";
        let g = g.contiguous()?;
        // A wanted gradient is one backend kernel's output, with the dtype of `like` and its
        // `shape`; one not wanted runs nothing.
        type Kernel<'a> = &'a dyn Fn() -> Result<Option<Storage>>;
        let grad = |want: bool, like: &Tensor, shape: &[usize], run: Kernel| {
            if !want {
                return Ok(None);
            }
            let v = run()?.ok_or_else(|| g.unsupported(op))?;
            Ok::<_, Error>(Some(like.derived(v, shape)))
        };
        let db = grad(need[2], weight, &[geo.o], &|| {
            dispatch::conv2d_bias_grad(&g, geo)
        })?;
        let dx = grad(need[0], x, x.shape(), &|| {
            dispatch::conv2d_input_grad(&g, &weight.contiguous()?, geo)
        })?;
        let dw = grad(need[1], weight, weight.shape(), &|| {
            dispatch::conv2d_weight_grad(&g, &x.contiguous()?, geo)
        })?;
        Ok([dx, dw, db])
    }

    /// Max pooling of the 4-d f32 `self` by its backend's own kernel: the maxima (recorded for
    /// autograd) and, when `want_indices`, their plane offsets as a u32 tensor, both
    /// `[n, c, oh, ow]`.
    pub(super) fn max_pool2d_cpu(
        &self,
        geo: PoolGeom,
        want_indices: bool,
    ) -> Result<(Tensor, Option<Tensor>)> {
        let x = self.contiguous()?;
        let (v, idx) =
            dispatch::max_pool2d(&x, &geo)?.ok_or_else(|| x.unsupported("max_pool2d"))?;
        let shape = [self.shape()[0], self.shape()[1], geo.out[0], geo.out[1]];
        let values = self.derived(v, &shape);
        let idx = Arc::new(idx);
        let indices = want_indices
            .then(|| -> Result<Tensor> {
                let s = dispatch::create::from_vec("max_pool2d", idx.to_vec(), self.device())?;
                Ok(Tensor::from_parts(
                    s,
                    &shape,
                    DType::U32,
                    self.device().clone(),
                ))
            })
            .transpose()?;
        let values = crate::autograd::conv::max_pool2d_cpu(self, geo, idx, values);
        Ok((values, indices))
    }

    /// The input gradient of [`Tensor::max_pool2d_cpu`] from the output gradient `g`.
    pub(crate) fn max_pool2d_cpu_grad(
        x: &Tensor,
        g: &Tensor,
        idx: &[u32],
        geo: &PoolGeom,
    ) -> Result<Tensor> {
        let g = g.contiguous()?;
        let dx = dispatch::max_pool2d_backward(&g, idx, geo)?
            .ok_or_else(|| g.unsupported("max_pool2d backward"))?;
        Ok(x.derived(dx, x.shape()))
    }

    /// Whether batch norm of `self` with these parameters and statistics runs the backend's own
    /// kernel: every operand an f32 tensor on such a backend, weight and bias both or neither.
    pub(crate) fn batch_norm_on_cpu(&self, operands: &[Option<&Tensor>], affine: bool) -> bool {
        let f32_cpu = |t: &Tensor| dispatch::conv::own_conv(&[t]) && t.dtype() == DType::F32;
        self.ndim() == 4
            && f32_cpu(self)
            && self.numel() > 0
            && operands.iter().flatten().all(|t| f32_cpu(t))
            && operands[..2].iter().all(|t| t.is_some() == affine)
    }

    /// Batch norm of the 4-d f32 `self` (on a backend checked by [`Tensor::batch_norm_on_cpu`])
    /// per channel (dim 1) as one autograd node, with
    /// `operands` = `[weight, bias, running_mean, running_var]`: the batch's statistics when
    /// the running ones are `None` (training), else those. Returns the output and the
    /// per-channel mean and biased variance it used.
    pub(crate) fn batch_norm_cpu(
        &self,
        operands: [Option<&Tensor>; 4],
        eps: f32,
    ) -> Result<(Tensor, Vec<f32>, Vec<f32>)> {
        let op = "batch_norm";
        let &[n, c, h, w] = self.shape() else {
            return Err(crate::Error::InvalidArgument {
                op,
                message: format!("input must be [N, C, H, W], got {:?}", self.shape()),
            });
        };
        let geo = BnGeom { n, c, hw: h * w };
        let packed = |t: Option<&Tensor>| t.map(|t| t.contiguous()).transpose();
        let [wt, bt, rm, rv] = operands.map(packed);
        let (x, wt, bt, rm, rv) = (self.contiguous()?, wt?, bt?, rm?, rv?);
        // The running statistics both or neither: the batch's own when either is missing.
        let (rm, rv) = match (rm, rv) {
            (Some(m), Some(v)) => (Some(m), Some(v)),
            _ => (None, None),
        };
        let train = rm.is_none();
        let f = dispatch::conv::batch_norm(
            &x,
            &geo,
            [wt.as_ref(), bt.as_ref(), rm.as_ref(), rv.as_ref()],
            eps,
        )?
        .ok_or_else(|| x.unsupported(op))?;
        let out = self.derived(f.y, self.shape());
        let saved = (Arc::new(f.mean.clone()), Arc::new(f.std));
        let [weight, bias, ..] = operands;
        let y = crate::autograd::conv::batch_norm_cpu(self, [weight, bias], geo, saved, train, out);
        Ok((y, f.mean, f.var))
    }

    /// The gradients of [`Tensor::batch_norm_cpu`] (`dx`, `dweight`, `dbias`) from the output
    /// gradient `g`.
    pub(crate) fn batch_norm_cpu_grads(
        x: &Tensor,
        weight: Option<&Tensor>,
        g: &Tensor,
        geo: &BnGeom,
        (mean, std): (&[f32], &[f32]),
        train: bool,
    ) -> Result<[Tensor; 3]> {
        let op = "batch_norm backward";
        let (xc, g) = (x.contiguous()?, g.contiguous()?);
        let w = weight.map(|w| w.contiguous()).transpose()?;
        let spec = BnBackward {
            geo,
            mean,
            std,
            train,
        };
        let [dx, dw, db] = dispatch::conv::batch_norm_backward(&xc, &g, w.as_ref(), &spec)?
            .ok_or_else(|| g.unsupported(op))?;
        Ok([
            x.derived(dx, x.shape()),
            x.derived(dw, &[geo.c]),
            x.derived(db, &[geo.c]),
        ])
    }
}
