// attention_forward.wgsl: the forward of the fused attention (helpers in attention.wgsl, composed
// after this file; see its header for the whole contract).
// Declared   by the library from this file's SHADERS entry (src/gpu/shader_table.rs):
// Bindings   @binding(0) q, (1) k, (2) v, (3) mask (a dummy without one; these four read by
//            attention.wgsl), (4) dst = [out (B L Ev), lse (B L)], (5) params.

// The forward has no upstream gradient (load() never asks for it here).
fn read_g(at: u32) -> f32 {
    return 0.0;
}

@compute @workgroup_size(64)
fn attn_forward(group: Group, @builtin(local_invocation_index) lid: u32) {
    let w = work_item(group, lid, P_L);
    if (w.b >= w.nb) { return; }
    let causal = (params[P_FLAGS] & 1u) != 0u;
    let mb = mask_base(w.b);
    let qrow = params[P_QOFF] + (w.b * w.l + w.at) * w.e;
    let kbase = params[P_KOFF] + w.b * w.s * w.e;
    let vbase = params[P_VOFF] + w.b * w.s * w.ev;
    var kend = w.s;
    if (causal) {
        kend = min(min(w.first + TILE, w.l), w.s);
    }
    let ps = pass_of(0u, kend);
    if (!ps.busy) { return; }
    let live = w.row < w.l;
    let orow = (w.b * w.l + w.row) * w.ev;
    let dc = min(64u, w.ev - w.col0);
    // This (chunk, row)'s m, l and NaN flag between passes (each chunk keeps its own: chunks
    // of one row run at once within a pass).
    let st = params[P_STATE] + ((w.chunk * w.nb + w.b) * w.l + w.row) * 3u;
    // Zero-initialized, like every WGSL var without an initializer.
    var acc: array<f32, 64>;
    var m = neg_inf();
    var l = 0.0;
    var bad = false;
    if (!ps.first && live) {
        for (var d = 0u; d < dc; d = d + 1u) {
            acc[d] = dst[orow + w.col0 + d];
        }
        m = dst[st];
        l = dst[st + 1u];
        bad = dst[st + 2u] != 0.0;
    }
    for (var j0 = ps.lo; j0 < ps.hi; j0 = j0 + STEP) {
        var s = dots(0u, qrow, 1u, kbase, j0, w.s, w.e, lid);
        var mx = neg_inf();
        for (var jj = 0u; jj < STEP; jj = jj + 1u) {
            let x = finish_score(s[jj], w.at, j0 + jj, mb);
            s[jj] = x;
            if (is_nan(x) || bitcast<u32>(x) == INF_BITS) {
                bad = true;
            } else if (x > mx) {
                mx = x;
            }
        }
        let m_new = max(m, mx);
        if (!is_neg_inf(m_new)) {
            let alpha = select(exp(m - m_new), 0.0, is_neg_inf(m));
            var sum = 0.0;
            for (var jj = 0u; jj < STEP; jj = jj + 1u) {
                let p = select(exp(s[jj] - m_new), 0.0, is_neg_inf(s[jj]));
                sum = sum + p;
                s[jj] = p * drop_factor(w.b, w.row, j0 + jj);
            }
            l = l * alpha + sum;
            for (var d = 0u; d < 64u; d = d + 1u) {
                acc[d] = acc[d] * alpha;
            }
            m = m_new;
        } else {
            s = array<f32, 16>();
        }
        accumulate(&acc, s, 2u, vbase, j0, w.s, w.col0, w.ev, lid);
    }
    if (!live) { return; }
    if (!ps.last) {
        for (var d = 0u; d < dc; d = d + 1u) {
            dst[orow + w.col0 + d] = acc[d];
        }
        dst[st] = m;
        dst[st + 1u] = l;
        dst[st + 2u] = select(0.0, 1.0, bad);
        return;
    }
    let dead = bad || l == 0.0;
    let inv = 1.0 / l;
    for (var d = 0u; d < dc; d = d + 1u) {
        dst[orow + w.col0 + d] = select(acc[d] * inv, nan_f32(), dead);
    }
    if (w.chunk == 0u) {
        dst[params[P_AUX] + w.b * w.l + w.row] = select(m + log(l), nan_f32(), dead);
    }
}
