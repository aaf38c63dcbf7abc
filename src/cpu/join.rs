//! CPU `cat` (and `stack`, which is `cat` of unsqueezed views): the fallback device and the
//! oracle for `shaders/join.wgsl`. Works for every dtype: elements are only moved.

use super::alloc::try_vec;
use super::storage::CpuStorage;
use super::strided::contiguous;
use crate::shape::Layout;
use crate::{Result, WithDType};
use std::borrow::Cow;

/// Concatenates views of one dtype (validated by the caller) along `dim` into `out_shape`.
pub(crate) fn cat(
    parts: &[(&CpuStorage, &Layout)],
    dim: usize,
    out_shape: &[usize],
) -> Result<CpuStorage> {
    Ok(match parts[0].0 {
        CpuStorage::F32(_) => CpuStorage::F32(cat_typed(parts, dim, out_shape)?),
        CpuStorage::F16(_) => CpuStorage::F16(cat_typed(parts, dim, out_shape)?),
        CpuStorage::I32(_) => CpuStorage::I32(cat_typed(parts, dim, out_shape)?),
        CpuStorage::U32(_) => CpuStorage::U32(cat_typed(parts, dim, out_shape)?),
        CpuStorage::U8(_) => CpuStorage::U8(cat_typed(parts, dim, out_shape)?),
    })
}

fn cat_typed<T: WithDType>(
    parts: &[(&CpuStorage, &Layout)],
    dim: usize,
    out_shape: &[usize],
) -> Result<Vec<T>> {
    let packed: Vec<Cow<[T]>> = parts
        .iter()
        .map(|(s, l)| {
            let v = s.as_slice::<T>().expect("cat: dtypes were validated");
            Ok(if l.is_contiguous() {
                Cow::Borrowed(&v[l.offset..l.offset + l.numel()])
            } else {
                Cow::Owned(contiguous(v, l)?)
            })
        })
        .collect::<Result<_>>()?;
    let outer: usize = out_shape[..dim].iter().product();
    let inner: usize = out_shape[dim + 1..].iter().product();
    let mut out = try_vec("cat", out_shape.iter().product())?;
    // Row-major output: for each index of the dims before `dim`, each input's block in turn.
    for o in 0..outer {
        for ((_, l), p) in parts.iter().zip(&packed) {
            let block = l.shape[dim] * inner;
            out.extend_from_slice(&p[o * block..(o + 1) * block]);
        }
    }
    Ok(out)
}
