//! Walking strided layouts on the host: the CPU twin of the `strided` shader entry points.

// Re-exported: `try_vec` lived here before `alloc.rs`, and kernels still name it through here.
pub(crate) use super::alloc::try_vec;
use crate::shape::Layout;
use crate::Result;
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Below this many elements a loop runs on the calling thread: a rayon hand-off costs a few
/// microseconds, more than the loop itself.
pub(crate) const PAR_THRESHOLD: usize = 1 << 15;

/// Elements per rayon task: large enough to amortise scheduling, small enough to balance.
const PAR_CHUNK: usize = 1 << 14;

/// Calls `f(offsets)` for the linear indices `start..end` of a row-major walk over `shape`, where
/// `offsets[k] = base[k] + Σ idx[d] * strides[k][d]` is operand `k`'s storage index.
pub(crate) fn walk<const K: usize>(
    shape: &[usize],
    strides: [&[usize]; K],
    base: [usize; K],
    start: usize,
    end: usize,
    mut f: impl FnMut([usize; K]),
) {
    if start >= end {
        return;
    }
    let nd = shape.len();
    if nd == 0 {
        f(base);
        return;
    }
    // Unravel `start` once; afterwards advance with carries, so the inner dim costs one add.
    let mut idx = vec![0usize; nd];
    let mut rem = start;
    for d in (0..nd).rev() {
        idx[d] = rem % shape[d];
        rem /= shape[d];
    }
    let mut pos = base;
    for k in 0..K {
        for d in 0..nd {
            pos[k] += idx[d] * strides[k][d];
        }
    }
    let last = nd - 1;
    let mut remaining = end - start;
    loop {
        // Run along the innermost dim.
        let run = (shape[last] - idx[last]).min(remaining);
        for _ in 0..run {
            f(pos);
            for k in 0..K {
                pos[k] += strides[k][last];
            }
        }
        remaining -= run;
        if remaining == 0 {
            return;
        }
        for k in 0..K {
            pos[k] -= strides[k][last] * (idx[last] + run);
        }
        idx[last] = 0;
        // Carry into the outer dims.
        let mut d = last;
        loop {
            d -= 1;
            idx[d] += 1;
            for k in 0..K {
                pos[k] += strides[k][d];
            }
            if idx[d] < shape[d] {
                break;
            }
            for k in 0..K {
                pos[k] -= strides[k][d] * shape[d];
            }
            idx[d] = 0;
        }
    }
}

/// Builds a `Vec` of `n` elements by filling disjoint ranges, in parallel when `n` is large.
/// `fill(start, out)` must write every slot of `out`, which holds indices `start..start+out.len()`.
///
/// # Errors
/// [`Error::OutOfMemory`] naming `op` when the host cannot allocate the result (a failed
/// allocation would otherwise abort the process).
pub(crate) fn build_vec<T: Send>(
    op: &'static str,
    n: usize,
    fill: impl Fn(usize, &mut [MaybeUninit<T>]) + Sync,
) -> Result<Vec<T>> {
    let mut v: Vec<T> = try_vec(op, n)?;
    // Filling spare capacity skips the zeroing pass a `vec![0; n]` would pay for.
    let spare = &mut v.spare_capacity_mut()[..n];
    if n >= PAR_THRESHOLD {
        spare
            .par_chunks_mut(PAR_CHUNK)
            .enumerate()
            .for_each(|(i, chunk)| fill(i * PAR_CHUNK, chunk));
    } else {
        fill(0, spare);
    }
    // SAFETY: `fill` wrote all `n` slots (every caller writes its whole chunk).
    unsafe { v.set_len(n) };
    Ok(v)
}

/// Gathers any view into a packed row-major `Vec` (dtype-agnostic: used for every dtype).
pub(crate) fn contiguous<T: Copy + Send + Sync>(src: &[T], l: &Layout) -> Result<Vec<T>> {
    let op = "contiguous";
    let n = l.numel();
    if l.is_contiguous() {
        let mut v = try_vec("contiguous", n)?;
        v.extend_from_slice(&src[l.offset..l.offset + n]);
        return Ok(v);
    }
    map_strided(op, src, l, |x| x)
}

/// `f(x)` for every element of the view `l` of `src`, packed row-major (any element types).
pub(crate) fn map1<T: Copy + Sync, U: Send>(
    op: &'static str,
    src: &[T],
    l: &Layout,
    f: impl Fn(T) -> U + Sync,
) -> Result<Vec<U>> {
    let n = l.numel();
    if l.is_contiguous() {
        let src = &src[l.offset..l.offset + n];
        return build_vec(op, n, |off, out| {
            let end = off + out.len();
            for (o, &x) in out.iter_mut().zip(&src[off..end]) {
                o.write(f(x));
            }
        });
    }
    map_strided(op, src, l, f)
}

/// `f(x)` for every element of a view that is not packed, walking its strides in row-major
/// order (the general path of [`contiguous`] and [`map1`]).
fn map_strided<T: Copy + Sync, U: Send>(
    op: &'static str,
    src: &[T],
    l: &Layout,
    f: impl Fn(T) -> U + Sync,
) -> Result<Vec<U>> {
    build_vec(op, l.numel(), |off, out| {
        let mut it = out.iter_mut();
        walk(
            &l.shape,
            [&l.strides],
            [l.offset],
            off,
            off + it.len(),
            |[p]| {
                if let Some(o) = it.next() {
                    o.write(f(src[p]));
                }
            },
        );
    })
}

/// `f(a, b)` over two views broadcast to one shape, packed row-major (any element types).
pub(crate) fn map2<T: Copy + Sync, U: Send>(
    op: &'static str,
    a: &[T],
    la: &Layout,
    b: &[T],
    lb: &Layout,
    f: impl Fn(T, T) -> U + Sync,
) -> Result<Vec<U>> {
    let n = la.numel();
    if la.is_contiguous() && lb.is_contiguous() {
        let a = &a[la.offset..la.offset + n];
        let b = &b[lb.offset..lb.offset + n];
        return build_vec(op, n, |off, out| {
            let end = off + out.len();
            for ((o, &x), &y) in out.iter_mut().zip(&a[off..end]).zip(&b[off..end]) {
                o.write(f(x, y));
            }
        });
    }
    build_vec(op, n, |off, out| {
        let mut it = out.iter_mut();
        walk(
            &la.shape,
            [&la.strides, &lb.strides],
            [la.offset, lb.offset],
            off,
            off + it.len(),
            |[p, q]| {
                if let Some(o) = it.next() {
                    o.write(f(a[p], b[q]));
                }
            },
        );
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walk_matches_naive_unravel() {
        let shape = [2usize, 3, 4];
        let sa = [1usize, 2, 6]; // a permuted view
        let sb = [0usize, 1, 0]; // a broadcast view
        for start in 0..24 {
            for end in start..=24 {
                let mut got = vec![];
                walk(&shape, [&sa, &sb], [5, 7], start, end, |p| got.push(p));
                let want: Vec<[usize; 2]> = (start..end)
                    .map(|i| {
                        let (a, b, c) = (i / 12, (i / 4) % 3, i % 4);
                        [
                            5 + a * sa[0] + b * sa[1] + c * sa[2],
                            7 + a * sb[0] + b * sb[1] + c * sb[2],
                        ]
                    })
                    .collect();
                assert_eq!(got, want, "start {start} end {end}");
            }
        }
    }
}
