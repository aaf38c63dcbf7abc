//! The fused attention's dispatch (`tensor/attention_fused.rs`): the CPU kernels
//! (`cpu/attention.rs`, `cpu/attention_backward.rs`) read the operands' views in place and write
//! their outputs in the operands' dim order; a GPU's (`gpu/attention.rs`) read packed buffers
//! and return one flat buffer per pass, split here into the outputs.

use super::{backend, Backend, Data};
use crate::cpu::attention::{self as ca, MaskView, RowsAt, Spec};
use crate::cpu::attention_backward as cab;
use crate::gpu::attention::{AttnParams, GpuDropout, GpuMask, Operand};
use crate::ops::backend::Dropout;
use crate::shape::Layout;
use crate::storage::CpuStorage;
use crate::{Device, Error, Result, Tensor};

const OP: &str = "scaled_dot_product_attention";

/// `(dq, dk, dv, ds)` of one backward pass.
type Grads = (Tensor, Tensor, Tensor, Option<Tensor>);

/// Whether the fused kernels are the default on `device` for `batch` problems of `l` queries
/// and `s` keys: always on the CPU; on a GPU as
/// [`crate::gpu::GpuDevice::attention_prefers_fused`] rules by size and adapter.
pub(crate) fn fused_by_default(device: &Device, batch: usize, l: usize, s: usize) -> bool {
    match backend(device) {
        Backend::Cpu => true,
        Backend::Gpu(g) => g.attention_prefers_fused(batch, l, s),
    }
}

/// Whether `device`'s kernels serve these dims (a GPU's indices must fit in u32).
pub(crate) fn supported(device: &Device, dims: (usize, usize, usize, usize, usize)) -> bool {
    match backend(device) {
        Backend::Cpu => true,
        Backend::Gpu(_) => AttnParams {
            batch_shape: Vec::new(),
            dims,
            scale: 1.0,
            causal: false,
            mask: None,
            dropout: None,
        }
        .supported(),
    }
}

/// Whether `device`'s kernels read any view whose rows are unit-stride in place (a head
/// split, a broadcast); a GPU's read packed buffers.
pub(crate) fn reads_views(device: &Device) -> bool {
    matches!(backend(device), Backend::Cpu)
}

/// The mask as the kernels read it: f32, viewed as `[batch.., L, S]` through strides.
pub(crate) struct Mask {
    /// f32 values (a boolean mask as `0 / -inf`), expanded (a view) to `[batch.., L, S]`.
    pub(crate) view: Tensor,
    /// A boolean mask: the kernels replace masked scores instead of adding to them.
    pub(crate) replace: bool,
    /// The user's float mask when its gradient is wanted.
    pub(crate) grad_of: Option<Tensor>,
}

/// Everything the kernels need, prepared from the user's tensors.
pub(crate) struct Problem {
    /// The broadcast batch dims of q, k, v and the mask.
    pub(crate) batch_shape: Vec<usize>,
    /// `(batch, L, S, E, Ev)`.
    pub(crate) spec: (usize, usize, usize, usize, usize),
    pub(crate) scale: f32,
    pub(crate) causal: bool,
    pub(crate) dropout: Option<Dropout>,
    /// The operands in the full shape, laid out as [`reads_views`] allows.
    pub(crate) q: Tensor,
    pub(crate) k: Tensor,
    pub(crate) v: Tensor,
    pub(crate) mask: Option<Mask>,
}

impl Problem {
    /// The full shape `[batch.., rows, cols]`.
    pub(crate) fn full(&self, rows: usize, cols: usize) -> Vec<usize> {
        let mut s = self.batch_shape.clone();
        s.extend([rows, cols]);
        s
    }

    /// The CPU spec over this problem's host data; the forward's output goes where `o_at` says.
    fn cpu_spec<'a>(&self, mask: Option<MaskView<'a>>, o_at: RowsAt) -> Spec<'a> {
        let (batch, l, s, e, ev) = self.spec;
        Spec {
            batch,
            l,
            s,
            e,
            ev,
            scale: self.scale,
            causal: self.causal,
            mask,
            dropout: self.dropout,
            q_at: self.rows_at(&self.q),
            k_at: self.rows_at(&self.k),
            v_at: self.rows_at(&self.v),
            o_at,
        }
    }

    /// The storage offset of every batch's first element in the view `lay` (batch dims first).
    fn batch_offsets(&self, lay: &Layout) -> Vec<usize> {
        let nb = self.batch_shape.len();
        (0..self.spec.0)
            .map(|b| {
                let (mut rem, mut at) = (b, lay.offset);
                for d in (0..nb).rev() {
                    let n = self.batch_shape[d];
                    at += (rem % n) * lay.strides[d];
                    rem /= n;
                }
                at
            })
            .collect()
    }

    /// Where the rows of the full-shape view `t` (unit-stride rows) sit in its storage.
    fn rows_at(&self, t: &Tensor) -> RowsAt {
        let lay = t.layout();
        RowsAt {
            offs: self.batch_offsets(lay),
            rs: lay.strides[self.batch_shape.len()],
        }
    }

    /// A new `[batch.., rows, cols]` buffer's layout laid out in `t`'s dim order (outermost in
    /// memory first, cols innermost): an output shaped like a head-split view `t` (`[N, L, H,
    /// D]` seen as `[N, H, L, D]`) then merges its heads back without a copy.
    fn like(&self, t: &Tensor, rows: usize, cols: usize) -> Like {
        let full = self.full(rows, cols);
        let nd = full.len();
        let st = &t.layout().strides;
        let mut order: Vec<usize> = (0..nd - 1).collect();
        // Stable: dims of equal stride (size 1, or broadcast) keep their logical order.
        order.sort_by(|&a, &b| st[b].cmp(&st[a]));
        order.push(nd - 1);
        let phys: Vec<usize> = order.iter().map(|&d| full[d]).collect();
        let packed = Layout::contiguous(&phys);
        let mut strides = vec![0; nd];
        let mut inv = vec![0isize; nd];
        for (i, &d) in order.iter().enumerate() {
            strides[d] = packed.strides[i];
            inv[d] = i as isize;
        }
        let lay = Layout {
            shape: full,
            strides,
            offset: 0,
        };
        let at = RowsAt {
            offs: self.batch_offsets(&lay),
            rs: lay.strides[nd - 2],
        };
        Like { phys, inv, at }
    }

    fn mask_view(&self) -> Result<Option<MaskView<'_>>> {
        let Some(m) = &self.mask else {
            return Ok(None);
        };
        let data = m.view.host_f32(OP)?;
        let lay = m.view.layout();
        let nb = self.batch_shape.len();
        Ok(Some(MaskView {
            data,
            batch_offsets: self.batch_offsets(lay),
            row_stride: lay.strides[nb],
            col_stride: lay.strides[nb + 1],
            replace: m.replace,
        }))
    }
}

/// An output buffer's layout from [`Problem::like`]: packed as `phys`, viewed through the
/// permutation `inv` in the problem's full shape, its rows where `at` says.
struct Like {
    phys: Vec<usize>,
    inv: Vec<isize>,
    at: RowsAt,
}

impl Like {
    /// `data` (laid out as this says) as a tensor of `like`'s device, in the full shape.
    fn view(&self, like: &Tensor, data: Vec<f32>) -> Result<Tensor> {
        like.derived(CpuStorage::F32(data), &self.phys)
            .permute(&self.inv)
    }
}

impl Tensor {
    /// This f32 tensor's host data from its view's offset (packed tensors only use it whole).
    fn cpu_data(&self) -> Result<&[f32]> {
        let all = self.host_f32(OP)?;
        Ok(&all[self.layout().offset..])
    }
}

/// `(out [batch.., L, Ev], lse [batch, L])`.
pub(crate) fn forward(p: &Problem) -> Result<(Tensor, Tensor)> {
    let (batch, l, _, _, ev) = p.spec;
    match p.q.data()? {
        Data::Cpu(_) => {
            // The output in q's dim order (see `Problem::like`).
            let o_like = p.like(&p.q, l, ev);
            let spec = p.cpu_spec(p.mask_view()?, o_like.at.clone());
            let (q, k, v) = (p.q.host_f32(OP)?, p.k.host_f32(OP)?, p.v.host_f32(OP)?);
            let (o, lse) = ca::forward(&spec, q, k, v);
            Ok((
                o_like.view(&p.q, o)?,
                p.q.derived(CpuStorage::F32(lse), &[batch, l]),
            ))
        }
        Data::Gpu(qb) => {
            let params = gpu_params(p)?;
            let buf = qb.device.attention_forward(
                OP,
                &params,
                [operand(&p.q)?, operand(&p.k)?, operand(&p.v)?],
            )?;
            let flat = p.q.derived(buf, &[batch * l * ev + batch * l]);
            Ok((
                flat.narrow(0, 0, batch * l * ev)?.reshape(&p.full(l, ev))?,
                flat.narrow(0, batch * l * ev, batch * l)?
                    .reshape(&[batch, l])?,
            ))
        }
    }
}

/// The gradients `(dq, dk, dv, ds)` in the full shape from the forward's `lse`, the upstream
/// gradient `g` and `d = rowsum(dO ∘ O)`; `ds` (the float mask's) only when `want_ds`.
pub(crate) fn backward(
    p: &Problem,
    lse: &Tensor,
    g: &Tensor,
    d: &Tensor,
    want_ds: bool,
) -> Result<Grads> {
    let (batch, l, s, e, ev) = p.spec;
    Ok(match p.q.data()? {
        Data::Cpu(_) => {
            // The upstream gradient read in place when its rows are unit-stride; the
            // gradients written in their operands' dim order (see `Problem::like`).
            let g = if ev == 1 || g.layout().strides.last() == Some(&1) {
                g.clone()
            } else {
                g.contiguous()?
            };
            let lse_c = lse.contiguous()?;
            let (dq_l, dk_l, dv_l) = (p.like(&p.q, l, e), p.like(&p.k, s, e), p.like(&p.v, s, ev));
            let spec = p.cpu_spec(p.mask_view()?, RowsAt::packed(batch, l, ev));
            let saved = cab::Saved {
                q: p.q.host_f32(OP)?,
                k: p.k.host_f32(OP)?,
                v: p.v.host_f32(OP)?,
                lse: lse_c.cpu_data()?,
                g: g.host_f32(OP)?,
                g_at: p.rows_at(&g),
                d: d.cpu_data()?,
                dq_at: dq_l.at.clone(),
                dk_at: dk_l.at.clone(),
                dv_at: dv_l.at.clone(),
            };
            let r = cab::backward(&spec, &saved, want_ds);
            (
                dq_l.view(&p.q, r.dq)?,
                dk_l.view(&p.q, r.dk)?,
                dv_l.view(&p.q, r.dv)?,
                r.ds.map(|v| p.q.derived(CpuStorage::F32(v), &p.full(l, s))),
            )
        }
        Data::Gpu(qb) => {
            let g = g.contiguous()?;
            let params = gpu_params(p)?;
            let stats = Tensor::cat(&[&lse.reshape(&[batch * l])?, &d.reshape(&[batch * l])?], 0)?;
            let (dq, dkv) = qb.device.attention_backward(
                OP,
                &params,
                [
                    operand(&p.q)?,
                    operand(&p.k)?,
                    operand(&p.v)?,
                    operand(&g)?,
                    operand(&stats)?,
                ],
                want_ds,
            )?;
            let dq_len = batch * l * e;
            let dq =
                p.q.derived(dq, &[dq_len + if want_ds { batch * l * s } else { 0 }]);
            let dk_len = batch * s * e;
            let dkv = p.q.derived(dkv, &[dk_len + batch * s * ev]);
            (
                dq.narrow(0, 0, dq_len)?.reshape(&p.full(l, e))?,
                dkv.narrow(0, 0, dk_len)?.reshape(&p.full(s, e))?,
                dkv.narrow(0, dk_len, batch * s * ev)?
                    .reshape(&p.full(s, ev))?,
                want_ds
                    .then(|| dq.narrow(0, dq_len, batch * l * s)?.reshape(&p.full(l, s)))
                    .transpose()?,
            )
        }
    })
}

/// A GPU tensor's buffer and first element.
fn operand(t: &Tensor) -> Result<Operand<'_>> {
    let b = t.gpu_data()?.ok_or_else(|| Error::DeviceMismatch {
        op: OP,
        lhs: "a GPU".into(),
        rhs: t.device().to_string(),
    })?;
    Ok((b, t.layout().offset))
}

/// The problem as the GPU kernels' parameters.
fn gpu_params(p: &Problem) -> Result<AttnParams<'_>> {
    let nb = p.batch_shape.len();
    let mask = match &p.mask {
        None => None,
        Some(m) => {
            let (buffer, base) = operand(&m.view)?;
            let st = &m.view.layout().strides;
            Some(GpuMask {
                buffer,
                base,
                row: st[nb],
                col: st[nb + 1],
                batch_strides: st[..nb].to_vec(),
                replace: m.replace,
            })
        }
    };
    Ok(AttnParams {
        batch_shape: p.batch_shape.clone(),
        dims: p.spec,
        scale: p.scale,
        causal: p.causal,
        mask,
        dropout: p.dropout.map(|d| GpuDropout {
            p: d.p,
            factor: 1.0 / (1.0 - d.p),
            seed: d.seed,
            offset: d.offset,
        }),
    })
}
