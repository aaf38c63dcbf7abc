//! The tensor type: shape, dtype, device and shared storage. This file and its submodules only
//! validate arguments and dispatch to `cpu/` or `gpu/`; no kernel lives here.

mod attention;
mod attention_decode;
pub(crate) mod attention_fused;
mod chunked;
mod compare;
mod conv;
mod conv_cpu;
mod convert;
mod create;
mod cross_entropy;
mod display;
mod elementwise;
mod fuse;
mod gather;
mod join;
mod matmul;
mod norm;
mod pad;
mod quant;
mod reduce;
mod scatter;
mod softmax;
mod transfer;
mod view;

pub use conv::Conv2dOptions;
pub(crate) use fuse::materialize_pending;
pub use matmul::{f16_accumulation, set_f16_accumulation};
pub use pad::PadMode;
pub use quant::{quantized_activations, set_quantized_activations, QTensor};

/// Forces quantized matrices into parts of `rows` rows (0: only at the binding limit).
pub(crate) fn quant_part_rows(rows: usize) {
    quant::FORCED_PART_ROWS.store(rows, std::sync::atomic::Ordering::Relaxed);
}
pub use transfer::{read_all, WgpuBufferView};

use crate::device::DeviceInner;
use crate::gpu::GpuDevice;
use crate::shape::Layout;
use crate::storage::{CpuStorage, Storage};
use crate::{DType, Device, Error, Result};
use std::sync::Arc;

/// An n-dimensional array on a [`Device`].
///
/// Cloning is cheap: clones share storage. Tensors are immutable; every op returns a new tensor,
/// and ops never move data between devices by themselves (use [`Tensor::to`]).
///
/// ```
/// use wgtensor::{Device, Tensor};
/// let device = Device::best();
/// let x = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[2, 2], &device)?;
/// let y = (&x * &x)?.add_scalar(1.0)?;
/// assert_eq!(y.to_vec::<f32>()?, vec![2.0, 5.0, 10.0, 17.0]);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Clone)]
pub struct Tensor(Arc<TensorInner>);

struct TensorInner {
    /// Materialised data, or a pending fused elementwise program (`fuse.rs`).
    storage: Arc<fuse::StorageCell>,
    layout: Layout,
    dtype: DType,
    device: Device,
    /// Autograd state: the recording node of an op result, or a leaf's flag and grad slot.
    autograd: crate::autograd::Meta,
}

impl Tensor {
    pub(crate) fn from_parts(
        storage: Storage,
        shape: &[usize],
        dtype: DType,
        device: Device,
    ) -> Tensor {
        if let Storage::Cpu(s) = &storage {
            crate::cpu::alloc::cpu_alloc(s.size_in_bytes() as u64);
        }
        Tensor(Arc::new(TensorInner {
            storage: Arc::new(fuse::StorageCell::ready(storage)),
            layout: Layout::contiguous(shape),
            dtype,
            device,
            autograd: Default::default(),
        }))
    }

    /// Bytes of the GPU buffer behind this tensor (for a pending fused result: the buffer it
    /// will get), without materialising it; `None` on the CPU.
    pub(crate) fn gpu_bytes(&self) -> Option<u64> {
        self.0.storage.gpu_bytes(self.dtype())
    }

    /// The tensor's data, materialising a pending fused program first (one dispatch).
    pub(crate) fn storage(&self) -> Result<&Storage> {
        self.0.storage.get()
    }

    pub(crate) fn layout(&self) -> &Layout {
        &self.0.layout
    }

    /// Autograd state (see `src/autograd/`).
    pub(crate) fn autograd_meta(&self) -> &crate::autograd::Meta {
        &self.0.autograd
    }

    /// This tensor's recording node when this handle is the last one to it (used to free long
    /// graphs without recursion); `None` otherwise.
    pub(crate) fn into_unique_node(self) -> Option<Arc<crate::autograd::Node>> {
        Arc::try_unwrap(self.0).ok()?.autograd.take_node()
    }

    /// A tensor sharing this one's storage and view with new autograd state: how recorded op
    /// results, `detach` and `requires_grad_` are made without copying data.
    pub(crate) fn with_autograd(&self, autograd: crate::autograd::Meta) -> Tensor {
        Tensor(Arc::new(TensorInner {
            storage: self.0.storage.clone(),
            layout: self.0.layout.clone(),
            dtype: self.0.dtype,
            device: self.0.device.clone(),
            autograd,
        }))
    }

    /// The shape (PyTorch's `t.shape`).
    ///
    /// ```
    /// let t = wgtensor::Tensor::zeros(&[2, 3], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.shape(), &[2, 3]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn shape(&self) -> &[usize] {
        &self.0.layout.shape
    }

    /// Same as [`Tensor::shape`] (candle's name).
    pub fn dims(&self) -> &[usize] {
        self.shape()
    }

    /// Number of dimensions (PyTorch's `t.dim()`).
    ///
    /// ```
    /// let t = wgtensor::Tensor::zeros(&[2, 3], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.ndim(), 2);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn ndim(&self) -> usize {
        self.shape().len()
    }

    /// Number of elements.
    ///
    /// ```
    /// let t = wgtensor::Tensor::zeros(&[2, 3], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.numel(), 6);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn numel(&self) -> usize {
        self.0.layout.numel()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.0.dtype
    }

    /// The device holding the data (PyTorch's `t.device`).
    ///
    /// ```
    /// let t = wgtensor::Tensor::zeros(&[1], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.device().to_string(), "cpu");
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn device(&self) -> &Device {
        &self.0.device
    }

    /// Whether the data is on a GPU (PyTorch's `t.is_cuda`).
    pub fn is_gpu(&self) -> bool {
        self.0.device.is_gpu()
    }

    /// Whether the data is on the CPU.
    pub fn is_cpu(&self) -> bool {
        self.0.device.is_cpu()
    }

    /// Whether elements are packed row-major (views such as broadcasts are not).
    pub fn is_contiguous(&self) -> bool {
        self.0.layout.is_contiguous()
    }

    /// f32 host data, or the error `op` reports for other dtypes.
    fn cpu_f32(&self, op: &'static str) -> Result<&[f32]> {
        match self.storage()? {
            Storage::Cpu(CpuStorage::F32(v)) => Ok(v),
            _ => Err(self.unsupported(op)),
        }
    }

    /// Rejects dtypes without kernels yet.
    fn require_f32(&self, op: &'static str) -> Result<()> {
        if self.dtype() == DType::F32 {
            Ok(())
        } else {
            Err(self.unsupported(op))
        }
    }

    fn unsupported(&self, op: &'static str) -> Error {
        Error::UnsupportedDType {
            op,
            dtype: self.dtype(),
            device: self.device().to_string(),
        }
    }

    /// Same device and dtype, or the error naming both.
    fn check_pair(&self, op: &'static str, rhs: &Tensor) -> Result<()> {
        if self.device() != rhs.device() {
            return Err(Error::DeviceMismatch {
                op,
                lhs: self.device().to_string(),
                rhs: rhs.device().to_string(),
            });
        }
        if self.dtype() != rhs.dtype() {
            return Err(Error::DTypeMismatch {
                op,
                lhs: self.dtype(),
                rhs: rhs.dtype(),
            });
        }
        Ok(())
    }

    /// A new contiguous tensor on `device` from freshly computed storage.
    fn derived(&self, storage: Storage, shape: &[usize]) -> Tensor {
        Tensor::from_parts(storage, shape, self.dtype(), self.device().clone())
    }
}

/// Which backend a device dispatches to; keeps the exhaustive match in one place.
pub(crate) enum Backend<'a> {
    Cpu,
    Gpu(&'a GpuDevice),
}

pub(crate) fn backend(device: &Device) -> Backend<'_> {
    match &device.0 {
        DeviceInner::Cpu => Backend::Cpu,
        DeviceInner::Gpu(g) => Backend::Gpu(g),
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tensor(shape={:?}, dtype={}, device={})",
            self.shape(),
            self.dtype(),
            self.device()
        )
    }
}
