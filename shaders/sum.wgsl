// sum.wgsl: the first pass of an f32 sum (or mean) over one packed row, four elements per load.
//
// Computes   partial c = the sum of elements [c * 16384, min(n, (c + 1) * 16384)) of the row
//            starting at element `offset` (a multiple of 4). Each of 256 threads adds 16
//            vec4s (consecutive threads, consecutive vectors: coalesced 16-byte loads), its four
//            lanes are added, then a fixed tree in workgroup memory: the order depends on the
//            sizes only, so the same input gives the same bits. The last vector of the row is
//            masked past n (the buffer holds whole vectors). The partials are reduced by
//            reduce.wgsl. Sums start at -0.0, so a row of -0.0 sums to -0.0; NaN propagates.
// Declared   by the library from this file's SHADERS entry (src/gpu/shader_table.rs):
// Bindings   @group(0) @binding(0) src    : array<vec4<f32>>, read-only
//            @group(0) @binding(1) dst    : array<f32>, read-write, one partial per workgroup
//            @group(0) @binding(2) params : array<u32>, read-only: [chunks, n, offset / 4]
// Dispatch   one 256-thread workgroup per chunk on the 2-D grid (wid.y * nwg.x + wid.x).
// Entry sum_wide_thread: the same partials over chunks of 256 elements (64 vec4s), one
//            invocation per chunk, no workgroup memory and no barrier, for adapters where a
//            barrier is dear (software adapters switch every SIMD group of the workgroup at
//            each); params [chunks, n, offset / 4]; invocation c of the 2-D grid computes
//            partial c.

const VECS_PER_THREAD: u32 = 16u;

var<workgroup> tree: array<f32, 256>;

// acc + vector v of the row (elements 4v .. 4v + 3), its lanes past n left out.
fn add_vector(acc: vec4<f32>, v: u32, n: u32, base: u32) -> vec4<f32> {
    let e = v * 4u;
    var out = acc;
    if (e + 4u <= n) {
        out = out + src[base + v];
    } else if (e < n) {
        let q = src[base + v];
        for (var j = 0u; j < n - e; j = j + 1u) {
            out[j] = out[j] + q[j];
        }
    }
    return out;
}

@compute @workgroup_size(WG_SIZE)
fn sum_wide(inv: Invocation) {
    let lid = inv.lid;
    let chunk = inv.wid.y * inv.nwg.x + inv.wid.x;
    // Uniform per workgroup, so the barriers below stay uniform.
    if (chunk >= params[0]) { return; }
    let n = params[1];
    let base = params[2];
    let neg0 = bitcast<f32>(0x80000000u);
    var acc = vec4<f32>(neg0);
    for (var k = 0u; k < VECS_PER_THREAD; k = k + 1u) {
        acc = add_vector(acc, (chunk * VECS_PER_THREAD + k) * WG_SIZE + lid, n, base);
    }
    tree[lid] = (acc.x + acc.y) + (acc.z + acc.w);
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            tree[lid] = tree[lid] + tree[lid + s];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        dst[chunk] = tree[0];
    }
}

const THREAD_VECS: u32 = 64u;

@compute @workgroup_size(WG_SIZE)
fn sum_wide_thread(inv: Invocation) {
    let chunk = flat_index(inv.wid, inv.nwg, inv.lid);
    if (chunk >= params[0]) { return; }
    let n = params[1];
    let base = params[2];
    var acc = vec4<f32>(bitcast<f32>(0x80000000u));
    for (var k = 0u; k < THREAD_VECS; k = k + 1u) {
        acc = add_vector(acc, chunk * THREAD_VECS + k, n, base);
    }
    dst[chunk] = (acc.x + acc.y) + (acc.z + acc.w);
}
