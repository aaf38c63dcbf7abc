//! The transfers' dispatch: how a tensor's data crosses between devices and back to the host
//! (uploads, grouped readbacks, mapped reads) and how a GPU buffer is lent to or adopted from
//! the application, so `tensor/transfer.rs` keeps only the device-neutral API around them.

use super::{backend, Backend, Data};
use crate::gpu::transfer::ReadPart;
use crate::gpu::GpuDevice;
use crate::shape::Layout;
use crate::storage::{CpuStorage, Storage};
use crate::tensor::Tensor;
use crate::{DType, Device, Error, Result};

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

/// `t`'s elements as storage on `device` (another device than `t`'s).
pub(crate) fn to_device(t: &Tensor, device: &Device) -> Result<Storage> {
    Ok(match (t.data()?, backend(device)) {
        // A packed host tensor uploads straight from its own memory (no intermediate copy).
        (Data::Cpu(s), Backend::Gpu(g)) if t.is_contiguous() => {
            let esize = t.dtype().size_in_bytes();
            let start = t.layout().offset * esize;
            let bytes = &s.as_bytes()[start..start + t.numel() * esize];
            Storage::from(g.upload("to", bytes)?)
        }
        (_, Backend::Cpu) => Storage::from(t.host_contiguous("to")?),
        (_, Backend::Gpu(g)) => Storage::from(g.upload("to", t.host_contiguous("to")?.as_bytes())?),
    })
}

/// `f` over the bytes of `packed` (a contiguous tensor): host memory read in place, a GPU
/// buffer mapped for the call (see `Tensor::map_read`).
pub(crate) fn read_packed<R>(
    op: &'static str,
    packed: &Tensor,
    f: impl FnOnce(&[u8]) -> R,
) -> Result<R> {
    let esize = packed.dtype().size_in_bytes();
    match packed.data()? {
        Data::Cpu(s) => {
            let start = packed.layout().offset * esize;
            Ok(f(&s.as_bytes()[start..start + packed.numel() * esize]))
        }
        Data::Gpu(b) => {
            let part = ReadPart {
                buffer: b,
                offset: (packed.layout().offset * esize) as u64,
                len: (packed.numel() * esize) as u64,
            };
            let mut f = Some(f);
            let mut out = b.device.read_many(op, &[part], |_, bytes| {
                b.device.note_read(bytes);
                f.take().map(|f| f(bytes))
            })?;
            out.pop().flatten().ok_or_else(|| Error::InvalidArgument {
                op,
                message: "the readback produced no data (a wgtensor bug)".into(),
            })
        }
    }
}

/// A packed copy of `t`'s view made on the host, or `None` on a GPU, where the generated
/// same-dtype copy (`convert_to`, whole output words per invocation) packs it.
pub(crate) fn contiguous(t: &Tensor) -> Result<Option<Storage>> {
    Ok(match t.data()? {
        Data::Cpu(s) => Some(Storage::from(s.contiguous(t.layout())?)),
        Data::Gpu(_) => None,
    })
}

/// The GPU buffer behind `t` once the work producing it is submitted (see
/// `Tensor::wgpu_buffer`), or why it has none to lend.
pub(crate) fn wgpu_buffer(t: &Tensor) -> Result<WgpuBufferView<'_>> {
    let bad = |message: String| Error::InvalidArgument {
        op: "wgpu_buffer",
        message,
    };
    match t.data()? {
        Data::Cpu(_) => Err(bad(
            "the tensor is on the cpu; move it with .to(&device) first".into(),
        )),
        Data::Gpu(_) if !t.is_contiguous() => Err(bad(
            "the tensor is a strided view; call .contiguous() first".into(),
        )),
        Data::Gpu(b) => {
            let esize = t.dtype().size_in_bytes() as u64;
            let offset = t.layout().offset as u64 * esize;
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
            Ok(WgpuBufferView {
                buffer: &b.buffer,
                offset,
                size: t.numel() as u64 * esize,
            })
        }
    }
}

/// Storage over the application's `buffer` on `device`, checked to hold `shape` of `dtype`
/// (see `Tensor::from_wgpu_buffer`).
pub(crate) fn adopt_wgpu_buffer(
    buffer: &wgpu::Buffer,
    shape: &[usize],
    dtype: DType,
    device: &Device,
) -> Result<Storage> {
    const OP: &str = "from_wgpu_buffer";
    let bad = |message: String| Error::InvalidArgument { op: OP, message };
    let Backend::Gpu(g) = backend(device) else {
        return Err(bad(
            "the device is the cpu; pass the GPU that owns the buffer (Device::from_wgpu)".into(),
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
    Ok(Storage::from(g.adopt(buffer, bytes)))
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
