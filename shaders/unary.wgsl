// unary.wgsl: one-input elementwise ops, dst[i] = f(src[...]).
//
// Computes   the op selected by the override constant OP (codes of `UnaryOp` in src/ops.rs):
//            0 neg, 1 abs, 2 exp, 3 log, 4 sqrt, 5 relu, 6 sigmoid, 7 tanh, 8 gelu (exact, erf),
//            9 sin, 10 cos, 11 copy. NaN propagates as in PyTorch (relu(NaN) = NaN).
// Bindings   @group(0) @binding(0) src  : array<f32>, read-only
//            @group(0) @binding(1) dst  : array<f32>, read-write, n elements, packed row-major
//            @group(0) @binding(2) params : array<u32>, read-only:
//                [n, ndim, src_offset, shape[ndim], src_strides[ndim]]   (ndim = 0 for `contiguous`)
// Entries    `contiguous` reads src[src_offset + i]; `strided` unravels i over `shape` and reads
//            through `src_strides` (transposed, narrowed or broadcast views; stride 0 repeats).
// Dispatch   256 threads per workgroup, one element per thread, ceil(n / 256) workgroups laid
//            out as a 2-D grid (x <= 65,535) and flattened as (wid.y * nwg.x + wid.x) * 256 + lid.

override OP: u32 = 0u;

@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
@group(0) @binding(2) var<storage, read> params: array<u32>;

const NAN_BITS: u32 = 0x7fc00000u;

// Tested on the bits: WGSL lets compilers assume floats are never NaN, so `x != x` may fold away.
fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

// Abramowitz & Stegun 7.1.26, |error| < 1.5e-7; the CPU twin is `erf` in src/ops.rs.
fn erf_approx(x: f32) -> f32 {
    let a = abs(x);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let poly = t * (0.2548296 + t * (-0.28449674 + t * (1.4214137 + t * (-1.4531521 + t * 1.0614054))));
    return sign(x) * (1.0 - poly * exp(-a * a));
}

fn apply(x: f32) -> f32 {
    // Special values are handled explicitly where drivers differ: some evaluate tanh as
    // (e^2x - 1) / (e^2x + 1), which is inf/inf = NaN for large x.
    if (is_nan(x)) {
        return x;
    }
    switch OP {
        case 0u: { return -x; }
        case 1u: { return abs(x); }
        case 2u: { return exp(x); }
        case 3u: {
            if (x < 0.0) { return bitcast<f32>(NAN_BITS); }
            return log(x);
        }
        case 4u: {
            if (x < 0.0) { return bitcast<f32>(NAN_BITS); }
            return sqrt(x);
        }
        case 5u: { return select(0.0, x, x > 0.0); }
        case 6u: { return 1.0 / (1.0 + exp(-x)); }
        case 7u: { return tanh(clamp(x, -15.0, 15.0)); }
        case 8u: {
            // The limit at -inf is 0; the formula alone would give -inf * 0 = NaN.
            if (bitcast<u32>(x) == 0xff800000u) { return 0.0; }
            return 0.5 * x * (1.0 + erf_approx(x * 0.70710678118654752));
        }
        case 9u: { return sin(x); }
        case 10u: { return cos(x); }
        default: { return x; }
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
    dst[i] = apply(src[params[2] + i]);
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
    var at = params[2];
    // At most ndim iterations: far from the 65,535-iteration cap some drivers impose.
    for (var k = nd; k > 0u; k = k - 1u) {
        let d = k - 1u;
        let size = params[3u + d];
        at = at + (rem % size) * params[3u + nd + d];
        rem = rem / size;
    }
    dst[i] = apply(src[at]);
}
