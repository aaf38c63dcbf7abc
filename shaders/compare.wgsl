// compare.wgsl: elementwise comparisons into U8 masks, and clamp.
//
// Computes   compare / compare_scalar: mask byte i = (a OP b) ? 1 : 0 with OP (override) 0 eq,
//              1 ne, 2 lt, 3 le, 4 gt, 5 ge (codes of `CmpOp` in src/cpu/compare.rs). IEEE rules:
//              any comparison with NaN is false except ne, which is true. NaN is tested on the
//              bits, since WGSL lets compilers assume floats are never NaN.
//            clamp_values: dst[i] = min(max(x, lo), hi) as PyTorch (lo > hi gives hi); NaN in x,
//              lo or hi gives NaN.
// Bindings   @group(0) @binding(0) lhs    : array<f32>, read-only
//            @group(0) @binding(1) rhs    : array<f32>, read-only (scalar entries bind lhs again)
//            @group(0) @binding(2) dst    : array<u32>, read-write: for masks, 4 mask bytes per
//                                           word, little-endian (byte i of the tensor is bits
//                                           8 * (i % 4) of word i / 4); for clamp_values, f32 bits
//            @group(0) @binding(3) params : array<u32>, read-only:
//              compare:        [n, ndim, lhs_offset, rhs_offset, shape[ndim], lhs_strides[ndim], rhs_strides[ndim]]
//              compare_scalar: [n, ndim, offset, bitcast<u32>(scalar), shape[ndim], strides[ndim]]
//              clamp_values:   [n, ndim, offset, bitcast<u32>(lo), bitcast<u32>(hi), shape[ndim], strides[ndim]]
//              ndim = 0 means every operand is contiguous (element i at offset + i). Broadcast
//              dims have stride 0.
// Dispatch   256 threads per workgroup, 2-D grid flattened as (wid.y * nwg.x + wid.x) * 256 + lid.
//            compare*: one thread per mask word (4 elements): ceil(ceil(n / 4) / 256) workgroups,
//            so no two threads write the same word. clamp_values: one thread per element.

override OP: u32 = 0u;

@group(0) @binding(0) var<storage, read> lhs: array<f32>;
@group(0) @binding(1) var<storage, read> rhs: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;
@group(0) @binding(3) var<storage, read> params: array<u32>;

const NAN_BITS: u32 = 0x7fc00000u;

fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

fn flat_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * 256u + lid;
}

// Storage index of element i of a view whose shape starts at params[shape_at] and strides at
// params[strides_at]; contiguous when ndim == 0.
fn position(i: u32, offset: u32, shape_at: u32, strides_at: u32) -> u32 {
    let nd = params[1];
    if (nd == 0u) {
        return offset + i;
    }
    var rem = i;
    var at = offset;
    // At most ndim iterations.
    for (var k = nd; k > 0u; k = k - 1u) {
        let d = k - 1u;
        let size = params[shape_at + d];
        at = at + (rem % size) * params[strides_at + d];
        rem = rem / size;
    }
    return at;
}

fn cmp(a: f32, b: f32) -> bool {
    if (is_nan(a) || is_nan(b)) {
        return OP == 1u;
    }
    switch OP {
        case 0u: { return a == b; }
        case 1u: { return a != b; }
        case 2u: { return a < b; }
        case 3u: { return a <= b; }
        case 4u: { return a > b; }
        default: { return a >= b; }
    }
}

@compute @workgroup_size(256)
fn compare(@builtin(workgroup_id) wid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let word = flat_index(wid, nwg, lid);
    let n = params[0];
    if (word * 4u >= n) {
        return;
    }
    let nd = params[1];
    var packed = 0u;
    for (var j = 0u; j < 4u; j = j + 1u) {
        let i = word * 4u + j;
        if (i < n) {
            let a = lhs[position(i, params[2], 4u, 4u + nd)];
            let b = rhs[position(i, params[3], 4u, 4u + 2u * nd)];
            packed = packed | (select(0u, 1u, cmp(a, b)) << (8u * j));
        }
    }
    dst[word] = packed;
}

@compute @workgroup_size(256)
fn compare_scalar(@builtin(workgroup_id) wid: vec3<u32>,
                  @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let word = flat_index(wid, nwg, lid);
    let n = params[0];
    if (word * 4u >= n) {
        return;
    }
    let nd = params[1];
    let b = bitcast<f32>(params[3]);
    var packed = 0u;
    for (var j = 0u; j < 4u; j = j + 1u) {
        let i = word * 4u + j;
        if (i < n) {
            let a = lhs[position(i, params[2], 4u, 4u + nd)];
            packed = packed | (select(0u, 1u, cmp(a, b)) << (8u * j));
        }
    }
    dst[word] = packed;
}

@compute @workgroup_size(256)
fn clamp_values(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    let nd = params[1];
    let x = lhs[position(i, params[2], 5u, 5u + nd)];
    let lo = bitcast<f32>(params[3]);
    let hi = bitcast<f32>(params[4]);
    if (is_nan(x) || is_nan(lo) || is_nan(hi)) {
        dst[i] = NAN_BITS;
        return;
    }
    // select, not max/min: the builtins' NaN behaviour is unspecified (checked above anyway).
    let up = select(x, lo, lo > x);
    dst[i] = bitcast<u32>(select(up, hi, up > hi));
}
