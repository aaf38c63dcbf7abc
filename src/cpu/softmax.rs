//! CPU softmax and log_softmax: the fallback device and the oracle for `shaders/softmax.wgsl`
//! (which runs after two `reduce.wgsl` reductions: the row max, then `Σ exp(x - max)`).

use super::reduce::{max, per_row, sum_exp, Rows};
use super::strided::{build_vec, walk};
use crate::shape::Layout;

/// `softmax` (or `log_softmax` when `log`) over dim `d` of the view `layout` of `src`, packed
/// row-major. Subtracting the row max keeps `exp` finite; NaN anywhere in a row makes the row NaN.
pub(crate) fn softmax(src: &[f32], layout: &Layout, d: usize, log: bool) -> Vec<f32> {
    let rows = Rows::along(layout, d);
    let (len, stride) = (rows.len, rows.stride);
    let stats: Vec<(f32, f32)> = per_row(&rows, |b| {
        let m = max(src, b, stride, len);
        (m, sum_exp(src, b, stride, len, m))
    });
    let inner: usize = layout.shape[d + 1..].iter().product();
    let n = layout.numel();
    build_vec(n, |off, out| {
        let mut i = off;
        let mut it = out.iter_mut();
        walk(
            &layout.shape,
            [&layout.strides],
            [layout.offset],
            off,
            off + it.len(),
            |[p]| {
                // Element i's row: its index with dim d removed.
                let (m, s) = stats[(i / (len * inner)) * inner + i % inner];
                let x = src[p] - m;
                let v = if log { x - s.ln() } else { x.exp() / s };
                if let Some(o) = it.next() {
                    o.write(v);
                }
                i += 1;
            },
        );
    })
}
