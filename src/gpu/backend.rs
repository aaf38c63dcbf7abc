//! The GPU's side of the backend interface (`crate::ops::backend::BackendStorage`): which WGSL
//! kernel and precision run each op the tensor layer asks for. The kernels live in their
//! family's file; the choices between them (an f16 product accumulated in f16 or in f32, the
//! adapter's matmul kernel or a named one) live here, so the tensor layer never names a GPU
//! function.

use super::buffer::GpuBuffer;
use super::matmul::{MatmulKernel, Precision};
use crate::ops::backend::{
    Affine, BackendStorage, Cat, CeBackward, CeRows, Gather, IdsView, MatmulSpec, NormSpec, OpIds,
    QMatrix, QuantDevice, ReduceCall, Scatter, View,
};
use crate::ops::geometry::{AdamStep, DecodeDims, Geom};
use crate::ops::RowOp;
use crate::shape::Layout;
use crate::{DType, Result};

/// Every matmul kernel's name, for `Tensor::matmul_with_kernel` to validate a name against.
pub(crate) fn matmul_kernel_names() -> Vec<&'static str> {
    MatmulKernel::ALL.iter().map(|k| k.name()).collect()
}

// The ops this impl leaves to the trait's defaults (`None`) have no kernel of their own on a
// GPU: every elementwise op, conversion, comparison, clamp and selection runs as a generated
// program (the tensor layer's fuser queues it, `elementwise.rs` runs it); the convolution and
// norm backward passes, max pooling and GELU's gradient are compositions of other ops; the
// product and the bias add are two programs (the add may fuse on); and f16 weights are read in
// place by every product, with no special path.
impl BackendStorage for GpuBuffer {
    const FUSED_ADAM: bool = false;

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

    fn matmul_kernel_name(&self, spec: &MatmulSpec) -> &'static str {
        self.device
            .matmul_kernel(spec.la, spec.lb, spec.dtype == DType::F16)
            .name()
    }

    fn softmax(&self, op: RowOp, layout: &Layout, d: usize) -> Result<Option<Self>> {
        self.device.softmax(op, self, layout, d).map(Some)
    }

    fn conv2d(&self, weight: &Self, bias: Option<&Self>, geo: &Geom) -> Result<Option<Self>> {
        // The implicit GEMM reads the input's windows in place, where its grid fits.
        if !super::conv::conv2d_fits(geo, self.device.max_workgroups_per_dim()) {
            return Ok(None);
        }
        self.device.conv2d(self, weight, bias, geo).map(Some)
    }

    fn reduce(&self, r: &ReduceCall) -> Result<Option<Self>> {
        // One kernel for every dtype the op takes (the shader's value kind is a parameter).
        self.device
            .reduce_typed(r.op.name(), r.op, r.dtype, self, r.layout, r.rows)
            .map(Some)
    }

    fn norm(&self, spec: &NormSpec, (weight, bias): Affine<'_, Self>) -> Result<Option<Self>> {
        // One row kernel per call (`gpu/rows.rs`), the affine parameters bound when given.
        self.device.norm(self, spec, weight, bias).map(Some)
    }

    fn check_ids(&self, _op: &'static str, _view: &IdsView, _bound: usize) -> Result<()> {
        // Ids are never read back: the kernels check them as they run (`gpu/ids.rs`).
        Ok(())
    }

    fn gather(&self, g: &Gather<'_, Self>) -> Result<Option<Self>> {
        let (OpIds { op, ids, view }, layout, d, index_shape) =
            (g.ids, g.layout, g.d, g.index_shape);
        // One thread per output element; a bad id writes zero and sets the error word.
        let ids = view.of(ids);
        self.device
            .gather(op, self, layout, d, ids, index_shape)
            .map(Some)
    }

    fn scatter_add(&self, s: &Scatter<'_, Self>) -> Result<Option<Self>> {
        let (OpIds { op, ids, view }, (vals, lv), lb, spec) = (s.ids, s.vals, s.base, s.spec);
        // A copy of the base (a buffer copy), then the deterministic scatter into it in place
        // (sort by target, sum each run in order: `gpu/scatter.rs`).
        let bytes = lb.numel() as u64 * 4;
        let out = self.device.extract(op, self, lb.offset as u64 * 4, bytes)?;
        if view.count > 0 && spec.r > 0 {
            self.device.scatter_add_into(
                op,
                &out,
                view.of(ids),
                spec.shape,
                spec.d,
                spec.out_strides,
                spec.bound,
                (vals, lv.offset, spec.r),
            )?;
        }
        Ok(Some(out))
    }

    fn cat(c: &Cat<'_, Self>) -> Result<Option<Self>> {
        let (parts, d, out_shape, dtype) = (c.parts, c.d, c.out_shape, c.dtype);
        // The copy kernel moves 32-bit words: 16- and 8-bit elements share words.
        let Some((first, _)) = parts.first() else {
            return Ok(None);
        };
        if dtype.size_in_bytes() != 4 {
            return Ok(None);
        }
        first.device.cat(parts, d, out_shape).map(Some)
    }

    fn assemble(
        op: &'static str,
        parts: &[(&Self, &Layout)],
        dtype: DType,
    ) -> Result<Option<Self>> {
        let Some((first, _)) = parts.first() else {
            return Ok(None);
        };
        let g = &first.device;
        let esize = dtype.size_in_bytes() as u64;
        // A packed view that starts inside its buffer is copied out first (buffer copies
        // start at the buffer's first byte).
        let mut owned = Vec::with_capacity(parts.len());
        for (b, l) in parts {
            let (offset, len) = (l.offset as u64 * esize, l.numel() as u64 * esize);
            owned.push(if offset == 0 {
                None
            } else {
                Some(g.extract(op, b, offset, len)?)
            });
        }
        let whole: Vec<(&GpuBuffer, u64)> = parts
            .iter()
            .zip(&owned)
            .map(|((b, l), o)| (o.as_ref().unwrap_or(b), l.numel() as u64 * esize))
            .collect();
        g.assemble(op, &whole).map(Some)
    }

    fn cross_entropy(&self, targets: OpIds<'_, Self>, ce: &CeRows) -> Result<Option<Self>> {
        let OpIds {
            ids: targets, view, ..
        } = targets;
        // Targets are never read back: the kernel checks them as it runs (`gpu/ids.rs`).
        let ids = view.of(targets);
        self.device.cross_entropy_rows(self, ce, ids).map(Some)
    }

    fn cross_entropy_backward(&self, b: &CeBackward<'_, Self>) -> Result<Option<Self>> {
        let (ce, (stats, ls), (g, lg)) = (b.ce, b.stats, b.g);
        if ls.offset != 0 {
            // The kernel reads the statistics from the start of their buffer.
            return Err(crate::Error::InvalidArgument {
                op: "cross_entropy",
                message: "cross-entropy statistics must start their buffer".into(),
            });
        }
        let ids = b.targets.view.of(b.targets.ids);
        self.device
            .cross_entropy_backward(self, ce, ids, stats, (g, lg.offset))
            .map(Some)
    }

    fn attention_decode(&self, k: &Self, v: &Self, dims: &DecodeDims) -> Result<Option<Self>> {
        self.device.attention_decode(self, k, v, *dims).map(Some)
    }

    fn write_bytes(&mut self, at: usize, src: &Self, len: usize) -> Result<()> {
        // A buffer copy on the queue, ordered after the programs that wrote either buffer.
        self.device
            .copy_into("write_rows", src, self, at as u64, len as u64)
    }

    fn adam_step(
        &self,
        _lp: &Layout,
        _grad: View<Self>,
        _moments: Option<[View<Self>; 2]>,
        _hyper: &AdamStep,
    ) -> Result<Option<[Self; 3]>> {
        // The op-by-op formula fuses into one generated program: no separate kernel.
        Ok(None)
    }

    fn copy_bytes(&self, op: &'static str, start: u64, len: u64) -> Result<Option<Self>> {
        self.device.extract(op, self, start, len).map(Some)
    }

    // A GPU composes the convolution family's backward passes, max pooling and batch norm
    // from gathers, matmuls and reductions (which fuse and batch with the ops around them);
    // only the conv2d forward has a kernel of its own, asked through `conv2d`.
    const OWN_CONV: bool = false;
}

impl crate::ops::backend::BackendDevice for super::GpuDevice {
    type Storage = GpuBuffer;

    fn upload(&self, op: &'static str, bytes: &[u8], _dtype: DType) -> Result<GpuBuffer> {
        super::GpuDevice::upload(self, op, bytes)
    }

    fn zeros(&self, op: &'static str, n: usize, dtype: DType) -> Result<GpuBuffer> {
        // wgpu zero-initialises new buffers, so zeros cost one allocation and no transfer.
        self.alloc(op, (n * dtype.size_in_bytes()) as u64)
    }

    fn filled(&self, op: &'static str, n: usize, value: f64, dtype: DType) -> Result<GpuBuffer> {
        self.fill_value(op, n, value, dtype)
    }

    fn arange(&self, _n: usize, _start: f32, _step: f32) -> Result<Option<GpuBuffer>> {
        // A generated program the tensor layer builds, which fuses into whatever consumes it.
        Ok(None)
    }

    fn random(
        &self,
        _dist: crate::ops::program::Dist,
        _seed: u64,
        _offset: u64,
        _n: usize,
    ) -> Result<Option<GpuBuffer>> {
        // As arange: a generated program (`Expr::Random`), fused with its consumer.
        Ok(None)
    }

    fn run_fused(&self, call: &crate::ops::backend::ProgramCall<GpuBuffer>) -> Result<GpuBuffer> {
        // An output past one binding runs in blocks of rows (`program_blocks.rs`).
        self.run_pending(call)
    }

    fn bind_limits(&self) -> Option<crate::ops::backend::BindLimits> {
        Some(crate::ops::backend::BindLimits {
            binding: self.binding_limit(),
            max_buffer: self.0.limits.max_buffer_size,
        })
    }
}

// No grouped matvec: each matrix's product is one launch per part, queued back to back.
impl QuantDevice for super::GpuDevice {
    fn quant_planes(
        &self,
        op: &'static str,
        scales: Vec<half::f16>,
        body: Vec<u8>,
    ) -> Result<[GpuBuffer; 2]> {
        // Buffers of exactly the planes' size, so the device holds the file's bytes and no
        // allocator rounding (up to 2 MiB a buffer).
        let s = self.upload_exact(op, bytemuck::cast_slice(&scales))?;
        Ok([s, self.upload_exact(op, &body)?])
    }

    fn quant_dequantize(&self, op: &'static str, mat: &QMatrix<GpuBuffer>) -> Result<GpuBuffer> {
        super::GpuDevice::quant_dequantize(self, op, mat)
    }

    fn quant_matmul_t(
        &self,
        op: &'static str,
        mat: &QMatrix<GpuBuffer>,
        x: (&GpuBuffer, usize),
        m: usize,
        _integer: bool,
    ) -> Result<GpuBuffer> {
        // Always dequantized in the kernel, in f32: no integer dot products.
        super::GpuDevice::quant_matmul_t(self, op, mat, x, m)
    }

    fn quant_gather_rows(
        &self,
        mat: &QMatrix<GpuBuffer>,
        OpIds { op, ids, view }: OpIds<'_, GpuBuffer>,
    ) -> Result<GpuBuffer> {
        // Bad ids are found by the kernel, reported at the next synchronizing call.
        super::GpuDevice::quant_gather_rows(self, op, mat, view.of(ids))
    }
}
