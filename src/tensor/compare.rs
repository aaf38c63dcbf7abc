//! Comparisons into U8 masks (their methods come from the table in `src/ops/compare.rs`),
//! `where_cond` and `clamp`: validate, then dispatch to the typed CPU loops or generated kernels.

use super::chunked::{blocks_needed, broadcast_pair, map_row_blocks, Broadcast};
use super::Tensor;
use crate::ops::CmpOp;
use crate::shape::broadcast_shapes;
use crate::{DType, Result};

impl Tensor {
    /// The comparison methods of the table (`src/ops/compare.rs`) land here.
    pub(crate) fn compare_op(&self, rhs: &Tensor, op: CmpOp) -> Result<Tensor> {
        let name = op.name();
        self.check_pair(name, rhs)?;
        // Past one storage binding: in row blocks (`chunked.rs`), as the arithmetic ops.
        match broadcast_pair(name, self, rhs, &|a, b| a.compare_op(b, op))? {
            Broadcast::Done(out) => Ok(out),
            Broadcast::Layouts(_, la, lb) => self.typed_compare(op, Ok((rhs, &lb)), &la),
        }
    }

    pub(crate) fn compare_scalar_op(&self, s: f32, op: CmpOp) -> Result<Tensor> {
        if let Some(g) = blocks_needed(&[self], self.numel()) {
            return map_row_blocks(op.scalar_name(), g, self.shape(), &[self], &|b| {
                b[0].compare_scalar_op(s, op)
            });
        }
        self.typed_compare(op, Err(s), self.layout())
    }

    /// `self` (a [`DType::U8`] mask) selects `on_true` where non-zero, else `on_false`
    /// (`torch.where(mask, on_true, on_false)`). All three broadcast to one shape; the values
    /// may have any dtype (the result has it).
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] when the mask is not U8;
    /// [`Error::DTypeMismatch`] when `on_true` and `on_false` differ; [`Error::ShapeMismatch`]
    /// when the shapes do not broadcast; [`Error::DeviceMismatch`].
    ///
    /// [`Error::UnsupportedDType`]: crate::Error::UnsupportedDType
    /// [`Error::DTypeMismatch`]: crate::Error::DTypeMismatch
    /// [`Error::ShapeMismatch`]: crate::Error::ShapeMismatch
    /// [`Error::DeviceMismatch`]: crate::Error::DeviceMismatch
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let d = Device::cpu();
    /// let x = Tensor::from_vec(vec![-1f32, 2.0, -3.0], &[3], &d)?;
    /// let zero = Tensor::zeros(&[1], wgtensor::DType::F32, &d)?;
    /// let relu = x.gt_scalar(0.0)?.where_cond(&x, &zero)?;
    /// assert_eq!(relu.to_vec::<f32>()?, vec![0.0, 2.0, 0.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn where_cond(&self, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor> {
        let out = self.where_cond_untracked(on_true, on_false)?;
        Ok(crate::autograd::shape::where_cond(
            self, on_true, on_false, out,
        ))
    }

    fn where_cond_untracked(&self, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor> {
        let name = "where_cond";
        if self.dtype() != DType::U8 {
            return Err(self.unsupported(name));
        }
        for t in [on_true, on_false] {
            self.check_device(name, t)?;
        }
        on_true.check_pair(name, on_false)?;
        let values = broadcast_shapes(name, on_true.shape(), on_false.shape())?;
        let shape = broadcast_shapes(name, self.shape(), &values)?;
        // The values first: blocks are sized by the first operand's dtype (the mask's is the
        // smallest).
        if let Some(g) = blocks_needed(&[on_true, on_false, self], shape.iter().product()) {
            return map_row_blocks(name, g, &shape, &[on_true, on_false, self], &|b| {
                b[2].where_cond_untracked(&b[0], &b[1])
            });
        }
        let lm = self.layout().broadcast_to(&shape);
        let lt = on_true.layout().broadcast_to(&shape);
        let lf = on_false.layout().broadcast_to(&shape);
        self.typed_where((on_true, &lt), (on_false, &lf), &lm)
    }

    /// Limits every element to `[min, max]` (`torch.clamp`): `min(max(x, min), max)`, so
    /// `min > max` gives `max` everywhere as in PyTorch. NaN stays NaN (and a NaN bound gives
    /// NaN). Pass `f32::NEG_INFINITY` / `f32::INFINITY` for a one-sided clamp. f16 clamps in
    /// f32 and rounds; on i32 / u32 the bounds must be integers in range (or ±inf), else
    /// [`Error::InvalidArgument`].
    ///
    /// [`Error::InvalidArgument`]: crate::Error::InvalidArgument
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![-2f32, 0.5, 3.0, f32::NAN], &[4], &Device::cpu())?;
    /// let c = t.clamp(0.0, 1.0)?.to_vec::<f32>()?;
    /// assert_eq!(&c[..3], &[0.0, 0.5, 1.0]);
    /// assert!(c[3].is_nan());
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn clamp(&self, min: f32, max: f32) -> Result<Tensor> {
        let out = self.clamp_untracked(min, max)?;
        Ok(crate::autograd::shape::clamp(self, min, max, out))
    }

    fn clamp_untracked(&self, min: f32, max: f32) -> Result<Tensor> {
        self.check_compute("clamp", false)?;
        if let Some(g) = blocks_needed(&[self], self.numel()) {
            return map_row_blocks("clamp", g, self.shape(), &[self], &|b| {
                b[0].clamp_untracked(min, max)
            });
        }
        self.typed_clamp(min, max)
    }
}

// The public comparison methods of the table (`src/ops/compare.rs`).
crate::ops::compare_tensor_half!();
