// scatter.wgsl: scatter_add and index_add (and so the Embedding backward) without float
// atomics, deterministic on every device: each contribution becomes a (key, position) pair, the
// pairs are sorted (bitonic network), and one thread per (key run, column) adds its run in
// position order, the order the CPU oracle uses.
//
// Pairs      `pairs` holds P = 2^m >= 512 pairs as [key, position] words; key = the flat target
//            (index_add: the target row; scatter_add: the element of the output), position = the
//            contribution's packed index. Padding and out-of-range ids get key NONE, sorted last.
// Entries    scatter_keys   (a = index/ids, output = pairs)
//                params [P, count, ndim, d, ids_offset, bound, code, 0, shape[ndim],
//                        out_strides[ndim]]: pair k < count takes c = unravel(k, shape) with
//                c[d] = ids[ids_offset + k]; key = sum c * out_strides (packed strides of the
//                target); an id outside 0..bound is reported (ids.wgsl) and keyed NONE.
//            sort_block     (output = pairs) params [k_max, P]: each workgroup sorts its block
//                of 512 pairs through stages k = 2..min(k_max, 512) in workgroup memory.
//            sort_step      (output = pairs) params [k, j, P / 2] (j >= 512): one
//                compare-exchange of the global network per thread.
//            sort_merge     (output = pairs) params [k, P]: the steps j = 256..1 of stage k
//                inside each block of 512.
//            segment_sum    (a = sorted pairs, b = values, output = dst as u32 bits of f32)
//                params [threads = P * r, P, r, src_offset]: thread (s, col), s the first
//                pair of a run of equal keys, adds src[pos * r + col] over the run (in position
//                order) and then adds that sum to dst[key * r + col].
// Declared   by the library from this file's SHADERS entry (src/gpu/shader_table.rs):
// Bindings   @group(0) @binding(0) a      : array<u32>, read-only
//            @group(0) @binding(1) b      : array<f32>, read-only
//            @group(0) @binding(2) out    : array<u32>, read-write
//            @group(0) @binding(3) params : array<u32>, read-only
// Dispatch   256 threads per workgroup on the 2-D grid; sort_block and sort_merge: P / 512
//            workgroups (two pairs per thread).

const NONE: u32 = 0xffffffffu;

// A block of BLOCK pairs (src/gpu/contract.rs) sorted in workgroup memory, two per thread: pairs
// t and t + HALF.
const HALF: u32 = BLOCK / 2u;
var<workgroup> wkey: array<u32, BLOCK>;
var<workgroup> wpos: array<u32, BLOCK>;

@compute @workgroup_size(WG_SIZE)
fn scatter_keys(inv: Invocation) {
    let k = item(inv);
    if (k >= params[0]) { return; }
    var key = NONE;
    var pos = NONE;
    if (k < params[1]) {
        let nd = params[2];
        let d = params[3];
        let bound = params[5];
        let code = params[6];
        let id = a[params[4] + k];
        pos = k;
        if (bad_id(code, id, bound)) {
            report_bad_id(code, id, bound);
        } else {
            key = strided_offset_but(k, 0u, nd, 8u, 8u + nd, d).x;
            // A 0-d target has no dim d (and its one id is 0).
            if (d < nd) {
                key = key + id * params[8u + nd + d];
            }
        }
    }
    out[2u * k] = key;
    out[2u * k + 1u] = pos;
}

// Whether pair (k1, p1) sorts after (k2, p2).
fn after(k1: u32, p1: u32, k2: u32, p2: u32) -> bool {
    return k1 > k2 || (k1 == k2 && p1 > p2);
}

// Compare-exchange of workgroup slots i < l, ascending when `up`.
fn exchange_local(i: u32, l: u32, up: bool) {
    let swap = after(wkey[i], wpos[i], wkey[l], wpos[l]) == up;
    if (swap) {
        let k = wkey[i];
        let p = wpos[i];
        wkey[i] = wkey[l];
        wpos[i] = wpos[l];
        wkey[l] = k;
        wpos[l] = p;
    }
}

// Workgroups past the last block (a rounded-up 2-D grid) load nothing and store nothing, but
// still reach every barrier.
fn load_block(base: u32, t: u32, npairs: u32) {
    if (base < npairs) {
        wkey[t] = out[2u * (base + t)];
        wpos[t] = out[2u * (base + t) + 1u];
        wkey[t + HALF] = out[2u * (base + t + HALF)];
        wpos[t + HALF] = out[2u * (base + t + HALF) + 1u];
    }
}

fn store_block(base: u32, t: u32, npairs: u32) {
    if (base < npairs) {
        out[2u * (base + t)] = wkey[t];
        out[2u * (base + t) + 1u] = wpos[t];
        out[2u * (base + t + HALF)] = wkey[t + HALF];
        out[2u * (base + t + HALF) + 1u] = wpos[t + HALF];
    }
}

// Thread t's pair (i, l) for step j: i = the t-th index with bit j clear, l = i + j.
fn pair_of(t: u32, j: u32) -> vec2<u32> {
    let c = cell(t, j);
    let i = c.x * 2u * j + c.y;
    return vec2<u32>(i, i + j);
}

// Steps j = j0, j0 / 2, ..., 1 of stage k on the block at base in workgroup memory, thread t
// exchanging one pair per step (uniform control flow: every thread reaches every barrier).
fn block_steps(base: u32, t: u32, k: u32, j0: u32) {
    for (var j = j0; j > 0u; j = j >> 1u) {
        let p = pair_of(t, j);
        exchange_local(p.x, p.y, ((base + p.x) & k) == 0u);
        workgroupBarrier();
    }
}

@compute @workgroup_size(WG_SIZE)
fn sort_block(inv: Invocation) {
    let base = group_index(inv.wid, inv.nwg) * BLOCK;
    let t = inv.lid;
    load_block(base, t, params[1]);
    workgroupBarrier();
    let kmax = min(params[0], BLOCK);
    for (var k = 2u; k <= kmax; k = k << 1u) {
        block_steps(base, t, k, k >> 1u);
    }
    store_block(base, t, params[1]);
}

@compute @workgroup_size(WG_SIZE)
fn sort_merge(inv: Invocation) {
    let base = group_index(inv.wid, inv.nwg) * BLOCK;
    load_block(base, inv.lid, params[1]);
    workgroupBarrier();
    block_steps(base, inv.lid, params[0], HALF);
    store_block(base, inv.lid, params[1]);
}

@compute @workgroup_size(WG_SIZE)
fn sort_step(inv: Invocation) {
    let t = item(inv);
    if (t >= params[2]) { return; }
    let p = pair_of(t, params[1]);
    let ki = out[2u * p.x];
    let pi = out[2u * p.x + 1u];
    let kl = out[2u * p.y];
    let pl = out[2u * p.y + 1u];
    if (after(ki, pi, kl, pl) == ((p.x & params[0]) == 0u)) {
        out[2u * p.x] = kl;
        out[2u * p.x + 1u] = pl;
        out[2u * p.y] = ki;
        out[2u * p.y + 1u] = pi;
    }
}

@compute @workgroup_size(WG_SIZE)
fn segment_sum(inv: Invocation) {
    // Column col of the r-wide row of pair s; s >= npairs past the params[0] = npairs * r
    // elements (the grid is rounded up).
    let sc = cell(item(inv), params[2]);
    let npairs = params[1];
    if (sc.x >= npairs) { return; }
    let r = params[2];
    let off = params[3];
    let s = sc.x;
    let col = sc.y;
    let key = a[2u * s];
    if (key == NONE || (s > 0u && a[2u * s - 2u] == key)) { return; }
    var acc = 0.0;
    var t = s;
    var done = false;
    // Two nested loops so neither passes lavapipe's 65,535-iteration cap (a run is at most the
    // number of contributions).
    for (var c = 0u; c < 65535u && !done; c = c + 1u) {
        for (var q = 0u; q < 4096u; q = q + 1u) {
            if (t >= npairs || a[2u * t] != key) {
                done = true;
                break;
            }
            acc = acc + b[off + a[2u * t + 1u] * r + col];
            t = t + 1u;
        }
    }
    let at = key * r + col;
    out[at] = bitcast<u32>(bitcast<f32>(out[at]) + acc);
}
