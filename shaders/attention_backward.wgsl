// attention_backward.wgsl: the backward of the fused attention (helpers in attention.wgsl,
// composed after this file; see its header for the whole contract). Scores are recomputed tile
// by tile from the forward's lse; D = rowsum(dO ∘ out) comes in with it.
// Declared   by the library from this file's SHADERS entry (src/gpu/shader_table.rs):
// Bindings   @binding(0) q, (1) k, (2) v, (3) mask (a dummy without one; these four read by
//            attention.wgsl), (4) g = dO [B, L, Ev], (5) stats = [lse (B L), D (B L)] from
//            P_SOFF, (6) dst, (7) params.

fn read_g(at: u32) -> f32 {
    return g[at];
}

// Query row i's (lse, D) from the forward, in `stats`.
fn row_stats(w: Work, i: u32) -> vec2<f32> {
    let at = params[P_SOFF] + w.b * w.l + i;
    return vec2<f32>(stats[at], stats[at + w.nb * w.l]);
}

// P = exp(S - lse) of a finished score (0 at -inf; a NaN lse or score stays NaN).
fn prob(x: f32, lse: f32) -> f32 {
    return select(exp(x - lse), 0.0, is_neg_inf(x) && !is_nan(lse));
}

// dq (and dS) for a tile of 64 queries, one query per invocation.
@compute @workgroup_size(64)
fn attn_dq(group: Group, @builtin(local_invocation_index) lid: u32) {
    let w = work_item(group, lid, P_L);
    if (w.b >= w.nb) { return; }
    let flags = params[P_FLAGS];
    let mb = mask_base(w.b);
    let qrow = params[P_QOFF] + (w.b * w.l + w.at) * w.e;
    let grow = params[P_GOFF] + (w.b * w.l + w.at) * w.ev;
    let kbase = params[P_KOFF] + w.b * w.s * w.e;
    let vbase = params[P_VOFF] + w.b * w.s * w.ev;
    let st = row_stats(w, w.at);
    let lse = st.x;
    let dd = st.y;
    let write_ds = (flags & 16u) != 0u && w.chunk == 0u && w.row < w.l;
    var kend = w.s;
    if ((flags & 1u) != 0u) {
        kend = min(min(w.first + TILE, w.l), w.s);
    }
    let ps = pass_of(0u, kend);
    let live = w.row < w.l;
    let orow = (w.b * w.l + w.row) * w.e;
    let dc = min(64u, w.e - w.col0);
    if (ps.busy) {
        // The dq accumulators wait in dq's own rows between passes (unscaled); the last pass
        // scales them. Zero-initialized, like every WGSL var without an initializer.
        var acc: array<f32, 64>;
        if (!ps.first && live) {
            for (var d = 0u; d < dc; d = d + 1u) {
                acc[d] = dst[orow + w.col0 + d];
            }
        }
        for (var j0 = ps.lo; j0 < ps.hi; j0 = j0 + STEP) {
            var s = dots(0u, qrow, 1u, kbase, j0, w.s, w.e, lid);
            let dp = dots(3u, grow, 2u, vbase, j0, w.s, w.ev, lid);
            for (var jj = 0u; jj < STEP; jj = jj + 1u) {
                let j = j0 + jj;
                let p = prob(finish_score(s[jj], w.at, j, mb), lse);
                let ds = p * (drop_factor(w.b, w.row, j) * dp[jj] - dd);
                s[jj] = select(ds, 0.0, j >= w.s);
                if (write_ds && j < w.s) {
                    dst[params[P_AUX] + (w.b * w.l + w.row) * w.s + j] = s[jj];
                }
            }
            accumulate(&acc, s, 1u, kbase, j0, w.s, w.col0, w.e, lid);
        }
        if (live) {
            let scale = select(1.0, pf(P_SCALE), ps.last);
            for (var d = 0u; d < dc; d = d + 1u) {
                dst[orow + w.col0 + d] = select(acc[d], acc[d] * scale, ps.last);
            }
        }
    }
    if (write_ds) {
        // Keys past the causal end of this tile, within this pass: dS = 0 (16 at a time).
        let p0 = params[P_PASS] * params[P_SPAN];
        let p1 = min(w.s, p0 + params[P_SPAN]);
        for (var j0 = max(kend, p0); j0 < p1; j0 = j0 + STEP) {
            for (var jj = 0u; jj < STEP; jj = jj + 1u) {
                if (j0 + jj < p1) {
                    dst[params[P_AUX] + (w.b * w.l + w.row) * w.s + j0 + jj] = 0.0;
                }
            }
        }
    }
}

// dk (chunks below P_KCHUNKS) or dv for a tile of 64 keys, one key per invocation.
@compute @workgroup_size(64)
fn attn_dkv(group: Group, @builtin(local_invocation_index) lid: u32) {
    let w = work_item(group, lid, P_S);
    if (w.b >= w.nb) { return; }
    let is_k = w.chunk < params[P_KCHUNKS];
    let c0 = select(w.chunk - params[P_KCHUNKS], w.chunk, is_k) * 64u;
    let mb = mask_base(w.b);
    let krow = params[P_KOFF] + (w.b * w.s + w.at) * w.e;
    let vrow = params[P_VOFF] + (w.b * w.s + w.at) * w.ev;
    let qbase = params[P_QOFF] + w.b * w.l * w.e;
    let gbase = params[P_GOFF] + w.b * w.l * w.ev;
    var istart = 0u;
    if ((params[P_FLAGS] & 1u) != 0u) {
        istart = min(w.first, w.l);
    }
    let ps = pass_of(istart, w.l);
    if (!ps.busy) { return; }
    let live = w.row < w.s;
    // This key's accumulators wait in its own dk or dv row between passes (unscaled).
    var orow = params[P_AUX] + (w.b * w.s + w.row) * w.ev + c0;
    var dc = min(64u, w.ev - c0);
    if (is_k) {
        orow = (w.b * w.s + w.row) * w.e + c0;
        dc = min(64u, w.e - c0);
    }
    var acc: array<f32, 64>;
    if (!ps.first && live) {
        for (var d = 0u; d < dc; d = d + 1u) {
            acc[d] = dst[orow + d];
        }
    }
    for (var i0 = ps.lo; i0 < ps.hi; i0 = i0 + STEP) {
        var s = dots(1u, krow, 0u, qbase, i0, w.l, w.e, lid);
        let dp = dots(2u, vrow, 3u, gbase, i0, w.l, w.ev, lid);
        for (var ii = 0u; ii < STEP; ii = ii + 1u) {
            let i = i0 + ii;
            let ic = min(i, w.l - 1u);
            let st = row_stats(w, ic);
            let lse = st.x;
            let dd = st.y;
            let p = prob(finish_score(s[ii], ic, w.row, mb), lse);
            let z = drop_factor(w.b, ic, w.at);
            let live = i < w.l && w.row < w.s;
            // dS for dk, P Z for dv.
            s[ii] = select(0.0, select(p * z, p * (z * dp[ii] - dd), is_k), live);
        }
        if (is_k) {
            accumulate(&acc, s, 0u, qbase, i0, w.l, c0, w.e, lid);
        } else {
            accumulate(&acc, s, 3u, gbase, i0, w.l, c0, w.ev, lid);
        }
    }
    if (!live) { return; }
    // dk is scaled once, by the last pass; dv is the sum itself.
    let scaled = is_k && ps.last;
    let scale = select(1.0, pf(P_SCALE), scaled);
    for (var d = 0u; d < dc; d = d + 1u) {
        dst[orow + d] = select(acc[d], acc[d] * scale, scaled);
    }
}
