// attention_forward.wgsl: the forward of the fused attention (helpers in attention.wgsl, composed
// after this file; see its header for the whole contract).
// Bindings   @binding(0) q, (1) k, (2) v, (3) mask (a dummy without one), (4) dst = [out (B L Ev),
//            lse (B L)], (5) params.

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> mask: array<f32>;
@group(0) @binding(4) var<storage, read_write> dst: array<f32>;
@group(0) @binding(5) var<storage, read> params: array<u32>;

// The forward has no upstream gradient (stage() never asks for it here).
fn read_g(at: u32) -> f32 {
    return 0.0;
}

@compute @workgroup_size(64)
fn attn_forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let it = work_item(wid, nwg);
    let b = it.z;
    if (b >= params[P_B]) {
        return;
    }
    let L = params[P_L];
    let S = params[P_S];
    let E = params[P_E];
    let EV = params[P_EV];
    let i0 = it.x * TILE;
    let i = i0 + lid;
    let c0 = it.y * 64u;
    let causal = (params[P_FLAGS] & 1u) != 0u;
    let mb = mask_base(b);
    let qrow = params[P_QOFF] + (b * L + min(i, L - 1u)) * E;
    let kbase = params[P_KOFF] + b * S * E;
    let vbase = params[P_VOFF] + b * S * EV;
    var kend = S;
    if (causal) {
        kend = min(min(i0 + TILE, L), S);
    }
    var acc: array<f32, 64>;
    for (var d = 0u; d < 64u; d = d + 1u) {
        acc[d] = 0.0;
    }
    var m = neg_inf();
    var l = 0.0;
    var bad = false;
    for (var j0 = 0u; j0 < kend; j0 = j0 + STEP) {
        var s: array<f32, 16>;
        for (var jj = 0u; jj < STEP; jj = jj + 1u) {
            s[jj] = 0.0;
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
        var mx = neg_inf();
        for (var jj = 0u; jj < STEP; jj = jj + 1u) {
            let x = finish_score(s[jj], min(i, L - 1u), j0 + jj, mb);
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
                s[jj] = p * drop_factor(b, i, j0 + jj);
            }
            l = l * alpha + sum;
            for (var d = 0u; d < 64u; d = d + 1u) {
                acc[d] = acc[d] * alpha;
            }
            m = m_new;
        } else {
            for (var jj = 0u; jj < STEP; jj = jj + 1u) {
                s[jj] = 0.0;
            }
        }
        workgroupBarrier();
        stage(2u, 1u, vbase, j0, S, c0, EV, lid);
        workgroupBarrier();
        for (var jj = 0u; jj < STEP; jj = jj + 1u) {
            let p = s[jj];
            for (var d = 0u; d < 64u; d = d + 1u) {
                acc[d] = acc[d] + p * tb[jj * 64u + d];
            }
        }
    }
    if (i >= L) {
        return;
    }
    let dead = bad || l == 0.0;
    let inv = 1.0 / l;
    let orow = (b * L + i) * EV;
    let dc = min(64u, EV - c0);
    for (var d = 0u; d < dc; d = d + 1u) {
        dst[orow + c0 + d] = select(acc[d] * inv, nan_f32(), dead);
    }
    if (it.y == 0u) {
        dst[params[P_AUX] + b * L + i] = select(m + log(l), nan_f32(), dead);
    }
}
