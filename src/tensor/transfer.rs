//! Moving tensors between devices (`.to()`, `.cpu()`, `.gpu()`) and reading them back.

use super::{backend, Backend, Tensor};
use crate::ops::UnaryOp;
use crate::shape::Layout;
use crate::storage::{CpuStorage, Storage};
use crate::{DType, Device, Error, Result, WithDType};

/// A GPU tensor's buffer, for use in the application's own wgpu passes (see
/// [`Tensor::wgpu_buffer`]).
#[derive(Debug, Clone, Copy)]
pub struct WgpuBufferView<'a> {
    /// The buffer (usages: STORAGE, COPY_SRC, COPY_DST).
    pub buffer: &'a wgpu::Buffer,
    /// Byte offset of the first element.
    pub offset: u64,
    /// Byte length of the elements (`numel * dtype size`).
    pub size: u64,
}

impl Tensor {
    /// A copy of this tensor on `device` (`t.to(device)`); `self` stays where it is. Moving to
    /// the device it is already on is a cheap clone. GPU-to-GPU moves go through the host.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let cpu = Tensor::from_vec(vec![1f32, 2.0], &[2], &Device::cpu())?;
    /// let dev = cpu.to(&Device::best())?;
    /// assert_eq!(dev.to_vec::<f32>()?, vec![1.0, 2.0]);
    /// assert!(cpu.is_cpu()); // unchanged
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn to(&self, device: &Device) -> Result<Tensor> {
        if self.device() == device {
            return Ok(self.clone());
        }
        let host = self.host_contiguous("to")?;
        let storage = match backend(device) {
            Backend::Cpu => Storage::Cpu(host),
            Backend::Gpu(g) => Storage::Gpu(g.upload("to", host.as_bytes())?),
        };
        Ok(Tensor::from_parts(
            storage,
            self.shape(),
            self.dtype(),
            device.clone(),
        ))
    }

    /// `t.to(&Device::cpu())` (PyTorch's `.cpu()`).
    ///
    /// ```
    /// let t = wgtensor::Tensor::ones(&[2], wgtensor::DType::F32, &wgtensor::Device::best())?;
    /// assert!(t.cpu()?.is_cpu());
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn cpu(&self) -> Result<Tensor> {
        self.to(&Device::cpu())
    }

    /// `t.to(&Device::gpu(0)?)` (PyTorch's `.cuda()`).
    ///
    /// # Errors
    /// [`Error::GpuUnavailable`] when no GPU exists.
    ///
    /// ```
    /// let t = wgtensor::Tensor::ones(&[2], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// match t.gpu() {
    ///     Ok(g) => assert!(g.is_gpu()),
    ///     Err(e) => println!("{e}"),
    /// }
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn gpu(&self) -> Result<Tensor> {
        self.to(&Device::gpu(0)?)
    }

    /// The elements in row-major order, copied to the host.
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] when `T` is not the tensor's element type; GPU errors
    /// ([`Error::Timeout`], [`Error::DeviceLost`]).
    ///
    /// ```
    /// let t = wgtensor::Tensor::arange(0.0, 3.0, 1.0, &wgtensor::Device::best())?;
    /// assert_eq!(t.to_vec::<f32>()?, vec![0.0, 1.0, 2.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn to_vec<T: WithDType>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype() {
            return Err(Error::DTypeMismatch {
                op: "to_vec",
                lhs: self.dtype(),
                rhs: T::DTYPE,
            });
        }
        let host = self.host_contiguous("to_vec")?;
        let slice = host.as_slice::<T>().expect("dtype checked above");
        Ok(slice.to_vec())
    }

    /// The single element of a one-element tensor (PyTorch's `.item()`).
    ///
    /// ```
    /// let t = wgtensor::Tensor::full(&[1, 1], 3.0, wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.to_scalar::<f32>()?, 3.0);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn to_scalar<T: WithDType>(&self) -> Result<T> {
        if self.numel() != 1 {
            return Err(Error::InvalidArgument {
                op: "to_scalar",
                message: format!(
                    "tensor of shape {:?} has {} elements, not 1",
                    self.shape(),
                    self.numel()
                ),
            });
        }
        Ok(self.to_vec::<T>()?[0])
    }

    /// A packed row-major copy of a view, on the same device (a clone if already contiguous).
    ///
    /// ```
    /// let t = wgtensor::Tensor::ones(&[2, 2], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert!(t.contiguous()?.is_contiguous());
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn contiguous(&self) -> Result<Tensor> {
        if self.is_contiguous() && self.layout().offset == 0 {
            return Ok(self.clone());
        }
        let storage = match self.storage() {
            Storage::Cpu(s) => Storage::Cpu(s.contiguous(self.layout())),
            Storage::Gpu(b) if self.dtype() == DType::F32 => {
                Storage::Gpu(b.device.unary(UnaryOp::Copy, b, self.layout())?)
            }
            // Other dtypes have no copy kernel yet: gather on the host and upload again.
            Storage::Gpu(b) => {
                let host = self.host_contiguous("contiguous")?;
                Storage::Gpu(b.device.upload("contiguous", host.as_bytes())?)
            }
        };
        Ok(self.derived(storage, self.shape()))
    }

    /// The GPU buffer behind a contiguous GPU tensor, to bind in the application's own passes.
    /// All work that produces the tensor has been submitted on the device's queue.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for CPU tensors and non-contiguous views (call
    /// [`Tensor::contiguous`] first).
    ///
    /// ```
    /// let t = wgtensor::Tensor::ones(&[4], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert!(t.wgpu_buffer().is_err()); // CPU tensors have no wgpu buffer
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn wgpu_buffer(&self) -> Result<WgpuBufferView<'_>> {
        let bad = |message: String| Error::InvalidArgument {
            op: "wgpu_buffer",
            message,
        };
        match self.storage() {
            Storage::Cpu(_) => Err(bad(
                "the tensor is on the cpu; move it with .to(&device) first".into(),
            )),
            Storage::Gpu(_) if !self.is_contiguous() => Err(bad(
                "the tensor is a strided view; call .contiguous() first".into(),
            )),
            Storage::Gpu(b) => {
                let esize = self.dtype().size_in_bytes() as u64;
                Ok(WgpuBufferView {
                    buffer: &b.buffer,
                    offset: self.layout().offset as u64 * esize,
                    size: self.numel() as u64 * esize,
                })
            }
        }
    }

    /// The elements, packed row-major, on the host (the one readback path).
    pub(crate) fn host_contiguous(&self, op: &'static str) -> Result<CpuStorage> {
        let layout = self.layout();
        match self.storage() {
            Storage::Cpu(s) => Ok(s.contiguous(layout)),
            Storage::Gpu(b) => {
                let esize = self.dtype().size_in_bytes() as u64;
                // Read the span the view touches, then gather on the host: one transfer, for
                // every dtype, whatever the strides.
                let start = layout.offset as u64 * esize;
                let len = (layout.span() as u64).saturating_sub(layout.offset as u64) * esize;
                let bytes = b.device.read(op, b, start, len)?;
                let host = CpuStorage::from_bytes(self.dtype(), &bytes);
                if layout.is_contiguous() {
                    return Ok(host);
                }
                let local = Layout {
                    offset: 0,
                    ..layout.clone()
                };
                Ok(host.contiguous(&local))
            }
        }
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Tensor>();
    is::<Device>();
}
