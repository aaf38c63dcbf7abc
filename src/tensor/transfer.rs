//! Moving tensors between devices (`.to()`, `.cpu()`, `.gpu()`) and reading them back.

use super::Data;
use super::{backend, Backend, Tensor};
use crate::gpu::transfer::ReadPart;
use crate::gpu::GpuDevice;
use crate::shape::Layout;
use crate::storage::{CpuStorage, Storage};
use crate::{Device, Error, Result, WithDType};
use std::future::Future;

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
        let out = self.to_untracked(device)?;
        Ok(crate::autograd::shape::to(self, out))
    }

    fn to_untracked(&self, device: &Device) -> Result<Tensor> {
        if self.device() == device {
            return Ok(self.clone());
        }
        let storage = match (self.data()?, backend(device)) {
            // A packed host tensor uploads straight from its own memory (no intermediate copy).
            (Data::Cpu(s), Backend::Gpu(g)) if self.is_contiguous() => {
                let esize = self.dtype().size_in_bytes();
                let start = self.layout().offset * esize;
                let bytes = &s.as_bytes()[start..start + self.numel() * esize];
                Storage::from(g.upload("to", bytes)?)
            }
            (_, Backend::Cpu) => Storage::from(self.host_contiguous("to")?),
            (_, Backend::Gpu(g)) => {
                Storage::from(g.upload("to", self.host_contiguous("to")?.as_bytes())?)
            }
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
        let esize = self.dtype().size_in_bytes();
        match packed.data()? {
            Data::Cpu(s) => {
                let start = packed.layout().offset * esize;
                let bytes = &s.as_bytes()[start..start + packed.numel() * esize];
                Ok(with_typed(bytes, f))
            }
            Data::Gpu(b) => {
                let part = ReadPart {
                    buffer: b,
                    offset: (packed.layout().offset * esize) as u64,
                    len: (packed.numel() * esize) as u64,
                };
                let mut f = Some(f);
                let mut out = b.device.read_many("map_read", &[part], |_, bytes| {
                    b.device.note_read(bytes);
                    f.take().map(|f| with_typed(bytes, f))
                })?;
                out.pop().flatten().ok_or_else(|| Error::InvalidArgument {
                    op: "map_read",
                    message: "the readback produced no data (a wgtensor bug)".into(),
                })
            }
        }
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
        let storage = match self.data()? {
            Data::Cpu(s) => Storage::from(s.contiguous(self.layout())?),
            // The generated same-dtype copy (whole output words per invocation, any dtype).
            Data::Gpu(_) => return self.convert_to(self.dtype()),
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
        match self.data()? {
            Data::Cpu(_) => Err(bad(
                "the tensor is on the cpu; move it with .to(&device) first".into(),
            )),
            Data::Gpu(_) if !self.is_contiguous() => Err(bad(
                "the tensor is a strided view; call .contiguous() first".into(),
            )),
            Data::Gpu(b) => {
                let esize = self.dtype().size_in_bytes() as u64;
                let offset = self.layout().offset as u64 * esize;
                let align = b.device.0.limits.min_storage_buffer_offset_alignment as u64;
                if !offset.is_multiple_of(align) {
                    return Err(bad(format!(
                        "the view starts {offset} bytes into its buffer, which is not a \
                         multiple of this adapter's min_storage_buffer_offset_alignment \
                         ({align}), so it cannot be bound there; call .contiguous() for a copy \
                         that starts at offset 0"
                    )));
                }
                // The application's own submissions must come after the work (and the staged
                // upload) that produces this tensor, and ops that read it later must not be
                // deferred past the application's writes.
                b.device.poll_once();
                b.device.check("wgpu_buffer")?;
                b.device.flush("wgpu_buffer")?;
                self.0.storage.mark_exported();
                Ok(WgpuBufferView {
                    buffer: &b.buffer,
                    offset,
                    size: self.numel() as u64 * esize,
                })
            }
        }
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
        const OP: &str = "from_wgpu_buffer";
        let bad = |message: String| Error::InvalidArgument { op: OP, message };
        let Backend::Gpu(g) = backend(device) else {
            return Err(bad(
                "the device is the cpu; pass the GPU that owns the buffer (Device::from_wgpu)"
                    .into(),
            ));
        };
        let numel = crate::shape::numel_checked(shape)?;
        let bytes = (numel as u64)
            .checked_mul(dtype.size_in_bytes() as u64)
            .ok_or_else(|| Error::ShapeOverflow {
                shape: shape.to_vec(),
            })?;
        use wgpu::BufferUsages as U;
        let needed = U::STORAGE | U::COPY_SRC | U::COPY_DST;
        let missing = needed - buffer.usage();
        if !missing.is_empty() {
            return Err(bad(format!(
                "the buffer lacks the usage(s) {missing:?} (it has {:?}); create it with \
                 STORAGE | COPY_SRC | COPY_DST",
                buffer.usage()
            )));
        }
        if buffer.size() < bytes {
            return Err(bad(format!(
                "the buffer holds {} bytes but shape {shape:?} of {dtype} needs {bytes}",
                buffer.size()
            )));
        }
        let t = Tensor::from_parts(g.adopt(buffer, bytes), shape, dtype, device.clone());
        t.0.storage.mark_exported();
        Ok(t)
    }

    /// The elements, packed row-major, read back to the host and widened to f64 exactly (for
    /// printing, which formats every dtype as one number type).
    pub(crate) fn host_f64s(&self, op: &'static str) -> Result<Vec<f64>> {
        Ok(self.host_contiguous(op)?.to_f64s())
    }

    /// The elements, packed row-major, on the host.
    pub(crate) fn host_contiguous(&self, op: &'static str) -> Result<CpuStorage> {
        Ok(host_many(op, &[self])?
            .pop()
            .expect("one tensor in, one out"))
    }
}

/// The one readback path: every tensor's elements, packed row-major, on the host. GPU tensors
/// on one device are read with one submit and one wait; each reads the span its view touches,
/// then views are gathered on the host (one transfer, for every dtype, whatever the strides).
pub(crate) fn host_many(op: &'static str, tensors: &[&Tensor]) -> Result<Vec<CpuStorage>> {
    let mut out: Vec<Option<CpuStorage>> = tensors
        .iter()
        .map(|t| t.host_data()?.map(|s| s.contiguous(t.layout())).transpose())
        .collect::<Result<_>>()?;
    // Group the GPU tensors by device, preserving order.
    let mut groups: Vec<(&GpuDevice, Vec<usize>)> = Vec::new();
    for (i, t) in tensors.iter().enumerate() {
        if let Ok(Some(b)) = t.gpu_data() {
            match groups.iter_mut().find(|(d, _)| **d == b.device) {
                Some((_, v)) => v.push(i),
                None => groups.push((&b.device, vec![i])),
            }
        }
    }
    for (device, members) in groups {
        let parts: Vec<ReadPart<'_>> = members
            .iter()
            .map(|&i| {
                let t = tensors[i];
                let Ok(Some(b)) = t.gpu_data() else {
                    unreachable!("grouped GPU tensors")
                };
                let esize = t.dtype().size_in_bytes() as u64;
                let l = t.layout();
                ReadPart {
                    buffer: b,
                    offset: l.offset as u64 * esize,
                    len: (l.span() as u64).saturating_sub(l.offset as u64) * esize,
                }
            })
            .collect();
        let hosts = device.read_many(op, &parts, |k, bytes| {
            let t = tensors[members[k]];
            let host = CpuStorage::from_bytes(t.dtype(), bytes)?;
            if t.layout().is_contiguous() {
                device.note_read(bytes);
                return Ok(host);
            }
            let local = Layout {
                offset: 0,
                ..t.layout().clone()
            };
            host.contiguous(&local)
        })?;
        for (k, h) in hosts.into_iter().enumerate() {
            out[members[k]] = Some(h?);
        }
    }
    Ok(out
        .into_iter()
        .map(|h| h.expect("every tensor was read"))
        .collect())
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
    let hosts = host_many("read_all", tensors)?;
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
