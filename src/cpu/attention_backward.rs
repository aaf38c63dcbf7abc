//! The backward of the fused attention (`attention.rs`) on the CPU, FlashAttention-2 style: the
//! scores are recomputed block by block from the forward's per-row log-sum-exp, never stored.
//!
//! With `P = softmax(S)`, `Pd = P ∘ Z` (Z the dropout factors), `O = Pd V` and `D = rowsum(dO ∘ O)`:
//! `dV = Pdᵀ dO`, `dS = P ∘ (Z ∘ (dO Vᵀ) - D)`, `dQ = scale · dS K`, `dK = scale · dSᵀ Q`, and a
//! float mask's gradient is `dS`. Two passes keep it free of atomics (and so deterministic): one
//! task per block of queries writes `dQ` (and `dS` when the mask needs it), one task per block
//! of keys writes `dK` and `dV`.

use super::attention::{RowsAt, Spec, BK, BQ};
use super::fast_exp::exp_le0;
use super::matmul::{mm, OutPtr};
use rayon::prelude::*;

/// Gradients of one attention: `dq [batch, L, E]`, `dk [batch, S, E]`, `dv [batch, S, Ev]`, each
/// laid out as its [`Saved`] layout says, and `ds [batch, L, S]` (packed) when asked for (a
/// float mask that needs its gradient).
pub(crate) struct Grads {
    pub dq: Vec<f32>,
    pub dk: Vec<f32>,
    pub dv: Vec<f32>,
    pub ds: Option<Vec<f32>>,
}

/// The inputs of the backward: the forward's operands (whole storages, read where the spec's
/// layouts say), its `lse`, the upstream gradient `g` (`[batch, L, Ev]` where `g_at` says),
/// `d = rowsum(g ∘ out)` (`[batch, L]`), and where to write each gradient.
pub(crate) struct Saved<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub lse: &'a [f32],
    pub g: &'a [f32],
    pub g_at: RowsAt,
    pub d: &'a [f32],
    pub dq_at: RowsAt,
    pub dk_at: RowsAt,
    pub dv_at: RowsAt,
}

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
    let mut dq = super::alloc::zeros_f32(batch * l * e);
    let mut dk = super::alloc::zeros_f32(batch * s * e);
    let mut dv = super::alloc::zeros_f32(batch * s * ev);
    let mut ds = want_ds.then(|| super::alloc::zeros_f32(batch * l * s));
    if dq.is_empty() || dk.is_empty() || dv.is_empty() {
        return Grads { dq, dk, dv, ds };
    }
    let out = Outs {
        dq: OutPtr::new(&mut dq),
        dk: OutPtr::new(&mut dk),
        dv: OutPtr::new(&mut dv),
        ds: ds.as_mut().map(|v| OutPtr::new(v)),
    };
    let pass = Pass { spec, t, out };
    if one {
        (0..batch)
            .into_par_iter()
            .for_each_init(Work::default, |w, b| pass.batch_block(b, w));
    } else {
        let (nq, nk) = (l.div_ceil(BQ), s.div_ceil(BK));
        (0..batch * nq)
            .into_par_iter()
            .for_each_init(Work::default, |w, i| {
                pass.dq_block(i / nq, (i % nq) * BQ, w)
            });
        (0..batch * nk)
            .into_par_iter()
            .for_each_init(Work::default, |w, i| {
                pass.dkv_block(i / nk, (i % nk) * BK, w)
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

/// One tile of scores: batch `b`, query rows `(i0, rows)` (`i0..i0 + rows`), keys `(j0, cols)`.
type Tile = (usize, (usize, usize), (usize, usize));

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
    fn scores_grad(spec: &Spec<'_>, t: &Saved<'_>, at: Tile, p: &mut [f32], dp: &mut [f32])
        => scores_grad_rows, ["avx2"]
}

#[inline(always)]
fn scores_grad_rows(
    spec: &Spec<'_>,
    t: &Saved<'_>,
    (b, (i0, rows), (j0, cols)): Tile,
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
                // Past the causal end every score is -inf: one exp serves them all (0, or NaN
                // for a NaN lse), so a diagonal tile does half the exps, with the same bits.
                let live = spec.key_end(i).saturating_sub(j0).min(cols);
                let (row, dead) = row.split_at_mut(live);
                let (drow, ddead) = drow.split_at_mut(live);
                for (x, g) in row.iter_mut().zip(drow.iter_mut()) {
                    *x = exp_le0(*x - lse);
                    *g = *x * (*g - d);
                }
                let p_dead = exp_le0(f32::NEG_INFINITY - lse);
                for (x, g) in dead.iter_mut().zip(ddead.iter_mut()) {
                    *x = p_dead;
                    *g = p_dead * (*g - d);
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

/// The gradient buffers, written in place by the tasks (each its own rows).
#[derive(Clone, Copy)]
struct Outs {
    dq: OutPtr,
    dk: OutPtr,
    dv: OutPtr,
    ds: Option<OutPtr>,
}

/// One backward's sizes, saved inputs and outputs, shared by the tasks.
#[derive(Clone, Copy)]
struct Pass<'a> {
    spec: &'a Spec<'a>,
    t: &'a Saved<'a>,
    out: Outs,
}

impl Pass<'_> {
    /// One `rows × cols` tile (query rows `i0..` and keys `j0..` of batch `b`):
    /// `p = Q_blk · K_blkᵀ` and `dp = dO_blk · V_blkᵀ`, which `scores_grad` turns into the
    /// probabilities and dS.
    fn tile(&self, at: Tile, p: &mut [f32], dp: &mut [f32]) {
        let (b, (i0, rows), (j0, cols)) = at;
        let (spec, t) = (self.spec, self.t);
        let (e, ev) = (spec.e, spec.ev);
        let q = (&t.q[spec.q_at.row(b, i0)..], spec.q_at.rs, 1);
        let k_t = (&t.k[spec.k_at.row(b, j0)..], 1, spec.k_at.rs);
        mm((rows, cols, e), p, cols, false, 1.0, q, k_t);
        let g = (&t.g[t.g_at.row(b, i0)..], t.g_at.rs, 1);
        let v_t = (&t.v[spec.v_at.row(b, j0)..], 1, spec.v_at.rs);
        mm((rows, cols, ev), dp, cols, false, 1.0, g, v_t);
        scores_grad(spec, t, at, p, dp);
    }

    /// Copies the tile's dS into the packed `ds` (a float mask's gradient), when asked for.
    fn keep_ds(&self, (b, (i0, rows), (j0, cols)): Tile, dp: &[f32]) {
        let Some(ds) = self.out.ds else {
            return;
        };
        let (l, s) = (self.spec.l, self.spec.s);
        for r in 0..rows {
            // SAFETY: the tile's (query row, key block) cells of dS are this task's alone.
            let dst = unsafe { ds.slice((b * l + i0 + r) * s + j0, cols) };
            dst.copy_from_slice(&dp[r * cols..(r + 1) * cols]);
        }
    }

    /// `dQ_blk (+)= scale · dS · K_blk` (the first key block overwrites).
    fn add_dq(&self, (b, (i0, rows), (j0, cols)): Tile, dp: &[f32]) {
        let (spec, t) = (self.spec, self.t);
        let k_blk = (&t.k[spec.k_at.row(b, j0)..], spec.k_at.rs, 1);
        let at = (t.dq_at.row(b, i0), t.dq_at.rs);
        // SAFETY: dQ rows `i0..i0 + rows` of batch `b` are this task's alone.
        unsafe {
            let dims = (rows, spec.e, cols);
            self.out
                .dq
                .mm(dims, at, j0 > 0, spec.scale, (dp, cols, 1), k_blk)
        }
    }

    /// `dV_blk (+)= Pdᵀ · dO_blk` and `dK_blk (+)= scale · dSᵀ · Q_blk` (overwriting unless
    /// `acc`).
    fn add_dkv(&self, (b, (i0, rows), (j0, cols)): Tile, (p, dp): (&[f32], &[f32]), acc: bool) {
        let (spec, t) = (self.spec, self.t);
        let g = (&t.g[t.g_at.row(b, i0)..], t.g_at.rs, 1);
        let q = (&t.q[spec.q_at.row(b, i0)..], spec.q_at.rs, 1);
        let dv_at = (t.dv_at.row(b, j0), t.dv_at.rs);
        let dk_at = (t.dk_at.row(b, j0), t.dk_at.rs);
        // SAFETY: dK and dV rows `j0..j0 + cols` of batch `b` are this task's alone.
        unsafe {
            self.out
                .dv
                .mm((cols, spec.ev, rows), dv_at, acc, 1.0, (p, 1, cols), g);
            self.out.dk.mm(
                (cols, spec.e, rows),
                dk_at,
                acc,
                spec.scale,
                (dp, 1, cols),
                q,
            );
        }
    }

    /// Every gradient of batch `b` (see [`one_pass`]): each tile once, query blocks in order,
    /// each adding to its dQ rows and to the dK and dV rows of its key block.
    fn batch_block(&self, b: usize, w: &mut Work) {
        let Spec { l, s, .. } = *self.spec;
        // Key blocks some query block has written (the first write overwrites; untouched
        // blocks keep the buffers' zeros).
        let mut touched = vec![false; s.div_ceil(BK)];
        for i0 in (0..l).step_by(BQ) {
            let rows = BQ.min(l - i0);
            self.query_tiles(b, i0, w, |(j0, cols), p, dp| {
                let acc = std::mem::replace(&mut touched[j0 / BK], true);
                self.add_dkv((b, (i0, rows), (j0, cols)), (p, dp), acc);
            });
        }
    }

    /// The dQ rows `i0..` of batch `b` (and their dS rows), over every key block they attend.
    fn dq_block(&self, b: usize, i0: usize, w: &mut Work) {
        self.query_tiles(b, i0, w, |_, _, _| {});
    }

    /// Every tile of query rows `i0..` of batch `b`, key blocks in order: its dS kept, its dQ
    /// added, then `then((j0, cols), p, dp)`.
    fn query_tiles(
        &self,
        b: usize,
        i0: usize,
        w: &mut Work,
        mut then: impl FnMut((usize, usize), &[f32], &[f32]),
    ) {
        let rows = BQ.min(self.spec.l - i0);
        let kend = self.spec.key_end(i0 + rows - 1);
        let mut j0 = 0;
        while j0 < kend {
            let cols = BK.min(kend - j0);
            let (p, dp) = w.blocks(rows * cols);
            let at = (b, (i0, rows), (j0, cols));
            self.tile(at, p, dp);
            self.keep_ds(at, dp);
            self.add_dq(at, dp);
            then((j0, cols), p, dp);
            j0 += cols;
        }
    }

    /// The dK and dV rows of keys `j0..` of batch `b`, over every query block that sees them
    /// (none: they keep the buffers' zeros).
    fn dkv_block(&self, b: usize, j0: usize, w: &mut Work) {
        let Spec { l, s, .. } = *self.spec;
        let cols = BK.min(s - j0);
        // Rows before j0 see none of these keys under a causal mask.
        let start = if self.spec.causal { j0.min(l) } else { 0 };
        let mut i0 = start;
        while i0 < l {
            let rows = BQ.min(l - i0);
            let (p, dp) = w.blocks(rows * cols);
            let at = (b, (i0, rows), (j0, cols));
            self.tile(at, p, dp);
            self.add_dkv(at, (p, dp), i0 > start);
            i0 += rows;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::attention::{forward, Dropout, MaskView};
    use super::*;

    /// Rows of a `[batch, rows, cols]` operand laid out as `[batch / h, rows, h, cols]` (a
    /// head split: batch `b` is head `b % h` of item `b / h`).
    fn split(batch: usize, h: usize, rows: usize, cols: usize) -> RowsAt {
        RowsAt {
            offs: (0..batch)
                .map(|b| (b / h) * rows * h * cols + (b % h) * cols)
                .collect(),
            rs: h * cols,
        }
    }

    /// `packed` (`[batch, rows, cols]`) written where `at` says.
    fn scatter(packed: &[f32], at: &RowsAt, rows: usize, cols: usize) -> Vec<f32> {
        let mut out = vec![f32::NAN; packed.len()];
        for (b, _) in at.offs.iter().enumerate() {
            for i in 0..rows {
                let src = &packed[(b * rows + i) * cols..][..cols];
                out[at.row(b, i)..][..cols].copy_from_slice(src);
            }
        }
        out
    }

    /// The inverse of [`scatter`].
    fn gather(data: &[f32], at: &RowsAt, rows: usize, cols: usize) -> Vec<f32> {
        let mut out = Vec::with_capacity(data.len());
        for b in 0..at.offs.len() {
            for i in 0..rows {
                out.extend_from_slice(&data[at.row(b, i)..][..cols]);
            }
        }
        out
    }

    fn bits(x: &[f32]) -> Vec<u32> {
        x.iter().map(|v| v.to_bits()).collect()
    }

    /// [`bits`] with -0 read as +0: gemm may take another path for another row stride, and
    /// an exact zero's sign can come out either way.
    fn bits0(x: &[f32]) -> Vec<u32> {
        x.iter().map(|&v| (v + 0.0).to_bits()).collect()
    }

    /// One pass per batch gives the bits of the two passes wherever it may be chosen (causal
    /// or not, L != S, partial blocks, several key blocks, a float mask with its dS, dropout),
    /// and operands read and gradients written in a head-split layout give the bits of the
    /// packed ones.
    #[test]
    fn one_pass_and_strided_layouts_give_the_bits_of_two_packed_passes() {
        let shapes = [
            (3usize, 64usize, 64usize, 16usize, 16usize),
            (2, 130, 70, 8, 5),
            (2, 70, 130, 3, 4),
            (4, 128, 200, 16, 16),
            (2, 1, 1, 1, 1),
        ];
        for (batch, l, s, e, ev) in shapes {
            let h = if batch % 2 == 0 { 2 } else { 1 };
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
                let what = format!(
                    "[{batch}, {l}, {s}, {e}, {ev}] causal {causal} mask {masked} dropout {drop}"
                );
                let spec_with = |ats: [RowsAt; 4]| {
                    let [q_at, k_at, v_at, o_at] = ats;
                    Spec {
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
                        q_at,
                        k_at,
                        v_at,
                        o_at,
                    }
                };
                let pk = |rows, cols| RowsAt::packed(batch, rows, cols);
                let spec = spec_with([pk(l, e), pk(s, e), pk(s, ev), pk(l, ev)]);
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
                    g_at: pk(l, ev),
                    d: &d,
                    dq_at: pk(l, e),
                    dk_at: pk(s, e),
                    dv_at: pk(s, ev),
                };
                let two = run(&spec, &saved, masked, false);
                // (With one key the softmax is constant: dQ and dK are 0.)
                assert!(two.dv.iter().any(|&x| x != 0.0));
                assert!(s == 1 || two.dq.iter().any(|&x| x != 0.0));
                if same_tiles(&spec) {
                    let one = run(&spec, &saved, masked, true);
                    assert_eq!(bits(&one.dq), bits(&two.dq), "dq {what}");
                    assert_eq!(bits(&one.dk), bits(&two.dk), "dk {what}");
                    assert_eq!(bits(&one.dv), bits(&two.dv), "dv {what}");
                    assert_eq!(
                        one.ds.as_deref().map(bits),
                        two.ds.as_deref().map(bits),
                        "ds {what}"
                    );
                }
                // The same problem with every operand and output head-split.
                let (qa, ka, va) = (
                    split(batch, h, l, e),
                    split(batch, h, s, e),
                    split(batch, h, s, ev),
                );
                let (ga, oa) = (split(batch, h, l, ev), split(batch, h, l, ev));
                let (qs, ks, vs) = (
                    scatter(&q, &qa, l, e),
                    scatter(&k, &ka, s, e),
                    scatter(&v, &va, s, ev),
                );
                let gs = scatter(&g, &ga, l, ev);
                let sspec = spec_with([qa.clone(), ka.clone(), va.clone(), oa.clone()]);
                let (out_s, lse_s) = forward(&sspec, &qs, &ks, &vs);
                assert_eq!(bits(&gather(&out_s, &oa, l, ev)), bits(&out), "out {what}");
                assert_eq!(bits(&lse_s), bits(&lse), "lse {what}");
                let ssaved = Saved {
                    q: &qs,
                    k: &ks,
                    v: &vs,
                    lse: &lse,
                    g: &gs,
                    g_at: ga,
                    d: &d,
                    dq_at: qa.clone(),
                    dk_at: ka.clone(),
                    dv_at: va.clone(),
                };
                for one in [false, true] {
                    if one && !same_tiles(&sspec) {
                        continue;
                    }
                    let r = run(&sspec, &ssaved, masked, one);
                    assert_eq!(
                        bits0(&gather(&r.dq, &qa, l, e)),
                        bits0(&two.dq),
                        "strided dq {what}"
                    );
                    assert_eq!(
                        bits0(&gather(&r.dk, &ka, s, e)),
                        bits0(&two.dk),
                        "strided dk {what}"
                    );
                    assert_eq!(
                        bits0(&gather(&r.dv, &va, s, ev)),
                        bits0(&two.dv),
                        "strided dv {what}"
                    );
                    assert_eq!(
                        r.ds.as_deref().map(bits),
                        two.ds.as_deref().map(bits),
                        "strided ds {what}"
                    );
                }
            }
        }
    }
}
