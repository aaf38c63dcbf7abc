//! CPU max pooling in one pass: each window's maximum and its plane offset, read straight from
//! the input (no window gather), and the backward scattering each gradient to its maximum.
//! Planes run in parallel; each plane's sums run in a fixed order.

use super::alloc::try_vec;
use super::strided::PAR_THRESHOLD;
pub(crate) use crate::ops::geometry::PoolGeom;
use crate::Result;
use rayon::prelude::*;

/// Maxima `[planes, oh, ow]` and their offsets within the plane. Windows are scanned in row
/// order; a later element wins only when larger, or NaN over a number (PyTorch's rule, and the
/// other devices' argmax); padding reads -inf at offset 0.
pub(crate) fn max_pool2d(x: &[f32], geo: &PoolGeom) -> Result<(Vec<f32>, Vec<u32>)> {
    let [oh, ow] = geo.out;
    let (hw, ohw) = (geo.h * geo.w, oh * ow);
    let total = geo.n * geo.c * ohw;
    let mut vals = try_vec::<f32>("max_pool2d", total)?;
    vals.resize(total, 0.0);
    let mut idx = try_vec::<u32>("max_pool2d", total)?;
    idx.resize(total, 0);
    let plane = |(pl, (v, ix)): (usize, (&mut [f32], &mut [u32]))| {
        let src = &x[pl * hw..(pl + 1) * hw];
        if geo.p == [0, 0] && geo.k == [2, 2] && geo.s == [2, 2] {
            // `MaxPool2d(2)`, most CNNs' pool: the window's four reads unrolled (the generic
            // scan below spent most of its time on loop control for 2-element rows), in the
            // same row order and with the same rule, so the same maxima and offsets.
            let w = geo.w;
            for oy in 0..oh {
                let (v, ix) = (&mut v[oy * ow..][..ow], &mut ix[oy * ow..][..ow]);
                for (ox, (v, ix)) in v.iter_mut().zip(ix.iter_mut()).enumerate() {
                    let at0 = 2 * oy * w + 2 * ox;
                    let mut best = (src[at0], at0 as u32);
                    for at in [at0 + 1, at0 + w, at0 + w + 1] {
                        let c = src[at];
                        let wins = (c > best.0) | (c.is_nan() & !best.0.is_nan());
                        best.0 = if wins { c } else { best.0 };
                        best.1 = if wins { at as u32 } else { best.1 };
                    }
                    (*v, *ix) = best;
                }
            }
            return;
        }
        if geo.p == [0, 0] {
            // Every window is inside the plane: the same scan without the bounds checks.
            for oy in 0..oh {
                for ox in 0..ow {
                    let at0 = oy * geo.s[0] * geo.w + ox * geo.s[1];
                    let mut best = (src[at0], at0 as u32);
                    for i in 0..geo.k[0] {
                        let row = at0 + i * geo.w;
                        for (j, &c) in src[row..row + geo.k[1]].iter().enumerate() {
                            // Selects, not branches: random data mispredicts half of them.
                            let wins = (c > best.0) | (c.is_nan() & !best.0.is_nan());
                            best.0 = if wins { c } else { best.0 };
                            best.1 = if wins { (row + j) as u32 } else { best.1 };
                        }
                    }
                    v[oy * ow + ox] = best.0;
                    ix[oy * ow + ox] = best.1;
                }
            }
            return;
        }
        for oy in 0..oh {
            for ox in 0..ow {
                let mut best = (f32::NEG_INFINITY, 0u32);
                let mut first = true;
                for i in 0..geo.k[0] {
                    for j in 0..geo.k[1] {
                        let y = (oy * geo.s[0] + i).checked_sub(geo.p[0]);
                        let xx = (ox * geo.s[1] + j).checked_sub(geo.p[1]);
                        let c = match (y, xx) {
                            (Some(y), Some(xx)) if y < geo.h && xx < geo.w => {
                                let at = y * geo.w + xx;
                                (src[at], at as u32)
                            }
                            _ => (f32::NEG_INFINITY, 0),
                        };
                        let wins = match (c.0.is_nan(), best.0.is_nan()) {
                            (true, false) => true,
                            (false, false) => c.0 > best.0,
                            _ => false,
                        };
                        if first || wins {
                            best = c;
                            first = false;
                        }
                    }
                }
                v[oy * ow + ox] = best.0;
                ix[oy * ow + ox] = best.1;
            }
        }
    };
    let ohw1 = ohw.max(1);
    if total >= PAR_THRESHOLD / 4 {
        // Tasks of whole runs of planes (at least ~4K outputs), not one task per small plane.
        let per = (4096 / ohw1).max(1);
        vals.par_chunks_mut(ohw1 * per)
            .zip(idx.par_chunks_mut(ohw1 * per))
            .enumerate()
            .for_each(|(t, (v, ix))| {
                v.chunks_mut(ohw1)
                    .zip(ix.chunks_mut(ohw1))
                    .enumerate()
                    .for_each(|(i, pair)| plane((t * per + i, pair)));
            });
    } else {
        vals.chunks_mut(ohw1)
            .zip(idx.chunks_mut(ohw1))
            .enumerate()
            .for_each(plane);
    }
    Ok((vals, idx))
}

/// The input gradient `[planes, h, w]`: each output gradient added at its maximum's offset
/// (windows that overlap add in output order).
pub(crate) fn max_pool2d_backward(g: &[f32], idx: &[u32], geo: &PoolGeom) -> Result<Vec<f32>> {
    let (hw, ohw) = (geo.h * geo.w, geo.out[0] * geo.out[1]);
    let planes = geo.n * geo.c;
    let mut dx = try_vec::<f32>("max_pool2d backward", planes * hw)?;
    dx.resize(planes * hw, 0.0);
    let plane = |(pl, d): (usize, &mut [f32])| {
        let (gs, is) = (&g[pl * ohw..(pl + 1) * ohw], &idx[pl * ohw..(pl + 1) * ohw]);
        for (&gv, &i) in gs.iter().zip(is) {
            d[i as usize] += gv;
        }
    };
    if dx.len() >= PAR_THRESHOLD {
        let per = (4096 / hw.max(1)).max(1);
        dx.par_chunks_mut(hw.max(1) * per)
            .enumerate()
            .for_each(|(t, d)| {
                d.chunks_mut(hw.max(1))
                    .enumerate()
                    .for_each(|(i, d)| plane((t * per + i, d)));
            });
    } else {
        dx.chunks_mut(hw.max(1)).enumerate().for_each(plane);
    }
    Ok(dx)
}
