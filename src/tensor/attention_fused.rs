//! The fused path of [`Tensor::scaled_dot_product_attention`]: one kernel streams keys and
//! values once per block of queries with an online softmax (`cpu/attention.rs`,
//! `shaders/attention.wgsl`), keeps only the per-row log-sum-exp, and the backward recomputes
//! the scores block by block. Memory grows with `L + S`, never with `L × S` (except a float
//! mask's own gradient, which has the mask's size).
//!
//! It serves f32 attention on every device; other dtypes and empty shapes take the composed
//! path (matmul, mask, softmax, matmul), which also stays as the reference the tests compare
//! against (`testing::force_attention`).

use super::Tensor;
use super::{backend, Backend, Data};
use crate::autograd::elementwise::sum_to;
use crate::cpu::attention::{self as ca, Dropout, MaskView, RowsAt, Spec};
use crate::cpu::attention_backward as cab;
use crate::gpu::attention::{AttnParams, GpuDropout, GpuMask, Operand};
use crate::shape::{broadcast_shapes, Layout};
use crate::storage::CpuStorage;
use crate::{DType, Error, Result};
use std::cell::Cell;

const OP: &str = "scaled_dot_product_attention";

thread_local! {
    /// `Some(true)`: always fused where it applies; `Some(false)`: always composed.
    static FORCE: Cell<Option<bool>> = const { Cell::new(None) };
}

/// Forces the fused (`Some(true)`) or composed (`Some(false)`) attention on this thread, or
/// returns to the default (`None`: fused wherever it applies).
pub(crate) fn force(mode: Option<bool>) {
    FORCE.with(|f| f.set(mode));
}

/// The mask as the kernels read it: f32, viewed as `[batch.., L, S]` through strides.
struct Mask {
    /// f32 values (a boolean mask as `0 / -inf`), expanded (a view) to `[batch.., L, S]`.
    view: Tensor,
    replace: bool,
    /// The user's float mask when its gradient is wanted.
    grad_of: Option<Tensor>,
}

/// Everything the kernels need, prepared from the user's tensors.
struct Problem {
    batch_shape: Vec<usize>,
    spec: (usize, usize, usize, usize, usize),
    scale: f32,
    causal: bool,
    dropout: Option<Dropout>,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Option<Mask>,
}

impl Problem {
    fn full(&self, rows: usize, cols: usize) -> Vec<usize> {
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

/// One `scaled_dot_product_attention` call: its operands and options, checked by the caller
/// (dims that line up, `dropout_p` in `[0, 1)`, the scale resolved).
#[derive(Clone, Copy)]
pub(crate) struct Call<'a> {
    pub q: &'a Tensor,
    pub k: &'a Tensor,
    pub v: &'a Tensor,
    pub mask: Option<&'a Tensor>,
    pub causal: bool,
    pub dropout_p: f32,
    pub scale: f32,
}

/// The fused attention, or `None` when it does not apply (the caller composes it).
pub(crate) fn try_fused(call: Call<'_>) -> Result<Option<Tensor>> {
    let Call { q, k, v, mask, .. } = call;
    match FORCE.with(Cell::get) {
        Some(false) => return Ok(None),
        // Decided before `prepare` draws the dropout's counter range, so the composed path
        // draws the same range.
        None if !fused_by_default(q, k, v, mask) => return Ok(None),
        _ => {}
    }
    let Some(p) = prepare(call)? else {
        if FORCE.with(Cell::get) == Some(true) {
            return Err(Error::InvalidArgument {
                op: OP,
                message: format!(
                    "the fused kernels do not serve q {:?} {} on {} (f32, no empty dims, \
                     indices within u32 on a GPU); testing::force_attention(Some(\"fused\")) requires them",
                    q.shape(),
                    q.dtype(),
                    q.device()
                ),
            });
        }
        return Ok(None);
    };
    let (out, lse) = crate::no_grad_scope(|| forward(&p))?;
    let float_mask = p.mask.as_ref().and_then(|m| m.grad_of.clone());
    let mut inputs = vec![q, k, v];
    if let Some(m) = &float_mask {
        inputs.push(m);
    }
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape().to_vec()).collect();
    let saved_out = out.clone();
    Ok(Some(crate::autograd::record(
        "scaled_dot_product_attention",
        out,
        &inputs,
        move |g, needs| {
            let grads = crate::no_grad_scope(|| backward(&p, &saved_out, &lse, g, needs))?;
            grads
                .into_iter()
                .zip(&shapes)
                .map(|(g, shape)| g.map(|g| sum_to(g, shape)).transpose())
                .collect()
        },
    )))
}

/// Whether the fused kernels are the default for these operands: always on the CPU; on a GPU
/// as [`crate::gpu::GpuDevice::attention_prefers_fused`] rules by size and adapter. Shapes
/// that do not line up answer true and are left to `prepare`'s errors.
fn fused_by_default(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>) -> bool {
    let Backend::Gpu(g) = backend(q.device()) else {
        return true;
    };
    let lead = |t: &Tensor| t.shape()[..t.ndim().saturating_sub(2)].to_vec();
    let mut batch_shape = lead(q);
    for t in [Some(k), Some(v), mask].into_iter().flatten() {
        match broadcast_shapes(OP, &batch_shape, &lead(t)) {
            Ok(b) => batch_shape = b,
            Err(_) => return true,
        }
    }
    let dim = |t: &Tensor| {
        t.shape()
            .get(t.ndim().wrapping_sub(2))
            .copied()
            .unwrap_or(1)
    };
    g.attention_prefers_fused(batch_shape.iter().product(), dim(q), dim(k))
}

/// The problem, or `None` where the fused kernels do not apply.
fn prepare(call: Call<'_>) -> Result<Option<Problem>> {
    let Call {
        q,
        k,
        v,
        mask,
        causal,
        dropout_p,
        scale,
    } = call;
    if [q, k, v].iter().any(|t| t.dtype() != DType::F32)
        || mask.is_some_and(|m| !matches!(m.dtype(), DType::F32 | DType::U8))
        || [k, v]
            .iter()
            .chain(mask.as_ref())
            .any(|t| t.device() != q.device())
    {
        return Ok(None);
    }
    let lead = |t: &Tensor| t.shape()[..t.ndim() - 2].to_vec();
    let mut batch_shape = broadcast_shapes(OP, &lead(q), &lead(k))?;
    batch_shape = broadcast_shapes(OP, &batch_shape, &lead(v))?;
    let (l, e) = (q.shape()[q.ndim() - 2], q.shape()[q.ndim() - 1]);
    let (s, ev) = (k.shape()[k.ndim() - 2], v.shape()[v.ndim() - 1]);
    if let Some(m) = mask {
        let ms = m.shape();
        let mlead = &ms[..ms.len().saturating_sub(2)];
        batch_shape = broadcast_shapes(OP, &batch_shape, mlead)?;
        // The mask's own last two dims must broadcast to [L, S].
        let tail = &ms[ms.len().saturating_sub(2)..];
        broadcast_shapes(OP, tail, &[l, s]).and_then(|t| {
            if t == [l, s] {
                Ok(())
            } else {
                Err(Error::ShapeMismatch {
                    op: OP,
                    lhs: ms.to_vec(),
                    rhs: vec![l, s],
                })
            }
        })?;
    }
    // Checked (debug and release alike): shapes whose products overflow are a typed error.
    let overflow = || Error::ShapeOverflow {
        shape: [batch_shape.as_slice(), &[l, s]].concat(),
    };
    let batch = batch_shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(overflow)?;
    if [batch, l, s, e, ev].contains(&0) {
        return Ok(None);
    }
    let scores = batch
        .checked_mul(l)
        .and_then(|x| x.checked_mul(s))
        .ok_or_else(overflow)?;
    if q.is_gpu() {
        let dims = AttnParams {
            batch_shape: Vec::new(),
            dims: (batch, l, s, e, ev),
            scale,
            causal,
            mask: None,
            dropout: None,
        };
        if !dims.supported() {
            return Ok(None);
        }
    }
    let dropout = (dropout_p > 0.0).then(|| {
        let (seed, offset) = crate::random::take(scores);
        Dropout {
            p: dropout_p,
            seed,
            offset,
        }
    });
    // In the full shape `[batch.., rows, cols]`. The CPU kernels read any view whose rows
    // are unit-stride in place (a head split, a broadcast); a GPU's read packed buffers.
    let on_gpu = q.is_gpu();
    let packed = |t: &Tensor, rows: usize, cols: usize| -> Result<Tensor> {
        let mut shape = batch_shape.clone();
        shape.extend([rows, cols]);
        let x = t.detach().expand(&shape)?;
        if !on_gpu && (cols == 1 || x.layout().strides.last() == Some(&1)) {
            return Ok(x);
        }
        x.contiguous()
    };
    let (qp, kp, vp) = crate::no_grad_scope(|| -> Result<_> {
        Ok((packed(q, l, e)?, packed(k, s, e)?, packed(v, s, ev)?))
    })?;
    let mask = match mask {
        None => None,
        Some(m) => {
            let mut full = batch_shape.clone();
            full.extend([l, s]);
            let replace = m.dtype() == DType::U8;
            let values = crate::no_grad_scope(|| -> Result<Tensor> {
                let f = if replace {
                    let zero = Tensor::zeros(&[1], DType::F32, m.device())?;
                    let gone = Tensor::full(&[1], f64::NEG_INFINITY, DType::F32, m.device())?;
                    m.where_cond(&zero, &gone)?
                } else {
                    m.detach()
                };
                // Materialised in its own shape (pending programs and odd views resolved),
                // then broadcast by strides.
                f.contiguous()?.expand(&full)
            })?;
            Some(Mask {
                view: values,
                replace,
                grad_of: (!replace).then(|| m.clone()),
            })
        }
    };
    Ok(Some(Problem {
        batch_shape,
        spec: (batch, l, s, e, ev),
        scale,
        causal,
        dropout,
        q: qp,
        k: kp,
        v: vp,
        mask,
    }))
}

/// `(out [batch.., L, Ev], lse [batch, L])`.
fn forward(p: &Problem) -> Result<(Tensor, Tensor)> {
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

/// Gradients of the recorded inputs (q, k, v, and the float mask when it is one), each in
/// the full shape.
fn backward(
    p: &Problem,
    out: &Tensor,
    lse: &Tensor,
    g: &Tensor,
    needs: &[bool],
) -> Result<Vec<Option<Tensor>>> {
    let (batch, l, s, e, ev) = p.spec;
    let want_ds = needs.get(3).copied().unwrap_or(false);
    // D = rowsum(dO ∘ O), the softmax backward's per-row term: `[batch.., L]`, packed.
    let d = g.mul(out)?.sum(-1, false)?.contiguous()?;
    let (dq, dk, dv, ds) = match p.q.data()? {
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
    };
    let mut grads = vec![
        needs[0].then_some(dq),
        needs[1].then_some(dk),
        needs[2].then_some(dv),
    ];
    if needs.len() > 3 {
        grads.push(ds.filter(|_| want_ds));
    }
    Ok(grads)
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
