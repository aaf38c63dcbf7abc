//! The GPU's side of the backend interface (`crate::ops::backend::BackendStorage`): which WGSL
//! kernel and precision run each op the tensor layer asks for. The kernels live in their
//! family's file; the choices between them (an f16 product accumulated in f16 or in f32, the
//! adapter's matmul kernel or a named one) live here, so the tensor layer never names a GPU
//! function.

use super::buffer::GpuBuffer;
use super::matmul::{MatmulKernel, Precision};
use crate::ops::backend::{BackendStorage, MatmulSpec};
use crate::{DType, Result};

/// Every matmul kernel's name, for `Tensor::matmul_with_kernel` to validate a name against.
pub(crate) fn matmul_kernel_names() -> Vec<&'static str> {
    MatmulKernel::ALL.iter().map(|k| k.name()).collect()
}

impl BackendStorage for GpuBuffer {
    fn matmul(&self, rhs: &Self, spec: &MatmulSpec) -> Result<Option<(Self, DType)>> {
        let kernel = spec.kernel.and_then(MatmulKernel::from_name);
        let (precision, out) = match spec.dtype {
            DType::F32 => (Precision::F32, DType::F32),
            // f16 operands are read in place (packed pairs): accumulated in f16 where the
            // adapter runs f16 natively and the caller allows it, else in f32 with the product
            // left in f32 for the caller to round once.
            DType::F16 if spec.f16_accumulate && self.device.native_f16() => {
                (Precision::F16Acc, DType::F16)
            }
            DType::F16 => (Precision::F16, DType::F32),
            _ => return Ok(None),
        };
        let b = self
            .device
            .matmul(self, spec.la, rhs, spec.lb, kernel, precision)?;
        Ok(Some((b, out)))
    }

    fn matmul_bias(
        &self,
        _rhs: &Self,
        _spec: &MatmulSpec,
        _bias: &Self,
        _bias_offset: usize,
    ) -> Result<Option<Self>> {
        // No fused kernel: the product and the add are two programs (the add may fuse on).
        Ok(None)
    }

    fn matmul_t_f16_weight(&self, _w: &Self, _spec: &MatmulSpec) -> Result<Option<Self>> {
        // The GPU reads f16 weights in place in every product; no special path.
        Ok(None)
    }

    fn matmul_kernel_name(&self, spec: &MatmulSpec) -> &'static str {
        self.device
            .matmul_kernel(spec.la, spec.lb, spec.dtype == DType::F16)
            .name()
    }
}
