//! CPU batch normalisation over `[n, c, hw]` per channel in two passes each way (PyTorch's
//! one kernel per direction), in place of a composition of a dozen elementwise ops and
//! reductions, each with its own pass, allocation and autograd record.
//!
//! The per-channel sums run in f64 in a fixed order (images, then the plane), one channel per
//! task; the elementwise parts run plane by plane. Results do not depend on the thread count.
//! The elementwise formula is the composition's: `(x - mean) / sqrt(var + eps) * weight + bias`.

use super::alloc::try_vec;
use super::strided::PAR_THRESHOLD;
pub(crate) use crate::ops::geometry::BnGeom;
use crate::Result;
use rayon::prelude::*;

impl BnGeom {
    /// Elements per channel.
    fn per(&self) -> usize {
        self.n * self.hw
    }
    fn big(&self) -> bool {
        self.n * self.c * self.hw >= PAR_THRESHOLD
    }
    /// `f(ch)` for every channel, in parallel when the tensor is large.
    fn channels<T: Send>(&self, f: impl Fn(usize) -> T + Sync + Send) -> Vec<T> {
        if self.big() {
            (0..self.c).into_par_iter().map(f).collect()
        } else {
            (0..self.c).map(f).collect()
        }
    }
    /// `f(ch, plane_of_out, plane_index)` over the `n * c` planes of `out`.
    fn planes(&self, out: &mut [f32], f: impl Fn(usize, &mut [f32], usize) + Sync + Send) {
        let (c, hw) = (self.c, self.hw.max(1));
        if self.big() {
            out.par_chunks_mut(hw)
                .enumerate()
                .for_each(|(p, o)| f(p % c, o, p));
        } else {
            out.chunks_mut(hw)
                .enumerate()
                .for_each(|(p, o)| f(p % c, o, p));
        }
    }
    /// `f(v)` over channel `ch`'s elements of `x`, images in order, summed in f64.
    fn sum(&self, x: &[f32], ch: usize, f: impl Fn(usize, f32) -> f64) -> f64 {
        let mut s = 0f64;
        for b in 0..self.n {
            let at = (b * self.c + ch) * self.hw;
            for (i, &v) in x[at..at + self.hw].iter().enumerate() {
                s += f(at + i, v);
            }
        }
        s
    }
}

/// The normalised output of packed `x` and the per-channel `mean` and `std = sqrt(var + eps)`
/// it used, with the biased batch variance `var` (training) or the given statistics `(mean,
/// var)` (eval).
pub(crate) struct BnForward {
    pub y: Vec<f32>,
    pub mean: Vec<f32>,
    pub var: Vec<f32>,
    pub std: Vec<f32>,
}

/// Batch norm forward of packed `x` `[n, c, hw]`; `stats` are the running `(mean, var)` in
/// eval mode, `None` for the batch's own (training).
pub(crate) fn forward(
    x: &[f32],
    geo: &BnGeom,
    stats: Option<(&[f32], &[f32])>,
    weight: Option<&[f32]>,
    bias: Option<&[f32]>,
    eps: f32,
) -> Result<BnForward> {
    let x = &x[..geo.n * geo.c * geo.hw];
    let (mean, var) = match stats {
        Some((m, v)) => (m[..geo.c].to_vec(), v[..geo.c].to_vec()),
        None => {
            let m = geo.per().max(1) as f64;
            let stats = geo.channels(|ch| {
                let mean = (geo.sum(x, ch, |_, v| v as f64) / m) as f32;
                let var = geo.sum(x, ch, |_, v| {
                    let d = (v - mean) as f64;
                    d * d
                }) / m;
                (mean, var as f32)
            });
            stats.into_iter().unzip()
        }
    };
    let std: Vec<f32> = var.iter().map(|&v| (v + eps).sqrt()).collect();
    let mut y = try_vec::<f32>("batch_norm", x.len())?;
    y.resize(x.len(), 0.0);
    let hw = geo.hw;
    geo.planes(&mut y, |ch, out, p| {
        let src = &x[p * hw..(p + 1) * hw];
        let (m, s) = (mean[ch], std[ch]);
        match (weight, bias) {
            (Some(w), Some(b)) => {
                let (w, b) = (w[ch], b[ch]);
                out.iter_mut()
                    .zip(src)
                    .for_each(|(o, &v)| *o = (v - m) / s * w + b);
            }
            _ => out.iter_mut().zip(src).for_each(|(o, &v)| *o = (v - m) / s),
        }
    });
    Ok(BnForward { y, mean, var, std })
}

/// Gradients of batch norm from the output gradient `g` (packed like `x`): `dx`, and the
/// per-channel `dweight = Σ g * x̂` and `dbias = Σ g`. In training the statistics depend on
/// `x` (`dx = weight / std * (g - mean(g) - x̂ * mean(g * x̂))`, PyTorch's formula); in eval
/// they are constants (`dx = g * weight / std`).
pub(crate) fn backward(
    x: &[f32],
    g: &[f32],
    geo: &BnGeom,
    mean: &[f32],
    std: &[f32],
    weight: Option<&[f32]>,
    train: bool,
) -> Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
    let total = geo.n * geo.c * geo.hw;
    let (x, g) = (&x[..total], &g[..total]);
    let xhat = |ch: usize, v: f32| (v - mean[ch]) / std[ch];
    let sums = geo.channels(|ch| {
        let sg = geo.sum(g, ch, |_, v| v as f64);
        let sgx = geo.sum(g, ch, |i, v| v as f64 * xhat(ch, x[i]) as f64);
        (sg as f32, sgx as f32)
    });
    let (db, dw): (Vec<f32>, Vec<f32>) = sums.into_iter().unzip();
    let m = geo.per().max(1) as f32;
    let mut dx = try_vec::<f32>("batch_norm backward", total)?;
    dx.resize(total, 0.0);
    let hw = geo.hw;
    geo.planes(&mut dx, |ch, out, p| {
        let (xs, gs) = (&x[p * hw..(p + 1) * hw], &g[p * hw..(p + 1) * hw]);
        let k = weight.map_or(1.0, |w| w[ch]) / std[ch];
        if train {
            let (a, b) = (db[ch] / m, dw[ch] / m);
            for ((o, &gv), &xv) in out.iter_mut().zip(gs).zip(xs) {
                *o = (gv - a - xhat(ch, xv) * b) * k;
            }
        } else {
            out.iter_mut().zip(gs).for_each(|(o, &gv)| *o = gv * k);
        }
    });
    Ok((dx, dw, db))
}
