//! Weights in the safetensors format (the `safetensors` crate): save tensors by name, load them
//! by name onto a chosen device, optionally converting f32 <-> f16 on the host.

use crate::storage::{CpuStorage, Storage};
use crate::{DType, Device, Error, Result, Tensor};
use safetensors::{tensor::TensorView, Dtype, SafeTensors};
use std::borrow::Cow;
use std::collections::HashSet;
use std::path::Path;

fn to_st(d: DType) -> Dtype {
    match d {
        DType::F32 => Dtype::F32,
        DType::F16 => Dtype::F16,
        DType::I32 => Dtype::I32,
        DType::U32 => Dtype::U32,
        DType::U8 => Dtype::U8,
    }
}

fn from_st(d: Dtype) -> Option<DType> {
    match d {
        Dtype::F32 => Some(DType::F32),
        Dtype::F16 => Some(DType::F16),
        Dtype::I32 => Some(DType::I32),
        Dtype::U32 => Some(DType::U32),
        Dtype::U8 => Some(DType::U8),
        _ => None,
    }
}

/// One tensor's host bytes, as `safetensors::serialize` wants them.
struct HostView {
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl safetensors::View for &HostView {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.bytes)
    }
    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}

/// The packed little-endian bytes of `t`, read back from wherever it lives.
fn host_bytes(t: &Tensor) -> Result<Vec<u8>> {
    let host = t.to(&Device::cpu())?.contiguous()?;
    let esize = host.dtype().size_in_bytes();
    let start = host.layout().offset * esize;
    match host.storage()? {
        Storage::Cpu(s) => Ok(s.as_bytes()[start..start + host.numel() * esize].to_vec()),
        // `to(cpu)` always gives host storage.
        Storage::Gpu(_) => Err(Error::InvalidArgument {
            op: "save_safetensors",
            message: "a tensor moved to the CPU still has GPU storage".into(),
        }),
    }
}

/// The safetensors bytes of `tensors` (what [`save_safetensors`] writes).
pub(crate) fn serialize(tensors: &[(String, Tensor)]) -> Result<Vec<u8>> {
    let mut seen = HashSet::new();
    let mut views = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        if !seen.insert(name.as_str()) {
            return Err(Error::InvalidArgument {
                op: "save_safetensors",
                message: format!("the name {name:?} appears twice; names must be unique"),
            });
        }
        views.push((
            name.clone(),
            HostView {
                dtype: to_st(t.dtype()),
                shape: t.shape().to_vec(),
                bytes: host_bytes(t)?,
            },
        ));
    }
    safetensors::serialize(views.iter().map(|(n, v)| (n.as_str(), v)), None).map_err(|e| {
        Error::InvalidArgument {
            op: "save_safetensors",
            message: format!("cannot serialize: {e}"),
        }
    })
}

/// Writes `tensors` to `path` in the safetensors format: an 8-byte little-endian header length,
/// a JSON header (`dtype`, `shape`, `data_offsets` per name) and the packed little-endian
/// elements. F32/F16/I32/U32/U8 are stored as the format's F32/F16/I32/U32/U8. Tensors on a GPU
/// are read back first (one wait per tensor).
///
/// To save a `HashMap<String, Tensor>`, collect it into a `Vec` first.
///
/// # Errors
/// [`Error::InvalidArgument`] for a repeated name; [`Error::Io`] when the file cannot be
/// written; device errors from reading GPU tensors back.
///
/// ```
/// use wgtensor::nn::{load_safetensors, save_safetensors};
/// use wgtensor::{Device, Tensor};
/// let path = std::env::temp_dir().join("wgtensor_doc_save.safetensors");
/// let w = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[2, 2], &Device::best())?;
/// save_safetensors(&path, &[("layer.weight".to_string(), w)])?;
/// let back = load_safetensors(&path, &Device::cpu(), None)?;
/// assert_eq!(back[0].0, "layer.weight");
/// assert_eq!(back[0].1.to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 4.0]);
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub fn save_safetensors(path: impl AsRef<Path>, tensors: &[(String, Tensor)]) -> Result<()> {
    let path = path.as_ref();
    let bytes = serialize(tensors)?;
    std::fs::write(path, bytes).map_err(|e| Error::Io {
        op: "save_safetensors",
        path: path.display().to_string(),
        message: e.to_string(),
    })
}

/// Converts a host tensor to `dtype` when both are floats (f32 <-> f16, through `half`); other
/// tensors are returned unchanged.
pub(crate) fn convert_float(t: Tensor, dtype: DType) -> Result<Tensor> {
    let device = t.device().clone();
    match (t.dtype(), dtype) {
        (DType::F32, DType::F16) => {
            let v: Vec<half::f16> = t
                .to_vec::<f32>()?
                .into_iter()
                .map(half::f16::from_f32)
                .collect();
            Tensor::from_vec(v, t.shape(), &device)
        }
        (DType::F16, DType::F32) => {
            let v: Vec<f32> = t
                .to_vec::<half::f16>()?
                .into_iter()
                .map(f32::from)
                .collect();
            Tensor::from_vec(v, t.shape(), &device)
        }
        _ => Ok(t),
    }
}

/// Parses safetensors `bytes` (named `path` in errors) into host tensors, in file order.
pub(crate) fn deserialize(bytes: &[u8], path: &str) -> Result<Vec<(String, Tensor)>> {
    let format = |message: String| Error::Format {
        op: "load_safetensors",
        path: path.to_string(),
        message,
    };
    let st = SafeTensors::deserialize(bytes).map_err(|e| format(e.to_string()))?;
    let mut named: Vec<(String, TensorView<'_>)> = st.tensors();
    // File order (by data offset), so saving what was loaded reproduces the file.
    named.sort_by_key(|(_, v)| v.data().as_ptr() as usize);
    let mut out = Vec::with_capacity(named.len());
    for (name, view) in named {
        let dtype = from_st(view.dtype()).ok_or_else(|| {
            format(format!(
                "tensor {name:?} has dtype {}, which wgtensor does not store \
                 (F32, F16, I32, U32 and U8 load); convert it when exporting",
                view.dtype()
            ))
        })?;
        let storage = CpuStorage::from_bytes(dtype, view.data())?;
        let t = Tensor::from_parts(Storage::Cpu(storage), view.shape(), dtype, Device::cpu());
        out.push((name, t));
    }
    Ok(out)
}

/// Reads every tensor of a safetensors file onto `device`, in file order, with its name.
///
/// `dtype`: `None` keeps the file's dtypes; `Some(DType::F16)` or `Some(DType::F32)` converts
/// floating tensors to that dtype on the host (with `half`) before the upload; integer tensors
/// keep their dtype. The file's optional `__metadata__` is ignored.
///
/// # Errors
/// [`Error::Io`] when the file cannot be read; [`Error::Format`] when it is not a valid
/// safetensors file (truncated, bad header, offsets outside the data) or holds a dtype wgtensor
/// does not store (BF16, F64, I64, ...); [`Error::InvalidArgument`] when `dtype` is not a
/// float dtype; device errors from the upload.
///
/// ```
/// use wgtensor::nn::{load_safetensors, save_safetensors};
/// use wgtensor::{DType, Device, Tensor};
/// let path = std::env::temp_dir().join("wgtensor_doc_load.safetensors");
/// save_safetensors(&path, &[("w".into(), Tensor::ones(&[3], DType::F32, &Device::cpu())?)])?;
/// let half = load_safetensors(&path, &Device::best(), Some(DType::F16))?;
/// assert_eq!(half[0].1.dtype(), DType::F16);
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub fn load_safetensors(
    path: impl AsRef<Path>,
    device: &Device,
    dtype: Option<DType>,
) -> Result<Vec<(String, Tensor)>> {
    let path = path.as_ref();
    if let Some(d) = dtype {
        if !matches!(d, DType::F32 | DType::F16) {
            return Err(Error::InvalidArgument {
                op: "load_safetensors",
                message: format!("dtype must be F32 or F16 (or None to keep the file's), got {d}"),
            });
        }
    }
    let bytes = std::fs::read(path).map_err(|e| Error::Io {
        op: "load_safetensors",
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    deserialize(&bytes, &path.display().to_string())?
        .into_iter()
        .map(|(name, t)| {
            let t = match dtype {
                Some(d) => convert_float(t, d)?,
                None => t,
            };
            Ok((name, t.to(device)?))
        })
        .collect()
}
