//! The ops transformer code needs beyond matmul and softmax: triangular masks, `masked_fill`,
//! `logsumexp`, `var`/`std`, `cumsum`, `topk`, multi-dim reductions, slice assignment,
//! and `scaled_dot_product_attention`.
//!
//! Each is composed from recorded ops, so it runs forward and backward on every device and
//! never reads back or uploads: masks come from `arange` and comparisons on the device.

use crate::error::{invalid, mismatch};
use crate::shape::normalize_dim;
use crate::{DType, Device, Result, Tensor};

/// A `[rows, cols]` U8 mask, true where `col - row <= diagonal` (lower) or `>= diagonal`
/// (upper), built on `device`.
fn triangle(
    rows: usize,
    cols: usize,
    diagonal: isize,
    lower: bool,
    device: &Device,
) -> Result<Tensor> {
    let r = Tensor::arange(0.0, rows as f32, 1.0, device)?.reshape(&[rows, 1])?;
    let c = Tensor::arange(0.0, cols as f32, 1.0, device)?.reshape(&[1, cols])?;
    // col - row - diagonal, exact in f32 for any realistic size.
    let diff = c.sub(&r)?.sub_scalar(diagonal as f32)?;
    if lower {
        diff.le_scalar(0.0)
    } else {
        diff.ge_scalar(0.0)
    }
}

fn last_two(op: &'static str, t: &Tensor) -> Result<(usize, usize)> {
    match t.shape() {
        [.., r, c] => Ok((*r, *c)),
        s => Err(invalid(op, format!("needs at least 2 dims, got {s:?}"))),
    }
}

impl Tensor {
    /// The lower triangle of the last two dims (PyTorch's `torch.tril`): elements with
    /// `col - row > diagonal` become 0.
    ///
    /// ```
    /// use wgtensor::{DType, Device, Tensor};
    /// let t = Tensor::ones(&[2, 3], DType::F32, &Device::best())?;
    /// assert_eq!(t.tril(0)?.to_vec::<f32>()?, vec![1.0, 0.0, 0.0, 1.0, 1.0, 0.0]);
    /// assert_eq!(t.triu(1)?.to_vec::<f32>()?, vec![0.0, 1.0, 1.0, 0.0, 0.0, 1.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for fewer than 2 dims; device errors.
    pub fn tril(&self, diagonal: isize) -> Result<Tensor> {
        let (r, c) = last_two("tril", self)?;
        let keep = triangle(r, c, diagonal, true, self.device())?;
        let zero = Tensor::zeros(&[1], self.dtype(), self.device())?;
        keep.where_cond(self, &zero)
    }

    /// The upper triangle of the last two dims (PyTorch's `torch.triu`): elements with
    /// `col - row < diagonal` become 0. See [`Tensor::tril`].
    ///
    /// ```
    /// use wgtensor::{DType, Device, Tensor};
    /// let t = Tensor::ones(&[2, 2], DType::F32, &Device::cpu())?;
    /// assert_eq!(t.triu(0)?.to_vec::<f32>()?, vec![1.0, 1.0, 0.0, 1.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::tril`].
    pub fn triu(&self, diagonal: isize) -> Result<Tensor> {
        let (r, c) = last_two("triu", self)?;
        let keep = triangle(r, c, diagonal, false, self.device())?;
        let zero = Tensor::zeros(&[1], self.dtype(), self.device())?;
        keep.where_cond(self, &zero)
    }

    /// `value` where the U8 `mask` is non-zero, `self` elsewhere (PyTorch's `masked_fill`);
    /// the mask broadcasts to `self`. Gradients flow to the kept elements.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let d = Device::best();
    /// let x = Tensor::from_vec(vec![1f32, 2.0, 3.0], &[3], &d)?;
    /// let m = Tensor::from_vec(vec![0u8, 1, 0], &[3], &d)?;
    /// assert_eq!(x.masked_fill(&m, -1.0)?.to_vec::<f32>()?, vec![1.0, -1.0, 3.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// The errors of [`Tensor::where_cond`] (a non-U8 mask, shapes that do not broadcast).
    pub fn masked_fill(&self, mask: &Tensor, value: f32) -> Result<Tensor> {
        let v = Tensor::full(&[1], value as f64, self.dtype(), self.device())?;
        mask.where_cond(&v, self)
    }

    /// `log(sum(exp(self)))` over `dim`, computed stably (PyTorch's `torch.logsumexp`): the
    /// maximum is subtracted first, so large inputs do not overflow; a slice of only -inf
    /// gives -inf.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![1000f32, 1000.0], &[1, 2], &Device::best())?;
    /// let y = x.logsumexp(-1, false)?.to_vec::<f32>()?;
    /// assert!((y[0] - (1000.0 + std::f32::consts::LN_2)).abs() < 1e-3);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// The errors of the reductions it is made of (a bad dim, a non-float dtype).
    pub fn logsumexp(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        // The shift carries no gradient (it cancels); clamping keeps -inf rows from giving
        // -inf - -inf = NaN.
        let m = self.detach().max(dim, true)?.clamp(-f32::MAX, f32::MAX)?;
        let out = self.sub(&m)?.exp()?.sum(dim, true)?.log()?.add(&m)?;
        if keepdim {
            Ok(out)
        } else {
            out.squeeze(dim)
        }
    }

    /// Variance over `dim` with `correction` (PyTorch's `torch.var(dim, correction=...)`:
    /// 1 is the unbiased estimator, 0 the population variance).
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[4], &Device::best())?;
    /// assert!((x.var(0, 1, false)?.to_scalar::<f32>()? - 1.6666666).abs() < 1e-6);
    /// assert!((x.std(0, 0, false)?.to_scalar::<f32>()? - 1.118034).abs() < 1e-6);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// The errors of the reductions it is made of.
    pub fn var(&self, dim: isize, correction: usize, keepdim: bool) -> Result<Tensor> {
        let n = self
            .shape()
            .get(normalize_dim("var", dim, self.ndim())?)
            .copied()
            .unwrap_or(1);
        let centered = self.sub(&self.mean(dim, true)?)?;
        let ss = centered.mul(&centered)?.sum(dim, keepdim)?;
        // n <= correction gives inf or NaN, as in PyTorch.
        ss.div_scalar(n as f32 - correction as f32)
    }

    /// Standard deviation over `dim`: the square root of [`Tensor::var`].
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![2f32, 4.0], &[2], &Device::cpu())?;
    /// assert_eq!(x.std(0, 0, false)?.to_scalar::<f32>()?, 1.0);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::var`].
    pub fn std(&self, dim: isize, correction: usize, keepdim: bool) -> Result<Tensor> {
        self.var(dim, correction, keepdim)?.sqrt()
    }

    /// Sum over several dims at once (PyTorch's `x.sum(dim=(0, 2))`); repeated dims are an
    /// error.
    ///
    /// ```
    /// use wgtensor::{DType, Device, Tensor};
    /// let x = Tensor::ones(&[2, 3, 4], DType::F32, &Device::best())?;
    /// let s = x.sum_dims(&[0, 2], false)?;
    /// assert_eq!((s.shape(), s.to_vec::<f32>()?), (&[3][..], vec![8.0; 3]));
    /// assert_eq!(x.mean_dims(&[0, -1], true)?.shape(), &[1, 3, 1]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an out-of-range or repeated dim; the errors of `sum`.
    pub fn sum_dims(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce_dims("sum_dims", dims, keepdim, |t, d| t.sum(d, true))
    }

    /// Mean over several dims at once (PyTorch's `x.mean(dim=(...))`). See
    /// [`Tensor::sum_dims`].
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let x = Tensor::arange(0.0, 4.0, 1.0, &Device::cpu())?.reshape(&[2, 2])?;
    /// assert_eq!(x.mean_dims(&[0, 1], false)?.to_scalar::<f32>()?, 1.5);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::sum_dims`].
    pub fn mean_dims(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce_dims("mean_dims", dims, keepdim, |t, d| t.mean(d, true))
    }

    fn reduce_dims(
        &self,
        op: &'static str,
        dims: &[isize],
        keepdim: bool,
        f: impl Fn(&Tensor, isize) -> Result<Tensor>,
    ) -> Result<Tensor> {
        let mut ds = dims
            .iter()
            .map(|&d| normalize_dim(op, d, self.ndim()))
            .collect::<Result<Vec<_>>>()?;
        ds.sort_unstable();
        if ds.windows(2).any(|w| w[0] == w[1]) {
            return Err(invalid(
                op,
                format!("dims {dims:?} repeat a dim of {:?}", self.shape()),
            ));
        }
        let mut out = self.clone();
        for &d in &ds {
            out = f(&out, d as isize)?;
        }
        if !keepdim {
            for &d in ds.iter().rev() {
                out = out.squeeze(d as isize)?;
            }
        }
        Ok(out)
    }

    /// Running sum along `dim` (PyTorch's `torch.cumsum`) for float tensors. Computed as a
    /// matmul with an upper-triangular matrix of ones made on the device: O(n²) work along
    /// `dim`, fine for sequence lengths, not for millions of elements.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[2, 2], &Device::best())?;
    /// assert_eq!(x.cumsum(1)?.to_vec::<f32>()?, vec![1.0, 3.0, 3.0, 7.0]);
    /// assert_eq!(x.cumsum(0)?.to_vec::<f32>()?, vec![1.0, 2.0, 4.0, 6.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`](crate::Error::UnsupportedDType) for integer tensors; a bad dim; the errors of matmul.
    pub fn cumsum(&self, dim: isize) -> Result<Tensor> {
        if self.ndim() == 0 {
            return Ok(self.clone());
        }
        let d = normalize_dim("cumsum", dim, self.ndim())?;
        if self.ndim() == 0 {
            return Ok(self.clone());
        }
        let n = self.shape()[d];
        let last = self.ndim() as isize - 1;
        let moved = self.transpose(d as isize, last)?;
        let ones = Tensor::ones(&[n, n], self.dtype(), self.device())?.triu(0)?;
        moved.matmul(&ones)?.transpose(d as isize, last)
    }

    /// The `k` largest (or smallest) elements along `dim` and their positions (PyTorch's
    /// `torch.topk(k, dim, largest, sorted=True)`), in order; ties keep the lower index first.
    /// Indices are U32. Runs `k` argmax passes on the device (meant for small `k`, such as
    /// sampling from logits). Gradients flow to the selected elements.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![1f32, 5.0, 3.0, 4.0], &[4], &Device::best())?;
    /// let (v, i) = x.topk(2, 0, true)?;
    /// assert_eq!((v.to_vec::<f32>()?, i.to_vec::<u32>()?), (vec![5.0, 4.0], vec![1, 3]));
    /// let (v, _) = x.topk(1, 0, false)?;
    /// assert_eq!(v.to_vec::<f32>()?, vec![1.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `k` exceeds the dim; [`Error::UnsupportedDType`](crate::Error::UnsupportedDType) for
    /// integer tensors; a bad dim.
    pub fn topk(&self, k: usize, dim: isize, largest: bool) -> Result<(Tensor, Tensor)> {
        let op = "topk";
        if !self.dtype().is_float() {
            return Err(self.unsupported(op));
        }
        let d = normalize_dim(op, dim, self.ndim())?;
        let n = self.shape().get(d).copied().unwrap_or(1);
        if k > n {
            return Err(invalid(
                op,
                format!("k = {k} is larger than dim {d} of {:?}", self.shape()),
            ));
        }
        let di = d as isize;
        let mut shape = vec![1; self.ndim()];
        if let Some(s) = shape.get_mut(d) {
            *s = n;
        }
        let pos = Tensor::arange(0.0, n as f32, 1.0, self.device())?.reshape(&shape)?;
        let mut work = if largest {
            self.detach()
        } else {
            self.detach().neg()?
        };
        let gone = Tensor::full(&[1], f64::NEG_INFINITY, self.dtype(), self.device())?;
        let (mut vals, mut ids) = (Vec::with_capacity(k), Vec::with_capacity(k));
        for _ in 0..k {
            let a = work.argmax(di, true)?;
            vals.push(self.gather(di, &a)?);
            let taken = pos.eq(&a.to_dtype(DType::F32)?)?;
            work = taken.where_cond(&gone, &work)?;
            ids.push(a);
        }
        if k == 0 {
            let mut s = self.shape().to_vec();
            if let Some(x) = s.get_mut(d) {
                *x = 0;
            }
            return Ok((
                Tensor::zeros(&s, self.dtype(), self.device())?,
                Tensor::zeros(&s, DType::U32, self.device())?,
            ));
        }
        let vr: Vec<&Tensor> = vals.iter().collect();
        let ir: Vec<&Tensor> = ids.iter().collect();
        Ok((Tensor::cat(&vr, di)?, Tensor::cat(&ir, di)?))
    }

    /// A copy of `self` with `src` written over positions `start .. start + src.len` of `dim`
    /// (PyTorch's `x[..., start:start+n] = src` / `narrow(dim, start, n).copy_(src)`, the
    /// write into a KV cache). `self` is unchanged (tensors are immutable); gradients flow to
    /// both the kept part of `self` and `src`.
    ///
    /// ```
    /// use wgtensor::{DType, Device, Tensor};
    /// let d = Device::best();
    /// let cache = Tensor::zeros(&[1, 4], DType::F32, &d)?;
    /// let new = Tensor::from_vec(vec![7f32, 8.0], &[1, 2], &d)?;
    /// let c = cache.slice_assign(1, 1, &new)?;
    /// assert_eq!(c.to_vec::<f32>()?, vec![0.0, 7.0, 8.0, 0.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) when `src` differs from `self` outside `dim`;
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when the range runs past the end; dtype and device
    /// mismatches.
    pub fn slice_assign(&self, dim: isize, start: usize, src: &Tensor) -> Result<Tensor> {
        let op = "slice_assign";
        let d = normalize_dim(op, dim, self.ndim())?;
        let (a, b) = (self.shape(), src.shape());
        if a.len() != b.len()
            || a.iter()
                .zip(b)
                .enumerate()
                .any(|(i, (x, y))| i != d && x != y)
        {
            return Err(mismatch(op, a, b));
        }
        let (n, len) = (a[d], b[d]);
        // Checked: a start near usize::MAX is this error, never a wrapped range.
        if start.checked_add(len).is_none_or(|end| end > n) {
            return Err(invalid(
                op,
                format!("positions {start}.. (+{len}) run past dim {d} of size {n}"),
            ));
        }
        let di = d as isize;
        let before = self.narrow(di, 0, start)?;
        let after = self.narrow(di, start + len, n - start - len)?;
        Tensor::cat(&[&before, src, &after], di)
    }

    /// `softmax(q kᵀ · scale + mask) v`, PyTorch's `F.scaled_dot_product_attention(q, k, v,
    /// attn_mask, dropout_p, is_causal, scale)`. `q` is `[.., L, E]`, `k` `[.., S, E]`, `v`
    /// `[.., S, Ev]`; batch dims broadcast. A U8 `mask` marks the positions that take part
    /// (PyTorch's boolean mask); a float mask is added to the scores. `is_causal` masks
    /// `col > row` (with `mask`, both apply). `scale` defaults to `1 / sqrt(E)`. Dropout (when
    /// `dropout_p > 0`) is drawn on the device. Gradients flow to `q`, `k`, `v` (and a float
    /// mask). A query that may attend to no key gives PyTorch's math-path answer on every path
    /// and device: a NaN output row, a NaN `q`-gradient row and NaN `k`/`v` gradients for its
    /// head (docs/tensors.md).
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let d = Device::best();
    /// let q = Tensor::randn(&[2, 4, 8], &d)?;
    /// let out = Tensor::scaled_dot_product_attention(&q, &q, &q, None, true, 0.0, None)?;
    /// assert_eq!(out.shape(), &[2, 4, 8]);
    /// // The first position attends only to itself.
    /// let first = out.narrow(1, 0, 1)?.to_vec::<f32>()?;
    /// let q0 = q.narrow(1, 0, 1)?.to_vec::<f32>()?;
    /// assert!(first.iter().zip(&q0).all(|(a, b)| (a - b).abs() < 1e-5));
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) when the dims do not line up; [`Error::InvalidArgument`](crate::Error::InvalidArgument) for
    /// `dropout_p` outside `[0, 1)`; the errors of matmul and softmax.
    pub fn scaled_dot_product_attention(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: Option<&Tensor>,
        is_causal: bool,
        dropout_p: f32,
        scale: Option<f32>,
    ) -> Result<Tensor> {
        let op = "scaled_dot_product_attention";
        let (l, e) = last_two(op, q)?;
        let (s, ek) = last_two(op, k)?;
        let (sv, _) = last_two(op, v)?;
        if e != ek || s != sv {
            let other = if e != ek { k } else { v };
            return Err(mismatch(op, q.shape(), other.shape()));
        }
        if !(0.0..1.0).contains(&dropout_p) {
            return Err(invalid(
                op,
                format!("dropout_p must be in [0, 1), got {dropout_p}"),
            ));
        }
        let scale = scale.unwrap_or(1.0 / (e as f32).sqrt());
        let call = super::attention_fused::Call {
            q,
            k,
            v,
            mask,
            causal: is_causal,
            dropout_p,
            scale,
        };
        if let Some(out) = super::attention_fused::try_fused(call)? {
            return Ok(out);
        }
        // The scale goes on q ([.., L, E]) rather than on the scores ([.., L, S]), as PyTorch's
        // kernels do: fewer elements whenever S > E.
        let mut scores = q.mul_scalar(scale)?.matmul(&k.transpose(-2, -1)?)?;
        // Masks are added as a bias of 0 and -inf, as PyTorch's math path adds them, rather
        // than filled: a filled position passes no gradient, which would turn the NaN gradient
        // of a row that may attend to nothing into 0 (the fused path and a float mask keep it).
        let dtype = scores.dtype();
        let (zero, neg_inf) = (
            Tensor::zeros(&[1], dtype, q.device())?,
            Tensor::full(&[1], f64::NEG_INFINITY, dtype, q.device())?,
        );
        let bias = |masked: &Tensor| masked.where_cond(&neg_inf, &zero);
        if is_causal {
            let future = triangle(l, s, 1, false, q.device())?;
            scores = scores.add(&bias(&future)?)?;
        }
        if let Some(m) = mask {
            scores = if m.dtype() == DType::U8 {
                scores.add(&bias(&m.eq_scalar(0.0)?)?)?
            } else {
                scores.add(m)?
            };
        }
        let mut p = scores.softmax(-1)?;
        if dropout_p > 0.0 {
            let keep = Tensor::rand(p.shape(), p.device())?.ge_scalar(dropout_p)?;
            let zero = Tensor::zeros(&[1], p.dtype(), p.device())?;
            p = keep.where_cond(&p.mul_scalar(1.0 / (1.0 - dropout_p))?, &zero)?;
        }
        p.matmul(v)
    }
}
