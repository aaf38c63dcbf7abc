//! CPU `index_select`: the fallback device and the oracle for `shaders/gather.wgsl`.

use crate::shape::Layout;
use crate::Result;

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
    let mut out = super::strided::try_vec("index_select", n)?;
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
