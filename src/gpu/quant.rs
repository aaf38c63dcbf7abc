//! GPU kernels of quantized matrices (`shaders/quant.wgsl`).

use super::buffer::GpuBuffer;
use super::device::GpuDevice;
use crate::{Error, QType, Result};

/// One row range of a quantized matrix on the device: its scales plane (f16 pairs) and body
/// plane (bytes read as `u32` words).
#[allow(dead_code)] // read by the kernels that follow
pub(crate) struct QPart<'a> {
    pub row0: usize,
    pub rows: usize,
    pub scales: &'a GpuBuffer,
    pub body: &'a GpuBuffer,
}

impl GpuDevice {
    fn quant_pending(&self, op: &'static str, q: QType) -> Error {
        Error::UnsupportedDType {
            op,
            dtype: crate::DType::U8,
            device: format!("{} ({q} kernels are not built yet)", self.label()),
        }
    }

    pub(crate) fn quant_dequantize(
        &self,
        op: &'static str,
        q: QType,
        _shape: [usize; 2],
        _parts: &[QPart<'_>],
    ) -> Result<GpuBuffer> {
        Err(self.quant_pending(op, q))
    }

    pub(crate) fn quant_matmul_t(
        &self,
        op: &'static str,
        q: QType,
        _shape: [usize; 2],
        _parts: &[QPart<'_>],
        _x: (&GpuBuffer, usize),
        _m: usize,
    ) -> Result<GpuBuffer> {
        Err(self.quant_pending(op, q))
    }

    pub(crate) fn quant_gather_rows(
        &self,
        op: &'static str,
        q: QType,
        _shape: [usize; 2],
        _parts: &[QPart<'_>],
        _ids: super::gather::Ids<'_>,
    ) -> Result<GpuBuffer> {
        Err(self.quant_pending(op, q))
    }
}
