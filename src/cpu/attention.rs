//! Fused scaled-dot-product attention on the CPU, FlashAttention-2 style: blocks of queries
//! across threads (rayon), each streaming over blocks of keys and values once with an online
//! softmax, so the `L × S` score matrix never exists; the backward (`attention_backward.rs`)
//! recomputes the scores block by block from the per-row log-sum-exp the forward keeps.
//!
//! Tile products go through the `gemm` crate (its single-threaded micro-kernels on packed
//! blocks); the row work between them is 8-lane loops LLVM vectorises. Every output element is
//! written by one task in a fixed order: the same input gives the same bits on every run.

use super::fast_exp::{exp_neg, lane_max};
use super::matmul::{mm, OutPtr};
pub(crate) use crate::ops::backend::Dropout;
use rayon::prelude::*;

/// Query rows per task.
pub(crate) const BQ: usize = 64;
/// Keys per block of the streamed loop.
pub(crate) const BK: usize = 64;

/// An additive (or, for boolean masks, replacing) `[batch, L, S]` mask read in place through
/// strides: element `(b, i, j)` is `data[batch_offsets[b] + i * row_stride + j * col_stride]`.
pub(crate) struct MaskView<'a> {
    pub data: &'a [f32],
    pub batch_offsets: Vec<usize>,
    pub row_stride: usize,
    pub col_stride: usize,
    /// A boolean mask converted to `0 / -inf`: `-inf` replaces the score (as `masked_fill`
    /// does, so a NaN score at a masked position vanishes) instead of being added.
    pub replace: bool,
}

impl Dropout {
    /// The factor element `e` of the probabilities is multiplied by: `1 / (1 - p)` or 0.
    #[inline]
    pub(crate) fn factor(&self, e: u64) -> f32 {
        let w = super::normal::words(self.seed, self.offset, e);
        if super::normal::uniform(w[0]) >= self.p {
            1.0 / (1.0 - self.p)
        } else {
            0.0
        }
    }
}

/// Where one operand's rows live in its storage: row `i` of batch `b` starts at
/// `offs[b] + i * rs`, its elements adjacent. The kernels read a head-split view such as
/// `[N, L, H, D]` seen as `[N, H, L, D]` in place, and write their outputs in the layout the
/// caller views them in, so neither side needs a packing copy.
#[derive(Clone, Debug)]
pub(crate) struct RowsAt {
    pub offs: Vec<usize>,
    pub rs: usize,
}

impl RowsAt {
    /// Packed `[batch, rows, cols]`.
    pub(crate) fn packed(batch: usize, rows: usize, cols: usize) -> RowsAt {
        RowsAt {
            offs: (0..batch).map(|b| b * rows * cols).collect(),
            rs: cols,
        }
    }

    /// The first element of row `i` of batch `b`.
    #[inline]
    pub(crate) fn row(&self, b: usize, i: usize) -> usize {
        self.offs[b] + i * self.rs
    }
}

/// Sizes and options of one attention: `batch` independent problems of `L` queries against `S`
/// keys, head dim `E` (queries, keys) and `Ev` (values): q `[batch, L, E]`, k `[batch, S, E]`,
/// v `[batch, S, Ev]` and the output `[batch, L, Ev]`, each where its [`RowsAt`] says.
pub(crate) struct Spec<'a> {
    pub batch: usize,
    pub l: usize,
    pub s: usize,
    pub e: usize,
    pub ev: usize,
    pub scale: f32,
    pub causal: bool,
    pub mask: Option<MaskView<'a>>,
    pub dropout: Option<Dropout>,
    pub q_at: RowsAt,
    pub k_at: RowsAt,
    pub v_at: RowsAt,
    /// Where the forward writes its output (inside a `batch * L * Ev` buffer).
    pub o_at: RowsAt,
}

impl Spec<'_> {
    /// Keys row `i` may attend: `0..key_end(i)` (causal masks `j > i`, top-left aligned).
    #[inline]
    pub(crate) fn key_end(&self, i: usize) -> usize {
        if self.causal {
            (i + 1).min(self.s)
        } else {
            self.s
        }
    }

    /// Scales, masks and flags one row of raw scores `q_i · k_j` for keys `j0..j0 + row.len()`.
    /// Returns whether a NaN or +inf appeared (softmax then gives a NaN row).
    #[inline(always)]
    pub(crate) fn finish_scores(&self, b: usize, i: usize, j0: usize, row: &mut [f32]) -> bool {
        for x in row.iter_mut() {
            *x *= self.scale;
        }
        if let Some(m) = &self.mask {
            let base = m.batch_offsets[b] + i * m.row_stride + j0 * m.col_stride;
            for (c, x) in row.iter_mut().enumerate() {
                let mv = m.data[base + c * m.col_stride];
                *x = if m.replace && mv == f32::NEG_INFINITY {
                    f32::NEG_INFINITY
                } else {
                    *x + mv
                };
            }
        }
        let end = self.key_end(i);
        if end < j0 + row.len() {
            for x in &mut row[end.saturating_sub(j0)..] {
                *x = f32::NEG_INFINITY;
            }
        }
        let mut bad = false;
        for &x in row.iter() {
            bad |= x.is_nan() || x == f32::INFINITY;
        }
        bad
    }
}

/// Per-task scratch, allocated once per rayon work item (never per row).
struct Scratch {
    s: Vec<f32>,
    acc: Vec<f32>,
    m: Vec<f32>,
    l: Vec<f32>,
    bad: Vec<bool>,
}

/// The forward: `(out, lse [batch, L])`, `out` a `batch * L * Ev` buffer laid out as
/// `spec.o_at` says. `lse` is the per-row log-sum-exp of the masked, scaled scores (NaN for a
/// row softmax makes NaN), all the backward needs. q, k and v are their whole storages, read
/// where `spec`'s layouts say.
pub(crate) fn forward(spec: &Spec<'_>, q: &[f32], k: &[f32], v: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let Spec { batch, l, ev, .. } = *spec;
    let mut out = super::alloc::zeros_f32(batch * l * ev);
    let mut lse = vec![0f32; batch * l];
    if out.is_empty() {
        return (out, lse);
    }
    let o = OutPtr::new(&mut out);
    lse.par_chunks_mut(l).enumerate().for_each(|(b, lb)| {
        lb.par_chunks_mut(BQ).enumerate().for_each_init(
            || Scratch {
                s: vec![0.0; BQ * BK],
                acc: vec![0.0; BQ * ev],
                m: vec![0.0; BQ],
                l: vec![0.0; BQ],
                bad: vec![false; BQ],
            },
            |sc, (qb, ls)| forward_block(spec, (q, k, v), b, qb * BQ, o, ls, sc),
        );
    });
    (out, lse)
}

multiversion! {
    /// [`block`], compiled for AVX2 and FMA where the CPU has them: the exponentials, maxima
    /// and rescales of the online softmax run 8 lanes wide (a third of a long causal forward
    /// outside the tile products). No operation changes, so neither do the bits.
    #[allow(clippy::too_many_arguments)]
    fn forward_block(
        spec: &Spec<'_>,
        qkv: (&[f32], &[f32], &[f32]),
        b: usize,
        i0: usize,
        out: OutPtr,
        lse: &mut [f32],
        sc: &mut Scratch
    ) => block, ["avx2", "fma"]
}

/// One task of the forward: query rows `i0..` of batch `b` against every key they attend.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn block(
    spec: &Spec<'_>,
    (q, k, v): (&[f32], &[f32], &[f32]),
    b: usize,
    i0: usize,
    out: OutPtr,
    lse: &mut [f32],
    sc: &mut Scratch,
) {
    let Spec { l, s, e, ev, .. } = *spec;
    let (q_rs, k_rs, v_rs) = (spec.q_at.rs, spec.k_at.rs, spec.v_at.rs);
    let rows = lse.len();
    let qb = &q[spec.q_at.row(b, i0)..];
    let kb = &k[spec.k_at.row(b, 0)..];
    let vb = &v[spec.v_at.row(b, 0)..];
    let acc = &mut sc.acc[..rows * ev];
    acc.fill(0.0);
    sc.m[..rows].fill(f32::NEG_INFINITY);
    sc.l[..rows].fill(0.0);
    sc.bad[..rows].fill(false);
    let kend = spec.key_end(i0 + rows - 1);
    let mut j0 = 0;
    while j0 < kend {
        let cols = BK.min(kend - j0);
        let st = &mut sc.s[..rows * cols];
        // S = Q_blk · K_blkᵀ: K's row j is column j of the product.
        let k_t = (&kb[j0 * k_rs..], 1, k_rs);
        mm((rows, cols, e), st, cols, false, 1.0, (qb, q_rs, 1), k_t);
        for r in 0..rows {
            let i = i0 + r;
            let row = &mut st[r * cols..(r + 1) * cols];
            sc.bad[r] |= spec.finish_scores(b, i, j0, row);
            // Past the causal end the scores are -inf: their exps are 0. Whole 8-lane chunks of
            // them are skipped (their max is -inf and their sums add +0 to every lane, so the
            // bits are those of the full row); a causal tile on the diagonal does half the exps.
            let live = (spec.key_end(i).saturating_sub(j0).div_ceil(8) * 8).min(cols);
            let (row, dead) = row.split_at_mut(live);
            dead.fill(0.0);
            let mx = row_max(row);
            let m_new = sc.m[r].max(mx);
            if m_new == f32::NEG_INFINITY {
                // Nothing attended yet: the probabilities are all 0.
                row.fill(0.0);
                continue;
            }
            let alpha = exp_neg(sc.m[r] - m_new);
            let sum = exp_row(row, m_new);
            sc.l[r] = sc.l[r] * alpha + sum;
            if alpha != 1.0 {
                for x in &mut acc[r * ev..(r + 1) * ev] {
                    *x *= alpha;
                }
            }
            sc.m[r] = m_new;
            if let Some(d) = &spec.dropout {
                let e0 = ((b * l + i) * s + j0) as u64;
                for (c, x) in row.iter_mut().enumerate() {
                    *x *= d.factor(e0 + c as u64);
                }
            }
        }
        // acc += P · V_blk.
        let v_blk = (&vb[j0 * v_rs..], v_rs, 1);
        mm((rows, ev, cols), acc, ev, true, 1.0, (st, cols, 1), v_blk);
        j0 += cols;
    }
    for r in 0..rows {
        let (m, sum) = (sc.m[r], sc.l[r]);
        // SAFETY: row `(b, i0 + r)` is this task's alone.
        let o = unsafe { out.slice(spec.o_at.row(b, i0 + r), ev) };
        // A NaN or +inf score, or a row with nothing to attend, gives a NaN row (as softmax).
        if sc.bad[r] || sum == 0.0 {
            o.fill(f32::NAN);
            lse[r] = f32::NAN;
            continue;
        }
        let inv = 1.0 / sum;
        for (x, &a) in o.iter_mut().zip(&acc[r * ev..(r + 1) * ev]) {
            *x = a * inv;
        }
        lse[r] = m + sum.ln();
    }
}

/// The maximum of a row, NaN ignored (NaN rows are flagged apart).
#[inline(always)]
pub(crate) fn row_max(row: &[f32]) -> f32 {
    let mut mx = [f32::NEG_INFINITY; 8];
    let mut cs = row.chunks_exact(8);
    for c in &mut cs {
        for j in 0..8 {
            mx[j] = lane_max(mx[j], c[j]);
        }
    }
    for (j, &x) in cs.remainder().iter().enumerate() {
        mx[j] = lane_max(mx[j], x);
    }
    mx.iter().copied().fold(f32::NEG_INFINITY, f32::max)
}

/// `row[j] = exp(row[j] - m)` (for `row[j] <= m`), returning the sum.
#[inline(always)]
fn exp_row(row: &mut [f32], m: f32) -> f32 {
    let mut acc = [0f32; 8];
    let mut cs = row.chunks_exact_mut(8);
    for c in &mut cs {
        for j in 0..8 {
            c[j] = exp_neg(c[j] - m);
            acc[j] += c[j];
        }
    }
    let mut sum = acc.iter().sum::<f32>();
    for x in cs.into_remainder() {
        *x = exp_neg(*x - m);
        sum += *x;
    }
    sum
}
