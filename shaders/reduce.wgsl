// reduce.wgsl: one pass of a multi-pass reduction over the rows of a strided view: sum, prod,
// max, min, argmax, argmin, and softmax's sum of exp(x - rowmax).
//
// Computes   item j = o * C + c (row o, chunk c of C chunks per row) reduces the row elements
//            r in [c * L, min(R, (c + 1) * L)), where element (o, r) is stored at
//            offset + sum_k idx_k(o) * out_strides[k] + r * stride_r   (idx = o unravelled over
//            out_shape). OP (override) = op | kind << 8; op: one of the OP_* constants (the
//            codes of the reduction table, src/ops/reduce.rs, appended below by the library);
//            kind: 0 f32, 1 i32, 2 u32. Integer sums and products wrap
//            (the CPU twin is `cpu::typed::reduce_int`); values travel as bits throughout.
//            A pass with C > 1 writes one partial per item; the host runs the next pass over the
//            partials (rows of length C, contiguous) until C == 1, so no per-invocation loop is
//            ever longer than 256 iterations (software drivers cut loops at 65,535) and the
//            reduction tree is fixed by the sizes alone: same input, same bits, no atomics.
//            NaN propagates: sum/prod by IEEE arithmetic, max/min explicitly; argmax/argmin treat
//            NaN as the extreme value (first NaN wins) and break ties towards the lowest index.
//            NaN is tested on the bits, since WGSL lets compilers assume floats are never NaN.
// Declared   by the library from this file's SHADERS entry (src/gpu/shader_table.rs):
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

// OP_SUM_EXP: softmax's sum of exp(x - aux[o]) (cpu::reduce::SUM_EXP_CODE, declared from
// src/gpu/contract.rs). The reduction table's op codes (`OP_<NAME>`) and its per-op functions,
// `is_arg()`, `identity()`, `combine(a, b)` (a holds the lower indices where that matters) and
// `load_map(v, r)`, are appended to this file by the library from src/ops/reduce.rs; NaN and
// wrap-around rules are stated per op there.

// Elements each thread of reduce_wg folds before the tree: L = WG_SIZE * PER_THREAD. Long enough that
// the tree's barriers (slow on software drivers) are rare, short enough to stay far below the
// 65,535-iteration cap and to leave several workgroups per row on large GPUs.
const PER_THREAD: u32 = 64u;
// The longest row chunk reduce_thread folds is THREAD_MAX (src/gpu/contract.rs).
// Shared-memory tree of reduce_wg, as bits so NaN payloads cross it untouched.
var<workgroup> tree_v: array<u32, WG_SIZE>;
var<workgroup> tree_i: array<u32, WG_SIZE>;

// A running result: value bits (f32, i32 or u32 by kind) and, for argmax/argmin, its index
// along the row.
struct Acc {
    v: u32,
    i: u32,
}

fn op() -> u32 {
    return OP & 0xffu;
}

fn kind() -> u32 {
    return OP >> 8u;
}

// NaN only exists for floats; integer bits that look like NaN are ordinary values.
fn nan_bits(x: u32) -> bool {
    return kind() == 0u && (x & 0x7fffffffu) > 0x7f800000u;
}

// b > a in the dtype's order (callers handle NaN first).
fn greater(b: u32, a: u32) -> bool {
    switch kind() {
        case 1u: { return bitcast<i32>(b) > bitcast<i32>(a); }
        case 2u: { return b > a; }
        default: { return bitcast<f32>(b) > bitcast<f32>(a); }
    }
}

// Equal values (-0.0 == 0.0 for floats).
fn same(b: u32, a: u32) -> bool {
    if (kind() == 0u) {
        return bitcast<f32>(b) == bitcast<f32>(a);
    }
    return b == a;
}

// Whether b beats a for argmax (up) or argmin: NaN first (lowest index among NaNs), then the
// larger (smaller) value, then the lower index. A total order: any tree gives the same answer.
fn arg_better(b: Acc, a: Acc, up: bool) -> bool {
    let bn = nan_bits(b.v);
    let an = nan_bits(a.v);
    if (bn || an) {
        return bn && (!an || b.i < a.i);
    }
    if (same(b.v, a.v)) {
        return b.i < a.i;
    }
    return greater(b.v, a.v) == up;
}

// Storage index of element (o, 0).
fn row_base(o: u32) -> u32 {
    let nd = params[8];
    return strided_offset(o, params[5], nd, 9u, 9u + nd);
}

fn load(o: u32, r: u32, base: u32) -> Acc {
    let at = base + r * params[4];
    if ((params[6] & 1u) != 0u) {
        return Acc(src[2u * at], src[2u * at + 1u]);
    }
    if (op() == OP_SUM_EXP) {
        let d = bitcast<f32>(src[at]) - bitcast<f32>(aux[o]);
        // exp may clamp its argument on some drivers, which would turn NaN into a number.
        if (is_nan(d)) {
            return Acc(NAN_BITS, r);
        }
        return Acc(bitcast<u32>(exp(d)), r);
    }
    return load_map(src[at], r);
}

fn store(item: u32, acc: Acc) {
    let last_pass = params[1] == 1u;
    if (is_arg()) {
        if (last_pass) {
            dst[item] = acc.i;
        } else {
            dst[2u * item] = acc.v;
            dst[2u * item + 1u] = acc.i;
        }
        return;
    }
    var v = acc.v;
    if (last_pass && (params[6] & 2u) != 0u) {
        v = bitcast<u32>(bitcast<f32>(v) / bitcast<f32>(params[7]));
    }
    dst[item] = v;
}

// The chunk `item` reduces: its row `o`, the row's storage base, and the row elements
// [start, end), at most `len` of them (each entry's own bound on L).
struct Chunk {
    o: u32,
    start: u32,
    end: u32,
    base: u32,
}

fn chunk_of(item: u32, len: u32) -> Chunk {
    let chunks = params[1];
    let o = item / chunks;
    let start = (item % chunks) * params[3];
    return Chunk(o, start, min(params[2], start + len), row_base(o));
}

// Thread `lid`'s fold of its elements of `item`'s chunk in the workgroup passes: consecutive
// threads read consecutive elements (coalesced when stride_r == 1), PER_THREAD each.
fn fold_wg(item: u32, lid: u32) -> Acc {
    let c = chunk_of(item, params[3]);
    var acc = identity();
    for (var k = 0u; k < PER_THREAD; k = k + 1u) {
        let r = c.start + k * WG_SIZE + lid;
        if (r < c.end) {
            acc = combine(acc, load(c.o, r, c.base));
        }
    }
    return acc;
}

@compute @workgroup_size(WG_SIZE)
fn reduce_wg(@builtin(workgroup_id) wid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let item = wid.y * nwg.x + wid.x;
    // Uniform per workgroup (the grid is rounded up), so the barriers below stay uniform.
    if (item >= params[0]) { return; }
    let acc = fold_wg(item, lid);
    tree_v[lid] = acc.v;
    tree_i[lid] = acc.i;
    workgroupBarrier();
    for (var s = WG_SIZE / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            let m = combine(Acc(tree_v[lid], tree_i[lid]), Acc(tree_v[lid + s], tree_i[lid + s]));
            tree_v[lid] = m.v;
            tree_i[lid] = m.i;
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        store(item, Acc(tree_v[0], tree_i[0]));
    }
}

@compute @workgroup_size(WG_SIZE)
fn reduce_thread(@builtin(workgroup_id) wid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let item = (wid.y * nwg.x + wid.x) * WG_SIZE + lid;
    if (item >= params[0]) { return; }
    let c = chunk_of(item, params[3]);
    var acc = identity();
    // Bounded here too, whatever L the host passes.
    for (var k = 0u; k < THREAD_MAX && c.start + k < c.end; k = k + 1u) {
        acc = combine(acc, load(c.o, c.start + k, c.base));
    }
    store(item, acc);
}
