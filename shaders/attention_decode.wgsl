// attention_decode.wgsl: attention of ONE query position per head over the first `len`
// positions of a KV cache, in one pass over K and V with an online softmax (flash-decoding
// without the split): no score matrix is written anywhere.
//
// Computes   out[h] = softmax(q[h] . K[0..len, kvh]^T * scale) V[0..len, kvh],  kvh = h / group
//            Positions are taken in tiles of 64: invocation t scores position tile + t (a dot
//            product over the head), the 64 scores go to workgroup memory, every invocation
//            updates the running max m and sum l from them (the same values in each, so no
//            reduction tree) and rescales its accumulators, then adds e^(s - m) * V for the
//            head dims it owns (t, t + 64, t + 128, t + 192). Masked slots hold -3e38, whose
//            exponential underflows to 0 (WGSL may not assume infinities exist).
// Declared   by the library from this file's SHADERS entry (src/gpu/shader_table.rs):
// Bindings   @group(0) @binding(0) q      : array<f32>, read-only, packed [heads, head_dim]
//            @group(0) @binding(1) k      : array<f32>, read-only, packed [capacity, kv_heads, head_dim]
//            @group(0) @binding(2) v      : array<f32>, read-only, same layout as k
//            @group(0) @binding(3) dst    : array<f32>, read-write, packed [heads, head_dim],
//                                           then with several passes [m, l] per head
//            @group(0) @binding(4) params : array<u32>, read-only:
//                                           [heads, kv_heads, head_dim, len, scale bits,
//                                            first tile of this pass, tiles per pass]
// Dispatch   64 invocations per workgroup, one workgroup per query head (heads workgroups on
//            the 2-D grid: head = wid.y * nwg.x + wid.x); head_dim <= 256. One dispatch (a
//            pass) takes at most params[6] tiles: lavapipe ends an invocation's loops silently
//            once they have run 65,535 iterations all together, which a cache of ~9,000
//            positions reached in one pass. The host sizes the passes (src/gpu/attention_decode.rs)
//            and dispatches them in order; between passes a head's accumulators (unnormalised)
//            wait in dst and its m, l after all heads' outputs, in f32, so the passes give the
//            bits of one.

// TILE, the positions per tile and invocations per workgroup, is the contract's
// (src/gpu/contract.rs).
const MASKED: f32 = -3.0e38;

var<workgroup> qs: array<f32, 256>;
var<workgroup> scores: array<f32, TILE>;

@compute @workgroup_size(TILE)
fn attention_decode(inv: Invocation) {
    let t = inv.lid;
    let h = group_index(inv.wid, inv.nwg);
    let heads = params[0];
    let kv_heads = params[1];
    let hd = params[2];
    let len = params[3];
    let scale = bitcast<f32>(params[4]);
    // Workgroups past the last head still reach every barrier, with nothing to do.
    let all_tiles = (len + TILE - 1u) / TILE;
    let t0 = params[5];
    let t1 = min(all_tiles, t0 + params[6]);
    let first = t0 == 0u;
    let last = t1 == all_tiles;
    let state = heads * hd + 2u * h;
    var tiles = t0;
    if (h < heads) {
        tiles = t1;
        for (var d = t; d < hd; d = d + TILE) {
            qs[d] = q[h * hd + d];
        }
    }
    let kvh = h / max(heads / max(kv_heads, 1u), 1u);
    let row = kv_heads * hd;
    workgroupBarrier();
    var m = MASKED;
    var l = 0.0;
    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    if (h < heads && !first) {
        m = dst[state];
        l = dst[state + 1u];
        for (var i = 0u; i < 4u; i = i + 1u) {
            let d = t + i * TILE;
            if (d < hd) {
                acc[i] = dst[h * hd + d];
            }
        }
    }
    for (var tile = t0; tile < tiles; tile = tile + 1u) {
        let base = tile * TILE;
        let p = base + t;
        var s = MASKED;
        if (p < len) {
            let kb = p * row + kvh * hd;
            var dot = 0.0;
            for (var d = 0u; d < hd; d = d + 1u) {
                dot = dot + qs[d] * k[kb + d];
            }
            s = dot * scale;
        }
        scores[t] = s;
        workgroupBarrier();
        let n = min(TILE, len - base);
        var tile_max = MASKED;
        for (var j = 0u; j < n; j = j + 1u) {
            tile_max = max(tile_max, scores[j]);
        }
        let m_new = max(m, tile_max);
        let corr = exp(m - m_new);
        l = l * corr;
        for (var i = 0u; i < 4u; i = i + 1u) {
            acc[i] = acc[i] * corr;
        }
        for (var j = 0u; j < n; j = j + 1u) {
            let e = exp(scores[j] - m_new);
            l = l + e;
            let vb = (base + j) * row + kvh * hd;
            for (var i = 0u; i < 4u; i = i + 1u) {
                let d = t + i * TILE;
                if (d < hd) {
                    acc[i] = acc[i] + e * v[vb + d];
                }
            }
        }
        m = m_new;
        // Every invocation has read this tile's scores before the next tile overwrites them.
        workgroupBarrier();
    }
    if (h < heads) {
        for (var i = 0u; i < 4u; i = i + 1u) {
            let d = t + i * TILE;
            if (d < hd) {
                dst[h * hd + d] = select(acc[i], acc[i] / l, last);
            }
        }
        if (!last && t == 0u) {
            dst[state] = m;
            dst[state + 1u] = l;
        }
    }
}
