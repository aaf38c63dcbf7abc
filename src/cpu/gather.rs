//! CPU `index_select`, `gather` and `scatter_add`/`index_add`: the fallback device and the
//! oracle for `shaders/gather.wgsl` and `shaders/scatter.wgsl`.

use super::storage::CpuStorage;
use crate::ops::backend::IdsView;
use crate::shape::Layout;
use crate::{Error, Result};

/// The ids `view` of `s` as u32, each checked against `bound` (`Error::IndexOutOfRange` naming
/// `op` for the first negative id, else the first one `>= bound`): what every CPU kernel that
/// takes ids reads, validated before anything runs.
pub(crate) fn host_ids(
    op: &'static str,
    s: &CpuStorage,
    view: &IdsView,
    bound: usize,
) -> Result<Vec<u32>> {
    let bad = |id: i64| Error::IndexOutOfRange {
        op,
        index: id,
        bound,
    };
    let range = view.offset..view.offset + view.count;
    let short = || Error::InvalidArgument {
        op,
        message: format!("ids {range:?} past their storage"),
    };
    let host: Vec<u32> = match (s, view.signed) {
        (CpuStorage::I32(v), true) => v
            .get(range.clone())
            .ok_or_else(short)?
            .iter()
            .map(|&id| u32::try_from(id).map_err(|_| bad(i64::from(id))))
            .collect::<Result<_>>()?,
        (CpuStorage::U32(v), false) => v.get(range.clone()).ok_or_else(short)?.to_vec(),
        _ => {
            return Err(Error::InvalidArgument {
                op,
                message: "ids must be U32 or I32".into(),
            })
        }
    };
    if let Some(&id) = host.iter().find(|&&id| id as usize >= bound) {
        return Err(bad(i64::from(id)));
    }
    Ok(host)
}

/// Rows `ids` (already validated `< layout.shape[d]`) of dim `d` of the view `layout` of `src`,
/// packed row-major with `shape[d]` replaced by `ids.len()`.
pub(crate) fn index_select<T: Copy>(
    src: &[T],
    layout: &Layout,
    d: usize,
    ids: &[u32],
) -> Result<Vec<T>> {
    let shape = &layout.shape;
    let outer: usize = shape[..d].iter().product();
    let inner: usize = shape[d + 1..].iter().product();
    let n = outer * ids.len() * inner;
    let mut out = super::alloc::try_vec("index_select", n)?;
    if n == 0 {
        return Ok(out);
    }
    // The inner block is one memcpy when its dims are packed (the embedding-table case).
    let inner_packed = {
        let mut expect = 1;
        let mut ok = true;
        for k in (d + 1..shape.len()).rev() {
            ok &= shape[k] == 1 || layout.strides[k] == expect;
            expect *= shape[k];
        }
        ok
    };
    let mut coords = vec![0usize; shape.len()];
    for o in 0..outer {
        // Offset of element (o unravelled over dims < d, 0, 0...).
        let mut rem = o;
        let mut base = layout.offset;
        for k in (0..d).rev() {
            base += (rem % shape[k]) * layout.strides[k];
            rem /= shape[k];
        }
        for &id in ids {
            let row = base + id as usize * layout.strides[d];
            if inner_packed {
                out.extend_from_slice(&src[row..row + inner]);
                continue;
            }
            for i in 0..inner {
                let mut rem = i;
                let mut at = row;
                for k in (d + 1..shape.len()).rev() {
                    coords[k] = rem % shape[k];
                    rem /= shape[k];
                    at += coords[k] * layout.strides[k];
                }
                out.push(src[at]);
            }
        }
    }
    Ok(out)
}

/// `torch.gather`: output element `i` (of `index_shape`) is the view's element at `i`'s
/// coordinates with the one of dim `d` replaced by `ids[i]` (validated `< layout.shape[d]`).
pub(crate) fn gather_dim(
    src: &[f32],
    layout: &Layout,
    d: usize,
    ids: &[u32],
    index_shape: &[usize],
) -> Result<Vec<f32>> {
    let mut out = super::alloc::try_vec("gather", ids.len())?;
    for (i, &id) in ids.iter().enumerate() {
        let mut rem = i;
        let mut at = layout.offset;
        for k in (0..index_shape.len()).rev() {
            let c = if k == d {
                id as usize
            } else {
                rem % index_shape[k]
            };
            rem /= index_shape[k];
            at += c * layout.strides[k];
        }
        out.push(src[at]);
    }
    Ok(out)
}

/// Adds `src` (`ids.len()` contributions of `r` floats, packed) into `base` (packed rows of
/// `r`): contribution `k`, at coordinates `k` unravelled over `shape` with the one of dim `d`
/// replaced by `ids[k]` (validated), goes to row `sum c * out_strides`. Each target's
/// contributions are summed in position order first and then added to `base`: the order of
/// `shaders/scatter.wgsl`, so CPU and GPU agree bit for bit.
pub(crate) fn scatter_add_into(
    base: &mut [f32],
    ids: &[u32],
    shape: &[usize],
    d: usize,
    out_strides: &[usize],
    src: &[f32],
    r: usize,
) -> Result<()> {
    let mut keyed: Vec<(usize, usize)> = super::alloc::try_vec("scatter_add", ids.len())?;
    for (k, &id) in ids.iter().enumerate() {
        let mut rem = k;
        let mut key = 0;
        for q in (0..shape.len()).rev() {
            let c = if q == d { id as usize } else { rem % shape[q] };
            rem /= shape[q];
            key += c * out_strides[q];
        }
        keyed.push((key, k));
    }
    keyed.sort_unstable();
    let mut acc = vec![0f32; r];
    for run in keyed.chunk_by(|a, b| a.0 == b.0) {
        acc.fill(0.0);
        for &(_, k) in run {
            for (a, v) in acc.iter_mut().zip(&src[k * r..(k + 1) * r]) {
                *a += v;
            }
        }
        let key = run[0].0;
        for (b, a) in base[key * r..(key + 1) * r].iter_mut().zip(&acc) {
            *b += a;
        }
    }
    Ok(())
}
