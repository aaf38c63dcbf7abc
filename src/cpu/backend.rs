//! The CPU's side of the backend interface (`crate::ops::backend::BackendStorage`): which host
//! kernel runs each op the tensor layer asks for. The kernels themselves live in their family's
//! file; the choices between them (gemm or a matrix-vector kernel for an f16 weight) live here,
//! so the tensor layer never names a CPU function.

use super::storage::CpuStorage;
use super::{f16_weight, matmul};
use crate::ops::backend::{BackendStorage, MatmulSpec};
use crate::{DType, Result};

impl BackendStorage for CpuStorage {
    fn matmul(&self, rhs: &Self, spec: &MatmulSpec) -> Result<Option<(Self, DType)>> {
        Ok(match (self, rhs) {
            (CpuStorage::F32(a), CpuStorage::F32(b)) => Some((
                CpuStorage::F32(matmul::matmul(a, spec.la, b, spec.lb)?),
                DType::F32,
            )),
            // f16 weights read in place where the layouts allow; elsewhere the caller multiplies
            // f32 copies (gemm has no f16 kernel here).
            _ => f16_weight::f16_matmul_t(self, spec.la, rhs, spec.lb)?.map(|s| (s, DType::F16)),
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
        f16_weight::f32_matmul_t_f16(self, spec.la, w, spec.lb)
    }

    fn matmul_kernel_name(&self, _spec: &MatmulSpec) -> &'static str {
        "gemm"
    }
}
