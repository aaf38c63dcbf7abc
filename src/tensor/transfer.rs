//! Moving tensors between devices (`.to()`, `.cpu()`, `.gpu()`) and reading them back.

use super::dispatch::transfer as dispatch;
use super::Tensor;
use crate::{Device, Error, Result, WithDType};
use std::future::Future;

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
        let out = self.to_untracked(device)?;
        Ok(crate::autograd::shape::to(self, out))
    }

    fn to_untracked(&self, device: &Device) -> Result<Tensor> {
        if self.device() == device {
            return Ok(self.clone());
        }
        let storage = dispatch::to_device(self, device)?;
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

    /// `t.to(device)` without blocking the caller (PyTorch's `non_blocking=True`): the copy runs
    /// on a worker thread and the returned future resolves to the moved tensor, with `pollster`,
    /// tokio or any other executor. Prepare the next batch while it runs.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let x = Tensor::ones(&[1024], wgtensor::DType::F32, &Device::cpu())?;
    /// let pending = x.to_async(&Device::best());   // returns at once
    /// let on_device = pollster::block_on(pending)?; // ...and is awaited when needed
    /// assert_eq!(on_device.shape(), &[1024]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn to_async(
        &self,
        device: &Device,
    ) -> impl Future<Output = Result<Tensor>> + Send + 'static + use<> {
        let (t, d) = (self.clone(), device.clone());
        in_background("to_async", device.to_string(), move || t.to(&d))
    }

    /// [`Tensor::to_vec`] without blocking the caller: the readback runs on a worker thread.
    ///
    /// ```
    /// let t = wgtensor::Tensor::arange(0.0, 4.0, 1.0, &wgtensor::Device::best())?;
    /// let v = pollster::block_on(t.to_vec_async::<f32>())?;
    /// assert_eq!(v, vec![0.0, 1.0, 2.0, 3.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn to_vec_async<T: WithDType>(
        &self,
    ) -> impl Future<Output = Result<Vec<T>>> + Send + 'static + use<T> {
        let t = self.clone();
        in_background("to_vec_async", self.device().to_string(), move || {
            t.to_vec::<T>()
        })
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
        Ok(self
            .host_contiguous("to_vec")?
            .into_vec::<T>()
            .expect("dtype checked above"))
    }

    /// Calls `f` with the elements in row-major order without copying them into a new `Vec`:
    /// a GPU tensor is mapped (its own buffer on unified-memory adapters, else one staging
    /// buffer the GPU copies into) and `f` reads the mapped memory; a packed CPU tensor is read
    /// in place. For callers that only look at the data (checksums, writing to a file, drawing);
    /// `to_vec` when the data must outlive the call. Strided views are packed on their device
    /// first. Other threads' work on the device waits while `f` runs, so keep `f` short.
    ///
    /// Inside `f`, work on the same GPU that must be submitted (a readback such as `to_vec`, or
    /// enough ops to fill a batch) cannot run while the buffer is mapped in place (unified-memory
    /// adapters): it returns [`Error::InvalidArgument`] at once, naming `map_read`, instead of
    /// waiting for the device timeout; the device stays usable. Elsewhere it completes.
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] when `T` is not the tensor's element type; GPU errors.
    ///
    /// ```
    /// let t = wgtensor::Tensor::arange(0.0, 4.0, 1.0, &wgtensor::Device::best())?;
    /// let sum = t.map_read(|v: &[f32]| v.iter().sum::<f32>())?;
    /// assert_eq!(sum, 6.0);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn map_read<T: WithDType, R>(&self, f: impl FnOnce(&[T]) -> R) -> Result<R> {
        if T::DTYPE != self.dtype() {
            return Err(Error::DTypeMismatch {
                op: "map_read",
                lhs: self.dtype(),
                rhs: T::DTYPE,
            });
        }
        let packed = if self.is_contiguous() {
            self.clone()
        } else {
            self.contiguous()?
        };
        dispatch::read_packed("map_read", &packed, |bytes| with_typed(bytes, f))
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
        let out = self.contiguous_untracked()?;
        Ok(crate::autograd::shape::view(
            "contiguous",
            crate::autograd::shape::View::Contiguous,
            self,
            out,
        ))
    }

    fn contiguous_untracked(&self) -> Result<Tensor> {
        if self.is_contiguous() && self.layout().offset == 0 {
            return Ok(self.clone());
        }
        if let Some(g) = super::chunked::blocks_needed(&[self], self.numel()) {
            return super::chunked::map_row_blocks("contiguous", g, self.shape(), &[self], &|b| {
                b[0].contiguous()
            });
        }
        match dispatch::contiguous(self)? {
            Some(storage) => Ok(self.derived(storage, self.shape())),
            // The generated same-dtype copy (whole output words per invocation, any dtype).
            None => self.convert_to(self.dtype()),
        }
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
    pub fn wgpu_buffer(&self) -> Result<dispatch::WgpuBufferView<'_>> {
        let view = dispatch::wgpu_buffer(self)?;
        self.0.storage.mark_exported();
        Ok(view)
    }

    /// A tensor over the application's own wgpu `buffer` (no copy), read as `shape` packed
    /// row-major elements of `dtype` from its start: the inverse of [`Tensor::wgpu_buffer`].
    /// `device` must be the GPU that owns the buffer (`Device::from_wgpu` over the
    /// application's device). The tensor reads the buffer's contents as they are when an op
    /// reading it runs: ops that read it are submitted at once, so they stay ordered with the
    /// application's own submissions; write to the buffer only after `device.synchronize()`
    /// if earlier wgtensor work must see the old contents. wgtensor never writes to it, and
    /// never reuses it after the tensor is dropped.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `device` is the CPU, when the buffer lacks a usage
    /// wgtensor needs (`STORAGE | COPY_SRC | COPY_DST`; the message names the missing ones), or
    /// is smaller than `shape` needs; [`Error::ShapeOverflow`] for a shape whose byte size
    /// overflows. A buffer of another device is a wgpu validation error, reported as
    /// [`Error::Wgpu`] by the first op that uses it.
    ///
    /// ```
    /// use wgtensor::wgpu::{BufferDescriptor, BufferUsages as U};
    /// use wgtensor::{DType, Device, Tensor};
    /// let device = Device::best();
    /// if let Some((dev, queue)) = device.wgpu() {
    ///     let desc = |usage| BufferDescriptor { label: None, size: 16, usage, mapped_at_creation: false };
    ///     let buffer = dev.create_buffer(&desc(U::STORAGE | U::COPY_SRC | U::COPY_DST));
    ///     queue.write_buffer(&buffer, 0, bytemuck_free(&[1f32, 2.0, 3.0, 4.0]));
    ///     let t = Tensor::from_wgpu_buffer(&buffer, &[2, 2], DType::F32, &device)?;
    ///     assert_eq!(t.mul_scalar(2.0)?.to_vec::<f32>()?, vec![2.0, 4.0, 6.0, 8.0]);
    ///     // STORAGE alone is not enough: wgtensor copies in and out of its tensors.
    ///     let bare = dev.create_buffer(&desc(U::STORAGE));
    ///     assert!(Tensor::from_wgpu_buffer(&bare, &[4], DType::F32, &device).is_err());
    /// }
    /// # fn bytemuck_free(v: &[f32]) -> &[u8] {
    /// #     unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), v.len() * 4) }
    /// # }
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn from_wgpu_buffer(
        buffer: &wgpu::Buffer,
        shape: &[usize],
        dtype: crate::DType,
        device: &crate::Device,
    ) -> Result<Tensor> {
        let storage = dispatch::adopt_wgpu_buffer(buffer, shape, dtype, device)?;
        let t = Tensor::from_parts(storage, shape, dtype, device.clone());
        t.0.storage.mark_exported();
        Ok(t)
    }
}

/// Reads several tensors back to the CPU with one submit and one wait per device (instead of one
/// round trip each); returns CPU tensors in the same order.
///
/// ```
/// use wgtensor::{Device, Tensor};
/// let dev = Device::best();
/// let a = Tensor::ones(&[3], wgtensor::DType::F32, &dev)?;
/// let b = a.mul_scalar(2.0)?;
/// let host = wgtensor::read_all(&[&a, &b])?;
/// assert_eq!(host[1].to_vec::<f32>()?, vec![2.0; 3]);
/// assert!(host[0].is_cpu());
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub fn read_all(tensors: &[&Tensor]) -> Result<Vec<Tensor>> {
    let hosts = dispatch::host_many("read_all", tensors)?;
    Ok(tensors
        .iter()
        .zip(hosts)
        .map(|(t, h)| Tensor::from_parts(h, t.shape(), t.dtype(), Device::cpu()))
        .collect())
}

/// Runs `work` on a new thread; the future resolves to its result.
fn in_background<T: Send + 'static>(
    op: &'static str,
    device: String,
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> impl Future<Output = Result<T>> + Send + 'static {
    let (tx, rx) = futures_intrusive::channel::shared::oneshot_channel();
    let spawned = std::thread::Builder::new()
        .name(format!("wgtensor-{op}"))
        .spawn(move || {
            let _ = tx.send(work());
        });
    async move {
        let lost = || Error::Wgpu {
            op,
            device: device.clone(),
            message: "the transfer thread ended without a result".into(),
        };
        if spawned.is_err() {
            return Err(Error::Wgpu {
                op,
                device: device.clone(),
                message: "could not start a transfer thread".into(),
            });
        }
        rx.receive().await.unwrap_or_else(|| Err(lost()))
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Tensor>();
    is::<Device>();
}

/// `f` over `bytes` as `&[T]`: in place when aligned (mapped and host memory normally are), else
/// over one aligned copy.
fn with_typed<T: WithDType, R>(bytes: &[u8], f: impl FnOnce(&[T]) -> R) -> R {
    match bytemuck::try_cast_slice::<u8, T>(bytes) {
        Ok(v) => f(v),
        Err(_) => {
            let v: Vec<T> = bytes
                .chunks_exact(std::mem::size_of::<T>())
                .map(bytemuck::pod_read_unaligned::<T>)
                .collect();
            f(&v)
        }
    }
}
