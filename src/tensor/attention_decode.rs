//! Decode-time attention over a KV cache: the fused one-pass kernel (`cpu/attention_decode.rs`,
//! `shaders/attention_decode.wgsl`) and the in-place append that fills the cache, each one call
//! of the backend interface (`BackendStorage::attention_decode`, `write_bytes`).

use super::dispatch;
use super::Tensor;
use crate::error::{invalid, mismatch};
use crate::ops::geometry::DecodeDims;
use crate::Result;

impl Tensor {
    /// Attention of one query position per head over the first `len` positions of a KV cache,
    /// as ONE kernel: each head reads its keys and values once, with an online softmax, and no
    /// score matrix is formed (flash-decoding). `q` is `[heads, head_dim]`, `k_cache` and
    /// `v_cache` are `[capacity, kv_heads, head_dim]` (position-major, so appending a position
    /// writes one contiguous block); `heads` must be a multiple of `kv_heads` (grouped-query
    /// attention: query head `h` reads key-value head `h / (heads / kv_heads)`). Returns
    /// `[heads, head_dim]`, equal within rounding to
    /// `softmax(q kᵀ · scale) v` over positions `0..len`. f32 only; not differentiable.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let d = Device::best();
    /// let q = Tensor::randn(&[4, 8], &d)?;
    /// let k = Tensor::randn(&[16, 2, 8], &d)?;
    /// let v = Tensor::randn(&[16, 2, 8], &d)?;
    /// let out = Tensor::attention_decode(&q, &k, &v, 10, 1.0 / 8f32.sqrt())?;
    /// assert_eq!(out.shape(), &[4, 8]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) when the shapes do not line up; [`Error::InvalidArgument`](crate::Error::InvalidArgument) when
    /// `len` is 0 or past the capacity, `heads` is not a multiple of `kv_heads`, or
    /// `head_dim > 256`; dtype (f32 only) and device mismatches.
    pub fn attention_decode(
        q: &Tensor,
        k_cache: &Tensor,
        v_cache: &Tensor,
        len: usize,
        scale: f32,
    ) -> Result<Tensor> {
        let op = "attention_decode";
        let (&[heads, hd], &[cap, kvh, hdk]) = (q.shape(), k_cache.shape()) else {
            return Err(mismatch(op, q.shape(), k_cache.shape()));
        };
        if hd != hdk || v_cache.shape() != k_cache.shape() {
            let other = if hd != hdk { q } else { v_cache };
            return Err(mismatch(op, k_cache.shape(), other.shape()));
        }
        if len == 0 || len > cap {
            return Err(invalid(
                op,
                format!("len must be in 1..={cap} (the cache's capacity), got {len}"),
            ));
        }
        if kvh == 0 || heads % kvh != 0 {
            return Err(invalid(
                op,
                format!("{heads} query heads are not a multiple of {kvh} key-value heads"),
            ));
        }
        if hd == 0 || hd > 256 {
            return Err(invalid(
                op,
                format!("head_dim must be in 1..=256, got {hd}"),
            ));
        }
        for t in [k_cache, v_cache] {
            q.check_device(op, t)?;
        }
        for t in [q, k_cache, v_cache] {
            t.require_f32(op)?;
        }
        let dims = DecodeDims {
            heads,
            kv_heads: kvh,
            head_dim: hd,
            len,
            scale,
        };
        let _guard = crate::no_grad();
        let (q, k, v) = (
            q.contiguous()?,
            k_cache.contiguous()?,
            v_cache.contiguous()?,
        );
        let storage =
            dispatch::attention_decode(&q, &k, &v, &dims)?.ok_or_else(|| q.unsupported(op))?;
        Ok(q.derived(storage, &[heads, hd]))
    }

    /// Writes `src` over rows `start .. start + src.shape[0]` of dim 0 of this tensor, in
    /// place when this handle is the only one to its storage (a KV cache owned by its model:
    /// a decode step then copies one position, not the cache), else through a copy
    /// ([`Tensor::slice_assign`]). Never visible to other tensors: a shared storage is copied.
    #[cfg_attr(not(feature = "models"), allow(dead_code))]
    pub(crate) fn write_rows_(&mut self, start: usize, src: &Tensor) -> Result<()> {
        let op = "write_rows";
        let (a, b) = (self.shape(), src.shape());
        if a.is_empty() || a.len() != b.len() || a[1..] != b[1..] {
            return Err(mismatch(op, a, b));
        }
        if start.checked_add(b[0]).is_none_or(|end| end > a[0]) {
            return Err(invalid(
                op,
                format!("rows {start}.. (+{}) run past {} rows", b[0], a[0]),
            ));
        }
        self.check_dtype(op, src)?;
        self.check_device(op, src)?;
        let row: usize = a[1..].iter().product();
        let (at, n) = (start * row, src.numel());
        let _guard = crate::no_grad();
        let src = src.contiguous()?;
        let elem = self.dtype().size_in_bytes();
        let plain = self.layout().is_contiguous() && self.layout().offset == 0;
        // In place only when nothing else can observe the write: this handle owns the tensor
        // and its storage (no view, clone or pending fused program holds it).
        let unique = plain && self.data_mut().is_some();
        let aligned = (at * elem).is_multiple_of(4) && (n * elem).is_multiple_of(4);
        if !unique || !aligned || n == 0 {
            if n > 0 {
                *self = self.slice_assign(0, start, &src)?;
            }
            return Ok(());
        }
        dispatch::write_bytes(op, self, at * elem, &src, n * elem)
    }
}
