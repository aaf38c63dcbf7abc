//! Loading safetensors checkpoints as they are published: memory-mapped files, the dtypes
//! wgtensor does not store (BF16, F64, I64, BOOL) converted on the host, single tensors by name,
//! and sharded checkpoints through their `model.safetensors.index.json`.
//!
//! Every tensor is validated and converted on the host before anything is uploaded, so a bad
//! file fails before a device (or a model) sees any of it.

use super::io::convert_float;
use crate::{DType, Device, Error, Result, Tensor};
use safetensors::{tensor::TensorView, Dtype, SafeTensors};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

thread_local! {
    /// Bytes of tensor data this thread copied out of mapped files (tests check that loading
    /// one tensor by name reads only that tensor).
    static BYTES_READ: Cell<u64> = const { Cell::new(0) };
}

/// Tensor-data bytes read from safetensors files by the calling thread so far.
pub(crate) fn bytes_read() -> u64 {
    BYTES_READ.with(Cell::get)
}

/// Drops the pages of `data`, a range of `map`, from this process's resident memory once a
/// tensor has been copied out of it: without this, loading a checkpoint holds every page of the
/// file resident beside the copies (an f32 model peaked at twice its size). The pages stay in
/// the OS's file cache; a later read of the range faults them back in with the same bytes.
pub(crate) fn release_pages(map: &memmap2::Mmap, data: &[u8]) {
    #[cfg(unix)]
    {
        let (base, at) = (map.as_ptr() as usize, data.as_ptr() as usize);
        if data.is_empty() || at < base || at + data.len() > base + map.len() {
            return;
        }
        // SAFETY: the map is a read-only file mapping this process never writes, so dropping
        // its pages loses nothing: every later access reads the file's bytes again. The
        // advice is only a hint; failing to take it leaves the pages resident.
        let advised = unsafe {
            map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, at - base, data.len())
        };
        if let Err(e) = advised {
            log::debug!("madvise(DONTNEED) on a mapped checkpoint failed: {e}");
        }
    }
    #[cfg(not(unix))]
    let _ = (map, data);
}

/// A memory-mapped safetensors file: the OS pages in only the tensors that are read.
struct Mapped {
    map: memmap2::Mmap,
    path: String,
}

impl Mapped {
    fn open(path: &Path, op: &'static str) -> Result<Mapped> {
        let io = |e: std::io::Error| Error::Io {
            op,
            path: path.display().to_string(),
            message: e.to_string(),
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the map is read-only and lives no longer than this load. Another process
        // truncating the file meanwhile would fault, which is the documented caveat of every
        // memory-mapped checkpoint loader (PyTorch's and safetensors' own included).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Ok(Mapped {
            map,
            path: path.display().to_string(),
        })
    }

    /// Parses and validates the header (offsets inside the file, sizes matching shapes).
    fn parse(&self, op: &'static str) -> Result<SafeTensors<'_>> {
        SafeTensors::deserialize(&self.map).map_err(|e| Error::Format {
            op,
            path: self.path.clone(),
            message: e.to_string(),
        })
    }
}

/// The dtype a file dtype is stored as, given the requested float dtype.
fn target(src: Dtype, want: Option<DType>) -> Option<DType> {
    let float = |default| Some(want.unwrap_or(default));
    match src {
        Dtype::F32 => float(DType::F32),
        Dtype::F16 => float(DType::F16),
        Dtype::BF16 | Dtype::F64 => float(DType::F32),
        Dtype::I32 | Dtype::I64 => Some(DType::I32),
        Dtype::U32 => Some(DType::U32),
        Dtype::U8 | Dtype::BOOL => Some(DType::U8),
        _ => None,
    }
}

/// Bytes copied between two [`release_pages`] calls while a plain tensor is read: a few MiB, so
/// a large tensor's file pages leave the resident set as it is copied, not after (otherwise the
/// peak is every tensor loaded so far plus the whole of the largest one twice).
const RELEASE_EVERY: usize = 4 << 20;

/// A plain little-endian tensor copied out in runs of [`RELEASE_EVERY`] bytes, each run's pages
/// released once copied.
fn copy_plain<T: crate::WithDType + bytemuck::Pod>(
    op: &'static str,
    mapped: &Mapped,
    data: &[u8],
    shape: &[usize],
) -> Result<Tensor> {
    let n = data.len() / std::mem::size_of::<T>();
    let mut v = crate::storage::try_vec::<T>(op, n)?;
    v.resize(n, T::zeroed());
    let dst: &mut [u8] = bytemuck::cast_slice_mut(&mut v[..]);
    for (d, s) in dst
        .chunks_mut(RELEASE_EVERY)
        .zip(data.chunks(RELEASE_EVERY))
    {
        d.copy_from_slice(s);
        release_pages(&mapped.map, s);
    }
    Tensor::from_vec(v, shape, &Device::cpu())
}

/// Converts one tensor view to a host tensor of the dtype [`target`] gives, then releases the
/// view's pages.
fn convert(
    op: &'static str,
    mapped: &Mapped,
    name: &str,
    view: &TensorView<'_>,
    want: Option<DType>,
) -> Result<Tensor> {
    let path = mapped.path.as_str();
    let data = view.data();
    BYTES_READ.with(|c| c.set(c.get() + data.len() as u64));
    let shape = view.shape();
    let to = target(view.dtype(), want).ok_or_else(|| Error::Format {
        op,
        path: path.to_string(),
        message: format!(
            "tensor {name:?} has dtype {}, which wgtensor cannot load (F32, F16, BF16, F64, \
             I32, I64, U32, U8 and BOOL load); convert it when exporting",
            view.dtype()
        ),
    })?;
    let host = |dtype: DType, bytes: &[u8]| -> Result<Tensor> {
        Tensor::from_host_bytes(dtype, bytes, shape)
    };
    let cpu = Device::cpu();
    let floats = |v: Vec<f32>| -> Result<Tensor> {
        if to == DType::F16 {
            let h: Vec<half::f16> = v.into_iter().map(half::f16::from_f32).collect();
            Tensor::from_vec(h, shape, &cpu)
        } else {
            Tensor::from_vec(v, shape, &cpu)
        }
    };
    let t = match view.dtype() {
        Dtype::F32 => convert_float(copy_plain::<f32>(op, mapped, data, shape)?, to),
        Dtype::F16 => convert_float(copy_plain::<half::f16>(op, mapped, data, shape)?, to),
        Dtype::I32 | Dtype::U32 | Dtype::U8 => host(to, data),
        Dtype::BF16 => floats(
            data.chunks_exact(2)
                .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
        ),
        Dtype::F64 => {
            let v = data
                .chunks_exact(8)
                .map(|b| f64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
            if to == DType::F16 {
                // One rounding, straight from f64.
                Tensor::from_vec(v.map(half::f16::from_f64).collect::<Vec<_>>(), shape, &cpu)
            } else {
                floats(v.map(|x| x as f32).collect())
            }
        }
        Dtype::I64 => {
            let mut out = Vec::with_capacity(data.len() / 8);
            for (i, b) in data.chunks_exact(8).enumerate() {
                let x = i64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
                let y = i32::try_from(x).map_err(|_| Error::InvalidArgument {
                    op,
                    message: format!(
                        "tensor {name:?} in {path} is I64 and holds {x} at flat index {i}, \
                         outside the i32 range wgtensor stores I64 tensors in ({}..={}); \
                         re-export it as I32 or with values in range",
                        i32::MIN,
                        i32::MAX
                    ),
                })?;
                out.push(y);
            }
            Tensor::from_vec(out, shape, &cpu)
        }
        Dtype::BOOL => Tensor::from_vec(
            data.iter().map(|&b| u8::from(b != 0)).collect::<Vec<u8>>(),
            shape,
            &cpu,
        ),
        // `target` returned None for every other dtype.
        other => Err(Error::Format {
            op,
            path: path.to_string(),
            message: format!("tensor {name:?} has unsupported dtype {other}"),
        }),
    }?;
    release_pages(&mapped.map, data);
    Ok(t)
}

fn check_dtype_arg(op: &'static str, dtype: Option<DType>) -> Result<()> {
    match dtype {
        Some(d) if !matches!(d, DType::F32 | DType::F16) => Err(Error::InvalidArgument {
            op,
            message: format!("dtype must be F32 or F16 (or None to keep the file's), got {d}"),
        }),
        _ => Ok(()),
    }
}

/// Every tensor of one file as host tensors, in file order.
fn read_file(op: &'static str, path: &Path, dtype: Option<DType>) -> Result<Vec<(String, Tensor)>> {
    let mapped = Mapped::open(path, op)?;
    let st = mapped.parse(op)?;
    let mut named: Vec<(String, TensorView<'_>)> = st.tensors();
    // File order (by data offset), so saving what was loaded reproduces the file.
    named.sort_by_key(|(_, v)| v.data().as_ptr() as usize);
    named
        .into_iter()
        .map(|(name, view)| {
            let t = convert(op, &mapped, &name, &view, dtype)?;
            Ok((name, t))
        })
        .collect()
}

fn upload(tensors: Vec<(String, Tensor)>, device: &Device) -> Result<Vec<(String, Tensor)>> {
    tensors
        .into_iter()
        .map(|(n, t)| Ok((n, t.to(device)?)))
        .collect()
}

/// Reads every tensor of a safetensors file onto `device`, in file order, with its name.
///
/// The file is memory-mapped, validated (header, offsets, sizes) and every tensor converted on
/// the host before the first upload. Stored dtypes: F32, F16, I32, U32 and U8 as they are;
/// BF16 and F64 become F32; I64 becomes I32 (every value range-checked); BOOL becomes U8.
/// `dtype`: `None` applies those rules; `Some(DType::F16)` or `Some(DType::F32)` turns every
/// floating tensor (F32, F16, BF16, F64) into that dtype instead. The `__metadata__` is ignored.
///
/// # Errors
/// [`Error::Io`] when the file cannot be opened; [`Error::Format`] when it is not a valid
/// safetensors file (truncated, bad header, offsets outside the data) or holds another dtype
/// (F8, I8, I16, U16, U64, ...); [`Error::InvalidArgument`] for an I64 value outside i32 (naming
/// the tensor, the value and its index) or when `dtype` is not a float dtype; device errors.
///
/// ```
/// use wgtensor::nn::{load_safetensors, save_safetensors};
/// use wgtensor::{DType, Device, Tensor};
/// let path = std::env::temp_dir().join("wgtensor_doc_load.safetensors");
/// save_safetensors(&path, &[("w".into(), Tensor::ones(&[3], DType::F32, &Device::cpu())?)])?;
/// let half = load_safetensors(&path, &Device::best(), Some(DType::F16))?;
/// assert_eq!(half[0].1.dtype(), DType::F16);
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub fn load_safetensors(
    path: impl AsRef<Path>,
    device: &Device,
    dtype: Option<DType>,
) -> Result<Vec<(String, Tensor)>> {
    check_dtype_arg("load_safetensors", dtype)?;
    upload(read_file("load_safetensors", path.as_ref(), dtype)?, device)
}

/// Reads the one tensor `name` of a safetensors file onto `device`, with the dtype rules of
/// [`load_safetensors`] (`dtype = None`). The file is memory-mapped: only the header and that
/// tensor's bytes are read, however large the other tensors are.
///
/// # Errors
/// [`Error::InvalidArgument`] when the file has no tensor `name` (listing some it has); the
/// errors of [`load_safetensors`].
///
/// ```
/// use wgtensor::nn::{load_tensor, save_safetensors};
/// use wgtensor::{DType, Device, Tensor};
/// let path = std::env::temp_dir().join("wgtensor_doc_load_tensor.safetensors");
/// let cpu = Device::cpu();
/// save_safetensors(&path, &[
///     ("a".into(), Tensor::ones(&[2], DType::F32, &cpu)?),
///     ("b".into(), Tensor::from_vec(vec![7i32, 8], &[2], &cpu)?),
/// ])?;
/// let b = load_tensor(&path, "b", &Device::best())?;
/// assert_eq!(b.to_vec::<i32>()?, vec![7, 8]);
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub fn load_tensor(path: impl AsRef<Path>, name: &str, device: &Device) -> Result<Tensor> {
    let op = "load_tensor";
    let mapped = Mapped::open(path.as_ref(), op)?;
    let st = mapped.parse(op)?;
    let view = st.tensor(name).map_err(|_| {
        let mut names = st.names();
        names.sort();
        Error::InvalidArgument {
            op,
            message: format!(
                "no tensor {name:?} in {}; it holds {} tensor(s): {}",
                mapped.path,
                names.len(),
                names
                    .iter()
                    .take(10)
                    .map(|n| format!("{n:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    })?;
    convert(op, &mapped, name, &view, None)?.to(device)
}

/// The `weight_map` of a sharded checkpoint's `*.index.json`: (tensor name, shard file) pairs
/// in the index's order.
fn weight_map(op: &'static str, index: &Path) -> Result<Vec<(String, String)>> {
    let shown = index.display().to_string();
    let text = std::fs::read_to_string(index).map_err(|e| Error::Io {
        op,
        path: shown.clone(),
        message: e.to_string(),
    })?;
    let format = |message: String| Error::Format {
        op,
        path: shown.clone(),
        message,
    };
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format(format!("not JSON: {e}")))?;
    let map = json
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| format("no \"weight_map\" object (tensor name -> shard file)".into()))?;
    map.iter()
        .map(|(name, file)| {
            let file = file
                .as_str()
                .ok_or_else(|| format(format!("weight_map[{name:?}] is not a file name")))?;
            Ok((name.clone(), file.to_string()))
        })
        .collect()
}

/// Reads a sharded checkpoint through its index (`model.safetensors.index.json`): the JSON
/// object's `weight_map` maps each tensor name to a shard file in the same directory. Every
/// shard is validated and converted (as [`load_safetensors`] does) before the first upload; the
/// result is sorted by name. Tensors a shard holds but the index does not name are ignored, as
/// in `transformers`.
///
/// # Errors
/// [`Error::Io`] when the index or a shard cannot be read; [`Error::Format`] when the index is
/// not JSON with a `weight_map` of strings, or a shard lacks a tensor the index places there; the
/// errors of [`load_safetensors`].
///
/// ```
/// use wgtensor::nn::{load_sharded, save_safetensors};
/// use wgtensor::{DType, Device, Tensor};
/// let dir = std::env::temp_dir().join("wgtensor_doc_sharded");
/// std::fs::create_dir_all(&dir).unwrap();
/// let cpu = Device::cpu();
/// save_safetensors(dir.join("a.safetensors"), &[("x".into(), Tensor::ones(&[2], DType::F32, &cpu)?)])?;
/// save_safetensors(dir.join("b.safetensors"), &[("y".into(), Tensor::zeros(&[3], DType::F32, &cpu)?)])?;
/// let index = r#"{"metadata": {}, "weight_map": {"x": "a.safetensors", "y": "b.safetensors"}}"#;
/// std::fs::write(dir.join("model.safetensors.index.json"), index).unwrap();
/// let all = load_sharded(dir.join("model.safetensors.index.json"), &Device::best(), None)?;
/// assert_eq!(all.iter().map(|(n, t)| (n.as_str(), t.numel())).collect::<Vec<_>>(), [("x", 2), ("y", 3)]);
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub fn load_sharded(
    index: impl AsRef<Path>,
    device: &Device,
    dtype: Option<DType>,
) -> Result<Vec<(String, Tensor)>> {
    let op = "load_sharded";
    check_dtype_arg(op, dtype)?;
    let index = index.as_ref();
    let shown = index.display().to_string();
    let map = weight_map(op, index)?;
    // Shard file -> the names the index places in it.
    let mut shards: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, file) in &map {
        shards.entry(file.clone()).or_default().push(name.clone());
    }
    let dir = index.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut host: Vec<(String, Tensor)> = Vec::with_capacity(map.len());
    for (file, names) in shards {
        let shard: PathBuf = dir.join(&file);
        let mut tensors: BTreeMap<String, Tensor> =
            read_file(op, &shard, dtype)?.into_iter().collect();
        for name in names {
            let t = tensors.remove(&name).ok_or_else(|| Error::Format {
                op,
                path: shard.display().to_string(),
                message: format!(
                    "the index {shown} places tensor {name:?} in this shard, which lacks it"
                ),
            })?;
            host.push((name, t));
        }
    }
    host.sort_by(|a, b| a.0.cmp(&b.0));
    upload(host, device)
}

/// Host tensors of a checkpoint for [`super::Module::load_weights`]: a sharded index
/// (`*.index.json`) or a single file.
pub(crate) fn load_any_host(path: &Path) -> Result<Vec<(String, Tensor)>> {
    let is_index = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(".index.json"));
    if is_index {
        load_sharded(path, &Device::cpu(), None)
    } else {
        read_file("load_safetensors", path, None)
    }
}

/// One safetensors checkpoint (a single file or the shards of an index), memory-mapped, read one
/// tensor at a time: loading a model through it holds about one tensor on the host beyond the
/// mapped files (the pretrained-model loader of `wgtensor::models` uploads each tensor before it
/// reads the next).
#[cfg_attr(not(feature = "models"), allow(dead_code))]
pub(crate) struct Checkpoint {
    files: Vec<(Mapped, usize, safetensors::tensor::Metadata)>,
    /// Tensor name -> index into `files`.
    index: BTreeMap<String, usize>,
}

#[cfg_attr(not(feature = "models"), allow(dead_code))]
impl Checkpoint {
    /// Opens `path`: a `.safetensors` file, or a `*.index.json` naming shards beside it. Every
    /// header is validated here (offsets inside the file, sizes matching shapes).
    pub(crate) fn open(path: &Path) -> Result<Checkpoint> {
        let op = "load_checkpoint";
        let is_index = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(".index.json"));
        let files: Vec<PathBuf> = if is_index {
            let mut shards: Vec<String> = Vec::new();
            for (_, file) in weight_map(op, path)? {
                if !shards.contains(&file) {
                    shards.push(file);
                }
            }
            shards.sort();
            let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
            shards.into_iter().map(|f| dir.join(f)).collect()
        } else {
            vec![path.to_path_buf()]
        };
        let mut out = Checkpoint {
            files: Vec::with_capacity(files.len()),
            index: BTreeMap::new(),
        };
        for f in files {
            let mapped = Mapped::open(&f, op)?;
            let (n, meta) = SafeTensors::read_metadata(&mapped.map).map_err(|e| Error::Format {
                op,
                path: mapped.path.clone(),
                message: e.to_string(),
            })?;
            let i = out.files.len();
            for name in meta.tensors().into_keys() {
                out.index.insert(name, i);
            }
            out.files.push((mapped, n, meta));
        }
        Ok(out)
    }

    /// The shape of `name`, if the checkpoint has it.
    pub(crate) fn shape(&self, name: &str) -> Option<&[usize]> {
        let (_, _, meta) = &self.files[*self.index.get(name)?];
        meta.info(name).map(|i| i.shape.as_slice())
    }

    /// Number of values in all tensors.
    pub(crate) fn numel_total(&self) -> u64 {
        self.files
            .iter()
            .flat_map(|(_, _, meta)| meta.tensors().into_values())
            .map(|info| info.shape.iter().product::<usize>() as u64)
            .sum()
    }

    /// Bytes of tensor data in the mapped files.
    pub(crate) fn data_bytes(&self) -> u64 {
        self.files
            .iter()
            .map(|(m, n, _)| (m.map.len() - 8 - n) as u64)
            .sum()
    }

    /// The tensor `name` as a host tensor, floats in `dtype` (the rules of
    /// [`load_safetensors`]); `Ok(None)` when the checkpoint lacks it.
    pub(crate) fn load(&self, name: &str, dtype: Option<DType>) -> Result<Option<Tensor>> {
        let Some(&i) = self.index.get(name) else {
            return Ok(None);
        };
        let (mapped, n, meta) = &self.files[i];
        let format = |message: String| Error::Format {
            op: "load_checkpoint",
            path: mapped.path.clone(),
            message,
        };
        let info = meta
            .info(name)
            .ok_or_else(|| format(format!("tensor {name:?} vanished from the header")))?;
        let (a, b) = info.data_offsets;
        let data = mapped
            .map
            .get(8 + n + a..8 + n + b)
            .ok_or_else(|| format(format!("tensor {name:?} lies past the end of the file")))?;
        let view = TensorView::new(info.dtype, info.shape.clone(), data)
            .map_err(|e| format(format!("tensor {name:?}: {e}")))?;
        convert("load_checkpoint", mapped, name, &view, dtype).map(Some)
    }
}
