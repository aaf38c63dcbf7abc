//! Weights in the safetensors format (the `safetensors` crate): save tensors by name, load them
//! by name (loading lives in `load.rs`), and the host f32 <-> f16 conversion both share.

use crate::{DType, Device, Error, Result, Tensor};
use safetensors::Dtype;
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
    match host.host_packed_bytes()? {
        Some(bytes) => Ok(bytes.to_vec()),
        // `to(cpu)` then `contiguous` always gives packed host data.
        None => Err(Error::InvalidArgument {
            op: "save_safetensors",
            message: "a tensor moved to the CPU is not packed host data".into(),
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
/// The save is atomic: the bytes go to a temporary file in the same directory, which is
/// fsynced and then renamed over `path`. A save that fails (disk full, the process killed)
/// leaves the previous file at `path` intact, and a reader that has the old file open or
/// memory-mapped keeps reading the old bytes.
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
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub fn save_safetensors(path: impl AsRef<Path>, tensors: &[(String, Tensor)]) -> Result<()> {
    let path = path.as_ref();
    let bytes = serialize(tensors)?;
    write_atomic(path, &bytes).map_err(|e| Error::Io {
        op: "save_safetensors",
        path: path.display().to_string(),
        message: format!("{e}; the previous file at this path (if any) is unchanged"),
    })
}

std::thread_local! {
    /// Test hook: the next [`write_atomic`] on this thread fails with "no space left" after
    /// writing this many bytes of its temporary file (`testing::fail_next_save_after`).
    pub(crate) static FAIL_NEXT_SAVE_AFTER: std::cell::Cell<Option<usize>> =
        const { std::cell::Cell::new(None) };
}

/// Replaces `path` with `bytes` so that a failure at any point (disk full, a killed process, a
/// power cut after the rename) leaves either the old file or the new one, never a mix: the
/// bytes go to a temporary file in the same directory (so the rename stays on one filesystem),
/// are flushed and fsynced, and the temporary is renamed over the target; the directory is
/// fsynced so the rename itself is durable. A reader that has the old file open or
/// memory-mapped keeps the old bytes (the rename gives the path a new inode).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path names no file")
    })?;
    // The temporary's name stays far below NAME_MAX (255 bytes on Linux) whatever the target's
    // length: at most 32 bytes of the target's name (to tell whose it is), then the process
    // id, a counter and the clock's nanoseconds (unique; `create_new` refuses a clash).
    let full = name.to_string_lossy();
    let mut cut = full.len().min(32);
    while !full.is_char_boundary(cut) {
        cut -= 1;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let tmp = dir.join(format!(
        ".{}.tmp-{}-{}-{nanos:08x}",
        &full[..cut],
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)?;
    let write = || -> std::io::Result<()> {
        match FAIL_NEXT_SAVE_AFTER.with(|c| c.take()) {
            Some(n) => {
                f.write_all(&bytes[..n.min(bytes.len())])?;
                return Err(std::io::Error::new(
                    std::io::ErrorKind::StorageFull,
                    "no space left on device (injected by testing::fail_next_save_after)",
                ));
            }
            None => f.write_all(bytes)?,
        }
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)
    };
    if let Err(e) = write() {
        // The temporary is garbage now; the target was never touched.
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    // Make the rename durable. Some platforms cannot open a directory; the data is already safe.
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
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
