// layer_norm.wgsl: layer normalisation over the last dim of a packed [nrows, len] tensor in ONE
// dispatch, one workgroup per row, f32 accumulation.
//
// Computes   dst = (x - mean) / sqrt(var + eps) * weight + bias   (var biased: divides by len)
//            Each thread folds its elements k = lid, lid + 256, ... with Welford's update into
//            (count, mean, M2); the 256 triples are merged by a fixed binary tree in workgroup
//            memory with Chan's formula (deterministic, no cancellation of a one-pass sum of
//            squares), then the row is read again and written. NaN propagates arithmetically.
// Bindings   @group(0) @binding(0) src    : array<f32>, read-only, packed [nrows, len]
//            @group(0) @binding(1) weight : array<f32>, read-only, len (unused unless FLAGS & 1)
//            @group(0) @binding(2) bias   : array<f32>, read-only, len (unused unless FLAGS & 2)
//            @group(0) @binding(3) dst    : array<f32>, read-write, packed [nrows, len]
//            @group(0) @binding(4) params : array<u32>, read-only: [nrows, len, eps bits, flags]
// Dispatch   256 threads per workgroup, nrows workgroups on the 2-D grid (row = wid.y * nwg.x +
//            wid.x); workgroups past nrows do nothing (but still reach every barrier).

@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read> weight: array<f32>;
@group(0) @binding(2) var<storage, read> bias: array<f32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;
@group(0) @binding(4) var<storage, read> params: array<u32>;

var<workgroup> wn: array<f32, 256>;
var<workgroup> wmean: array<f32, 256>;
var<workgroup> wm2: array<f32, 256>;

@compute @workgroup_size(256)
fn layer_norm(inv: Invocation) {
    let lid = inv.lid;
    let row = inv.wid.y * inv.nwg.x + inv.wid.x;
    let len = params[1];
    var count = 0u;
    if (row < params[0]) {
        count = len;
    }
    let base = row * len;
    var n = 0.0;
    var mean = 0.0;
    var m2 = 0.0;
    for (var k = lid; k < count; k = k + 256u) {
        let x = src[base + k];
        n = n + 1.0;
        let d = x - mean;
        mean = mean + d / n;
        m2 = m2 + d * (x - mean);
    }
    wn[lid] = n;
    wmean[lid] = mean;
    wm2[lid] = m2;
    workgroupBarrier();
    // Fixed tree: 128, 64, ..., 1 (the same order on every run and device).
    for (var h = 128u; h > 0u; h = h >> 1u) {
        if (lid < h) {
            let na = wn[lid];
            let nb = wn[lid + h];
            if (nb > 0.0) {
                let nn = na + nb;
                let d = wmean[lid + h] - wmean[lid];
                wmean[lid] = wmean[lid] + d * (nb / nn);
                wm2[lid] = wm2[lid] + wm2[lid + h] + d * d * (na * nb / nn);
                wn[lid] = nn;
            }
        }
        workgroupBarrier();
    }
    let mu = wmean[0];
    let rstd = 1.0 / sqrt(wm2[0] / f32(len) + bitcast<f32>(params[2]));
    let flags = params[3];
    for (var k = lid; k < count; k = k + 256u) {
        var y = (src[base + k] - mu) * rstd;
        if ((flags & 1u) != 0u) {
            y = y * weight[k];
        }
        if ((flags & 2u) != 0u) {
            y = y + bias[k];
        }
        dst[base + k] = y;
    }
}

// One invocation per row: the autotuned variant for many rows (no workgroup merge, no barrier;
// a software adapter pays dearly for each barrier). Welford over the whole row, then the write
// pass. 256 rows per workgroup on the same 2-D grid (row = (wid.y * nwg.x + wid.x) * 256 + lid).
@compute @workgroup_size(256)
fn layer_norm_per_row(inv: Invocation) {
    let row = (inv.wid.y * inv.nwg.x + inv.wid.x) * 256u + inv.lid;
    if (row >= params[0]) {
        return;
    }
    let len = params[1];
    let base = row * len;
    var n = 0.0;
    var mean = 0.0;
    var m2 = 0.0;
    for (var k = 0u; k < len; k = k + 1u) {
        let x = src[base + k];
        n = n + 1.0;
        let d = x - mean;
        mean = mean + d / n;
        m2 = m2 + d * (x - mean);
    }
    let rstd = 1.0 / sqrt(m2 / f32(len) + bitcast<f32>(params[2]));
    let flags = params[3];
    for (var k = 0u; k < len; k = k + 1u) {
        var y = (src[base + k] - mean) * rstd;
        if ((flags & 1u) != 0u) {
            y = y * weight[k];
        }
        if ((flags & 2u) != 0u) {
            y = y + bias[k];
        }
        dst[base + k] = y;
    }
}
