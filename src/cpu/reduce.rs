//! CPU reductions (sum, mean, prod, max, min, argmax, argmin): the fallback device and the
//! oracle for `shaders/reduce.wgsl`.
//!
//! Sums and products are pairwise. A leaf of up to [`LEAF`] elements is folded into [`LANES`]
//! independent accumulators (element `k` goes to lane `k % LANES`, which the compiler keeps in
//! SIMD registers), the lanes are combined by a halving tree, and leaves are combined by a binary
//! tree whose split points depend only on the length. The tree never depends on the thread
//! count, so a result is bit-identical from run to run however rayon schedules the halves.
//! Rows that interleave in memory (a reduction over a non-last dim) are folded a tile of
//! adjacent rows at a time, so every cache line loaded serves many rows.

use super::strided::PAR_THRESHOLD;
use rayon::prelude::*;

/// Accumulators per leaf: 16 f32 lanes fill one AVX-512 register or four SSE registers, and
/// enough independent chains to hide the add latency.
const LANES: usize = 16;
/// Elements per leaf (16 KiB of f32: stays in L1 while the lanes walk it). Rounding error grows
/// with `LEAF / LANES` (256 sequential adds per lane), then only logarithmically.
const LEAF: usize = 4096;
/// Below this many elements a tree is folded on the calling thread.
const PAR_MIN: usize = 1 << 16;
/// Elements per rayon task when many short rows are reduced in parallel.
const PAR_CHUNK: usize = 1 << 14;
/// Adjacent rows folded together when rows interleave in memory (a reduction over a non-last
/// dim): two 64-byte lines feed 32 rows at once instead of one element per cache line (32 beat
/// 16 and 64 on a 4096 x 4096 column sum here: 16 leaves the prefetcher idle, 64 spills).
const TILE: usize = 32;
/// Elements per row folded in order before the tiles combine pairwise (as `LEAF / LANES`).
const TILE_LEAF: usize = 256;

// The reduction table (`src/ops/reduce.rs`) declares the ops, their folds and shader codes.
use crate::ops::IntElem;
pub(crate) use crate::ops::ReduceOp;

/// `OP` of `shaders/reduce.wgsl` for softmax's `Σ exp(x - rowmax)`.
pub(crate) const SUM_EXP_CODE: u32 = 6;

// A reduction's rows: a backend-neutral descriptor the tensor layer builds and both backends
// read (here for the CPU kernels and `gpu/reduce.rs`).
pub(crate) use crate::ops::geometry::Rows;

/// `max` that propagates NaN (either operand) as PyTorch does.
#[inline(always)]
pub(crate) fn max_nan(a: f32, b: f32) -> f32 {
    if b > a || b.is_nan() {
        b
    } else {
        a
    }
}

#[inline(always)]
fn min_nan(a: f32, b: f32) -> f32 {
    if b < a || b.is_nan() {
        b
    } else {
        a
    }
}

#[inline(always)]
pub(crate) fn add(a: f32, b: f32) -> f32 {
    a + b
}

/// Identity of a sum: `-0.0 + x == x` for every x, including `-0.0` (which `0.0 +` would flip).
pub(crate) const SUM_ID: f32 = -0.0;

/// Folds one leaf (≤ [`LEAF`] elements `src[start + k * stride]`) into lanes, then the lanes by
/// a halving tree. The contiguous and strided cases run the same arithmetic in the same order.
#[inline(always)]
fn leaf<F, M>(src: &[f32], start: usize, stride: usize, n: usize, id: f32, f: F, map: M) -> f32
where
    F: Fn(f32, f32) -> f32,
    M: Fn(f32) -> f32,
{
    let mut acc = [id; LANES];
    if stride == 1 {
        // Slices of exactly LANES let the compiler drop bounds checks and vectorise.
        let xs = &src[start..start + n];
        let mut chunks = xs.chunks_exact(LANES);
        for c in &mut chunks {
            for j in 0..LANES {
                acc[j] = f(acc[j], map(c[j]));
            }
        }
        for (a, &x) in acc.iter_mut().zip(chunks.remainder()) {
            *a = f(*a, map(x));
        }
    } else {
        for k in 0..n {
            acc[k % LANES] = f(acc[k % LANES], map(src[start + k * stride]));
        }
    }
    let mut w = LANES;
    while w > 1 {
        w /= 2;
        for j in 0..w {
            acc[j] = f(acc[j], acc[j + w]);
        }
    }
    acc[0]
}

/// Pairwise fold of `map(src[start + k * stride])` for `k < n` with the associative `f`.
pub(crate) fn fold<F, M>(
    src: &[f32],
    start: usize,
    stride: usize,
    n: usize,
    id: f32,
    f: F,
    map: M,
) -> f32
where
    F: Fn(f32, f32) -> f32 + Sync + Copy,
    M: Fn(f32) -> f32 + Sync + Copy,
{
    if n <= LEAF {
        return leaf(src, start, stride, n, id, f, map);
    }
    // Split on a leaf boundary so every leaf but the last is full, whatever the recursion depth.
    let mid = (n / 2).div_ceil(LEAF) * LEAF;
    let right = start + mid * stride;
    let (a, b) = if n >= PAR_MIN {
        rayon::join(
            || fold(src, start, stride, mid, id, f, map),
            || fold(src, right, stride, n - mid, id, f, map),
        )
    } else {
        (
            fold(src, start, stride, mid, id, f, map),
            fold(src, right, stride, n - mid, id, f, map),
        )
    };
    f(a, b)
}

/// Folds `w <= TILE` adjacent rows at once: row `j` holds `src[base + j + k * stride]` for
/// `k < n`, mapped by `map(j0 + j, x)`. Pairwise over blocks of [`TILE_LEAF`] elements, split
/// by length only (deterministic, like [`fold`]).
#[allow(clippy::too_many_arguments)]
fn fold_tile<F, M>(
    src: &[f32],
    base: usize,
    w: usize,
    j0: usize,
    stride: usize,
    n: usize,
    id: f32,
    f: F,
    map: M,
) -> [f32; TILE]
where
    F: Fn(f32, f32) -> f32 + Sync + Copy,
    M: Fn(usize, f32) -> f32 + Sync + Copy,
{
    if n <= TILE_LEAF {
        let mut acc = [id; TILE];
        for k in 0..n {
            let line = &src[base + k * stride..][..w];
            for (j, (a, &x)) in acc.iter_mut().zip(line).enumerate() {
                *a = f(*a, map(j0 + j, x));
            }
        }
        return acc;
    }
    let mid = (n / 2).div_ceil(TILE_LEAF) * TILE_LEAF;
    let right = base + mid * stride;
    let (mut a, b) = if n * w >= PAR_MIN {
        rayon::join(
            || fold_tile(src, base, w, j0, stride, mid, id, f, map),
            || fold_tile(src, right, w, j0, stride, n - mid, id, f, map),
        )
    } else {
        (
            fold_tile(src, base, w, j0, stride, mid, id, f, map),
            fold_tile(src, right, w, j0, stride, n - mid, id, f, map),
        )
    };
    for (x, y) in a.iter_mut().zip(b) {
        *x = f(*x, y);
    }
    a
}

/// Folds `out.len()` adjacent rows (row `j` at `src[base + j + k * stride]`, `k < n`) into `out`,
/// tile by tile, in parallel when there is enough work.
#[allow(clippy::too_many_arguments)]
pub(crate) fn fold_adjacent<F, M>(
    src: &[f32],
    base: usize,
    stride: usize,
    n: usize,
    id: f32,
    f: F,
    map: M,
    out: &mut [f32],
) where
    F: Fn(f32, f32) -> f32 + Sync + Copy,
    M: Fn(usize, f32) -> f32 + Sync + Copy,
{
    let tile = |(t, o): (usize, &mut [f32])| {
        let acc = fold_tile(
            src,
            base + t * TILE,
            o.len(),
            t * TILE,
            stride,
            n,
            id,
            f,
            map,
        );
        o.copy_from_slice(&acc[..o.len()]);
    };
    if out.len() * n >= PAR_THRESHOLD {
        out.par_chunks_mut(TILE).enumerate().for_each(tile);
    } else {
        out.chunks_mut(TILE).enumerate().for_each(tile);
    }
}

/// Whether rows interleave with their neighbours (row `o + 1` starts one element after row
/// `o`, and rows are not contiguous themselves): then rows are folded in tiles. Returns the
/// number of adjacent rows per line (the last output dim).
fn adjacent_rows(rows: &Rows) -> Option<usize> {
    let last = *rows.out_shape.last()?;
    (rows.stride != 1 && rows.out_strides.last() == Some(&1) && last > 1).then_some(last)
}

/// Whether candidate `b` beats the current best `a` (value, index): NaN beats every number (the
/// first NaN wins), then the larger (`up`) or smaller value, then the lower index. A total order,
/// so any reduction tree gives PyTorch's answer.
#[inline(always)]
fn better(b: (f32, u32), a: (f32, u32), up: bool) -> bool {
    match (b.0.is_nan(), a.0.is_nan()) {
        (true, true) => b.1 < a.1,
        (true, false) => true,
        (false, true) => false,
        (false, false) if b.0 == a.0 => b.1 < a.1,
        (false, false) => (b.0 > a.0) == up,
    }
}

/// Arg-reduction of a non-empty row; element `k` has index `first + k`.
fn arg_fold(src: &[f32], start: usize, stride: usize, n: usize, first: u32, up: bool) -> u32 {
    fn go(src: &[f32], start: usize, stride: usize, n: usize, first: u32, up: bool) -> (f32, u32) {
        if n < PAR_MIN {
            let mut best = (src[start], first);
            for k in 1..n {
                let c = (src[start + k * stride], first + k as u32);
                if better(c, best, up) {
                    best = c;
                }
            }
            return best;
        }
        let mid = n / 2;
        let (a, b) = rayon::join(
            || go(src, start, stride, mid, first, up),
            || {
                go(
                    src,
                    start + mid * stride,
                    stride,
                    n - mid,
                    first + mid as u32,
                    up,
                )
            },
        );
        if better(b, a, up) {
            b
        } else {
            a
        }
    }
    go(src, start, stride, n, first, up).1
}

/// Arg-reduction of `w <= TILE` adjacent non-empty rows at once (row `j` at
/// `src[base + j + k * stride]`); element `k` has index `first + k`. Exact, so any split works;
/// halves run in parallel when long.
fn arg_tile(
    src: &[f32],
    base: usize,
    w: usize,
    stride: usize,
    n: usize,
    first: u32,
    up: bool,
) -> [(f32, u32); TILE] {
    if n * w < PAR_MIN || n < 2 {
        // Indices only grow here, so `better` reduces to a strict comparison (ties keep the
        // earlier index) or a first NaN: branch-free selects on separate value and index lanes.
        let mut v = [f32::NAN; TILE];
        let mut idx = [first; TILE];
        v[..w].copy_from_slice(&src[base..base + w]);
        for k in 1..n {
            let line = &src[base + k * stride..][..w];
            let at = first + k as u32;
            for ((b, i), &x) in v.iter_mut().zip(&mut idx).zip(line) {
                let beats = if up { x > *b } else { x < *b };
                let take = beats || (x.is_nan() && !b.is_nan());
                *b = if take { x } else { *b };
                *i = if take { at } else { *i };
            }
        }
        let mut best = [(f32::NAN, u32::MAX); TILE];
        for (b, (&x, &i)) in best.iter_mut().zip(v.iter().zip(&idx)) {
            *b = (x, i);
        }
        return best;
    }
    let mid = n / 2;
    let (mut a, b) = rayon::join(
        || arg_tile(src, base, w, stride, mid, first, up),
        || {
            arg_tile(
                src,
                base + mid * stride,
                w,
                stride,
                n - mid,
                first + mid as u32,
                up,
            )
        },
    );
    for (x, y) in a.iter_mut().zip(b) {
        if better(y, *x, up) {
            *x = y;
        }
    }
    a
}

/// `f(base)` for every row, in parallel when there is enough work.
pub(crate) fn per_row<T: Send>(rows: &Rows, f: impl Fn(usize) -> T + Sync + Send) -> Vec<T> {
    let m = rows.outputs();
    let work = m.saturating_mul(rows.len.max(1));
    if m > 1 && work >= PAR_THRESHOLD {
        // Long rows parallelise inside `fold`; many short rows are batched into tasks here.
        let min_len = (PAR_CHUNK / rows.len.max(1)).max(1);
        (0..m)
            .into_par_iter()
            .with_min_len(min_len)
            .map(|o| f(rows.base(o)))
            .collect()
    } else {
        (0..m).map(|o| f(rows.base(o))).collect()
    }
}

// The CPU folds of the reduction table, expanded here so each is monomorphised and inlined.
crate::ops::reduce_cpu_half!();

/// The element map of a fold that takes elements as they are.
#[inline(always)]
fn keep(x: f32) -> f32 {
    x
}

/// The finish of a fold whose value is the result.
#[inline(always)]
fn whole(v: f32, _: usize) -> f32 {
    v
}

/// A mean: PyTorch divides the sum (it does not multiply by 1/n); 0/0 makes an empty mean NaN.
#[inline(always)]
fn mean_of(v: f32, n: usize) -> f32 {
    v / n as f32
}

#[inline(always)]
fn mul(a: f32, b: f32) -> f32 {
    a * b
}

/// A value reduction of every row (`op` is not an arg op; rows are non-empty unless `op` is a
/// sum, mean or product).
pub(crate) fn reduce(op: ReduceOp, src: &[f32], rows: &Rows) -> Vec<f32> {
    op.cpu_f32(src, rows)
        .unwrap_or_else(|| unreachable!("arg reductions return indices: use arg_reduce"))
}

/// `finish(fold of map(x) by f from id, len)` of every row: pairwise per row, or tile by tile
/// when rows interleave in memory.
fn value_rows<F, M>(
    src: &[f32],
    rows: &Rows,
    id: f32,
    f: F,
    map: M,
    finish: fn(f32, usize) -> f32,
) -> Vec<f32>
where
    F: Fn(f32, f32) -> f32 + Sync + Send + Copy,
    M: Fn(f32) -> f32 + Sync + Send + Copy,
{
    let (n, s) = (rows.len, rows.stride);
    let Some(width) = adjacent_rows(rows) else {
        return per_row(rows, |b| finish(fold(src, b, s, n, id, f, map), n));
    };
    let mut out = super::alloc::zeros_f32(rows.outputs());
    let line = |(l, o): (usize, &mut [f32])| {
        fold_adjacent(src, rows.base(l * width), s, n, id, f, |_, x| map(x), o);
        o.iter_mut().for_each(|x| *x = finish(*x, n));
    };
    if out.len() * n >= PAR_THRESHOLD {
        out.par_chunks_mut(width).enumerate().for_each(line);
    } else {
        out.chunks_mut(width).enumerate().for_each(line);
    }
    out
}

/// The fold of every row of integers by `f` from `id`, in order (sums and products wrap).
fn int_rows<T: IntElem>(src: &[T], rows: &Rows, id: T, f: fn(T, T) -> T) -> Vec<T> {
    (0..rows.outputs())
        .map(|o| {
            let base = rows.base(o);
            (0..rows.len).fold(id, |acc, r| f(acc, src[base + r * rows.stride]))
        })
        .collect()
}

/// argmax/argmin of every (non-empty) row, as indices along the row.
pub(crate) fn arg_reduce(op: ReduceOp, src: &[f32], rows: &Rows) -> Vec<u32> {
    let up = match op {
        ReduceOp::ArgMax => true,
        ReduceOp::ArgMin => false,
        _ => unreachable!("value reductions return values: use reduce"),
    };
    let (n, s) = (rows.len, rows.stride);
    let Some(width) = adjacent_rows(rows) else {
        return per_row(rows, |b| arg_fold(src, b, s, n, 0, up));
    };
    let mut out = vec![0u32; rows.outputs()];
    let tile = |l: usize, t: usize, o: &mut [u32]| {
        let best = arg_tile(src, rows.base(l * width) + t * TILE, o.len(), s, n, 0, up);
        for (o, b) in o.iter_mut().zip(best) {
            *o = b.1;
        }
    };
    if out.len() * n >= PAR_THRESHOLD {
        out.par_chunks_mut(width).enumerate().for_each(|(l, line)| {
            line.par_chunks_mut(TILE)
                .enumerate()
                .for_each(|(t, o)| tile(l, t, o))
        });
    } else {
        for (l, line) in out.chunks_mut(width).enumerate() {
            for (t, o) in line.chunks_mut(TILE).enumerate() {
                tile(l, t, o);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shape::Layout;

    #[test]
    fn pairwise_sum_is_accurate_and_layout_independent() {
        let sum = |v: &[f32], start, stride, n| fold(v, start, stride, n, SUM_ID, add, keep);
        let n = 1_000_003;
        let v: Vec<f32> = (0..n)
            .map(|i| ((i * 7919) % 1000) as f32 * 0.001 + 0.1)
            .collect();
        let exact: f64 = v.iter().map(|&x| x as f64).sum();
        let got = sum(&v, 0, 1, n) as f64;
        assert!(((got - exact) / exact).abs() < 1e-6, "{got} vs {exact}");
        // The same tree through the strided path (stride 2 over a doubled copy).
        let doubled: Vec<f32> = v.iter().flat_map(|&x| [x, 0.0]).collect();
        assert_eq!(sum(&doubled, 0, 2, n).to_bits(), sum(&v, 0, 1, n).to_bits());
    }

    #[test]
    fn arg_rules() {
        let v = [1.0f32, 3.0, 3.0, f32::NAN, 0.0, f32::NAN];
        let rows = Rows::all(&Layout::contiguous(&[6]));
        assert_eq!(arg_reduce(ReduceOp::ArgMax, &v, &rows), vec![3]);
        assert_eq!(arg_reduce(ReduceOp::ArgMin, &v, &rows), vec![3]);
        let w = [1.0f32, 3.0, 3.0, 0.0, 0.0];
        let rows = Rows::all(&Layout::contiguous(&[5]));
        assert_eq!(arg_reduce(ReduceOp::ArgMax, &w, &rows), vec![1]);
        assert_eq!(arg_reduce(ReduceOp::ArgMin, &w, &rows), vec![3]);
        assert!(reduce(ReduceOp::Max, &v, &Rows::all(&Layout::contiguous(&[6])))[0].is_nan());
    }
}
