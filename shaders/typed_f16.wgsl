// typed_f16.wgsl: native-f16 elementwise kernels, used instead of typed.wgsl's unpacking path
// when the device has SHADER_F16 (and WGTENSOR_DISABLE_SHADER_F16 is not 1).
//
// Computes  OP and params exactly as typed.wgsl (code | dtype << 8 | ...; only f16 reaches here).
//           + - * /, maximum, minimum, neg, abs and relu run in f16 arithmetic: for + - * / the
//           correctly rounded f16 result equals rounding the f32 result, so both paths (and the
//           CPU) agree bit for bit. Other ops, and scalar ops (whose scalar is an f32 that is
//           not rounded first), compute in f32 and convert once, as the fallback does.
// Bindings  @binding(0) a, @binding(1) b, @binding(2) c : array<f16>, read-only (c unused);
//           @binding(3) dst : array<vec2<f16>>, read-write, one word (two halves) per thread;
//           @binding(4) params : array<u32>, as typed.wgsl.
// Dispatch  256 threads per workgroup, one output word per thread, 2-D grid flattened as
//           (wid.y * nwg.x + wid.x) * 256 + lid.

enable f16;

override OP: u32 = 0u;

@group(0) @binding(0) var<storage, read> a: array<f16>;
@group(0) @binding(1) var<storage, read> b: array<f16>;
@group(0) @binding(2) var<storage, read> c: array<f16>;
@group(0) @binding(3) var<storage, read_write> dst: array<vec2<f16>>;
@group(0) @binding(4) var<storage, read> params: array<u32>;

const HEAD: u32 = 8u;
const NAN_BITS: u32 = 0x7fc00000u;
const INF_BITS: u32 = 0x7f800000u;

fn code() -> u32 { return OP & 0xffu; }

fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

fn is_inf(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u;
}

fn position(i: u32, v: u32) -> u32 {
    let nd = params[1];
    if (nd == 0u) {
        return params[2u + v] + i;
    }
    var rem = i;
    var at = params[2u + v];
    let strides = HEAD + nd * (1u + v);
    // At most ndim iterations.
    for (var k = nd; k > 0u; k = k - 1u) {
        let d = k - 1u;
        let size = params[HEAD + d];
        at = at + (rem % size) * params[strides + d];
        rem = rem / size;
    }
    return at;
}

fn erf_approx(x: f32) -> f32 {
    let ax = abs(x);
    let t = 1.0 / (1.0 + 0.3275911 * ax);
    let poly = t * (0.2548296 + t * (-0.28449674 + t * (1.4214137 + t * (-1.4531521 + t * 1.0614054))));
    return sign(x) * (1.0 - poly * exp(-ax * ax));
}

// The f32 ops of unary.wgsl, for codes 2-4 and 6-10.
fn unary_f32(x: f32) -> f32 {
    if (is_nan(x)) {
        return x;
    }
    switch code() {
        case 2u: { return exp(x); }
        case 3u: {
            if (x < 0.0) { return bitcast<f32>(NAN_BITS); }
            return log(x);
        }
        case 4u: {
            if (x < 0.0) { return bitcast<f32>(NAN_BITS); }
            return sqrt(x);
        }
        case 6u: { return 1.0 / (1.0 + exp(-x)); }
        case 7u: { return tanh(clamp(x, -15.0, 15.0)); }
        case 8u: {
            if (bitcast<u32>(x) == 0xff800000u) { return 0.0; }
            return 0.5 * x * (1.0 + erf_approx(x * 0.70710678118654752));
        }
        case 9u: { return sin(x); }
        case 10u: { return cos(x); }
        default: { return x; }
    }
}

// f32 -> f16 with typed.wgsl's rounding (nearest even, inf past 65504), read back as f16.
fn to_f16(x: f32) -> f16 {
    let u = bitcast<u32>(x);
    let s = (u >> 16u) & 0x8000u;
    let m = u & 0x7fffffffu;
    var h: u32;
    if (m > 0x7f800000u) {
        h = s | 0x7e00u | ((m >> 13u) & 0x3ffu);
    } else if (m >= 0x477ff000u) {
        h = s | 0x7c00u;
    } else if (m >= 0x38800000u) {
        let r = m - 0x38000000u;
        h = s | ((r + 0xfffu + ((r >> 13u) & 1u)) >> 13u);
    } else if (m <= 0x33000000u) {
        h = s;
    } else {
        let e = m >> 23u;
        let mant = (m & 0x7fffffu) | 0x800000u;
        let sh = 126u - e;
        let k = mant >> sh;
        let rest = mant & ((1u << sh) - 1u);
        let halfway = 1u << (sh - 1u);
        h = s | select(k, k + 1u, rest > halfway || (rest == halfway && (k & 1u) == 1u));
    }
    // Exact: h is an f16 already, widened to f32 and narrowed back.
    return f16(unpack2x16float(h).x);
}

fn unary_h(x: f16) -> f16 {
    switch code() {
        case 0u: { return -x; }
        case 1u: { return abs(x); }
        case 5u: {
            if (is_nan(f32(x))) { return x; }
            return select(f16(0.0), x, x > f16(0.0));
        }
        case 11u: { return x; }
        default: { return to_f16(unary_f32(f32(x))); }
    }
}

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
    if (y_odd && (bitcast<u32>(x) & 0x80000000u) != 0u) {
        r = -r;
    }
    return r;
}

// Binary ops in f32, for scalar operands and pow / rem.
fn binary_f32(x: f32, y: f32) -> f32 {
    switch code() {
        case 0u: { return x + y; }
        case 1u: { return x - y; }
        case 2u: { return x * y; }
        case 3u: { return x / y; }
        case 4u: {
            if (is_nan(x) || is_nan(y)) { return bitcast<f32>(NAN_BITS); }
            return select(y, x, x > y);
        }
        case 5u: {
            if (is_nan(x) || is_nan(y)) { return bitcast<f32>(NAN_BITS); }
            return select(y, x, x < y);
        }
        case 6u: { return pow_c(x, y); }
        case 7u: { return x - y * trunc(x / y); }
        default: { return x; }
    }
}

fn binary_h(x: f16, y: f16) -> f16 {
    switch code() {
        case 0u: { return x + y; }
        case 1u: { return x - y; }
        case 2u: { return x * y; }
        case 3u: { return x / y; }
        case 4u: {
            if (is_nan(f32(x)) || is_nan(f32(y))) { return to_f16(bitcast<f32>(NAN_BITS)); }
            return select(y, x, x > y);
        }
        case 5u: {
            if (is_nan(f32(x)) || is_nan(f32(y))) { return to_f16(bitcast<f32>(NAN_BITS)); }
            return select(y, x, x < y);
        }
        default: { return to_f16(binary_f32(f32(x), f32(y))); }
    }
}

fn element(e: u32, entry: u32) -> f16 {
    let x = a[position(e, 0u)];
    switch entry {
        case 0u: { return unary_h(x); }
        case 1u: { return binary_h(x, b[position(e, 1u)]); }
        default: {
            let s = bitcast<f32>(params[5]);
            if ((params[7] & 1u) != 0u) {
                return to_f16(binary_f32(s, f32(x)));
            }
            return to_f16(binary_f32(f32(x), s));
        }
    }
}

fn run(wid: vec3<u32>, nwg: vec3<u32>, lid: u32, entry: u32) {
    let w = (wid.y * nwg.x + wid.x) * 256u + lid;
    let n = params[0];
    if (w >= (n + 1u) / 2u) {
        return;
    }
    var word = vec2<f16>(f16(0.0), f16(0.0));
    word[0] = element(2u * w, entry);
    if (2u * w + 1u < n) {
        word[1] = element(2u * w + 1u, entry);
    }
    dst[w] = word;
}

@compute @workgroup_size(256)
fn unary(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    run(wid, nwg, lid, 0u);
}

@compute @workgroup_size(256)
fn binary(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    run(wid, nwg, lid, 1u);
}

@compute @workgroup_size(256)
fn scalar(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    run(wid, nwg, lid, 2u);
}
