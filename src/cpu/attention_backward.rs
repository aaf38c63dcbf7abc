//! The backward of the fused attention (`attention.rs`) on the CPU, FlashAttention-2 style: the
//! scores are recomputed block by block from the forward's per-row log-sum-exp, never stored.
//!
//! With `P = softmax(S)`, `Pd = P ∘ Z` (Z the dropout factors), `O = Pd V` and `D = rowsum(dO ∘ O)`:
//! `dV = Pdᵀ dO`, `dS = P ∘ (Z ∘ (dO Vᵀ) - D)`, `dQ = scale · dS K`, `dK = scale · dSᵀ Q`, and a
//! float mask's gradient is `dS`. Two passes keep it free of atomics (and so deterministic): one
//! task per block of queries writes `dQ` (and `dS` when the mask needs it), one task per block
//! of keys writes `dK` and `dV`.

use super::attention::{Spec, BK, BQ};
use super::fast_exp::exp_le0;
use super::matmul::mm;
use rayon::prelude::*;

/// Gradients of one attention: `dq [batch, L, E]`, `dk [batch, S, E]`, `dv [batch, S, Ev]`, and
/// `ds [batch, L, S]` when asked for (a float mask that needs its gradient).
pub(crate) struct Grads {
    pub dq: Vec<f32>,
    pub dk: Vec<f32>,
    pub dv: Vec<f32>,
    pub ds: Option<Vec<f32>>,
}

/// The inputs of the backward: the forward's operands, its `lse`, the upstream gradient `g`
/// (`[batch, L, Ev]`) and `d = rowsum(g ∘ out)` (`[batch, L]`).
pub(crate) struct Saved<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub lse: &'a [f32],
    pub g: &'a [f32],
    pub d: &'a [f32],
}

/// One dQ task: batch, first query row, its dQ rows and (when asked for) its dS rows.
type DqTask<'a> = (usize, usize, &'a mut [f32], Option<&'a mut [f32]>);

/// The backward: one pass per batch where that serves ([`one_pass`]), else both passes.
pub(crate) fn backward(spec: &Spec<'_>, t: &Saved<'_>, want_ds: bool) -> Grads {
    run(spec, t, want_ds, one_pass(spec))
}

/// The backward, in one pass per batch when `one` (valid only where [`one_pass`]'s tile
/// condition holds), else in two.
fn run(spec: &Spec<'_>, t: &Saved<'_>, want_ds: bool, one: bool) -> Grads {
    let Spec {
        batch, l, s, e, ev, ..
    } = *spec;
    let pass = Pass { spec, t };
    let mut dq = super::alloc::zeros_f32(batch * l * e);
    let mut ds = want_ds.then(|| super::alloc::zeros_f32(batch * l * s));
    if one {
        let mut dk = super::alloc::zeros_f32(batch * s * e);
        let mut dv = super::alloc::zeros_f32(batch * s * ev);
        if !dq.is_empty() && !dk.is_empty() && !dv.is_empty() {
            let mut ds_b: Vec<Option<&mut [f32]>> = match ds.as_mut() {
                Some(v) => v.chunks_mut(l * s).map(Some).collect(),
                None => (0..batch).map(|_| None).collect(),
            };
            dq.par_chunks_mut(l * e)
                .zip(dk.par_chunks_mut(s * e))
                .zip(dv.par_chunks_mut(s * ev))
                .zip(ds_b.par_iter_mut())
                .enumerate()
                .for_each_init(Work::default, |w, (b, (((dq, dk), dv), ds))| {
                    pass.batch_block(b, (dq, dk, dv), ds.as_deref_mut(), w)
                });
        }
        return Grads { dq, dk, dv, ds };
    }
    if !dq.is_empty() {
        // One task per (batch, query block); ds is split along the same blocks.
        let mut ds_blocks = ds.as_mut().map(|v| {
            v.chunks_mut(l * s)
                .flat_map(|x| x.chunks_mut(BQ * s))
                .collect::<Vec<_>>()
                .into_iter()
        });
        let mut tasks: Vec<DqTask<'_>> = Vec::new();
        for (b, dqb) in dq.chunks_mut(l * e).enumerate() {
            for (qb, blk) in dqb.chunks_mut(BQ * e).enumerate() {
                let dsb = ds_blocks.as_mut().and_then(|it| it.next());
                tasks.push((b, qb * BQ, blk, dsb));
            }
        }
        tasks
            .into_par_iter()
            .for_each_init(Work::default, |w, (b, i0, dqb, dsb)| {
                pass.dq_block(b, i0, dqb, dsb, w)
            });
    }
    let mut dk = super::alloc::zeros_f32(batch * s * e);
    let mut dv = super::alloc::zeros_f32(batch * s * ev);
    if !dk.is_empty() && !dv.is_empty() {
        dk.par_chunks_mut(s * e)
            .zip(dv.par_chunks_mut(s * ev))
            .enumerate()
            .for_each(|(b, (dkb, dvb))| {
                dkb.par_chunks_mut(BK * e)
                    .zip(dvb.par_chunks_mut(BK * ev))
                    .enumerate()
                    .for_each_init(Work::default, |w, (kb, (dk, dv))| {
                        pass.dkv_block(b, kb * BK, dk, dv, w)
                    });
            });
    }
    Grads { dq, dk, dv, ds }
}

/// Whether one task per batch computing each tile once (and writing dQ, dK and dV from it)
/// serves better than the two passes, which compute every tile twice but split a batch's work
/// across threads. Only when there are batches enough for every thread, and only when the two
/// passes would cut the same tiles (a causal block ends mid key block only when the last query
/// block is partial and there are more keys than queries), so both give the same bits: the
/// same tile products, accumulated in the same order (key blocks ascending for dQ, query
/// blocks ascending for dK and dV, the first contribution overwriting).
fn one_pass(spec: &Spec<'_>) -> bool {
    same_tiles(spec) && spec.batch >= 2 * rayon::current_num_threads()
}

/// Whether both ways cut the same tiles (see [`one_pass`]).
fn same_tiles(spec: &Spec<'_>) -> bool {
    BQ == BK && (!spec.causal || spec.s <= spec.l || spec.l.is_multiple_of(BQ))
}

/// Per-task scratch: the score block and its gradient.
#[derive(Default)]
struct Work {
    p: Vec<f32>,
    dp: Vec<f32>,
}

impl Work {
    fn blocks(&mut self, n: usize) -> (&mut [f32], &mut [f32]) {
        if self.p.len() < n {
            self.p.resize(n, 0.0);
            self.dp.resize(n, 0.0);
        }
        (&mut self.p[..n], &mut self.dp[..n])
    }
}

multiversion! {
    /// Recomputes `P` (in `p`, `rows × cols`, query rows from `i0`, keys from `j0`) and turns `dp`
    /// (holding `dO Vᵀ` on entry) into `dS`; leaves `Pd = P ∘ Z` in `p` for `dV`. The `exp` is the
    /// forward's polynomial one (`fast_exp::exp_le0`, no libm call), so the loop vectorises; on
    /// x86-64 it is also compiled for AVX2 and picked at run time (explicit operations, no FMA
    /// contraction: the same bits either way).
    fn scores_grad(spec: &Spec<'_>, t: &Saved<'_>, b: usize, rows: (usize, usize),
        cols: (usize, usize), p: &mut [f32], dp: &mut [f32]) => scores_grad_rows, ["avx2"]
}

#[inline(always)]
fn scores_grad_rows(
    spec: &Spec<'_>,
    t: &Saved<'_>,
    b: usize,
    (i0, rows): (usize, usize),
    (j0, cols): (usize, usize),
    p: &mut [f32],
    dp: &mut [f32],
) {
    let (l, s) = (spec.l, spec.s);
    for r in 0..rows {
        let i = i0 + r;
        let row = &mut p[r * cols..(r + 1) * cols];
        spec.finish_scores(b, i, j0, row);
        let lse = t.lse[b * l + i];
        let d = t.d[b * l + i];
        let drow = &mut dp[r * cols..(r + 1) * cols];
        // exp_le0 propagates a NaN lse or score into the gradients, as the composed backward does.
        match &spec.dropout {
            None => {
                for (x, g) in row.iter_mut().zip(drow.iter_mut()) {
                    *x = exp_le0(*x - lse);
                    *g = *x * (*g - d);
                }
            }
            Some(dr) => {
                let e0 = ((b * l + i) * s + j0) as u64;
                for (c, (x, g)) in row.iter_mut().zip(drow.iter_mut()).enumerate() {
                    let z = dr.factor(e0 + c as u64);
                    let pv = exp_le0(*x - lse);
                    *g = pv * (z * *g - d);
                    *x = pv * z;
                }
            }
        }
    }
}

/// One backward's sizes and saved inputs, shared by the tasks of both passes.
#[derive(Clone, Copy)]
struct Pass<'a> {
    spec: &'a Spec<'a>,
    t: &'a Saved<'a>,
}

impl Pass<'_> {
    /// One `rows × cols` tile of both passes: `p = Q_blk · K_blkᵀ` and `dp = dO_blk · V_blkᵀ`,
    /// which `scores_grad` turns into the probabilities and dS. `q`, `g` start at the tile's
    /// first query row; `k`, `v` at its first key.
    #[allow(clippy::too_many_arguments)]
    fn tile(
        &self,
        b: usize,
        (i0, rows): (usize, usize),
        (j0, cols): (usize, usize),
        (q, g): (&[f32], &[f32]),
        (k, v): (&[f32], &[f32]),
        p: &mut [f32],
        dp: &mut [f32],
    ) {
        let (e, ev) = (self.spec.e, self.spec.ev);
        mm((rows, cols, e), p, cols, false, 1.0, (q, e, 1), (k, 1, e));
        mm(
            (rows, cols, ev),
            dp,
            cols,
            false,
            1.0,
            (g, ev, 1),
            (v, 1, ev),
        );
        scores_grad(self.spec, self.t, b, (i0, rows), (j0, cols), p, dp);
    }

    /// The dQ rows `i0..` of batch `b` (and their dS rows), over every key block they attend.
    fn dq_block(
        &self,
        b: usize,
        i0: usize,
        dq: &mut [f32],
        mut ds: Option<&mut [f32]>,
        w: &mut Work,
    ) {
        let (spec, t) = (self.spec, self.t);
        let Spec { l, s, e, ev, .. } = *spec;
        let rows = dq.len() / e;
        let qb = &t.q[(b * l + i0) * e..];
        let gb = &t.g[(b * l + i0) * ev..];
        let kb = &t.k[b * s * e..(b + 1) * s * e];
        let vb = &t.v[b * s * ev..(b + 1) * s * ev];
        let kend = spec.key_end(i0 + rows - 1);
        let mut j0 = 0;
        while j0 < kend {
            let cols = BK.min(kend - j0);
            let (p, dp) = w.blocks(rows * cols);
            let kv = (&kb[j0 * e..], &vb[j0 * ev..]);
            self.tile(b, (i0, rows), (j0, cols), (qb, gb), kv, p, dp);
            if let Some(dsb) = ds.as_deref_mut() {
                for r in 0..rows {
                    let dst = &mut dsb[r * s + j0..r * s + j0 + cols];
                    dst.copy_from_slice(&dp[r * cols..(r + 1) * cols]);
                }
            }
            // dQ += scale · dS · K_blk (the first block overwrites).
            let k_blk = (&kb[j0 * e..], e, 1);
            mm(
                (rows, e, cols),
                dq,
                e,
                j0 > 0,
                spec.scale,
                (dp, cols, 1),
                k_blk,
            );
            j0 += cols;
        }
    }

    /// Every gradient of batch `b` (see [`one_pass`]): each tile once, query blocks in order,
    /// each adding to its dQ rows and to the dK and dV rows of its key block.
    fn batch_block(
        &self,
        b: usize,
        (dq, dk, dv): (&mut [f32], &mut [f32], &mut [f32]),
        mut ds: Option<&mut [f32]>,
        w: &mut Work,
    ) {
        let (spec, t) = (self.spec, self.t);
        let Spec { l, s, e, ev, .. } = *spec;
        let (qall, gall) = (&t.q[b * l * e..], &t.g[b * l * ev..]);
        let kb = &t.k[b * s * e..(b + 1) * s * e];
        let vb = &t.v[b * s * ev..(b + 1) * s * ev];
        // Key blocks some query block has written (the first write overwrites; untouched
        // blocks keep the buffers' zeros).
        let mut touched = vec![false; s.div_ceil(BK)];
        let mut i0 = 0;
        while i0 < l {
            let rows = BQ.min(l - i0);
            let (qb, gb) = (&qall[i0 * e..], &gall[i0 * ev..]);
            let dqb = &mut dq[i0 * e..(i0 + rows) * e];
            let kend = spec.key_end(i0 + rows - 1);
            let mut j0 = 0;
            while j0 < kend {
                let cols = BK.min(kend - j0);
                let (p, dp) = w.blocks(rows * cols);
                let kv = (&kb[j0 * e..], &vb[j0 * ev..]);
                self.tile(b, (i0, rows), (j0, cols), (qb, gb), kv, p, dp);
                if let Some(dsb) = ds.as_deref_mut() {
                    for r in 0..rows {
                        let dst = &mut dsb[(i0 + r) * s + j0..(i0 + r) * s + j0 + cols];
                        dst.copy_from_slice(&dp[r * cols..(r + 1) * cols]);
                    }
                }
                let k_blk = (&kb[j0 * e..], e, 1);
                let dp_rows = (&*dp, cols, 1);
                mm((rows, e, cols), dqb, e, j0 > 0, spec.scale, dp_rows, k_blk);
                let acc = std::mem::replace(&mut touched[j0 / BK], true);
                let dvb = &mut dv[j0 * ev..(j0 + cols) * ev];
                mm(
                    (cols, ev, rows),
                    dvb,
                    ev,
                    acc,
                    1.0,
                    (p, 1, cols),
                    (gb, ev, 1),
                );
                let dkb = &mut dk[j0 * e..(j0 + cols) * e];
                mm(
                    (cols, e, rows),
                    dkb,
                    e,
                    acc,
                    spec.scale,
                    (dp, 1, cols),
                    (qb, e, 1),
                );
                j0 += cols;
            }
            i0 += rows;
        }
    }

    /// The dK and dV rows of keys `j0..` of batch `b`, over every query block that sees them.
    fn dkv_block(&self, b: usize, j0: usize, dk: &mut [f32], dv: &mut [f32], w: &mut Work) {
        let (spec, t) = (self.spec, self.t);
        let Spec { l, s, e, ev, .. } = *spec;
        let cols = dk.len() / e;
        let kv = (&t.k[(b * s + j0) * e..], &t.v[(b * s + j0) * ev..]);
        let qall = &t.q[b * l * e..(b + 1) * l * e];
        let gall = &t.g[b * l * ev..(b + 1) * l * ev];
        // Rows before j0 see none of these keys under a causal mask.
        let start = if spec.causal { j0.min(l) } else { 0 };
        let mut i0 = start;
        while i0 < l {
            let rows = BQ.min(l - i0);
            let (p, dp) = w.blocks(rows * cols);
            let (qb, gb) = (&qall[i0 * e..], &gall[i0 * ev..]);
            self.tile(b, (i0, rows), (j0, cols), (qb, gb), kv, p, dp);
            // dV += Pdᵀ · dO_blk, dK += scale · dSᵀ · Q_blk (the first block overwrites).
            let acc = i0 > start;
            mm(
                (cols, ev, rows),
                dv,
                ev,
                acc,
                1.0,
                (p, 1, cols),
                (gb, ev, 1),
            );
            let q_blk = (qb, e, 1);
            mm(
                (cols, e, rows),
                dk,
                e,
                acc,
                spec.scale,
                (dp, 1, cols),
                q_blk,
            );
            i0 += rows;
        }
        if start >= l {
            // No query attends these keys: zero gradients (the buffers start at 0).
            dk.fill(0.0);
            dv.fill(0.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::attention::{forward, Dropout, MaskView};
    use super::*;

    /// One pass per batch gives the bits of the two passes wherever it may be chosen: causal
    /// or not, L != S, partial blocks, several key blocks, a float mask (with its dS) and
    /// dropout.
    #[test]
    fn one_pass_gives_the_bits_of_two() {
        let shapes = [
            (3usize, 64usize, 64usize, 16usize, 16usize),
            (2, 130, 70, 8, 5),
            (2, 70, 130, 3, 4),
            (4, 128, 200, 16, 16),
            (2, 1, 1, 1, 1),
        ];
        for (batch, l, s, e, ev) in shapes {
            let val = |n: usize, m: usize| -> Vec<f32> {
                (0..n)
                    .map(|i| ((i * m % 97) as f32 - 48.0) * 0.021)
                    .collect()
            };
            let (q, k, v) = (
                val(batch * l * e, 7),
                val(batch * s * e, 11),
                val(batch * s * ev, 13),
            );
            let g = val(batch * l * ev, 17);
            let mask = val(batch * l * s, 19);
            for (causal, masked, drop) in [
                (true, false, false),
                (false, true, false),
                (true, true, true),
            ] {
                let spec = Spec {
                    batch,
                    l,
                    s,
                    e,
                    ev,
                    scale: 0.3,
                    causal,
                    mask: masked.then(|| MaskView {
                        data: &mask,
                        batch_offsets: (0..batch).map(|b| b * l * s).collect(),
                        row_stride: s,
                        col_stride: 1,
                        replace: false,
                    }),
                    dropout: drop.then_some(Dropout {
                        p: 0.25,
                        seed: 5,
                        offset: 9,
                    }),
                };
                if !same_tiles(&spec) {
                    continue;
                }
                let (out, lse) = forward(&spec, &q, &k, &v);
                let d: Vec<f32> = (0..batch * l)
                    .map(|r| (0..ev).map(|c| g[r * ev + c] * out[r * ev + c]).sum())
                    .collect();
                let saved = Saved {
                    q: &q,
                    k: &k,
                    v: &v,
                    lse: &lse,
                    g: &g,
                    d: &d,
                };
                let (one, two) = (
                    run(&spec, &saved, masked, true),
                    run(&spec, &saved, masked, false),
                );
                let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                let what = format!(
                    "[{batch}, {l}, {s}, {e}, {ev}] causal {causal} mask {masked} dropout {drop}"
                );
                assert_eq!(bits(&one.dq), bits(&two.dq), "dq {what}");
                assert_eq!(bits(&one.dk), bits(&two.dk), "dk {what}");
                assert_eq!(bits(&one.dv), bits(&two.dv), "dv {what}");
                assert_eq!(
                    one.ds.as_deref().map(bits),
                    two.ds.as_deref().map(bits),
                    "ds {what}"
                );
                // (With one key the softmax is constant: dQ and dK are 0.)
                assert!(one.dv.iter().any(|&x| x != 0.0));
                assert!(s == 1 || one.dq.iter().any(|&x| x != 0.0));
            }
        }
    }
}
