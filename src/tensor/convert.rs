//! `to_dtype`, scalars in a tensor's dtype, and comparisons, `clamp` and `where_cond` (every
//! dtype) as generated programs where the device fuses, else by the backend's own kernels
//! (`dispatch::convert` and friends). The public ops in
//! `compare.rs` validate, then call the functions here.

use super::chunked::{blocks_needed, map_row_blocks};
use super::dispatch;
use super::fuse::Fuser;
use super::Tensor;
use crate::ops::backend::Scalar;
use crate::ops::program::Expr;
use crate::ops::CmpOp;
use crate::shape::Layout;
use crate::{DType, Error, Result};

impl Tensor {
    /// Converts to `dtype` (PyTorch's `t.to(dtype)`), on the tensor's device; works on strided
    /// views and returns a packed tensor. The same dtype returns a cheap clone.
    ///
    /// Conversions follow Rust's `as`: f32 -> f16 rounds to nearest even (as the `half`
    /// crate), values past f16's range become ±inf; float -> integer truncates toward zero and
    /// saturates at the integer's range, NaN becomes 0; integer -> float rounds to nearest
    /// even; integer -> integer keeps the low bits (`-1i32` -> `u32::MAX`, `300u32` -> `44u8`);
    /// f16 -> f32 is exact. The GPU kernel gives the same bits as the CPU.
    ///
    /// # Errors
    /// GPU errors (out of memory, device lost).
    ///
    /// ```
    /// use wgtensor::{DType, Device, Tensor};
    /// let t = Tensor::from_vec(vec![1.5f32, -2.7, 300.0, f32::NAN], &[4], &Device::cpu())?;
    /// assert_eq!(t.to_dtype(DType::I32)?.to_vec::<i32>()?, vec![1, -2, 300, 0]);
    /// assert_eq!(t.to_dtype(DType::U8)?.to_vec::<u8>()?, vec![1, 0, 255, 0]);
    /// let h = t.to_dtype(DType::F16)?;
    /// assert_eq!(h.dtype(), DType::F16);
    /// assert_eq!(h.to_dtype(DType::F32)?.to_vec::<f32>()?[..3], [1.5, -2.69921875, 300.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        let out = self.convert_to(dtype)?;
        Ok(crate::autograd::shape::to_dtype(self, out))
    }

    /// A packed copy of the view in `dtype` (also the strided copy behind `contiguous`).
    pub(crate) fn convert_to(&self, dtype: DType) -> Result<Tensor> {
        // Past one binding: convert in row blocks, sized for the wider of the two dtypes.
        let (from, to) = (self.dtype().size_in_bytes(), dtype.size_in_bytes());
        if let Some(g) = blocks_needed(&[self], self.numel() * from.max(to) / from) {
            // `map_row_blocks` sizes blocks by its first operand's dtype: a one-element
            // tensor of the target dtype (broadcast, so bound whole) makes that the wider one.
            let sizing = Tensor::zeros(
                &[1],
                if to > from { dtype } else { self.dtype() },
                self.device(),
            )?;
            return map_row_blocks("to_dtype", g, self.shape(), &[&sizing, self], &|b| {
                b[1].convert_to(dtype)
            });
        }
        let name = if dtype == self.dtype() {
            "contiguous"
        } else {
            "to_dtype"
        };
        if let Some(mut f) = Fuser::on(name, self.device(), self.shape())? {
            let x = f.operand(self, self.layout())?;
            let out = f.push(Expr::Cast(x), dtype);
            return f.finish(name, out, self.device());
        }
        let storage =
            dispatch::convert(self, dtype)?.ok_or_else(|| self.unsupported("to_dtype"))?;
        Ok(Tensor::from_parts(
            storage,
            self.shape(),
            dtype,
            self.device().clone(),
        ))
    }

    /// Runs an f32 op on an f16 tensor: converts to f32, runs `f` (accumulating in f32), and
    /// converts the result back to f16 when `back` (argmax-style results stay U32).
    pub(super) fn via_f32(
        &self,
        back: bool,
        f: impl FnOnce(&Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        let r = f(&self.to_dtype(DType::F32)?)?;
        if back && r.dtype() == DType::F32 {
            r.to_dtype(DType::F16)
        } else {
            Ok(r)
        }
    }

    /// Whether this dtype computes `op`: f32 and f16 run every op; i32 and u32 every op but the
    /// float-only ones; u8 is storage and masks only.
    pub(super) fn check_compute(&self, op: &'static str, float_only: bool) -> Result<()> {
        match self.dtype() {
            DType::F32 | DType::F16 => Ok(()),
            DType::I32 | DType::U32 if !float_only => Ok(()),
            _ => Err(self.unsupported(op)),
        }
    }

    /// `s` in this tensor's dtype: floats take it as is (f16 math runs in f32), integers only
    /// when `s` is an integer in range (`allow_inf` maps ±inf to the type's min / max, for
    /// one-sided clamps).
    pub(super) fn scalar_for(&self, op: &'static str, s: f32, allow_inf: bool) -> Result<Scalar> {
        let (lo, hi) = match self.dtype() {
            DType::F32 | DType::F16 => return Ok(Scalar::F(s)),
            DType::I32 => (i32::MIN as f64, i32::MAX as f64),
            DType::U32 => (0.0, u32::MAX as f64),
            DType::U8 => (0.0, 255.0),
        };
        let v = if allow_inf && s.is_infinite() {
            if s > 0.0 {
                hi
            } else {
                lo
            }
        } else {
            s as f64
        };
        if v.is_nan() || v.fract() != 0.0 || v < lo || v > hi {
            return Err(Error::InvalidArgument {
                op,
                message: format!(
                    "the scalar {s} is not a {} value (an integer in [{lo}, {hi}]); use an \
                     integer scalar or convert the tensor with .to_dtype(DType::F32)",
                    self.dtype()
                ),
            });
        }
        Ok(match self.dtype() {
            DType::I32 => Scalar::I(v as i32),
            _ => Scalar::U(v as u32),
        })
    }

    /// Comparisons of any dtype (`rhs`: a broadcast view, or a scalar).
    pub(super) fn typed_compare(
        &self,
        op: CmpOp,
        rhs: std::result::Result<(&Tensor, &Layout), f32>,
        la: &Layout,
    ) -> Result<Tensor> {
        let scalar = match rhs {
            Ok(_) => None,
            Err(s) => Some(self.scalar_for(op.scalar_name(), s, false)?),
        };
        let shape = la.shape.clone();
        let name = if rhs.is_ok() {
            op.name()
        } else {
            op.scalar_name()
        };
        if let Some(mut f) = Fuser::on(name, self.device(), &shape)? {
            let x = f.operand(self, la)?;
            let (name, y) = match (rhs, scalar) {
                (Ok((r, lb)), _) => (op.name(), f.operand(r, lb)?),
                (_, Some(s)) => (
                    op.scalar_name(),
                    f.scalar(s.bits(), scalar_dtype(self.dtype())),
                ),
                _ => return Err(self.unsupported(op.scalar_name())),
            };
            let out = f.push(Expr::Compare(op, x, y), DType::U8);
            return f.finish(name, out, self.device());
        }
        let storage = match (rhs, scalar) {
            (Ok((r, lb)), _) => dispatch::compare(op, (self, la), (r, lb))?,
            (Err(_), Some(s)) => dispatch::compare_scalar(op, self, la, s)?,
            _ => None,
        };
        let storage = storage.ok_or_else(|| self.unsupported(op.scalar_name()))?;
        Ok(Tensor::from_parts(
            storage,
            &shape,
            DType::U8,
            self.device().clone(),
        ))
    }

    pub(super) fn typed_clamp(&self, min: f32, max: f32) -> Result<Tensor> {
        let lo = self.scalar_for("clamp", min, true)?;
        let hi = self.scalar_for("clamp", max, true)?;
        if let Some(mut f) = Fuser::on("clamp", self.device(), self.shape())? {
            let x = f.operand(self, self.layout())?;
            let sd = scalar_dtype(self.dtype());
            let (a, b) = (f.scalar(lo.bits(), sd), f.scalar(hi.bits(), sd));
            let out = f.push(Expr::Clamp(x, a, b), self.dtype());
            return f.finish("clamp", out, self.device());
        }
        let storage = dispatch::clamp(self, lo, hi)?.ok_or_else(|| self.unsupported("clamp"))?;
        Ok(self.derived(storage, self.shape()))
    }

    /// `where_cond` for values of any dtype, into `on_true`'s dtype.
    pub(super) fn typed_where(
        &self,
        (on_true, lt): (&Tensor, &Layout),
        (on_false, lf): (&Tensor, &Layout),
        lm: &Layout,
    ) -> Result<Tensor> {
        let name = "where_cond";
        if let Some(mut f) = Fuser::on(name, self.device(), &lm.shape)? {
            let m = f.operand(self, lm)?;
            let a = f.operand(on_true, lt)?;
            let b = f.operand(on_false, lf)?;
            let out = f.push(Expr::Where(m, a, b), on_true.dtype());
            return f.finish(name, out, self.device());
        }
        let storage = dispatch::where_cond((self, lm), (on_true, lt), (on_false, lf))?
            .ok_or_else(|| self.device_mismatch(name, on_true))?;
        Ok(on_true.derived(storage, &lm.shape))
    }
}

/// The dtype of a scalar operand: floats take an unrounded f32 (f16 math runs in f32).
pub(super) fn scalar_dtype(d: DType) -> DType {
    if d == DType::F16 {
        DType::F32
    } else {
        d
    }
}
