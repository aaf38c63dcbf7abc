//! Elementwise ops with numpy/PyTorch broadcasting: validate, then dispatch to `cpu/` or `gpu/`.

use super::chunked::{blocks_needed, map_row_blocks};
use super::Tensor;
use crate::ops::{BinaryOp, UnaryOp};
use crate::shape::broadcast_shapes;
use crate::storage::{CpuStorage, Storage};
use crate::{cpu, DType, Error, Result};

impl Tensor {
    fn unary_op(&self, op: UnaryOp) -> Result<Tensor> {
        self.check_compute(op.name(), op.float_only())?;
        if let Some(g) = blocks_needed(&[self], self.numel()) {
            return map_row_blocks(op.name(), g, self.shape(), &[self], &|b| b[0].unary_op(op));
        }
        if self.dtype() != DType::F32 {
            return self.typed_unary(op);
        }
        let storage = match self.storage() {
            Storage::Cpu(_) => Storage::Cpu(CpuStorage::F32(cpu::elementwise::unary(
                op,
                self.cpu_f32(op.name())?,
                self.layout(),
            )?)),
            Storage::Gpu(b) => Storage::Gpu(b.device.unary(op, b, self.layout())?),
        };
        Ok(self.derived(storage, self.shape()))
    }

    fn binary_op(&self, rhs: &Tensor, op: BinaryOp) -> Result<Tensor> {
        let name = op.name();
        self.check_pair(name, rhs)?;
        self.check_compute(name, op.float_only())?;
        let shape = broadcast_shapes(name, self.shape(), rhs.shape())?;
        if let Some(g) = blocks_needed(&[self, rhs], shape.iter().product()) {
            return map_row_blocks(name, g, &shape, &[self, rhs], &|b| {
                b[0].binary_op(&b[1], op)
            });
        }
        let (la, lb) = (
            self.layout().broadcast_to(&shape),
            rhs.layout().broadcast_to(&shape),
        );
        if self.dtype() != DType::F32 {
            return self.typed_binary(rhs, op, &shape, &la, &lb);
        }
        let storage = match (self.storage(), rhs.storage()) {
            (Storage::Cpu(_), Storage::Cpu(_)) => Storage::Cpu(CpuStorage::F32(
                cpu::elementwise::binary(op, self.cpu_f32(name)?, &la, rhs.cpu_f32(name)?, &lb)?,
            )),
            (Storage::Gpu(a), Storage::Gpu(b)) => {
                Storage::Gpu(a.device.binary(op, a, &la, b, &lb)?)
            }
            _ => {
                return Err(Error::DeviceMismatch {
                    op: name,
                    lhs: self.device().to_string(),
                    rhs: rhs.device().to_string(),
                })
            }
        };
        Ok(self.derived(storage, &shape))
    }

    fn scalar_op(&self, op: BinaryOp, s: f32, scalar_first: bool) -> Result<Tensor> {
        let name = op.scalar_name();
        self.check_compute(name, op.float_only())?;
        if let Some(g) = blocks_needed(&[self], self.numel()) {
            return map_row_blocks(name, g, self.shape(), &[self], &|b| {
                b[0].scalar_op(op, s, scalar_first)
            });
        }
        if self.dtype() != DType::F32 {
            return self.typed_scalar(op, s, scalar_first);
        }
        let storage = match self.storage() {
            Storage::Cpu(_) => Storage::Cpu(CpuStorage::F32(cpu::elementwise::scalar(
                op,
                self.cpu_f32(name)?,
                self.layout(),
                s,
                scalar_first,
            )?)),
            Storage::Gpu(b) => {
                Storage::Gpu(b.device.scalar(op, b, self.layout(), s, scalar_first)?)
            }
        };
        Ok(self.derived(storage, self.shape()))
    }
}

/// Defines broadcasting binary ops.
macro_rules! binary_ops {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {
        impl Tensor {
            $(
                $(#[$doc])*
                ///
                /// # Errors
                /// [`Error::ShapeMismatch`] when the shapes do not broadcast,
                /// [`Error::DeviceMismatch`] / [`Error::DTypeMismatch`] when the operands differ
                /// (no implicit promotion: convert with [`Tensor::to_dtype`]);
                /// [`Error::UnsupportedDType`] for u8, and for `pow` on integers. Integer ops
                /// follow WGSL (see [`crate::DType`]); f16 computes in f32 and rounds once.
                pub fn $name(&self, rhs: &Tensor) -> Result<Tensor> {
                    let out = self.binary_op(rhs, BinaryOp::$op)?;
                    Ok(crate::autograd::elementwise::binary(BinaryOp::$op, self, rhs, out))
                }
            )*
        }
    };
}

binary_ops! {
    /// `self + rhs` with broadcasting.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let d = Device::cpu();
    /// let a = Tensor::from_vec(vec![1f32, 2.0, 3.0], &[3, 1], &d)?;
    /// let b = Tensor::from_vec(vec![10f32, 20.0], &[1, 2], &d)?;
    /// assert_eq!(a.add(&b)?.to_vec::<f32>()?, vec![11.0, 21.0, 12.0, 22.0, 13.0, 23.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    add => Add;
    /// `self - rhs` with broadcasting.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let a = Tensor::from_vec(vec![5f32, 7.0], &[2], &Device::cpu())?;
    /// assert_eq!(a.sub(&a)?.to_vec::<f32>()?, vec![0.0, 0.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    sub => Sub;
    /// `self * rhs` with broadcasting.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let a = Tensor::from_vec(vec![2f32, 3.0], &[2], &Device::cpu())?;
    /// assert_eq!(a.mul(&a)?.to_vec::<f32>()?, vec![4.0, 9.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    mul => Mul;
    /// `self / rhs` with broadcasting (IEEE: `x / 0` is ±inf or NaN).
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let a = Tensor::from_vec(vec![1f32, 3.0], &[2], &Device::cpu())?;
    /// let b = Tensor::from_vec(vec![2f32], &[1], &Device::cpu())?;
    /// assert_eq!(a.div(&b)?.to_vec::<f32>()?, vec![0.5, 1.5]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    div => Div;
    /// Elementwise maximum; NaN in either operand gives NaN (PyTorch's `torch.maximum`).
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let a = Tensor::from_vec(vec![1f32, 5.0], &[2], &Device::cpu())?;
    /// let b = Tensor::from_vec(vec![3f32, 2.0], &[2], &Device::cpu())?;
    /// assert_eq!(a.maximum(&b)?.to_vec::<f32>()?, vec![3.0, 5.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    maximum => Maximum;
    /// Elementwise minimum; NaN in either operand gives NaN.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let a = Tensor::from_vec(vec![1f32, 5.0], &[2], &Device::cpu())?;
    /// let b = Tensor::from_vec(vec![3f32, 2.0], &[2], &Device::cpu())?;
    /// assert_eq!(a.minimum(&b)?.to_vec::<f32>()?, vec![1.0, 2.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    minimum => Minimum;
    /// `self ** rhs` with C `powf` semantics (negative base with a non-integer exponent is NaN).
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let a = Tensor::from_vec(vec![2f32, -3.0], &[2], &Device::cpu())?;
    /// let b = Tensor::from_vec(vec![3f32, 2.0], &[2], &Device::cpu())?;
    /// assert_eq!(a.pow(&b)?.to_vec::<f32>()?, vec![8.0, 9.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pow => Pow;
    /// Truncated remainder `self % rhs` with broadcasting: WGSL's `%` (C's `fmod`,
    /// PyTorch's `torch.fmod`, not `torch.remainder`), so the result has the sign of `self`.
    /// Integers follow WGSL: `x % 0 == 0` and `i32::MIN % -1 == 0`. Floats compute
    /// `a - b * trunc(a / b)` on every device (`x % 0` is NaN).
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let a = Tensor::from_vec(vec![7i32, -7, 7, 5], &[4], &Device::cpu())?;
    /// let b = Tensor::from_vec(vec![3i32, 3, -3, 0], &[4], &Device::cpu())?;
    /// assert_eq!(a.rem(&b)?.to_vec::<i32>()?, vec![1, -1, 1, 0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    rem => Rem;
}

/// Defines tensor-with-scalar ops.
macro_rules! scalar_ops {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {
        impl Tensor {
            $(
                $(#[$doc])*
                pub fn $name(&self, s: f32) -> Result<Tensor> {
                    let out = self.scalar_op(BinaryOp::$op, s, false)?;
                    Ok(crate::autograd::elementwise::scalar(BinaryOp::$op, self, s, false, out))
                }
            )*
        }
    };
}

scalar_ops! {
    /// `self + s`.
    ///
    /// ```
    /// let t = wgtensor::Tensor::ones(&[2], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.add_scalar(2.0)?.to_vec::<f32>()?, vec![3.0, 3.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    add_scalar => Add;
    /// `self - s`.
    ///
    /// ```
    /// let t = wgtensor::Tensor::ones(&[2], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.sub_scalar(2.0)?.to_vec::<f32>()?, vec![-1.0, -1.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    sub_scalar => Sub;
    /// `self * s`.
    ///
    /// ```
    /// let t = wgtensor::Tensor::ones(&[2], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.mul_scalar(3.0)?.to_vec::<f32>()?, vec![3.0, 3.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    mul_scalar => Mul;
    /// `self / s`.
    ///
    /// ```
    /// let t = wgtensor::Tensor::ones(&[2], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.div_scalar(4.0)?.to_vec::<f32>()?, vec![0.25, 0.25]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    div_scalar => Div;
    /// `self ** s`.
    ///
    /// ```
    /// let t = wgtensor::Tensor::full(&[2], 3.0, wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.pow_scalar(2.0)?.to_vec::<f32>()?, vec![9.0, 9.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pow_scalar => Pow;
    /// `max(self, s)`; NaN propagates.
    ///
    /// ```
    /// let t = wgtensor::Tensor::arange(0.0, 3.0, 1.0, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.maximum_scalar(1.0)?.to_vec::<f32>()?, vec![1.0, 1.0, 2.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    maximum_scalar => Maximum;
    /// `min(self, s)`; NaN propagates.
    ///
    /// ```
    /// let t = wgtensor::Tensor::arange(0.0, 3.0, 1.0, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.minimum_scalar(1.0)?.to_vec::<f32>()?, vec![0.0, 1.0, 1.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    minimum_scalar => Minimum;
    /// `self % s`, truncated as [`Tensor::rem`].
    ///
    /// ```
    /// let t = wgtensor::Tensor::from_vec(vec![-7i32, 8], &[2], &wgtensor::Device::cpu())?;
    /// assert_eq!(t.rem_scalar(3.0)?.to_vec::<i32>()?, vec![-1, 2]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    rem_scalar => Rem;
}

/// Defines unary ops.
macro_rules! unary_ops {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {
        impl Tensor {
            $(
                $(#[$doc])*
                pub fn $name(&self) -> Result<Tensor> {
                    let out = self.unary_op(UnaryOp::$op)?;
                    Ok(crate::autograd::elementwise::unary(UnaryOp::$op, self, out))
                }
            )*
        }
    };
}

unary_ops! {
    /// `-self`.
    ///
    /// ```
    /// let t = wgtensor::Tensor::ones(&[1], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.neg()?.to_vec::<f32>()?, vec![-1.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    neg => Neg;
    /// `|self|`.
    ///
    /// ```
    /// let t = wgtensor::Tensor::full(&[1], -2.0, wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.abs()?.to_vec::<f32>()?, vec![2.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    abs => Abs;
    /// `e^self`.
    ///
    /// ```
    /// let t = wgtensor::Tensor::zeros(&[1], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.exp()?.to_vec::<f32>()?, vec![1.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    exp => Exp;
    /// Natural logarithm (NaN for negative inputs, -inf at 0).
    ///
    /// ```
    /// let t = wgtensor::Tensor::ones(&[1], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.log()?.to_vec::<f32>()?, vec![0.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    log => Log;
    /// Square root (NaN for negative inputs).
    ///
    /// ```
    /// let t = wgtensor::Tensor::full(&[1], 9.0, wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.sqrt()?.to_vec::<f32>()?, vec![3.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    sqrt => Sqrt;
    /// `max(self, 0)`; NaN stays NaN as in PyTorch.
    ///
    /// ```
    /// let t = wgtensor::Tensor::arange(-1.0, 2.0, 1.0, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.relu()?.to_vec::<f32>()?, vec![0.0, 0.0, 1.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    relu => Relu;
    /// `1 / (1 + e^-self)`.
    ///
    /// ```
    /// let t = wgtensor::Tensor::zeros(&[1], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.sigmoid()?.to_vec::<f32>()?, vec![0.5]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    sigmoid => Sigmoid;
    /// Hyperbolic tangent.
    ///
    /// ```
    /// let t = wgtensor::Tensor::zeros(&[1], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.tanh()?.to_vec::<f32>()?, vec![0.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    tanh => Tanh;
    /// Exact GELU, `x * Φ(x)` (PyTorch's default `approximate='none'`), with erf to within 1.5e-7.
    ///
    /// ```
    /// let t = wgtensor::Tensor::zeros(&[1], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.gelu()?.to_vec::<f32>()?, vec![0.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    gelu => Gelu;
    /// Sine.
    ///
    /// ```
    /// let t = wgtensor::Tensor::zeros(&[1], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.sin()?.to_vec::<f32>()?, vec![0.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    sin => Sin;
    /// Cosine.
    ///
    /// ```
    /// let t = wgtensor::Tensor::zeros(&[1], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.cos()?.to_vec::<f32>()?, vec![1.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    cos => Cos;
}

/// `&a + &b` etc. return `Result<Tensor>`, as shapes or devices may not match.
macro_rules! operators {
    ($($trait:ident $method:ident => $tensor_fn:ident, $scalar_fn:ident, $op:ident;)*) => {$(
        impl std::ops::$trait<&Tensor> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                self.$tensor_fn(rhs)
            }
        }
        impl std::ops::$trait<f32> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: f32) -> Result<Tensor> {
                self.$scalar_fn(rhs)
            }
        }
        impl std::ops::$trait<&Tensor> for f32 {
            type Output = Result<Tensor>;
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                let out = rhs.scalar_op(BinaryOp::$op, self, true)?;
                Ok(crate::autograd::elementwise::scalar(BinaryOp::$op, rhs, self, true, out))
            }
        }
    )*};
}

operators! {
    Add add => add, add_scalar, Add;
    Sub sub => sub, sub_scalar, Sub;
    Mul mul => mul, mul_scalar, Mul;
    Div div => div, div_scalar, Div;
    Rem rem => rem, rem_scalar, Rem;
}

impl std::ops::Neg for &Tensor {
    type Output = Result<Tensor>;
    fn neg(self) -> Result<Tensor> {
        Tensor::neg(self)
    }
}
