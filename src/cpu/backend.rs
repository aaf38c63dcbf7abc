//! The CPU's side of the backend interface (`crate::ops::backend::BackendStorage`): which host
//! kernel runs each op the tensor layer asks for. The kernels themselves live in their family's
//! file; the choices between them (gemm or a matrix-vector kernel for an f16 weight) live here,
//! so the tensor layer never names a CPU function.

use super::storage::CpuStorage;
use super::{
    adam, attention_decode as decode, batch_norm, conv, conv_direct, cross_entropy as ce,
    elementwise, f16_weight, gather, join, matmul, norm, pool, reduce, softmax, typed,
};
use crate::ops::backend::{
    Affine, BackendStorage, BnBackward, BnForward, Cat, CeBackward, CeRows, Gather, IdsView,
    MatmulSpec, NormGrads, NormSpec, OpIds, ReduceCall, Scalar, Scatter, View,
};
use crate::ops::geometry::{AdamStep, BnGeom, DecodeDims, Geom, PoolGeom};
use crate::ops::{BinaryOp, CmpOp, RowOp, UnaryOp};
use crate::shape::Layout;
use crate::{DType, Error, Result};
use half::f16;

/// The f32 data of `s`, or `None` for another dtype (the CPU's conv kernels are f32 only).
fn f32s(s: &CpuStorage) -> Option<&[f32]> {
    match s {
        CpuStorage::F32(v) => Some(v),
        _ => None,
    }
}

/// The data of the view `l` of `s` packed from offset 0: `s` itself when it already is (read in
/// place), else a packed copy held by the caller in `keep`.
fn packed<'a>(
    s: &'a CpuStorage,
    l: &Layout,
    keep: &'a mut Option<CpuStorage>,
) -> Result<&'a CpuStorage> {
    if l.is_contiguous() && l.offset == 0 {
        return Ok(s);
    }
    Ok(keep.insert(s.contiguous(l)?))
}

/// The elements of `v` from `offset` on (a packed view's, read in place).
fn from(v: &[f32], offset: usize) -> &[f32] {
    v.get(offset..).unwrap_or_default()
}

/// The f32 elements of the packed view `l` of `s` (read in place); `None` for another dtype
/// or a strided view.
fn packed_f32<'a>(s: &'a CpuStorage, l: &Layout) -> Option<&'a [f32]> {
    if !l.is_contiguous() {
        return None;
    }
    f32s(s)?.get(l.offset..l.offset + l.numel())
}

/// `f` of the f32 data of `a` and `b` as f32 storage; `None` when either holds another dtype
/// (the f32-only kernels' common refusal).
fn on_f32s(
    a: &CpuStorage,
    b: &CpuStorage,
    f: impl FnOnce(&[f32], &[f32]) -> Result<Vec<f32>>,
) -> Result<Option<CpuStorage>> {
    let (Some(a), Some(b)) = (f32s(a), f32s(b)) else {
        return Ok(None);
    };
    f(a, b).map(|v| Some(CpuStorage::F32(v)))
}

/// The first `n` elements of `v` (the view's, when the storage holds more), or all of `v`.
fn head(v: &[f32], n: usize) -> &[f32] {
    v.get(..n).unwrap_or(v)
}

impl BackendStorage for CpuStorage {
    const FUSED_ADAM: bool = true;

    fn matmul(&self, rhs: &Self, spec: &MatmulSpec) -> Result<Option<(Self, DType)>> {
        Ok(match (self, rhs) {
            (CpuStorage::F32(a), CpuStorage::F32(b)) => Some((
                CpuStorage::F32(matmul::matmul(a, spec.la, b, spec.lb)?),
                DType::F32,
            )),
            // f16 weights read in place where the layouts allow; elsewhere the caller multiplies
            // f32 copies (gemm has no f16 kernel here).
            _ => f16_weight::matmul_t::<f16>(self, spec.la, rhs, spec.lb)?.map(|s| (s, DType::F16)),
        })
    }

    fn matmul_bias(
        &self,
        rhs: &Self,
        spec: &MatmulSpec,
        bias: &Self,
        bias_offset: usize,
    ) -> Result<Option<Self>> {
        let (CpuStorage::F32(a), CpuStorage::F32(b), CpuStorage::F32(c)) = (self, rhs, bias) else {
            return Ok(None);
        };
        let n = spec.lb.shape[spec.lb.shape.len() - 1];
        let Some(c) = c.get(bias_offset..bias_offset + n) else {
            return Ok(None);
        };
        Ok(Some(CpuStorage::F32(matmul::matmul_bias(
            a,
            spec.la,
            b,
            spec.lb,
            Some(c),
        )?)))
    }

    fn matmul_t_f16_weight(&self, w: &Self, spec: &MatmulSpec) -> Result<Option<Self>> {
        f16_weight::matmul_t::<f32>(self, spec.la, w, spec.lb)
    }

    fn matmul_kernel_name(&self, _spec: &MatmulSpec) -> &'static str {
        "gemm"
    }

    fn softmax(&self, op: RowOp, layout: &Layout, d: usize) -> Result<Option<Self>> {
        let CpuStorage::F32(v) = self else {
            return Ok(None);
        };
        Ok(Some(CpuStorage::F32(softmax::softmax(op, v, layout, d))))
    }

    fn conv2d(&self, weight: &Self, bias: Option<&Self>, geo: &Geom) -> Result<Option<Self>> {
        let (Some(x), Some(w)) = (f32s(self), f32s(weight)) else {
            return Ok(None);
        };
        let b = match bias {
            Some(b) => match f32s(b) {
                Some(b) => Some(b),
                None => return Ok(None),
            },
            None => None,
        };
        // Stride-1 shapes the direct kernels cover run them; the rest unfold blocks for gemm.
        let y = if conv_direct::fits(geo) {
            conv_direct::conv2d(x, w, b, geo)?
        } else {
            conv::conv2d(x, w, b, geo)?
        };
        Ok(Some(CpuStorage::F32(y)))
    }

    fn conv2d_input_grad(&self, weight: &Self, geo: &Geom) -> Result<Option<Self>> {
        on_f32s(self, weight, |g, w| {
            match conv_direct::input_grad_fits(geo) {
                true => conv_direct::conv2d_input_grad(g, w, geo),
                false => conv::conv2d_input_grad(g, w, geo),
            }
        })
    }

    fn conv2d_weight_grad(&self, x: &Self, geo: &Geom) -> Result<Option<Self>> {
        on_f32s(x, self, |x, g| match conv_direct::fits(geo) {
            true => conv_direct::conv2d_weight_grad(x, g, geo),
            false => conv::conv2d_weight_grad(x, g, geo),
        })
    }

    fn conv2d_bias_grad(&self, geo: &Geom) -> Result<Option<Self>> {
        Ok(f32s(self).map(|g| CpuStorage::F32(conv::conv2d_bias_grad(g, geo))))
    }

    fn max_pool2d(&self, geo: &PoolGeom) -> Result<Option<(Self, Vec<u32>)>> {
        let Some(x) = f32s(self) else {
            return Ok(None);
        };
        let (v, idx) = pool::max_pool2d(x, geo)?;
        Ok(Some((CpuStorage::F32(v), idx)))
    }

    fn max_pool2d_backward(&self, idx: &[u32], geo: &PoolGeom) -> Result<Option<Self>> {
        let Some(g) = f32s(self) else {
            return Ok(None);
        };
        Ok(Some(CpuStorage::F32(pool::max_pool2d_backward(
            g, idx, geo,
        )?)))
    }

    fn unary(&self, op: UnaryOp, layout: &Layout) -> Result<Option<Self>> {
        elementwise::unary(op, self, layout).map(Some)
    }

    fn binary(&self, op: BinaryOp, la: &Layout, rhs: &Self, lb: &Layout) -> Result<Option<Self>> {
        elementwise::binary(op, self, la, rhs, lb).map(Some)
    }

    fn scalar(
        &self,
        op: BinaryOp,
        layout: &Layout,
        s: Scalar,
        first: bool,
    ) -> Result<Option<Self>> {
        elementwise::scalar(op, self, layout, s, first).map(Some)
    }

    fn gelu_backward(&self, lx: &Layout, g: &Self, lg: &Layout) -> Result<Option<Self>> {
        if !(matches!(self, CpuStorage::F32(_)) && matches!(g, CpuStorage::F32(_))) {
            return Ok(None);
        }
        // Packed views are read in place (from offset 0), others are packed first.
        let (mut kx, mut kg) = (None, None);
        let (x, g) = (packed(self, lx, &mut kx)?, packed(g, lg, &mut kg)?);
        on_f32s(x, g, elementwise::gelu_backward)
    }

    fn convert(&self, layout: &Layout, dtype: DType) -> Result<Option<Self>> {
        typed::convert(self, layout, dtype).map(Some)
    }

    fn compare(&self, op: CmpOp, la: &Layout, rhs: &Self, lb: &Layout) -> Result<Option<Self>> {
        Ok(Some(CpuStorage::U8(typed::compare(op, self, la, rhs, lb)?)))
    }

    fn compare_scalar(&self, op: CmpOp, la: &Layout, s: Scalar) -> Result<Option<Self>> {
        Ok(Some(CpuStorage::U8(typed::compare_scalar(
            op, self, la, s,
        )?)))
    }

    fn clamp(&self, layout: &Layout, lo: Scalar, hi: Scalar) -> Result<Option<Self>> {
        typed::clamp(self, layout, lo, hi).map(Some)
    }

    fn where_cond(
        &self,
        lm: &Layout,
        (t, lt): (&Self, &Layout),
        (f, lf): (&Self, &Layout),
    ) -> Result<Option<Self>> {
        let CpuStorage::U8(m) = self else {
            return Ok(None);
        };
        typed::where_cond(m, lm, t, lt, f, lf).map(Some)
    }

    fn reduce(&self, r: &ReduceCall) -> Result<Option<Self>> {
        let (op, rows) = (r.op, r.rows);
        // `rows` holds the view's offset and strides: the kernels index the storage directly.
        Ok(Some(match self {
            CpuStorage::F32(x) if op.is_arg() => CpuStorage::U32(reduce::arg_reduce(op, x, rows)),
            CpuStorage::F32(x) => CpuStorage::F32(reduce::reduce(op, x, rows)),
            _ => typed::reduce_int(op, self, rows)?,
        }))
    }

    fn norm(&self, spec: &NormSpec, (weight, bias): Affine<'_, Self>) -> Result<Option<Self>> {
        // An affine parameter of another dtype is no f32 kernel's input.
        fn param(p: Option<&CpuStorage>) -> Option<Option<&[f32]>> {
            match p {
                Some(p) => f32s(p).map(Some),
                None => Some(None),
            }
        }
        let (Some(x), Some(w), Some(b)) = (f32s(self), param(weight), param(bias)) else {
            return Ok(None);
        };
        let x = head(x, spec.nrows * spec.len);
        Ok(Some(CpuStorage::F32(norm::norm(
            spec.row, x, spec.len, w, b, spec.eps,
        )?)))
    }

    fn norm_backward(
        &self,
        lx: &Layout,
        (g, lg): (&Self, &Layout),
        weight: Option<(&Self, &Layout)>,
        spec: &NormSpec,
        want_wb: bool,
    ) -> Result<Option<NormGrads<Self>>> {
        // One kernel computes every gradient (two passes over each row), on packed operands.
        let (mut kx, mut kg, mut kw) = (None, None, None);
        let (x, g) = (packed(self, lx, &mut kx)?, packed(g, lg, &mut kg)?);
        let w = match weight {
            Some((w, lw)) => match f32s(packed(w, lw, &mut kw)?) {
                Some(w) => Some(w),
                None => return Ok(None),
            },
            None => None,
        };
        let (Some(x), Some(g)) = (f32s(x), f32s(g)) else {
            return Ok(None);
        };
        let n = spec.nrows * spec.len;
        let (dx, wb) = norm::norm_backward(
            spec.row,
            head(x, n),
            head(g, n),
            spec.len,
            w,
            spec.eps,
            want_wb,
        )?;
        Ok(Some((
            CpuStorage::F32(dx),
            wb.map(|(dw, db)| (CpuStorage::F32(dw), CpuStorage::F32(db))),
        )))
    }

    fn check_ids(&self, op: &'static str, view: &IdsView, bound: usize) -> Result<()> {
        gather::host_ids(op, self, view, bound).map(drop)
    }

    fn gather(&self, g: &Gather<'_, Self>) -> Result<Option<Self>> {
        let Some(src) = f32s(self) else {
            return Ok(None);
        };
        let (layout, d) = (g.layout, g.d);
        // Every id is checked before anything runs.
        let host = gather::host_ids(g.ids.op, g.ids.ids, g.ids.view, layout.shape[d])?;
        Ok(Some(CpuStorage::F32(match g.index_shape {
            None => gather::index_select(src, layout, d, &host)?,
            Some(shape) => gather::gather_dim(src, layout, d, &host, shape)?,
        })))
    }

    fn scatter_add(&self, s: &Scatter<'_, Self>) -> Result<Option<Self>> {
        let (OpIds { op, ids, view }, (vals, lv), lb, spec) = (s.ids, s.vals, s.base, s.spec);
        let (Some(base), Some(v)) = (f32s(self), f32s(vals)) else {
            return Ok(None);
        };
        // Every id is checked before anything runs.
        let host = gather::host_ids(op, ids, view, spec.bound)?;
        let past = || Error::InvalidArgument {
            op,
            message: "a packed view past its storage".into(),
        };
        let mut out = base
            .get(lb.offset..lb.offset + lb.numel())
            .ok_or_else(past)?
            .to_vec();
        let v = v.get(lv.offset..).ok_or_else(past)?;
        gather::scatter_add_into(
            &mut out,
            &host,
            spec.shape,
            spec.d,
            spec.out_strides,
            v,
            spec.r,
        )?;
        Ok(Some(CpuStorage::F32(out)))
    }

    fn cat(c: &Cat<'_, Self>) -> Result<Option<Self>> {
        // Elements are only moved: one kernel for every dtype.
        join::cat(c.parts, c.d, c.out_shape).map(Some)
    }

    fn cross_entropy(&self, targets: OpIds<'_, Self>, ce: &CeRows) -> Result<Option<Self>> {
        let OpIds {
            ids: targets, view, ..
        } = targets;
        // Every target is checked before anything runs.
        let t = ce::host_targets("cross_entropy", targets, view, (ce.c, ce.spec))?;
        let Some(x) = f32s(self) else {
            return Ok(None);
        };
        let x = from(x, ce.offset);
        Ok(Some(CpuStorage::F32(ce::rows(x, ce.n, ce.c, &t, ce.spec))))
    }

    fn cross_entropy_backward(&self, b: &CeBackward<'_, Self>) -> Result<Option<Self>> {
        let (ce, (stats, ls), (g, lg)) = (b.ce, b.stats, b.g);
        let t = ce::host_targets(
            "cross_entropy",
            b.targets.ids,
            b.targets.view,
            (ce.c, ce.spec),
        )?;
        let (Some(x), Some(stats), Some(g)) = (f32s(self), f32s(stats), f32s(g)) else {
            return Ok(None);
        };
        Ok(Some(CpuStorage::F32(ce::backward(
            from(x, ce.offset),
            (ce.n, ce.c),
            &t,
            ce.spec,
            from(stats, ls.offset),
            from(g, lg.offset),
        ))))
    }

    fn attention_decode(&self, k: &Self, v: &Self, dims: &DecodeDims) -> Result<Option<Self>> {
        let (Some(q), Some(k), Some(v)) = (f32s(self), f32s(k), f32s(v)) else {
            return Ok(None);
        };
        Ok(Some(CpuStorage::F32(decode::attention_decode(
            q, k, v, *dims,
        ))))
    }

    fn write_bytes(&mut self, at: usize, src: &Self, len: usize) -> Result<()> {
        let (d, s) = (self.as_bytes_mut(), src.as_bytes());
        match (d.get_mut(at..at + len), s.get(..len)) {
            (Some(d), Some(s)) => {
                d.copy_from_slice(s);
                Ok(())
            }
            _ => Err(Error::InvalidArgument {
                op: "write_rows",
                message: format!("bytes {at}.. (+{len}) past a storage"),
            }),
        }
    }

    fn adam_step(
        &self,
        lp: &Layout,
        (g, lg): View<Self>,
        moments: Option<[View<Self>; 2]>,
        hyper: &AdamStep,
    ) -> Result<Option<[Self; 3]>> {
        // Weight gradients often arrive as transposed views of a matmul: pack them once.
        let mut keep = None;
        let g = match lg.is_contiguous() {
            true => packed_f32(g, lg),
            false => f32s(keep.insert(g.contiguous(lg)?)),
        };
        let (Some(ps), Some(gs)) = (packed_f32(self, lp), g) else {
            return Ok(None);
        };
        let old = match moments {
            Some([(m, lm), (v, lv)]) => match (packed_f32(m, lm), packed_f32(v, lv)) {
                (Some(m), Some(v)) if m.len() == ps.len() && v.len() == ps.len() => Some((m, v)),
                _ => return Ok(None),
            },
            None => None,
        };
        if gs.len() != ps.len() {
            return Ok(None);
        }
        let (np, nm, nv) = adam::adam_step(ps, gs, old, hyper)?;
        Ok(Some([np, nm, nv].map(CpuStorage::F32)))
    }

    fn copy_bytes(&self, _op: &'static str, _start: u64, _len: u64) -> Result<Option<Self>> {
        // The host binds nothing: no view is ever split to fit.
        Ok(None)
    }

    // The host runs conv2d, max pooling and batch norm as kernels of its own (direct or
    // unfolded + gemm, two-pass batch norm), in place of the compositions a GPU records.
    const OWN_CONV: bool = true;

    fn batch_norm(
        &self,
        geo: &BnGeom,
        stats: Option<(&Self, &Self)>,
        (weight, bias): Affine<'_, Self>,
        eps: f32,
    ) -> Result<Option<BnForward<Self>>> {
        // Every operand f32 or no kernel: `None` for any other dtype.
        let Some(x) = f32s(self) else {
            return Ok(None);
        };
        fn f32_opt(t: Option<&CpuStorage>) -> Option<Option<&[f32]>> {
            match t {
                Some(t) => f32s(t).map(Some),
                None => Some(None),
            }
        }
        let stats = match stats {
            Some((m, v)) => match (f32s(m), f32s(v)) {
                (Some(m), Some(v)) => Some((m, v)),
                _ => return Ok(None),
            },
            None => None,
        };
        let (Some(weight), Some(bias)) = (f32_opt(weight), f32_opt(bias)) else {
            return Ok(None);
        };
        let f = batch_norm::forward(x, geo, stats, weight, bias, eps)?;
        Ok(Some(BnForward {
            y: CpuStorage::F32(f.y),
            mean: f.mean,
            var: f.var,
            std: f.std,
        }))
    }

    fn batch_norm_backward(
        &self,
        g: &Self,
        weight: Option<&Self>,
        spec: &BnBackward,
    ) -> Result<Option<[Self; 3]>> {
        let BnBackward {
            geo,
            mean,
            std,
            train,
        } = *spec;
        let (Some(x), Some(g)) = (f32s(self), f32s(g)) else {
            return Ok(None);
        };
        let w = match weight.map(f32s) {
            Some(None) => return Ok(None),
            w => w.flatten(),
        };
        let (dx, dw, db) = batch_norm::backward(x, g, geo, mean, std, w, train)?;
        Ok(Some([dx, dw, db].map(CpuStorage::F32)))
    }
}

/// The CPU as a device that makes data (`BackendDevice`): the host has one, with no state.
pub(crate) struct CpuDevice;

impl crate::ops::backend::BackendDevice for CpuDevice {
    type Storage = CpuStorage;

    fn upload(&self, _op: &'static str, bytes: &[u8], dtype: DType) -> Result<CpuStorage> {
        CpuStorage::from_bytes(dtype, bytes)
    }

    fn zeros(&self, op: &'static str, n: usize, dtype: DType) -> Result<CpuStorage> {
        self.filled(op, n, 0.0, dtype)
    }

    fn filled(&self, op: &'static str, n: usize, value: f64, dtype: DType) -> Result<CpuStorage> {
        fn host<T: crate::WithDType>(op: &'static str, n: usize, v: f64) -> Result<CpuStorage> {
            let mut data = super::alloc::try_vec(op, n)?;
            data.resize(n, T::from_f64(v));
            Ok(CpuStorage::from_vec(data))
        }
        match dtype {
            DType::F32 => host::<f32>(op, n, value),
            DType::F16 => host::<half::f16>(op, n, value),
            DType::I32 => host::<i32>(op, n, value),
            DType::U32 => host::<u32>(op, n, value),
            DType::U8 => host::<u8>(op, n, value),
        }
    }

    fn arange(&self, n: usize, start: f32, step: f32) -> Result<Option<CpuStorage>> {
        Ok(Some(CpuStorage::F32(elementwise::arange(n, start, step)?)))
    }

    fn random(
        &self,
        dist: crate::ops::program::Dist,
        seed: u64,
        offset: u64,
        n: usize,
    ) -> Result<Option<CpuStorage>> {
        Ok(Some(CpuStorage::F32(super::normal::sample_host(
            dist, seed, offset, n,
        )?)))
    }

    fn run_fused(&self, call: &crate::ops::backend::ProgramCall<CpuStorage>) -> Result<CpuStorage> {
        super::fused::run(call)
    }

    fn bind_limits(&self) -> Option<crate::ops::backend::BindLimits> {
        None
    }
}
