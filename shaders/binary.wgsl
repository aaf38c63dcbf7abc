// binary.wgsl: two-input elementwise ops with broadcasting, and their tensor-scalar forms.
//
// Computes   dst[i] = f(a, b) for the op selected by the override constant OP (codes of
//            `BinaryOp` in src/ops.rs): 0 add, 1 sub, 2 mul, 3 div, 4 maximum, 5 minimum, 6 pow,
//            7 rem (a - b * trunc(a / b)).
//            maximum/minimum propagate NaN as PyTorch does; pow follows C's powf for negative
//            bases, zero and infinities (the CPU twin calls f32::powf).
// Bindings   @group(0) @binding(0) lhs  : array<f32>, read-only
//            @group(0) @binding(1) rhs  : array<f32>, read-only (scalar entries bind lhs here too)
//            @group(0) @binding(2) dst  : array<f32>, read-write, n elements, packed row-major
//            @group(0) @binding(3) params : array<u32>, read-only:
//              contiguous:     [n, 0, lhs_offset, rhs_offset]
//              strided:        [n, ndim, lhs_offset, rhs_offset, shape[ndim], lhs_strides[ndim], rhs_strides[ndim]]
//              scalar_*:       [n, ndim, offset, scalar_first, bitcast<u32>(scalar), shape[ndim], strides[ndim]]
//            Broadcast dims have stride 0, so operands are never expanded in memory.
// Dispatch   256 threads per workgroup, one element per thread, ceil(n / 256) workgroups laid
//            out as a 2-D grid (x <= 65,535) and flattened as (wid.y * nwg.x + wid.x) * 256 + lid.

override OP: u32 = 0u;

@group(0) @binding(0) var<storage, read> lhs: array<f32>;
@group(0) @binding(1) var<storage, read> rhs: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;
@group(0) @binding(3) var<storage, read> params: array<u32>;

const NAN_BITS: u32 = 0x7fc00000u;
const INF_BITS: u32 = 0x7f800000u;

// Tested on the bits: WGSL lets compilers assume floats are never NaN, so `x != x` may fold away.
fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

fn is_inf(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u;
}

// C99 powf semantics on top of exp2/log2, which WGSL only defines for positive bases.
fn pow_c(x: f32, y: f32) -> f32 {
    if (y == 0.0 || x == 1.0) {
        return 1.0;
    }
    if (is_nan(x) || is_nan(y)) {
        return bitcast<f32>(NAN_BITS);
    }
    let ax = abs(x);
    if (is_inf(y)) {
        if (ax == 1.0) { return 1.0; }
        if ((ax > 1.0) == (y > 0.0)) { return bitcast<f32>(INF_BITS); }
        return 0.0;
    }
    // y is finite and non-zero here.
    let y_int = floor(y) == y;
    let y_odd = y_int && abs(y) < 16777216.0 && (y - 2.0 * floor(y * 0.5)) == 1.0;
    if (x < 0.0 && !y_int && !is_inf(x)) {
        return bitcast<f32>(NAN_BITS);
    }
    var r: f32;
    if (ax == 0.0) {
        r = select(bitcast<f32>(INF_BITS), 0.0, y > 0.0);
    } else if (is_inf(ax)) {
        r = select(0.0, bitcast<f32>(INF_BITS), y > 0.0);
    } else if (y_int && abs(y) <= 64.0) {
        // Small integer powers by repeated squaring (at most 7 rounds): exact where the result
        // is representable (3^2 == 9), unlike exp2(y * log2(x)).
        var e = u32(abs(y));
        var base = ax;
        r = 1.0;
        for (var k = 0u; k < 7u && e > 0u; k = k + 1u) {
            if ((e & 1u) != 0u) { r = r * base; }
            base = base * base;
            e = e >> 1u;
        }
        if (y < 0.0) { r = 1.0 / r; }
    } else {
        r = exp2(y * log2(ax));
    }
    // The sign of x (including -0.0) survives odd integer powers.
    if (y_odd && (bitcast<u32>(x) & 0x80000000u) != 0u) {
        r = -r;
    }
    return r;
}

fn apply(a: f32, b: f32) -> f32 {
    switch OP {
        case 0u: { return a + b; }
        case 1u: { return a - b; }
        case 2u: { return a * b; }
        case 3u: { return a / b; }
        case 4u: {
            if (is_nan(a) || is_nan(b)) { return bitcast<f32>(NAN_BITS); }
            return select(b, a, a > b);
        }
        case 5u: {
            if (is_nan(a) || is_nan(b)) { return bitcast<f32>(NAN_BITS); }
            return select(b, a, a < b);
        }
        case 6u: { return pow_c(a, b); }
        // Truncated remainder, WGSL's float `%` spelled out (the CPU twin is ops::rem_f32).
        case 7u: { return a - b * trunc(a / b); }
        default: { return a; }
    }
}

fn flat_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * 256u + lid;
}

@compute @workgroup_size(256)
fn contiguous(@builtin(workgroup_id) wid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    // The grid is rounded up to whole workgroups: threads past the end must not store.
    if (i >= params[0]) {
        return;
    }
    dst[i] = apply(lhs[params[2] + i], rhs[params[3] + i]);
}

@compute @workgroup_size(256)
fn strided(@builtin(workgroup_id) wid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    let nd = params[1];
    var rem = i;
    var a = params[2];
    var b = params[3];
    // At most ndim iterations: far from the 65,535-iteration cap some drivers impose.
    for (var k = nd; k > 0u; k = k - 1u) {
        let d = k - 1u;
        let size = params[4u + d];
        let idx = rem % size;
        rem = rem / size;
        a = a + idx * params[4u + nd + d];
        b = b + idx * params[4u + 2u * nd + d];
    }
    dst[i] = apply(lhs[a], rhs[b]);
}

// Reads element i of the (possibly strided) lhs view for the scalar entries.
fn scalar_operand(i: u32, strided: bool) -> f32 {
    if (!strided) {
        return lhs[params[2] + i];
    }
    let nd = params[1];
    var rem = i;
    var at = params[2];
    for (var k = nd; k > 0u; k = k - 1u) {
        let d = k - 1u;
        let size = params[5u + d];
        at = at + (rem % size) * params[5u + nd + d];
        rem = rem / size;
    }
    return lhs[at];
}

fn scalar_apply(x: f32) -> f32 {
    let s = bitcast<f32>(params[4]);
    if (params[3] != 0u) {
        return apply(s, x);
    }
    return apply(x, s);
}

@compute @workgroup_size(256)
fn scalar_contiguous(@builtin(workgroup_id) wid: vec3<u32>,
                     @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    // rhs is bound (to lhs) but unused: the scalar travels in params.
    dst[i] = scalar_apply(scalar_operand(i, false));
}

@compute @workgroup_size(256)
fn scalar_strided(@builtin(workgroup_id) wid: vec3<u32>,
                  @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    dst[i] = scalar_apply(scalar_operand(i, true));
}
