//! The CPU's direct convolution for stride 1 (any dilation, padding and groups of at least 8
//! output channels) on AVX2 + FMA: no unfolded matrix and no gemm packing. Each image's
//! channels are copied once into a padded plane; the output is then computed at every position
//! of the padded width (`Wp` columns a row, the `Wp - ow` extra ones thrown away), where every
//! tap `(ci, i, j)` becomes one constant offset into the flat padded image. A register tile of
//! 16 output channels x 6 positions (or 8 x 12) sums all `cg * kh * kw` taps in registers, as a
//! gemm microkernel does: two aligned loads of packed weights, six broadcast inputs and twelve
//! FMAs a tap. The unfold-and-gemm path spent about 40 % of a 32-channel 3x3 convolution
//! copying taps and packing panels; this spends it on FMAs.
//!
//! Every output is summed in tap order `(ci, i, j)` with one FMA a tap, whatever the split
//! across threads, so results do not depend on the number of threads; the bias is added after
//! the sum, as a separate add would round.

use super::alloc::try_vec;
use super::conv::Geom;
use crate::Result;
use rayon::prelude::*;

/// Positions a tile covers (6 with 16 channels, 12 with 8): the padded width rounds up to it.
const POS: usize = 12;

/// Whether [`conv2d`] runs `geo` on this CPU: stride 1, at least 8 output channels a group
/// (fewer would leave most of each 8-lane vector idle), and AVX2 + FMA.
pub(crate) fn fits(geo: &Geom) -> bool {
    geo.s == [1, 1] && geo.o / geo.g >= 8 && avx2()
}

/// Whether the AVX2 kernels may run, as for the other CPU kernels (`WGTENSOR_CONV_SCALAR=1`
/// keeps the unfold + gemm path); asked once per process.
fn avx2() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| super::avx2_fma_f16c("WGTENSOR_CONV_SCALAR"))
}

/// Output channels of one tile: 16 (two vectors) when a group has 12 or more, else 8.
fn lanes(og: usize) -> usize {
    if og >= 12 {
        16
    } else {
        8
    }
}

/// The padded plane of one image: `Hp x Wp` per channel.
struct Plane {
    hp: usize,
    wp: usize,
}

impl Plane {
    fn of(geo: &Geom) -> Plane {
        Plane {
            hp: geo.h + 2 * geo.p[0],
            wp: geo.w + 2 * geo.p[1],
        }
    }
    fn hw(&self) -> usize {
        self.hp * self.wp
    }
    /// Positions computed per output channel, whole tiles: `oh` rows of `Wp`, rounded up.
    fn q(&self, geo: &Geom) -> usize {
        (geo.out[0] * self.wp).div_ceil(POS) * POS
    }
    /// Elements of a group's padded channels plus the zeros the last tile may read past them.
    fn len(&self, geo: &Geom) -> usize {
        let cg = geo.c / geo.g;
        cg * self.hw() + (geo.k[1] - 1) * geo.d[1] + POS
    }

    /// Copies channels `c0..c0 + cg` of image `x` into `buf` with the zero border.
    fn fill(&self, geo: &Geom, x: &[f32], c0: usize, buf: &mut [f32]) {
        let (h, w, [py, px]) = (geo.h, geo.w, geo.p);
        buf.fill(0.0);
        let cg = geo.c / geo.g;
        for ci in 0..cg {
            let src = &x[(c0 + ci) * h * w..][..h * w];
            let dst = &mut buf[ci * self.hw()..];
            for (y, row) in src.chunks_exact(w).enumerate() {
                let at = (y + py) * self.wp + px;
                dst[at..at + w].copy_from_slice(row);
            }
        }
    }
}

/// The offset of every tap `(ci, i, j)` in a group's padded plane, in the weights' order.
fn offsets(geo: &Geom, plane: &Plane) -> Vec<usize> {
    let (cg, [kh, kw]) = (geo.c / geo.g, geo.k);
    (0..cg)
        .flat_map(|ci| (0..kh).flat_map(move |i| (0..kw).map(move |j| (ci, i, j))))
        .map(|(ci, i, j)| ci * plane.hw() + i * geo.d[0] * plane.wp + j * geo.d[1])
        .collect()
}

/// One task: image `b`, group `gi`, channel blocks `k0..k1` (of [`lanes`] channels) of the
/// group.
#[derive(Clone, Copy)]
struct Task {
    b: usize,
    gi: usize,
    k0: usize,
    k1: usize,
}

/// The tasks in output order: every (image, group), its channel blocks split in about equal
/// parts so that there are about two tasks a thread (each part pads its own input channels,
/// one copy of the input against `cg * kh * kw` FMAs an output).
fn tasks(geo: &Geom, blocks: usize) -> Vec<Task> {
    let planes = geo.n * geo.g;
    let want = 2 * rayon::current_num_threads();
    let parts = want.div_ceil(planes).clamp(1, blocks);
    let mut v = Vec::with_capacity(planes * parts);
    for b in 0..geo.n {
        for gi in 0..geo.g {
            for p in 0..parts {
                let (k0, k1) = (blocks * p / parts, blocks * (p + 1) / parts);
                if k1 > k0 {
                    v.push(Task { b, gi, k0, k1 });
                }
            }
        }
    }
    v
}

/// The weights of every group as blocks of `lanes` channels, tap-major: `[g, blocks, kk,
/// lanes]`, zeros past the group's last channel.
fn pack(wt: &[f32], geo: &Geom, lanes: usize) -> Result<Vec<f32>> {
    let og = geo.o / geo.g;
    let kk = wt.len() / geo.o.max(1);
    let blocks = og.div_ceil(lanes);
    let len = geo.g * blocks * kk * lanes;
    let mut v = try_vec::<f32>("conv2d", len)?;
    v.resize(len, 0.0);
    for (gb, dst) in v.chunks_exact_mut(kk * lanes).enumerate() {
        let (gi, kb) = (gb / blocks, gb % blocks);
        for lane in 0..lanes.min(og - kb * lanes) {
            let src = &wt[(gi * og + kb * lanes + lane) * kk..][..kk];
            for (t, &w) in src.iter().enumerate() {
                dst[t * lanes + lane] = w;
            }
        }
    }
    Ok(v)
}

/// Convolution of packed `x` `[n, c, h, w]` with packed `wt` `[o, c / g, kh, kw]` (checked by
/// [`fits`]), plus `bias` `[o]` when given: packed `[n, o, oh, ow]`.
pub(crate) fn conv2d(x: &[f32], wt: &[f32], bias: Option<&[f32]>, geo: &Geom) -> Result<Vec<f32>> {
    let (og, cg, l) = (geo.o / geo.g, geo.c / geo.g, geo.out[0] * geo.out[1]);
    let (kh, kw) = (geo.k[0], geo.k[1]);
    let kk = cg * kh * kw;
    let lanes = lanes(og);
    let blocks = og.div_ceil(lanes);
    let plane = Plane::of(geo);
    let q = plane.q(geo);
    let offs = offsets(geo, &plane);
    let packed = pack(wt, geo, lanes)?;
    let mut out = try_vec::<f32>("conv2d", geo.n * geo.o * l)?;
    out.resize(geo.n * geo.o * l, 0.0);
    // Each task's output channels, one disjoint slice each, in order.
    let tasks = tasks(geo, blocks);
    let mut parts = Vec::with_capacity(tasks.len());
    let mut rest = &mut out[..];
    for t in &tasks {
        let chans = (t.k1 * lanes).min(og) - t.k0 * lanes;
        let (mine, tail) = std::mem::take(&mut rest).split_at_mut(chans * l);
        parts.push((t, mine));
        rest = tail;
    }
    let chw = geo.c * geo.h * geo.w;
    parts.into_par_iter().for_each_init(
        || (vec![0f32; plane.len(geo)], vec![0f32; lanes * q]),
        |(pad, acc), (t, y)| {
            plane.fill(geo, &x[t.b * chw..][..chw], t.gi * cg, pad);
            let [oh, ow] = geo.out;
            for kb in t.k0..t.k1 {
                let w = &packed[(t.gi * blocks + kb) * kk * lanes..][..kk * lanes];
                sum_taps(pad, &offs, w, lanes, q, acc);
                // Keep the `ow` real columns of every row; add the bias after the sum.
                let c0 = kb * lanes;
                let chans = lanes.min(og - c0);
                let y = &mut y[(c0 - t.k0 * lanes) * l..][..chans * l];
                for (ri, (dst, src)) in y.chunks_exact_mut(l).zip(acc.chunks_exact(q)).enumerate() {
                    let bv = bias.map(|b| b[t.gi * og + c0 + ri]);
                    for oy in 0..oh {
                        let d = &mut dst[oy * ow..][..ow];
                        d.copy_from_slice(&src[oy * plane.wp..][..ow]);
                        if let Some(bv) = bv {
                            d.iter_mut().for_each(|v| *v += bv);
                        }
                    }
                }
            }
        },
    );
    Ok(out)
}

/// Whether [`conv2d_input_grad`] runs `geo`: stride 1, padding at most `(k - 1) * d` on both
/// axes, at least 8 input channels a group, and AVX2 + FMA.
pub(crate) fn input_grad_fits(geo: &Geom) -> bool {
    let pads = (0..2).all(|a| geo.p[a] <= (geo.k[a] - 1) * geo.d[a]);
    geo.s == [1, 1] && pads && geo.c / geo.g >= 8 && avx2()
}

/// Gradient of the input of [`conv2d`] (checked by [`input_grad_fits`]): packed `[n, c, h, w]`
/// from the output gradient `gy` `[n, o, oh, ow]`. At stride 1 it is itself a stride-1
/// convolution of `gy`, padded by `(k - 1) * d - p`, with the kernel flipped and its channel
/// axes swapped, so the forward's kernel computes it.
pub(crate) fn conv2d_input_grad(gy: &[f32], wt: &[f32], geo: &Geom) -> Result<Vec<f32>> {
    let (og, cg, [kh, kw]) = (geo.o / geo.g, geo.c / geo.g, geo.k);
    let flipped_geo = Geom {
        c: geo.o,
        h: geo.out[0],
        w: geo.out[1],
        o: geo.c,
        p: [
            (kh - 1) * geo.d[0] - geo.p[0],
            (kw - 1) * geo.d[1] - geo.p[1],
        ],
        out: [geo.h, geo.w],
        ..*geo
    };
    // `[c, og, kh, kw]` by groups: flipped[gi * cg + ci, oc, kh - 1 - i, kw - 1 - j] is
    // wt[gi * og + oc, ci, i, j].
    let mut flipped = try_vec::<f32>("conv2d backward", wt.len())?;
    flipped.resize(wt.len(), 0.0);
    for gi in 0..geo.g {
        for oc in 0..og {
            for ci in 0..cg {
                for i in 0..kh {
                    for j in 0..kw {
                        let src = (((gi * og + oc) * cg + ci) * kh + i) * kw + j;
                        let dst = (((gi * cg + ci) * og + oc) * kh + kh - 1 - i) * kw + kw - 1 - j;
                        flipped[dst] = wt[src];
                    }
                }
            }
        }
    }
    conv2d(gy, &flipped, None, &flipped_geo)
}

/// Gradient of the weight of [`conv2d`] (checked by [`fits`]): packed `[o, c / g, kh, kw]`,
/// from packed `x` `[n, c, h, w]` and the output gradient `gy` `[n, o, oh, ow]`.
///
/// The same register tile turned around: 16 channels (or 8) x 6 taps (or 12) of the weight
/// gradient stay in registers while every real output position of every image goes by (the
/// output gradient transposed to position-major blocks of 16 channels, one aligned pair of
/// loads, and one broadcast input a tap). Only real positions are summed, so an input read by
/// no tap (the column a thrown-away position would read) never reaches a sum. Each element is
/// summed over images, then positions, in order: the same bits at any number of threads.
pub(crate) fn conv2d_weight_grad(x: &[f32], gy: &[f32], geo: &Geom) -> Result<Vec<f32>> {
    let op = "conv2d backward";
    let (og, cg, l) = (geo.o / geo.g, geo.c / geo.g, geo.out[0] * geo.out[1]);
    let (kh, kw) = (geo.k[0], geo.k[1]);
    let kk = cg * kh * kw;
    let lanes = lanes(og);
    let taps = if lanes == 16 { 6 } else { 12 };
    let blocks = og.div_ceil(lanes);
    let plane = Plane::of(geo);
    let offs = offsets(geo, &plane);
    // Every image's padded planes, `[n, g, plen]`.
    let (plen, chw) = (plane.len(geo), geo.c * geo.h * geo.w);
    let mut pads = try_vec::<f32>(op, geo.n * geo.g * plen)?;
    pads.resize(geo.n * geo.g * plen, 0.0);
    pads.par_chunks_mut(plen.max(1))
        .enumerate()
        .for_each(|(bg, pad)| {
            let (b, gi) = (bg / geo.g, bg % geo.g);
            plane.fill(geo, &x[b * chw..][..chw], gi * cg, pad);
        });
    // The output gradient by blocks of channels, position-major: `[n, g, blocks, l, lanes]`,
    // zeros past a group's last channel.
    let glen = l * lanes;
    let mut gts = try_vec::<f32>(op, geo.n * geo.g * blocks * glen)?;
    gts.resize(geo.n * geo.g * blocks * glen, 0.0);
    gts.par_chunks_mut(glen.max(1))
        .enumerate()
        .for_each(|(i, gt)| {
            let (b, gi, kb) = (i / (geo.g * blocks), i / blocks % geo.g, i % blocks);
            let c0 = gi * og + kb * lanes;
            for lane in 0..lanes.min(og - kb * lanes) {
                let src = &gy[(b * geo.o + c0 + lane) * l..][..l];
                for (p, &v) in src.iter().enumerate() {
                    gt[p * lanes + lane] = v;
                }
            }
        });
    // One task per (group, block, run of taps): its sums, `[taps, lanes]`.
    let runs = kk.div_ceil(taps);
    let sums: Vec<Vec<f32>> = (0..geo.g * blocks * runs)
        .into_par_iter()
        .map(|i| {
            let (gb, run) = (i / runs, i % runs);
            let (gi, kb) = (gb / blocks, gb % blocks);
            let t0 = run * taps;
            // A short last run repeats its first tap; those sums are dropped.
            let mine: Vec<usize> = (0..taps).map(|j| offs[(t0 + j).min(kk - 1)]).collect();
            let planes = (0..geo.n).map(|b| &pads[(b * geo.g + gi) * plen..][..plen]);
            let grads = (0..geo.n).map(|b| &gts[((b * geo.g + gi) * blocks + kb) * glen..][..glen]);
            let mut acc = vec![0f32; taps * lanes];
            for (pad, gt) in planes.zip(grads) {
                sum_positions(pad, gt, &mine, geo.out, plane.wp, &mut acc);
            }
            acc
        })
        .collect();
    let mut dw = try_vec::<f32>(op, geo.o * kk)?;
    dw.resize(geo.o * kk, 0.0);
    for (i, acc) in sums.iter().enumerate() {
        let (gb, run) = (i / runs, i % runs);
        let (gi, kb) = (gb / blocks, gb % blocks);
        for (j, row) in acc.chunks_exact(lanes).enumerate() {
            let t = run * taps + j;
            if t >= kk {
                break;
            }
            for (lane, &v) in row.iter().enumerate().take(og - kb * lanes) {
                dw[(gi * og + kb * lanes + lane) * kk + t] = v;
            }
        }
    }
    Ok(dw)
}

/// `acc[j, r]` += Σ over the real output positions `(oy, ox)`, in order, of
/// `gt[oy * ow + ox, r] * pad[offs[j] + oy * wp + ox]`, for the 6 (16 lanes) or 12 (8 lanes)
/// taps `offs` of one image.
fn sum_positions(
    pad: &[f32],
    gt: &[f32],
    offs: &[usize],
    out: [usize; 2],
    wp: usize,
    acc: &mut [f32],
) {
    let [oh, ow] = out;
    let lanes = acc.len() / offs.len();
    // Every read stays inside `pad` and `gt`: the last position is `(oh - 1) * wp + ow - 1`.
    let last = (oh.max(1) - 1) * wp + ow.max(1) - 1;
    assert!(gt.len() >= oh * ow * lanes && offs.iter().all(|&o| o + last < pad.len()));
    assert!(matches!((lanes, offs.len()), (16, 6) | (8, 12)) && oh * ow > 0);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `fits` checked AVX2 + FMA; the asserts above bound every access.
    unsafe {
        if lanes == 16 {
            avx2::sum_positions::<2, 6>(pad, gt, offs, out, wp, acc)
        } else {
            avx2::sum_positions::<1, 12>(pad, gt, offs, out, wp, acc)
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("conv_direct::fits is false off x86_64");
}

/// `acc[r, p]` = Σ over taps `t` of `w[t, r] * pad[offs[t] + p]`, for the `lanes` (8 or 16)
/// channels of `w` and `q` (whole tiles) positions.
fn sum_taps(pad: &[f32], offs: &[usize], w: &[f32], lanes: usize, q: usize, acc: &mut [f32]) {
    let kk = offs.len();
    // Every read stays inside `pad` and every write inside `acc`: the last tile starts at
    // `q - 6` or `q - 12` and reads up to `offs[kk - 1] + q - 1 < pad.len()` (`Plane::len`).
    assert!(w.len() == kk * lanes && acc.len() >= lanes * q && q.is_multiple_of(POS));
    assert!(offs.iter().all(|&o| o + q <= pad.len()));
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `fits` checked AVX2 + FMA; the asserts above bound every access.
    unsafe {
        if lanes == 16 {
            avx2::sum_taps::<2, 6>(pad, offs, w, q, acc)
        } else {
            avx2::sum_taps::<1, 12>(pad, offs, w, q, acc)
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("conv_direct::fits is false off x86_64");
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// [`super::sum_taps`] for `V` vectors of channels (8 `V` lanes) and `N` positions a tile.
    ///
    /// # Safety
    /// The CPU has AVX2 + FMA; `w` holds `8 V * offs.len()`, `acc` at least `8 V * q`
    /// elements, `q` is a multiple of `N`, and `offs[t] + q <= pad.len()` for every tap.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn sum_taps<const V: usize, const N: usize>(
        pad: &[f32],
        offs: &[usize],
        w: &[f32],
        q: usize,
        acc: &mut [f32],
    ) {
        let (p, wp, ap) = (pad.as_ptr(), w.as_ptr(), acc.as_mut_ptr());
        for q0 in (0..q).step_by(N) {
            let mut s = [[_mm256_setzero_ps(); N]; V];
            for (t, &off) in offs.iter().enumerate() {
                // SAFETY: t * 8V + 8V <= w.len(); off + q0 + N <= off + q <= pad.len().
                unsafe {
                    let wv: [__m256; V] =
                        std::array::from_fn(|v| _mm256_loadu_ps(wp.add((t * V + v) * 8)));
                    let x = p.add(off + q0);
                    // One broadcast at a time, used at once: 12 sums, the weights and one
                    // input fit the 16 registers.
                    #[allow(clippy::needless_range_loop)]
                    for n in 0..N {
                        let xb = _mm256_broadcast_ss(&*x.add(n));
                        for v in 0..V {
                            s[v][n] = _mm256_fmadd_ps(wv[v], xb, s[v][n]);
                        }
                    }
                }
            }
            // Channel-major out of the position-major registers: lane `i` of `s[v][n]` is
            // channel `8 v + i` at position `q0 + n`.
            for (v, sv) in s.iter().enumerate() {
                for (n, &sn) in sv.iter().enumerate() {
                    let mut lane = [0f32; 8];
                    // SAFETY: `lane` is 8 f32s.
                    unsafe { _mm256_storeu_ps(lane.as_mut_ptr(), sn) };
                    for (i, &val) in lane.iter().enumerate() {
                        // SAFETY: (8 v + i) * q + q0 + n < 8 V * q <= acc.len().
                        unsafe { *ap.add((8 * v + i) * q + q0 + n) = val };
                    }
                }
            }
        }
    }

    /// [`super::sum_positions`] for `V` vectors of channels and `N` taps.
    ///
    /// # Safety
    /// The CPU has AVX2 + FMA; `acc` holds `N * 8 V`, `gt` at least `oh * ow * 8 V`
    /// elements, and `offs[j] + (oh - 1) * wp + ow - 1 < pad.len()` for every tap.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn sum_positions<const V: usize, const N: usize>(
        pad: &[f32],
        gt: &[f32],
        offs: &[usize],
        [oh, ow]: [usize; 2],
        wp: usize,
        acc: &mut [f32],
    ) {
        let (p, g, ap) = (pad.as_ptr(), gt.as_ptr(), acc.as_mut_ptr());
        let base: [*const f32; N] = std::array::from_fn(|j| p.wrapping_add(offs[j]));
        // SAFETY (all below): `acc` holds N * 8V; a position `oy * ow + ox` of `gt` holds 8V
        // lanes; `base[j] + oy * wp + ox` is at most `offs[j] + (oh - 1) * wp + ow - 1`.
        let mut s: [[__m256; N]; V] = std::array::from_fn(|v| {
            std::array::from_fn(|j| unsafe { _mm256_loadu_ps(ap.add((j * V + v) * 8)) })
        });
        for oy in 0..oh {
            for ox in 0..ow {
                unsafe {
                    let gp = g.add((oy * ow + ox) * 8 * V);
                    let gv: [__m256; V] = std::array::from_fn(|v| _mm256_loadu_ps(gp.add(8 * v)));
                    let q = oy * wp + ox;
                    #[allow(clippy::needless_range_loop)]
                    for j in 0..N {
                        let xb = _mm256_broadcast_ss(&*base[j].add(q));
                        for v in 0..V {
                            s[v][j] = _mm256_fmadd_ps(gv[v], xb, s[v][j]);
                        }
                    }
                }
            }
        }
        for (v, sv) in s.iter().enumerate() {
            for (j, &sj) in sv.iter().enumerate() {
                unsafe { _mm256_storeu_ps(ap.add((j * V + v) * 8), sj) };
            }
        }
    }
}
