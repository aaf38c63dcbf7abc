// attention_backward.wgsl: the backward of the fused attention (helpers in attention.wgsl,
// composed after this file; see its header for the whole contract). Scores are recomputed tile
// by tile from the forward's lse; D = rowsum(dO ∘ out) comes in with it.
// Bindings   @binding(0) q, (1) k, (2) v, (3) mask (a dummy without one), (4) g = dO [B, L, Ev],
//            (5) stats = [lse (B L), D (B L)] from P_SOFF, (6) dst, (7) params.

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> mask: array<f32>;
@group(0) @binding(4) var<storage, read> g: array<f32>;
@group(0) @binding(5) var<storage, read> stats: array<f32>;
@group(0) @binding(6) var<storage, read_write> dst: array<f32>;
@group(0) @binding(7) var<storage, read> params: array<u32>;

fn read_g(at: u32) -> f32 {
    return g[at];
}

// P = exp(S - lse) of a finished score (0 at -inf; a NaN lse or score stays NaN).
fn prob(x: f32, lse: f32) -> f32 {
    return select(exp(x - lse), 0.0, is_neg_inf(x) && !is_nan(lse));
}

// dq (and dS) for a tile of 64 queries, one query per invocation.
@compute @workgroup_size(64)
fn attn_dq(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let it = work_item(wid, nwg);
    let b = it.z;
    if (b >= params[P_B]) {
        return;
    }
    let B = params[P_B];
    let L = params[P_L];
    let S = params[P_S];
    let E = params[P_E];
    let EV = params[P_EV];
    let i0 = it.x * TILE;
    let i = i0 + lid;
    let ic = min(i, L - 1u);
    let c0 = it.y * 64u;
    let flags = params[P_FLAGS];
    let mb = mask_base(b);
    let qrow = params[P_QOFF] + (b * L + ic) * E;
    let grow = params[P_GOFF] + (b * L + ic) * EV;
    let kbase = params[P_KOFF] + b * S * E;
    let vbase = params[P_VOFF] + b * S * EV;
    let lse = stats[params[P_SOFF] + b * L + ic];
    let dd = stats[params[P_SOFF] + B * L + b * L + ic];
    let write_ds = (flags & 16u) != 0u && it.y == 0u && i < L;
    var kend = S;
    if ((flags & 1u) != 0u) {
        kend = min(min(i0 + TILE, L), S);
    }
    var acc: array<f32, 64>;
    for (var d = 0u; d < 64u; d = d + 1u) {
        acc[d] = 0.0;
    }
    for (var j0 = 0u; j0 < kend; j0 = j0 + STEP) {
        var s: array<f32, 16>;
        var dp: array<f32, 16>;
        for (var jj = 0u; jj < STEP; jj = jj + 1u) {
            s[jj] = 0.0;
            dp[jj] = 0.0;
        }
        for (var e0 = 0u; e0 < E; e0 = e0 + 64u) {
            workgroupBarrier();
            stage(1u, 0u, kbase, j0, S, e0, E, lid);
            workgroupBarrier();
            let de = min(64u, E - e0);
            for (var d = 0u; d < de; d = d + 1u) {
                let qd = q[qrow + e0 + d];
                for (var jj = 0u; jj < STEP; jj = jj + 1u) {
                    s[jj] = s[jj] + qd * ta[jj * 64u + d];
                }
            }
        }
        for (var e0 = 0u; e0 < EV; e0 = e0 + 64u) {
            workgroupBarrier();
            stage(2u, 1u, vbase, j0, S, e0, EV, lid);
            workgroupBarrier();
            let de = min(64u, EV - e0);
            for (var d = 0u; d < de; d = d + 1u) {
                let gd = g[grow + e0 + d];
                for (var jj = 0u; jj < STEP; jj = jj + 1u) {
                    dp[jj] = dp[jj] + gd * tb[jj * 64u + d];
                }
            }
        }
        for (var jj = 0u; jj < STEP; jj = jj + 1u) {
            let j = j0 + jj;
            let p = prob(finish_score(s[jj], ic, j, mb), lse);
            let ds = p * (drop_factor(b, i, j) * dp[jj] - dd);
            s[jj] = select(ds, 0.0, j >= S);
            if (write_ds && j < S) {
                dst[params[P_AUX] + (b * L + i) * S + j] = s[jj];
            }
        }
        workgroupBarrier();
        stage(1u, 0u, kbase, j0, S, c0, E, lid);
        workgroupBarrier();
        for (var jj = 0u; jj < STEP; jj = jj + 1u) {
            let ds = s[jj];
            for (var d = 0u; d < 64u; d = d + 1u) {
                acc[d] = acc[d] + ds * ta[jj * 64u + d];
            }
        }
    }
    if (i >= L) {
        return;
    }
    if (write_ds) {
        // Keys past the causal end of this tile: dS = 0 (16 at a time, a bounded loop).
        for (var j0 = kend; j0 < S; j0 = j0 + STEP) {
            for (var jj = 0u; jj < STEP; jj = jj + 1u) {
                if (j0 + jj < S) {
                    dst[params[P_AUX] + (b * L + i) * S + j0 + jj] = 0.0;
                }
            }
        }
    }
    let scale = pf(P_SCALE);
    let dc = min(64u, E - c0);
    for (var d = 0u; d < dc; d = d + 1u) {
        dst[(b * L + i) * E + c0 + d] = acc[d] * scale;
    }
}

// dk (chunks below P_KCHUNKS) or dv for a tile of 64 keys, one key per invocation.
@compute @workgroup_size(64)
fn attn_dkv(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let it = work_item(wid, nwg);
    let b = it.z;
    if (b >= params[P_B]) {
        return;
    }
    let B = params[P_B];
    let L = params[P_L];
    let S = params[P_S];
    let E = params[P_E];
    let EV = params[P_EV];
    let j0t = it.x * TILE;
    let j = j0t + lid;
    let jc = min(j, S - 1u);
    let is_k = it.y < params[P_KCHUNKS];
    let c0 = select(it.y - params[P_KCHUNKS], it.y, is_k) * 64u;
    let mb = mask_base(b);
    let krow = params[P_KOFF] + (b * S + jc) * E;
    let vrow = params[P_VOFF] + (b * S + jc) * EV;
    let qbase = params[P_QOFF] + b * L * E;
    let gbase = params[P_GOFF] + b * L * EV;
    var istart = 0u;
    if ((params[P_FLAGS] & 1u) != 0u) {
        istart = min(j0t, L);
    }
    var acc: array<f32, 64>;
    for (var d = 0u; d < 64u; d = d + 1u) {
        acc[d] = 0.0;
    }
    for (var i0 = istart; i0 < L; i0 = i0 + STEP) {
        var s: array<f32, 16>;
        var dp: array<f32, 16>;
        for (var ii = 0u; ii < STEP; ii = ii + 1u) {
            s[ii] = 0.0;
            dp[ii] = 0.0;
        }
        for (var e0 = 0u; e0 < E; e0 = e0 + 64u) {
            workgroupBarrier();
            stage(0u, 0u, qbase, i0, L, e0, E, lid);
            workgroupBarrier();
            let de = min(64u, E - e0);
            for (var d = 0u; d < de; d = d + 1u) {
                let kd = k[krow + e0 + d];
                for (var ii = 0u; ii < STEP; ii = ii + 1u) {
                    s[ii] = s[ii] + ta[ii * 64u + d] * kd;
                }
            }
        }
        for (var e0 = 0u; e0 < EV; e0 = e0 + 64u) {
            workgroupBarrier();
            stage(3u, 1u, gbase, i0, L, e0, EV, lid);
            workgroupBarrier();
            let de = min(64u, EV - e0);
            for (var d = 0u; d < de; d = d + 1u) {
                let vd = v[vrow + e0 + d];
                for (var ii = 0u; ii < STEP; ii = ii + 1u) {
                    dp[ii] = dp[ii] + tb[ii * 64u + d] * vd;
                }
            }
        }
        for (var ii = 0u; ii < STEP; ii = ii + 1u) {
            let i = i0 + ii;
            let ic = min(i, L - 1u);
            let lse = stats[params[P_SOFF] + b * L + ic];
            let dd = stats[params[P_SOFF] + B * L + b * L + ic];
            let p = prob(finish_score(s[ii], ic, j, mb), lse);
            let z = drop_factor(b, ic, jc);
            let live = i < L && j < S;
            // dS for dk, P Z for dv.
            s[ii] = select(0.0, select(p * z, p * (z * dp[ii] - dd), is_k), live);
        }
        workgroupBarrier();
        if (is_k) {
            stage(0u, 0u, qbase, i0, L, c0, E, lid);
        } else {
            stage(3u, 0u, gbase, i0, L, c0, EV, lid);
        }
        workgroupBarrier();
        for (var ii = 0u; ii < STEP; ii = ii + 1u) {
            let w = s[ii];
            for (var d = 0u; d < 64u; d = d + 1u) {
                acc[d] = acc[d] + w * ta[ii * 64u + d];
            }
        }
    }
    if (j >= S) {
        return;
    }
    if (is_k) {
        let scale = pf(P_SCALE);
        let dc = min(64u, E - c0);
        for (var d = 0u; d < dc; d = d + 1u) {
            dst[(b * S + j) * E + c0 + d] = acc[d] * scale;
        }
    } else {
        let dc = min(64u, EV - c0);
        for (var d = 0u; d < dc; d = d + 1u) {
            dst[params[P_AUX] + (b * S + j) * EV + c0 + d] = acc[d];
        }
    }
}
