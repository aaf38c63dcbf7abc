//! The GGUF parser: a bounds-checked cursor over the mapped file. Every length is compared
//! with the bytes left before it is used, and nothing is allocated from a count the file has
//! not proven it can hold.

use super::{ggml_type_name, GgufDType, GgufFile, GgufTensorInfo, GgufValue};
use crate::{DType, Device, Error, Result, Tensor};
use half::{bf16, f16};
use std::collections::BTreeMap;
use std::path::Path;

const OP: &str = "GgufFile::open";
const MAGIC: &[u8; 4] = b"GGUF";
/// ggml's `GGML_MAX_DIMS`.
const MAX_DIMS: u32 = 4;
/// Arrays inside arrays deeper than this are refused (no file needs more than 2).
const MAX_DEPTH: u32 = 8;

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    path: &'a str,
}

impl<'a> Cursor<'a> {
    fn err(&self, message: String) -> Error {
        Error::Format {
            op: OP,
            path: self.path.to_string(),
            message,
        }
    }

    fn left(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.left() {
            return Err(self.err(format!(
                "{what} needs {n} bytes at offset {} but the file ends {} bytes later \
                 (truncated or corrupt)",
                self.pos,
                self.left()
            )));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count of items of at least `min_size` bytes each, refused when the rest of the file
    /// could not hold them.
    fn count(&mut self, what: &str, min_size: usize) -> Result<usize> {
        let n = self.u64(what)?;
        let fits = (self.left() / min_size.max(1)) as u64;
        if n > fits {
            return Err(self.err(format!(
                "{what} is {n}, but the {} bytes left in the file hold at most {fits}",
                self.left()
            )));
        }
        Ok(n as usize)
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let n = self.u64(what)?;
        if n > self.left() as u64 {
            return Err(self.err(format!(
                "{what} has length {n} at offset {}, past the end of the file ({} bytes left)",
                self.pos - 8,
                self.left()
            )));
        }
        let s = self.take(n as usize, what)?;
        String::from_utf8(s.to_vec()).map_err(|_| {
            self.err(format!(
                "{what} at offset {} is not UTF-8",
                self.pos - s.len()
            ))
        })
    }

    /// A value of GGUF type `ty`.
    fn value(&mut self, ty: u32, key: &str, depth: u32) -> Result<GgufValue> {
        Ok(match ty {
            0 => GgufValue::U8(self.array::<1>(key)?[0]),
            1 => GgufValue::I8(self.array::<1>(key)?[0] as i8),
            2 => GgufValue::U16(u16::from_le_bytes(self.array(key)?)),
            3 => GgufValue::I16(i16::from_le_bytes(self.array(key)?)),
            4 => GgufValue::U32(self.u32(key)?),
            5 => GgufValue::I32(i32::from_le_bytes(self.array(key)?)),
            6 => GgufValue::F32(f32::from_le_bytes(self.array(key)?)),
            7 => match self.array::<1>(key)?[0] {
                0 => GgufValue::Bool(false),
                1 => GgufValue::Bool(true),
                b => return Err(self.err(format!("metadata {key:?}: bool byte {b} is not 0 or 1"))),
            },
            8 => GgufValue::String(self.string(key)?),
            9 => {
                if depth >= MAX_DEPTH {
                    return Err(self.err(format!(
                        "metadata {key:?}: arrays nested deeper than {MAX_DEPTH} levels"
                    )));
                }
                let ety = self.u32(key)?;
                let n = self.count(&format!("metadata {key:?} array length"), min_size(ety))?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.value(ety, key, depth + 1)?);
                }
                GgufValue::Array(v)
            }
            10 => GgufValue::U64(self.u64(key)?),
            11 => GgufValue::I64(i64::from_le_bytes(self.array(key)?)),
            12 => GgufValue::F64(f64::from_le_bytes(self.array(key)?)),
            t => {
                return Err(self.err(format!(
                    "metadata {key:?} has value type {t}, which is not a GGUF type (0..=12)"
                )))
            }
        })
    }
}

/// The fewest bytes a value of GGUF type `ty` takes (so a claimed array length can be checked
/// against the bytes left before anything is allocated).
fn min_size(ty: u32) -> usize {
    match ty {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 => 8,
        9 => 12,
        _ => 8,
    }
}

pub(super) fn open(path: &Path) -> Result<GgufFile> {
    let shown = path.display().to_string();
    let file = std::fs::File::open(path).map_err(crate::models::config::io_error(OP, path))?;
    // SAFETY: the map is read-only and private to this value; another process truncating the
    // file meanwhile would fault, the documented caveat of every memory-mapped model loader
    // (llama.cpp's and safetensors' included).
    let map =
        unsafe { memmap2::Mmap::map(&file) }.map_err(crate::models::config::io_error(OP, path))?;
    let h = parse(&map, &shown)?;
    Ok(GgufFile {
        map,
        path: shown,
        version: h.version,
        alignment: h.alignment,
        data_offset: h.data_offset,
        metadata: h.metadata,
        tensors: h.tensors,
    })
}

/// What the header says.
struct Header {
    version: u32,
    alignment: u64,
    data_offset: usize,
    metadata: BTreeMap<String, GgufValue>,
    tensors: Vec<GgufTensorInfo>,
}

/// Parses and checks the header of the file held in `bytes` (the map).
fn parse(bytes: &[u8], path: &str) -> Result<Header> {
    let mut c = Cursor {
        bytes,
        pos: 0,
        path,
    };
    let magic = c.array::<4>("the magic")?;
    if &magic != MAGIC {
        return Err(c.err(format!(
            "the file starts with {magic:02x?}, not the GGUF magic \"GGUF\"; is it a GGUF file?"
        )));
    }
    let version = c.u32("the version")?;
    if !(2..=3).contains(&version) {
        return Err(c.err(format!(
            "GGUF version {version}; wgtensor reads versions 2 and 3 (convert the file with a \
             recent llama.cpp)"
        )));
    }
    // A tensor info takes at least 8 (name length) + 4 (dims) + 4 (type) + 8 (offset) bytes; a
    // key-value pair at least 8 (key length) + 4 (type) + 1.
    let n_tensors = c.count("the tensor count", 24)?;
    let n_kv = c.count("the metadata count", 13)?;
    let mut metadata = BTreeMap::new();
    for _ in 0..n_kv {
        let key = c.string("a metadata key")?;
        let ty = c.u32(&key)?;
        let v = c.value(ty, &key, 0)?;
        if metadata.insert(key.clone(), v).is_some() {
            return Err(c.err(format!("metadata key {key:?} appears twice")));
        }
    }
    let alignment = match metadata.get("general.alignment") {
        None => 32,
        Some(GgufValue::U32(a)) if a.is_power_of_two() => *a as u64,
        Some(v) => {
            return Err(c.err(format!(
                "general.alignment is {v:?}; it must be a u32 power of two"
            )))
        }
    };
    let mut tensors: Vec<GgufTensorInfo> = Vec::new();
    let mut names = std::collections::HashSet::new();
    for _ in 0..n_tensors {
        let name = c.string("a tensor name")?;
        let n_dims = c.u32(&name)?;
        if n_dims > MAX_DIMS {
            return Err(c.err(format!(
                "tensor {name:?} has {n_dims} dims; GGUF tensors have at most {MAX_DIMS}"
            )));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(c.u64(&name)?);
        }
        let ty = c.u32(&name)?;
        let offset = c.u64(&name)?;
        let dtype = GgufDType::from_ggml(ty).ok_or_else(|| {
            c.err(format!(
                "tensor {name:?} has type {}, which wgtensor does not read (it reads F32, F16, \
                 BF16, Q8_0, Q4_0, Q4_K and Q6_K); requantize the file with llama.cpp's \
                 llama-quantize",
                ggml_type_name(ty)
            ))
        })?;
        if !names.insert(name.clone()) {
            return Err(c.err(format!("tensor name {name:?} appears twice")));
        }
        tensors.push(GgufTensorInfo {
            name,
            dims,
            dtype,
            offset,
        });
    }
    let data_offset = (c.pos as u64).div_ceil(alignment) * alignment;
    let file_len = bytes.len() as u64;
    if data_offset > file_len && !tensors.is_empty() {
        return Err(c.err(format!(
            "the data section would start at {data_offset}, past the end of the file ({file_len} bytes)"
        )));
    }
    let data_len = file_len.saturating_sub(data_offset);
    for t in &tensors {
        check_tensor(&c, t, alignment, data_len)?;
    }
    Ok(Header {
        version,
        alignment,
        data_offset: data_offset as usize,
        metadata,
        tensors,
    })
}

/// Dims, size, alignment and extent of one tensor, against the data section's length.
fn check_tensor(c: &Cursor<'_>, t: &GgufTensorInfo, alignment: u64, data_len: u64) -> Result<()> {
    let name = &t.name;
    let numel = t
        .dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= isize::MAX as u64)
        .ok_or_else(|| {
            c.err(format!(
                "tensor {name:?} has dims {:?}, whose product overflows",
                t.dims
            ))
        })?;
    let bl = t.dtype.block_len() as u64;
    let inner = t.dims.first().copied().unwrap_or(1);
    if inner % bl != 0 {
        return Err(c.err(format!(
            "tensor {name:?} is {} with an innermost dim of {inner}, not a multiple of its \
             block length {bl}",
            t.dtype.as_str()
        )));
    }
    let size = numel / bl * t.dtype.block_bytes() as u64;
    if !t.offset.is_multiple_of(alignment) {
        return Err(c.err(format!(
            "tensor {name:?} starts at data offset {}, not a multiple of the alignment {alignment}",
            t.offset
        )));
    }
    let end = t.offset.checked_add(size);
    if end.is_none_or(|e| e > data_len) {
        return Err(c.err(format!(
            "tensor {name:?} ({} bytes at data offset {}) runs past the end of the data section \
             ({data_len} bytes): the file is truncated or corrupt",
            size, t.offset
        )));
    }
    Ok(())
}

/// Elements converted between two `release` calls in [`dense`]: a few MiB, so a large tensor's
/// file pages leave the resident set while it is read, not after.
const RELEASE_EVERY: usize = 1 << 20;

/// A dense tensor from its file bytes, in `dtype` (F32 or F16). `release` is called with each
/// run of `bytes` once it has been converted (the loader drops those mapped pages).
pub(super) fn dense(
    op: &'static str,
    from: GgufDType,
    bytes: &[u8],
    shape: &[usize],
    device: &Device,
    dtype: DType,
    release: &dyn Fn(&[u8]),
) -> Result<Tensor> {
    let n = shape.iter().product::<usize>();
    let esize = bytes.len() / n.max(1);
    // Converts elements `a..b` into `out`, then hands their bytes to `release`.
    fn runs<T>(
        n: usize,
        esize: usize,
        bytes: &[u8],
        out: &mut Vec<T>,
        release: &dyn Fn(&[u8]),
        f: impl Fn(usize) -> T,
    ) {
        for a in (0..n).step_by(RELEASE_EVERY) {
            let b = (a + RELEASE_EVERY).min(n);
            out.extend((a..b).map(&f));
            release(&bytes[a * esize..b * esize]);
        }
    }
    if dtype == DType::F16 {
        let mut out = crate::storage::try_vec::<f16>(op, n)?;
        if from == GgufDType::F16 {
            let f = |i: usize| f16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]);
            runs(n, esize, bytes, &mut out, release, f);
        } else {
            let f = |i: usize| f16::from_f32(value(from, bytes, i));
            runs(n, esize, bytes, &mut out, release, f);
        }
        Tensor::from_vec(out, shape, device)
    } else {
        let mut out = crate::storage::try_vec::<f32>(op, n)?;
        runs(n, esize, bytes, &mut out, release, |i| {
            value(from, bytes, i)
        });
        Tensor::from_vec(out, shape, device)
    }
}

/// Element `i` of dense data as f32.
#[inline]
fn value(from: GgufDType, b: &[u8], i: usize) -> f32 {
    match from {
        GgufDType::F32 => f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]),
        GgufDType::F16 => f16::from_le_bytes([b[2 * i], b[2 * i + 1]]).to_f32(),
        GgufDType::BF16 => bf16::from_le_bytes([b[2 * i], b[2 * i + 1]]).to_f32(),
        // Quantized tensors never come here (they load as QTensor).
        GgufDType::Quantized(_) => f32::NAN,
    }
}
