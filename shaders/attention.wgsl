// attention.wgsl: fused scaled-dot-product attention, FlashAttention-2 style (the twin of
// src/cpu/attention.rs and attention_backward.rs, which are the oracle).
//
// Computes   attn_forward: out = softmax(scale q kᵀ + mask) v per batch b, streaming keys and
//              values once per tile of 64 queries with an online softmax (running max m, sum l);
//              also lse = m + ln l per row (NaN for a row softmax makes NaN: a NaN or +inf
//              score, or nothing attended).
//            attn_dq: dq = scale dS k, dS = P (Z (dO vᵀ) - D), P = exp(S - lse) recomputed tile
//              by tile; with flag 16 also dS itself (a float mask's gradient).
//            attn_dkv: dk = scale dSᵀ q and dv = (P Z)ᵀ dO, one thread per key.
//            Z: dropout factors from Philox, element (b, i, j) = counter (b L + i) S + j, the
//            element Tensor::rand would give the composed path. No atomics: every output
//            element is written by one invocation, in a fixed order.
// Declared   by the library from this file's SHADERS entry (src/gpu/shader_table.rs):
// Bindings   @binding(0) q [B, L, E], (1) k [B, S, E], (2) v [B, S, Ev], (3) mask (strided,
//            f32; a dummy without one), forward: (4) dst, (5) params;
//            backward: (4) g = dO [B, L, Ev], (5) stats = [lse (B L), D (B L)], (6) dst,
//            (7) params.
//            dst: forward [out (B L Ev), lse (B L), then with several passes the state
//            (chunks B L x 3) from P_STATE]; attn_dq [dq (B L E), dS (B L S)];
//            attn_dkv [dk (B S E), dv (B S Ev)].
// Params     see the P_* constants; from P_SHAPE: the batch dims' sizes, then the mask's
//            strides over them.
// Dispatch   @workgroup_size(64): one workgroup per (tile of 64 rows, output chunk of 64
//            dims, batch), numbered tile + tiles (chunk + chunks b) over a 2-D grid; extra
//            workgroups return. Each invocation owns one row (a query, or a key in attn_dkv).
//            The streamed loop steps 16 keys (or queries) at a time, and one dispatch (a pass)
//            streams at most P_SPAN of them: lavapipe ends an invocation's loops silently once
//            they have run 65,535 iterations all together, and drivers may bound how long one
//            dispatch runs. The host sizes P_SPAN from the loops' iteration counts
//            (src/gpu/attention.rs) and dispatches passes 0 .. P_PASSES in order; between passes
//            a row's running state (accumulators, and the forward's m, l and NaN flag) waits in
//            dst, in f32, so the passes give the bits of one pass.

const P_B: u32 = 0u;
const P_L: u32 = 1u;
const P_S: u32 = 2u;
const P_E: u32 = 3u;
const P_EV: u32 = 4u;
const P_SCALE: u32 = 5u;
// 1 causal, 2 mask, 4 boolean mask (-inf replaces), 8 dropout, 16 write dS.
const P_FLAGS: u32 = 6u;
const P_DROP_P: u32 = 7u;
const P_DROP_SCALE: u32 = 8u;
const P_SEED: u32 = 9u;
const P_OFFSET: u32 = 11u;
const P_TILES: u32 = 13u;
const P_CHUNKS: u32 = 14u;
const P_MROW: u32 = 15u;
const P_MCOL: u32 = 16u;
const P_MBASE: u32 = 17u;
// Element offsets of q, k, v, g and stats in their buffers.
const P_QOFF: u32 = 18u;
const P_KOFF: u32 = 19u;
const P_VOFF: u32 = 20u;
const P_GOFF: u32 = 21u;
const P_SOFF: u32 = 22u;
// Forward: where lse starts in dst; attn_dq: where dS starts; attn_dkv: where dv starts.
const P_AUX: u32 = 23u;
// attn_dkv: chunks of dk (the rest are dv's).
const P_KCHUNKS: u32 = 24u;
const P_NB: u32 = 25u;
// This dispatch's pass, the rows one pass streams (a multiple of STEP), the pass count, and
// where the forward keeps m, l and the NaN flag of each (chunk, row) between passes: from P_PASS
// on, which the host writes (it, TILE and STEP are the contract's, src/gpu/contract.rs).
const P_SPAN: u32 = P_PASS + 1u;
const P_PASSES: u32 = P_PASS + 2u;
const P_STATE: u32 = P_PASS + 3u;
const P_SHAPE: u32 = P_PASS + 4u;

const NEG_INF_BITS: u32 = 0xff800000u;

// The staged STEP × TILE block of k, v, q or dO every loop reads (a barrier before each staging
// keeps one block enough).
var<workgroup> ta: array<f32, STEP * TILE>;

fn neg_inf() -> f32 {
    return bitcast<f32>(NEG_INF_BITS);
}

fn is_neg_inf(x: f32) -> bool {
    return bitcast<u32>(x) == NEG_INF_BITS;
}

fn pf(i: u32) -> f32 {
    return bitcast<f32>(params[i]);
}

// The workgroup builtins every entry point takes (uniform, so kept apart from the
// invocation's own index: control flow that depends on them stays uniform for barriers).
struct Group {
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
}

// What a workgroup computes and the sizes every entry reads: its tile of rows (queries, or keys
// in attn_dkv) from `first`, the invocation's own `row` and the row `at` it reads (the tile's
// last real row for invocations past the end), its output chunk from column `col0`, batch b
// (b == nb, the batch count, past the last workgroup), and L, S, E, Ev.
struct Work {
    first: u32,
    row: u32,
    at: u32,
    chunk: u32,
    col0: u32,
    b: u32,
    nb: u32,
    l: u32,
    s: u32,
    e: u32,
    ev: u32,
}

// The Work of invocation lid of a workgroup whose tile rows number params[rows_at] (P_L or P_S).
fn work_item(group: Group, lid: u32, rows_at: u32) -> Work {
    let w = group_index(group.wid, group.nwg);
    let tiles = params[P_TILES];
    let chunks = params[P_CHUNKS];
    let rest = w / tiles;
    let nb = params[P_B];
    let first = (w % tiles) * TILE;
    let row = first + lid;
    let chunk = rest % chunks;
    return Work(first, row, min(row, params[rows_at] - 1u), chunk, chunk * 64u, min(rest / chunks, nb), nb, params[P_L], params[P_S], params[P_E], params[P_EV]);
}

// The part [lo, hi) of a workgroup's streamed range [start, end) that this pass covers, and
// whether this pass is the first (start from zero) and the last (write the result) of those
// that cover it; an empty range belongs to the pass holding `start`. Uniform when its
// arguments are: passes a workgroup has no part in return before any barrier.
struct Pass {
    lo: u32,
    hi: u32,
    first: bool,
    last: bool,
    busy: bool,
}

fn pass_of(start: u32, end: u32) -> Pass {
    let span = params[P_SPAN];
    let p = params[P_PASS];
    let top = params[P_PASSES] - 1u;
    let f = min(start / span, top);
    var l = f;
    if (end > start) {
        l = min((end - 1u) / span, top);
    }
    let lo = max(start, p * span);
    let hi = min(end, (p + 1u) * span);
    return Pass(lo, max(lo, hi), p == f, p == l, p >= f && p <= l);
}

// Where batch b's mask starts.
fn mask_base(b: u32) -> u32 {
    let nb = params[P_NB];
    return strided_offset(b, params[P_MBASE], nb, P_SHAPE, P_SHAPE + nb);
}

// Element `at` of q (which = 0), k (1), v (2) or g (3).
fn load(which: u32, at: u32) -> f32 {
    var x = 0.0;
    switch which {
        case 0u: { x = q[at]; }
        case 1u: { x = k[at]; }
        case 2u: { x = v[at]; }
        default: { x = read_g(at); }
    }
    return x;
}

// Stages rows r0 .. r0 + 16 (of `rows`), dims d0 .. d0 + 64 (of `dims`) of a packed matrix
// starting at element `base` of operand `which` (see load) into `ta`, zeros past the edges.
// Called by all 64 invocations (uniform control flow).
fn stage(which: u32, base: u32, r0: u32, rows: u32, d0: u32, dims: u32, lid: u32) {
    workgroupBarrier();
    for (var t = 0u; t < 16u; t = t + 1u) {
        let idx = t * 64u + lid;
        let r = r0 + idx / 64u;
        let d = d0 + idx % 64u;
        var x = 0.0;
        if (r < rows && d < dims) {
            x = load(which, base + r * dims + d);
        }
        ta[idx] = x;
    }
    workgroupBarrier();
}

// The 16 dot products of this invocation's row (starting at element `row` of operand `own`)
// with rows r0 .. r0 + 16 of the matrix at `base` of operand `which`: the scores q kᵀ (or
// k qᵀ) and dO vᵀ (or v dOᵀ), `dims` long, staged 64 dims at a time.
fn dots(own: u32, row: u32, which: u32, base: u32, r0: u32, rows: u32, dims: u32, lid: u32) -> array<f32, 16> {
    var s: array<f32, 16>;
    for (var e0 = 0u; e0 < dims; e0 = e0 + 64u) {
        stage(which, base, r0, rows, e0, dims, lid);
        let de = min(64u, dims - e0);
        for (var d = 0u; d < de; d = d + 1u) {
            let x = load(own, row + e0 + d);
            for (var jj = 0u; jj < STEP; jj = jj + 1u) {
                s[jj] = s[jj] + x * ta[jj * 64u + d];
            }
        }
    }
    return s;
}

// acc += Σ_jj w[jj] · (row r0 + jj, dims c0 .. c0 + 64 of the matrix at `base` of `which`):
// P v, dS k, dSᵀ q or (P Z)ᵀ dO for this invocation's 64 output dims.
fn accumulate(acc: ptr<function, array<f32, 64>>, w: array<f32, 16>, which: u32, base: u32, r0: u32, rows: u32, c0: u32, dims: u32, lid: u32) {
    stage(which, base, r0, rows, c0, dims, lid);
    for (var jj = 0u; jj < STEP; jj = jj + 1u) {
        let p = w[jj];
        for (var d = 0u; d < 64u; d = d + 1u) {
            (*acc)[d] = (*acc)[d] + p * ta[jj * 64u + d];
        }
    }
}

// A raw score q_i · k_j made the score softmax sees: scaled, masked (a boolean mask's -inf
// replaces, a float mask adds), causal (j > i) and out-of-range (j >= S) keys at -inf.
fn finish_score(raw: f32, i: u32, j: u32, mb: u32) -> f32 {
    let flags = params[P_FLAGS];
    if (j >= params[P_S] || ((flags & 1u) != 0u && j > i)) {
        return neg_inf();
    }
    var x = raw * pf(P_SCALE);
    if ((flags & 2u) != 0u) {
        let mv = mask[mb + i * params[P_MROW] + j * params[P_MCOL]];
        if ((flags & 4u) != 0u && is_neg_inf(mv)) {
            x = neg_inf();
        } else {
            x = x + mv;
        }
    }
    return x;
}

// The dropout factor of element (b, i, j): 1 / (1 - p) when kept, 0 when dropped, 1 without
// dropout.
fn drop_factor(b: u32, i: u32, j: u32) -> f32 {
    if ((params[P_FLAGS] & 8u) == 0u) {
        return 1.0;
    }
    let e = (b * params[P_L] + i) * params[P_S] + j;
    let w = philox_words(params[P_SEED], params[P_SEED + 1u], params[P_OFFSET], params[P_OFFSET + 1u], e);
    return select(0.0, pf(P_DROP_SCALE), uniform_of(w.x) >= pf(P_DROP_P));
}

