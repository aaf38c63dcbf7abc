//! CPU 2-d convolution by blocks of output rows: each block of one image is unfolded (im2col)
//! into a small buffer that stays in cache and goes straight into the `gemm` crate's kernels,
//! so no im2col matrix of the whole batch (or image) is ever built. The input and weight
//! gradients run the same way (`gemm` with the buffer transposed, then a fold back for the
//! input). Images run in parallel; every sum has a fixed order, so results do not depend on the
//! number of threads. A stride-1 convolution with 8 or more output channels a group (8 input
//! channels for the input gradient) takes the direct kernels of `conv_direct.rs` instead on
//! CPUs with AVX2 + FMA, forward and both gradients (the tensor layer chooses).

use super::alloc::try_vec;
use super::matmul::mm;
pub(crate) use crate::ops::geometry::Geom;
use crate::Result;
use rayon::prelude::*;

/// Unfolded elements per block (256 KiB of f32): a block and the gemm panels fit in L2.
const BLOCK_ELEMS: usize = 1 << 16;

/// Output rows at most this long unfold by a table (`Geom::table`).
const TABLE_MAX_OW: usize = 16;

/// Weight-gradient partial sums: images are split into at most this many fixed runs (not one
/// per thread), each summed in order, then the runs in order.
const WGRAD_PARTS: usize = 8;

impl Geom {
    fn cg(&self) -> usize {
        self.c / self.g
    }
    fn og(&self) -> usize {
        self.o / self.g
    }
    /// Rows of the unfolded matrix of one group: `cg * kh * kw`.
    fn kk(&self) -> usize {
        self.cg() * self.k[0] * self.k[1]
    }
    fn l(&self) -> usize {
        self.out[0] * self.out[1]
    }
    /// Output rows per block.
    fn rows_per_block(&self) -> usize {
        (BLOCK_ELEMS / (self.kk() * self.out[1]).max(1)).clamp(1, self.out[0])
    }
    /// Elements of one input image: `c * h * w`.
    fn chw(&self) -> usize {
        self.c * self.h * self.w
    }
    /// Elements of the largest unfolded block, the per-task buffer.
    fn block_cap(&self) -> usize {
        self.kk() * self.rows_per_block() * self.out[1]
    }
    /// The output columns `lo..hi` whose input column `ox * s + j * d - p` is inside the image.
    fn cols_in(&self, j: usize) -> (usize, usize) {
        let ow = self.out[1];
        let off = (j * self.d[1]) as isize - self.p[1] as isize;
        let lo = if off >= 0 {
            0
        } else {
            (off.unsigned_abs()).div_ceil(self.s[1])
        };
        let hi = if off >= self.w as isize {
            0
        } else {
            ((self.w as isize - off) as usize).div_ceil(self.s[1])
        };
        let lo = lo.min(ow);
        (lo, hi.clamp(lo, ow))
    }
    /// Input row of output row `oy` at tap row `i`, or `None` in the padding.
    fn row_in(&self, oy: usize, i: usize) -> Option<usize> {
        let y = (oy * self.s[0] + i * self.d[0]).checked_sub(self.p[0])?;
        (y < self.h).then_some(y)
    }

    /// Visits the unfolded rows of group `gi`, output rows `oy0..oy1`, in runs:
    /// `f(col_index, Some(input_index), len)` for `len` columns that read the input at
    /// `input_index + k * stride`, `f(col_index, None, len)` for columns in the padding.
    fn walk(
        &self,
        gi: usize,
        oy0: usize,
        oy1: usize,
        mut f: impl FnMut(usize, Option<usize>, usize),
    ) {
        let [kh, kw] = self.k;
        let (ow, hw, rows) = (self.out[1], self.h * self.w, oy1 - oy0);
        for ci in 0..self.cg() {
            let chan = (gi * self.cg() + ci) * hw;
            for i in 0..kh {
                for j in 0..kw {
                    let r = (ci * kh + i) * kw + j;
                    let (lo, hi) = self.cols_in(j);
                    for oy in oy0..oy1 {
                        let at = r * rows * ow + (oy - oy0) * ow;
                        match self.row_in(oy, i) {
                            None => f(at, None, ow),
                            Some(y) => {
                                f(at, None, lo);
                                if hi > lo {
                                    let x0 = lo * self.s[1] + j * self.d[1] - self.p[1];
                                    f(at + lo, Some(chan + y * self.w + x0), hi - lo);
                                }
                                f(at + hi, None, ow - hi);
                            }
                        }
                    }
                }
            }
        }
    }

    /// `cols[kk, (oy1 - oy0) * ow]` = the unfolded input of group `gi` of one image `x`.
    fn unfold(&self, x: &[f32], gi: usize, oy0: usize, oy1: usize, cols: &mut [f32]) {
        let s = self.s[1];
        self.walk(gi, oy0, oy1, |at, src, len| {
            let dst = &mut cols[at..at + len];
            match src {
                None => dst.fill(0.0),
                Some(src) if s == 1 => dst.copy_from_slice(&x[src..src + len]),
                Some(src) => dst
                    .iter_mut()
                    .zip(x[src..].iter().step_by(s))
                    .for_each(|(d, &v)| *d = v),
            }
        });
    }

    /// Adds the unfolded gradient `cols` of group `gi`, rows `oy0..oy1`, into image `dx`.
    fn fold(&self, cols: &[f32], gi: usize, oy0: usize, oy1: usize, dx: &mut [f32]) {
        let s = self.s[1];
        self.walk(gi, oy0, oy1, |at, dst, len| {
            if let Some(dst) = dst {
                let src = &cols[at..at + len];
                if s == 1 {
                    dx[dst..dst + len]
                        .iter_mut()
                        .zip(src)
                        .for_each(|(d, &v)| *d += v);
                } else {
                    dx[dst..]
                        .iter_mut()
                        .step_by(s)
                        .zip(src)
                        .for_each(|(d, &v)| *d += v);
                }
            }
        });
    }

    /// For small images (one block, rows of at most [`TABLE_MAX_OW`]): the input offset (from
    /// the group's first channel) of every element of the unfolded block, `u32::MAX` in the
    /// padding. Unfold and fold then run one flat loop per image instead of a short copy per
    /// tap and row, in the same order, so with the same results.
    fn table(&self) -> Option<Vec<u32>> {
        let small = self.rows_per_block() >= self.out[0]
            && self.out[1] <= TABLE_MAX_OW
            && self.cg() * self.h * self.w < u32::MAX as usize;
        if !small {
            return None;
        }
        let s = self.s[1];
        let mut t = vec![u32::MAX; self.kk() * self.l()];
        self.walk(0, 0, self.out[0], |at, src, len| {
            if let Some(src) = src {
                for (k, d) in t[at..at + len].iter_mut().enumerate() {
                    *d = (src + k * s) as u32;
                }
            }
        });
        Some(t)
    }

    /// [`Geom::unfold`] of the whole image by `table` (see [`Geom::table`]).
    fn unfold_by(&self, table: &[u32], x: &[f32], gi: usize, cols: &mut [f32]) {
        let xg = &x[gi * self.cg() * self.h * self.w..];
        for (c, &t) in cols.iter_mut().zip(table) {
            *c = if t == u32::MAX { 0.0 } else { xg[t as usize] };
        }
    }

    /// [`Geom::fold`] of the whole image by `table`.
    fn fold_by(&self, table: &[u32], cols: &[f32], gi: usize, dx: &mut [f32]) {
        let dg = &mut dx[gi * self.cg() * self.h * self.w..];
        for (&v, &t) in cols.iter().zip(table) {
            if t != u32::MAX {
                dg[t as usize] += v;
            }
        }
    }

    /// Unfolds rows `oy0..oy1` of group `gi`, by `table` when there is one (the whole image).
    fn unfold_any(
        &self,
        table: Option<&[u32]>,
        x: &[f32],
        gi: usize,
        oy: (usize, usize),
        cols: &mut [f32],
    ) {
        match table {
            Some(t) => self.unfold_by(t, x, gi, cols),
            None => self.unfold(x, gi, oy.0, oy.1, cols),
        }
    }

    /// The output-row blocks `(oy0, oy1)` of one image.
    fn blocks(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let r = self.rows_per_block();
        (0..self.out[0])
            .step_by(r)
            .map(move |a| (a, (a + r).min(self.out[0])))
    }
}

/// Convolution of packed `x` `[n, c, h, w]` with packed `wt` `[o, c / g, kh, kw]`, plus
/// `bias` `[o]` when given: packed `[n, o, oh, ow]`. The bias is added to each block while it
/// is in cache, after its sum (the rounding of a separate add).
pub(crate) fn conv2d(x: &[f32], wt: &[f32], bias: Option<&[f32]>, geo: &Geom) -> Result<Vec<f32>> {
    let (l, kk, og) = (geo.l(), geo.kk(), geo.og());
    let (chw, ow, cap) = (geo.chw(), geo.out[1], geo.block_cap());
    let table = geo.table();
    let table = table.as_deref();
    let mut out = try_vec::<f32>("conv2d", geo.n * geo.o * l)?;
    out.resize(geo.n * geo.o * l, 0.0);
    out.par_chunks_mut((geo.o * l).max(1))
        .enumerate()
        .for_each_init(
            || vec![0f32; cap],
            |cols, (b, y)| {
                let img = &x[b * chw..(b + 1) * chw];
                for gi in 0..geo.g {
                    for (oy0, oy1) in geo.blocks() {
                        let nb = (oy1 - oy0) * ow;
                        geo.unfold_any(table, img, gi, (oy0, oy1), &mut cols[..kk * nb]);
                        let w = &wt[gi * og * kk..];
                        let y = &mut y[gi * og * l + oy0 * ow..];
                        mm((og, nb, kk), y, l, false, 1.0, (w, kk, 1), (cols, nb, 1));
                        if let Some(bias) = bias {
                            for (r, &bv) in bias[gi * og..(gi + 1) * og].iter().enumerate() {
                                y[r * l..r * l + nb].iter_mut().for_each(|v| *v += bv);
                            }
                        }
                    }
                }
            },
        );
    Ok(out)
}

/// Gradient of the input: packed `[n, c, h, w]` from the output gradient `gy` `[n, o, oh, ow]`.
pub(crate) fn conv2d_input_grad(gy: &[f32], wt: &[f32], geo: &Geom) -> Result<Vec<f32>> {
    let (l, kk, og) = (geo.l(), geo.kk(), geo.og());
    let (chw, ow, cap) = (geo.chw(), geo.out[1], geo.block_cap());
    let table = geo.table();
    let table = table.as_deref();
    let mut dx = try_vec::<f32>("conv2d backward", geo.n * chw)?;
    dx.resize(geo.n * chw, 0.0);
    dx.par_chunks_mut(chw.max(1)).enumerate().for_each_init(
        || vec![0f32; cap],
        |cols, (b, dimg)| {
            let g = &gy[b * geo.o * l..(b + 1) * geo.o * l];
            for gi in 0..geo.g {
                for (oy0, oy1) in geo.blocks() {
                    let nb = (oy1 - oy0) * ow;
                    // cols[kk, nb] = W_g^T [kk, og] · gy block [og, nb]
                    let (w, gb) = (&wt[gi * og * kk..], &g[gi * og * l + oy0 * ow..]);
                    mm((kk, nb, og), cols, nb, false, 1.0, (w, 1, kk), (gb, l, 1));
                    match table {
                        Some(t) => geo.fold_by(t, &cols[..kk * nb], gi, dimg),
                        None => geo.fold(&cols[..kk * nb], gi, oy0, oy1, dimg),
                    }
                }
            }
        },
    );
    Ok(dx)
}

/// Gradient of the weight: packed `[o, c / g, kh, kw]`.
pub(crate) fn conv2d_weight_grad(x: &[f32], gy: &[f32], geo: &Geom) -> Result<Vec<f32>> {
    let (l, kk, og) = (geo.l(), geo.kk(), geo.og());
    let (chw, ow, cap) = (geo.chw(), geo.out[1], geo.block_cap());
    let wlen = geo.o * kk;
    let parts = geo.n.clamp(1, WGRAD_PARTS);
    let per = geo.n.div_ceil(parts);
    let table = geo.table();
    let table = table.as_deref();
    let mut partial = try_vec::<f32>("conv2d backward", parts * wlen)?;
    partial.resize(parts * wlen, 0.0);
    partial
        .par_chunks_mut(wlen.max(1))
        .enumerate()
        .for_each(|(part, dw)| {
            let mut cols = vec![0f32; cap];
            for b in part * per..((part + 1) * per).min(geo.n) {
                let img = &x[b * chw..(b + 1) * chw];
                let g = &gy[b * geo.o * l..(b + 1) * geo.o * l];
                for gi in 0..geo.g {
                    for (oy0, oy1) in geo.blocks() {
                        let nb = (oy1 - oy0) * ow;
                        geo.unfold_any(table, img, gi, (oy0, oy1), &mut cols[..kk * nb]);
                        // dW_g [og, kk] += gy block [og, nb] · cols^T [nb, kk]
                        let (gb, dwg) = (&g[gi * og * l + oy0 * ow..], &mut dw[gi * og * kk..]);
                        mm((og, kk, nb), dwg, kk, true, 1.0, (gb, l, 1), (&cols, 1, nb));
                    }
                }
            }
        });
    let (first, rest) = partial.split_at_mut(wlen);
    for p in rest.chunks(wlen.max(1)) {
        first.iter_mut().zip(p).for_each(|(a, b)| *a += b);
    }
    partial.truncate(wlen);
    Ok(partial)
}

/// Gradient of the bias: `[o]`, each channel's output gradient summed over images and
/// positions in f64, in order.
pub(crate) fn conv2d_bias_grad(gy: &[f32], geo: &Geom) -> Vec<f32> {
    let l = geo.l();
    (0..geo.o)
        .map(|oc| {
            let mut s = 0f64;
            for b in 0..geo.n {
                let at = (b * geo.o + oc) * l;
                s += gy[at..at + l].iter().map(|&v| v as f64).sum::<f64>();
            }
            s as f32
        })
        .collect()
}
