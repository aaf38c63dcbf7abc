// reduce.wgsl: one pass of a multi-pass reduction over the rows of a strided view: sum, prod,
// max, min, argmax, argmin, and softmax's sum of exp(x - rowmax).
//
// Computes   item j = o * C + c (row o, chunk c of C chunks per row) reduces the row elements
//            r in [c * L, min(R, (c + 1) * L)), where element (o, r) is stored at
//            offset + sum_k idx_k(o) * out_strides[k] + r * stride_r   (idx = o unravelled over
//            out_shape). OP (override): 0 sum, 1 prod, 2 max, 3 min, 4 argmax, 5 argmin,
//            6 sum of exp(x - aux[o]) (codes of `ReduceOp` in src/cpu/reduce.rs).
//            A pass with C > 1 writes one partial per item; the host runs the next pass over the
//            partials (rows of length C, contiguous) until C == 1, so no per-invocation loop is
//            ever longer than 256 iterations (software drivers cut loops at 65,535) and the
//            reduction tree is fixed by the sizes alone: same input, same bits, no atomics.
//            NaN propagates: sum/prod by IEEE arithmetic, max/min explicitly; argmax/argmin treat
//            NaN as the extreme value (first NaN wins) and break ties towards the lowest index.
//            NaN is tested on the bits, since WGSL lets compilers assume floats are never NaN.
// Bindings   @group(0) @binding(0) src    : array<u32>, read-only: f32 bits, or (value bits,
//                                           index) pairs when flags & 1 (argmax/argmin partials)
//            @group(0) @binding(1) aux    : array<u32>, read-only: row maxima for OP 6; other ops
//                                           bind src here too and never read it
//            @group(0) @binding(2) dst    : array<u32>, read-write: per item a value (f32 bits) or
//                                           a pair; when C == 1 the value (or index) of row o
//            @group(0) @binding(3) params : array<u32>, read-only:
//              [items, C, R, L, stride_r, offset, flags, bitcast<u32>(divisor), ndim,
//               out_shape[ndim], out_strides[ndim]]
//              flags: 1 = src holds pairs, 2 = divide the final value by divisor (mean)
// Dispatch   reduce_wg:     one 256-thread workgroup per item, L = 16384 (64 elements per thread,
//                           then a shared-memory tree); `items` workgroups on a 2-D grid,
//                           flattened as wid.y * nwg.x + wid.x.
//            reduce_thread: one thread per item, L <= 256 elements folded in order;
//                           ceil(items / 256) workgroups on a 2-D grid, flattened as
//                           (wid.y * nwg.x + wid.x) * 256 + lid.

override OP: u32 = 0u;

@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read> aux: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;
@group(0) @binding(3) var<storage, read> params: array<u32>;

const WG: u32 = 256u;
// Elements each thread of reduce_wg folds before the tree: L = WG * PER_THREAD. Long enough that
// the tree's barriers (slow on software drivers) are rare, short enough to stay far below the
// 65,535-iteration cap and to leave several workgroups per row on large GPUs.
const PER_THREAD: u32 = 64u;
// The longest row chunk reduce_thread folds (the host never asks for more).
const THREAD_MAX: u32 = 256u;
const NAN_BITS: u32 = 0x7fc00000u;

// Shared-memory tree of reduce_wg, as bits so NaN payloads cross it untouched.
var<workgroup> tree_v: array<u32, 256>;
var<workgroup> tree_i: array<u32, 256>;

// A running result: value and, for argmax/argmin, its index along the row.
struct Acc {
    v: f32,
    i: u32,
}

fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

fn is_arg() -> bool {
    return OP == 4u || OP == 5u;
}

// The neutral element. The sum starts at -0.0 (-0.0 + x == x for every x, even -0.0); arg ops
// start at the opposite infinity with an index no real element has, so any element beats it.
fn identity() -> Acc {
    switch OP {
        case 1u: { return Acc(1.0, 0u); }
        case 2u, 4u: { return Acc(bitcast<f32>(0xff800000u), 0xffffffffu); }
        case 3u, 5u: { return Acc(bitcast<f32>(0x7f800000u), 0xffffffffu); }
        default: { return Acc(bitcast<f32>(0x80000000u), 0u); }
    }
}

// Whether b beats a for argmax (up) or argmin: NaN first (lowest index among NaNs), then the
// larger (smaller) value, then the lower index. A total order: any tree gives the same answer.
fn arg_better(b: Acc, a: Acc, up: bool) -> bool {
    let bn = is_nan(b.v);
    let an = is_nan(a.v);
    if (bn || an) {
        return bn && (!an || b.i < a.i);
    }
    if (b.v == a.v) {
        return b.i < a.i;
    }
    return (b.v > a.v) == up;
}

// Combines a (the lower indices, where that matters) with b.
fn combine(a: Acc, b: Acc) -> Acc {
    switch OP {
        case 1u: { return Acc(a.v * b.v, 0u); }
        case 2u: {
            if (is_nan(a.v) || (!is_nan(b.v) && !(b.v > a.v))) { return a; }
            return b;
        }
        case 3u: {
            if (is_nan(a.v) || (!is_nan(b.v) && !(b.v < a.v))) { return a; }
            return b;
        }
        case 4u: {
            if (arg_better(b, a, true)) { return b; }
            return a;
        }
        case 5u: {
            if (arg_better(b, a, false)) { return b; }
            return a;
        }
        default: { return Acc(a.v + b.v, 0u); }
    }
}

// Storage index of element (o, 0).
fn row_base(o: u32) -> u32 {
    let nd = params[8];
    var rem = o;
    var at = params[5];
    // At most ndim iterations.
    for (var k = nd; k > 0u; k = k - 1u) {
        let d = k - 1u;
        let size = params[9u + d];
        at = at + (rem % size) * params[9u + nd + d];
        rem = rem / size;
    }
    return at;
}

fn load(o: u32, r: u32, base: u32) -> Acc {
    let at = base + r * params[4];
    if ((params[6] & 1u) != 0u) {
        return Acc(bitcast<f32>(src[2u * at]), src[2u * at + 1u]);
    }
    let x = bitcast<f32>(src[at]);
    if (OP == 6u) {
        let d = x - bitcast<f32>(aux[o]);
        // exp may clamp its argument on some drivers, which would turn NaN into a number.
        if (is_nan(d)) {
            return Acc(bitcast<f32>(NAN_BITS), r);
        }
        return Acc(exp(d), r);
    }
    return Acc(x, r);
}

fn store(item: u32, acc: Acc) {
    let last_pass = params[1] == 1u;
    if (is_arg()) {
        if (last_pass) {
            dst[item] = acc.i;
        } else {
            dst[2u * item] = bitcast<u32>(acc.v);
            dst[2u * item + 1u] = acc.i;
        }
        return;
    }
    var v = acc.v;
    if (last_pass && (params[6] & 2u) != 0u) {
        v = v / bitcast<f32>(params[7]);
    }
    dst[item] = bitcast<u32>(v);
}

@compute @workgroup_size(256)
fn reduce_wg(@builtin(workgroup_id) wid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let item = wid.y * nwg.x + wid.x;
    // Uniform per workgroup (the grid is rounded up), so the barriers below stay uniform.
    if (item >= params[0]) {
        return;
    }
    let chunks = params[1];
    let o = item / chunks;
    let start = (item % chunks) * params[3];
    let end = min(params[2], start + params[3]);
    let base = row_base(o);
    var acc = identity();
    // Consecutive threads read consecutive elements: coalesced when stride_r == 1.
    for (var k = 0u; k < PER_THREAD; k = k + 1u) {
        let r = start + k * WG + lid;
        if (r < end) {
            acc = combine(acc, load(o, r, base));
        }
    }
    tree_v[lid] = bitcast<u32>(acc.v);
    tree_i[lid] = acc.i;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            let m = combine(Acc(bitcast<f32>(tree_v[lid]), tree_i[lid]),
                            Acc(bitcast<f32>(tree_v[lid + s]), tree_i[lid + s]));
            tree_v[lid] = bitcast<u32>(m.v);
            tree_i[lid] = m.i;
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        store(item, Acc(bitcast<f32>(tree_v[0]), tree_i[0]));
    }
}

@compute @workgroup_size(256)
fn reduce_thread(@builtin(workgroup_id) wid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let item = (wid.y * nwg.x + wid.x) * WG + lid;
    if (item >= params[0]) {
        return;
    }
    let chunks = params[1];
    let o = item / chunks;
    let start = (item % chunks) * params[3];
    let end = min(params[2], start + params[3]);
    let base = row_base(o);
    var acc = identity();
    // Bounded here too, whatever L the host passes.
    for (var k = 0u; k < THREAD_MAX && start + k < end; k = k + 1u) {
        acc = combine(acc, load(o, start + k, base));
    }
    store(item, acc);
}
