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

/// Calls `f(offsets)` for the linear indices `range` of a row-major walk over `shape`, where
/// `offsets[k] = base[k] + Σ idx[d] * strides[k][d]` is operand `k`'s storage index.
pub(crate) fn walk<const K: usize>(
    shape: &[usize],
    strides: [&[usize]; K],
    base: [usize; K],
    range: std::ops::Range<usize>,
    mut f: impl FnMut([usize; K]),
) {
    let inner: [usize; K] = std::array::from_fn(|k| strides[k].last().copied().unwrap_or(0));
    walk_runs(shape, strides, base, range, |mut pos, run| {
        for _ in 0..run {
            f(pos);
            for k in 0..K {
                pos[k] += inner[k];
            }
        }
    });
}

/// [`walk`] by runs along the innermost dim: `f(offsets, run)` stands for the `run` elements
/// from `offsets` on, operand `k` advancing by its innermost stride. Kernels whose innermost
/// strides are 0 or 1 (a bias broadcast over rows, a narrowed view) loop over slices there.
pub(crate) fn walk_runs<const K: usize>(
    shape: &[usize],
    strides: [&[usize]; K],
    base: [usize; K],
    range: std::ops::Range<usize>,
    mut f: impl FnMut([usize; K], usize),
) {
    let (start, end) = (range.start, range.end);
    if start >= end {
        return;
    }
    let nd = shape.len();
    if nd == 0 {
        f(base, 1);
        return;
    }
    // Unravel `start` once; afterwards advance with carries.
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
        f(pos, run);
        remaining -= run;
        if remaining == 0 {
            return;
        }
        for k in 0..K {
            pos[k] -= strides[k][last] * idx[last];
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

#[inline(always)]
fn map_body<T: Copy, U>(src: &[T], out: &mut [MaybeUninit<U>], f: &impl Fn(T) -> U) {
    for (o, &x) in out.iter_mut().zip(src) {
        o.write(f(x));
    }
}

#[inline(always)]
fn zip_body<T: Copy, U>(a: &[T], b: &[T], out: &mut [MaybeUninit<U>], f: &impl Fn(T, T) -> U) {
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        o.write(f(x, y));
    }
}

multiversion! {
    /// `out[i] = f(src[i])`, compiled for AVX2 and FMA where the CPU has them: the op's scalar
    /// function inlines into the loop, which then vectorises 8 lanes wide instead of SSE's 4
    /// (GELU's forward ran 2x slower in the portable build). Rust never contracts a multiply
    /// and an add into an FMA on its own, so both builds give the same bits.
    #[inline]
    pub(crate) fn map_slice[T: Copy, U](src: &[T], out: &mut [MaybeUninit<U>], f: &impl Fn(T) -> U)
        => map_body, ["avx2", "fma"]
}

multiversion! {
    /// `out[i] = f(a[i], b[i])`, compiled for AVX2 and FMA where the CPU has them (as
    /// [`map_slice`]).
    #[inline]
    pub(crate) fn zip_slices[T: Copy, U](
        a: &[T],
        b: &[T],
        out: &mut [MaybeUninit<U>],
        f: &impl Fn(T, T) -> U
    ) => zip_body, ["avx2", "fma"]
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
            map_slice(&src[off..end], out, &f);
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
    let s = l.strides.last().copied().unwrap_or(0);
    build_vec(op, l.numel(), |off, out| {
        let mut at = 0;
        walk_runs(
            &l.shape,
            [&l.strides],
            [l.offset],
            off..off + out.len(),
            |[p], run| {
                let o = &mut out[at..at + run];
                at += run;
                if s == 1 {
                    for (o, &x) in o.iter_mut().zip(&src[p..p + run]) {
                        o.write(f(x));
                    }
                } else {
                    for (j, o) in o.iter_mut().enumerate() {
                        o.write(f(src[p + j * s]));
                    }
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
            zip_slices(&a[off..end], &b[off..end], out, &f);
        });
    }
    let (sa, sb) = (
        la.strides.last().copied().unwrap_or(0),
        lb.strides.last().copied().unwrap_or(0),
    );
    build_vec(op, n, |off, out| {
        let mut at = 0;
        let strides = [&la.strides[..], &lb.strides[..]];
        let end = off + out.len();
        walk_runs(
            &la.shape,
            strides,
            [la.offset, lb.offset],
            off..end,
            |[p, q], run| {
                let o = &mut out[at..at + run];
                at += run;
                // The innermost strides of broadcasts over rows are 0 or 1: slice loops there.
                match (sa, sb) {
                    (1, 1) => {
                        for ((o, &x), &y) in o.iter_mut().zip(&a[p..p + run]).zip(&b[q..q + run]) {
                            o.write(f(x, y));
                        }
                    }
                    (1, 0) => {
                        let y = b[q];
                        for (o, &x) in o.iter_mut().zip(&a[p..p + run]) {
                            o.write(f(x, y));
                        }
                    }
                    (0, 1) => {
                        let x = a[p];
                        for (o, &y) in o.iter_mut().zip(&b[q..q + run]) {
                            o.write(f(x, y));
                        }
                    }
                    _ => {
                        for (j, o) in o.iter_mut().enumerate() {
                            o.write(f(a[p + j * sa], b[q + j * sb]));
                        }
                    }
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
                walk(&shape, [&sa, &sb], [5, 7], start..end, |p| got.push(p));
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

    #[test]
    fn map_paths_match_the_element_walk() {
        let a: Vec<f32> = (0..60).map(|i| i as f32 * 0.5 - 7.0).collect();
        let b: Vec<f32> = (0..60).map(|i| (i * 7 % 11) as f32).collect();
        let lay = |shape: &[usize], strides: &[usize], offset: usize| Layout {
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            offset,
        };
        let shape = [3usize, 4, 5];
        // Packed, a row broadcast (inner stride 1 / outer 0), a column broadcast (inner 0), a
        // transposed view (inner stride 4), an offset narrowed view.
        let views = [
            lay(&shape, &[20, 5, 1], 0),
            lay(&shape, &[0, 5, 1], 3),
            lay(&shape, &[4, 1, 0], 1),
            lay(&shape, &[1, 15, 3], 0),
            lay(&shape, &[12, 6, 1], 2),
        ];
        for la in &views {
            let want1: Vec<f32> = {
                let mut v = vec![];
                walk(&shape, [&la.strides], [la.offset], 0..60, |[p]| {
                    v.push(a[p] * 3.0)
                });
                v
            };
            assert_eq!(map1("t", &a, la, |x| x * 3.0).unwrap(), want1);
            for lb in &views {
                let mut want = vec![];
                let st = [&la.strides[..], &lb.strides[..]];
                walk(&shape, st, [la.offset, lb.offset], 0..60, |[p, q]| {
                    want.push(a[p] - b[q])
                });
                assert_eq!(map2("t", &a, la, &b, lb, |x, y| x - y).unwrap(), want);
            }
        }
    }
}
