// common.wgsl: helpers shared by every kernel. src/gpu/kernels.rs prepends this file to each
// shader in shaders/ (and to every generated elementwise kernel) at embed time, so each helper is
// written once; tests/shaders.rs validates every composed shader with naga.
//
// Defines   NAN_BITS, INF_BITS; is_nan / is_inf (tested on the bits: WGSL lets compilers assume
//           floats are never NaN, so `x != x` may fold away); flat_index (the 2-D dispatch grid
//           flattened as group_index(wid, nwg) * WG_SIZE + lid, and the Invocation struct whose
//           `item` it is); cell (an element's row and column); f32 <-> f16 bits with the CPU's
//           rounding (`half`); erf_approx and pow_c (the CPU twins are in src/ops.rs); WGSL
//           integer division guards; conversions between dtypes with Rust `as` semantics; the
//           8x8 register tile of the matmul kernels.
// Bindings  none of its own; `strided_offset` reads the `params` every shader binds.
// Uses      WG_SIZE, declared in every shader from src/gpu/contract.rs.

const NAN_BITS: u32 = 0x7fc00000u;
const INF_BITS: u32 = 0x7f800000u;

fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

fn is_inf(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u;
}

fn nan_f32() -> f32 {
    return bitcast<f32>(NAN_BITS);
}

// The index of a workgroup on the 2-D dispatch grid (row-major over x <= 65,535 columns).
fn group_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.y * nwg.x + wid.x;
}

fn flat_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return group_index(wid, nwg) * WG_SIZE + lid;
}

// The builtins of an entry point on the 2-D grid (of any workgroup size), as one parameter.
struct Invocation {
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
}

// Online log-sum-exp: merges the running pair (m, s) = (max, sum of exp(x - max)) with
// (m2, s2). An empty pair has s = 0 and m = -inf and is skipped, since exp(-inf - -inf) would be
// NaN. Softmax and cross-entropy fold their rows with it.
fn lse_merge(m: f32, s: f32, m2: f32, s2: f32) -> vec2<f32> {
    if (s2 == 0.0) {
        return vec2<f32>(m, s);
    }
    if (s == 0.0) {
        return vec2<f32>(m2, s2);
    }
    let mm = max(m, m2);
    return vec2<f32>(mm, s * exp(m - mm) + s2 * exp(m2 - mm));
}

// The elements a workgroup-per-row entry folds of its row: len, or none in the workgroups past
// the params[0] rows (the grid is rounded up), which must still reach every barrier.
fn row_count(row: u32, len: u32) -> u32 {
    return select(0u, len, row < params[0]);
}

// The flat element index of an invocation.
fn item(inv: Invocation) -> u32 {
    return flat_index(inv.wid, inv.nwg, inv.lid);
}

// The (row, column) of element i of a row-major matrix of `cols` columns: where an entry that
// takes one element per invocation over equal rows finds its row's data.
fn cell(i: u32, cols: u32) -> vec2<u32> {
    return vec2<u32>(i / cols, i % cols);
}

// Storage index of element i of a strided view: `base + sum_d idx_d * strides[d]`, with idx the
// row-major unravelling of i over the nd dims whose sizes are params[shape_at..] and strides
// params[strides_at..]. Every shader binds `params: array<u32>` (the binding convention), so
// this reads it directly. At most nd iterations: far from lavapipe's 65,535-iteration cap.
fn strided_offset(i: u32, base: u32, nd: u32, shape_at: u32, strides_at: u32) -> u32 {
    var rem = i;
    var at = base;
    for (var k = nd; k > 0u; k = k - 1u) {
        let d = k - 1u;
        let size = params[shape_at + d];
        at = at + (rem % size) * params[strides_at + d];
        rem = rem / size;
    }
    return at;
}

// strided_offset without dim d: x = base + sum over the dims k != d of idx_k * strides[k], and
// y = idx_d. Gather and scatter put an id in place of idx_d (x + id * strides[d]).
fn strided_offset_but(i: u32, base: u32, nd: u32, shape_at: u32, strides_at: u32, d: u32) -> vec2<u32> {
    var rem = i;
    var at = base;
    var idx_d = 0u;
    for (var k = nd; k > 0u; k = k - 1u) {
        let j = k - 1u;
        let size = params[shape_at + j];
        let c = rem % size;
        rem = rem / size;
        if (j == d) {
            idx_d = c;
        } else {
            at = at + c * params[strides_at + j];
        }
    }
    return vec2<u32>(at, idx_d);
}

// f32 -> f16 bits, round to nearest even, overflow to inf, NaN stays a quiet NaN (as `half`).
// Not pack2x16float: it leaves the rounding mode to the implementation and is indeterminate past
// 65504, where the CPU gives inf.
fn f32_to_f16(x: f32) -> u32 {
    let u = bitcast<u32>(x);
    let s = (u >> 16u) & 0x8000u;
    let m = u & 0x7fffffffu;
    if (m > 0x7f800000u) {
        return s | 0x7e00u | ((m >> 13u) & 0x3ffu);
    }
    // 65520 and up round past 65504, the largest f16.
    if (m >= 0x477ff000u) {
        return s | 0x7c00u;
    }
    if (m >= 0x38800000u) {
        // Normal: rebias the exponent (127 -> 15) and round away the 13 extra mantissa bits.
        let r = m - 0x38000000u;
        return s | ((r + 0xfffu + ((r >> 13u) & 1u)) >> 13u);
    }
    // Below 2^-25 (and the tie at 2^-25) rounds to zero.
    if (m <= 0x33000000u) {
        return s;
    }
    // Subnormal: k * 2^-24 with k = mantissa >> (126 - e), rounded to nearest even.
    let e = m >> 23u;
    let mant = (m & 0x7fffffu) | 0x800000u;
    let sh = 126u - e;
    let k = mant >> sh;
    let rest = mant & ((1u << sh) - 1u);
    let halfway = 1u << (sh - 1u);
    var r = k;
    if (rest > halfway || (rest == halfway && (k & 1u) == 1u)) {
        r = k + 1u;
    }
    return s | r;
}

// f16 bits (low 16 bits of h) -> f32, exact, NaN payloads kept. Not unpack2x16float: GL drivers
// widen NaN to a different payload, so a stored NaN would not come back as the same bits.
fn f16_to_f32(h: u32) -> f32 {
    let s = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0x1fu) {
        return bitcast<f32>(s | 0x7f800000u | (m << 13u));
    }
    if (e == 0u) {
        // Zero or subnormal: m * 2^-24, exact in f32.
        return bitcast<f32>(s | bitcast<u32>(f32(m) * 5.9604644775390625e-8));
    }
    return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u));
}

// x rounded to the nearest f16 value (as an f32): what storing and reloading an f16 gives.
fn round_f16(x: f32) -> f32 {
    return f16_to_f32(f32_to_f16(x));
}

// Abramowitz & Stegun 7.1.26, |error| < 1.5e-7; the CPU twin is `erf` in src/ops.rs.
fn erf_approx(x: f32) -> f32 {
    let ax = abs(x);
    let t = 1.0 / (1.0 + 0.3275911 * ax);
    let poly = t * (0.2548296 + t * (-0.28449674 + t * (1.4214137 + t * (-1.4531521 + t * 1.0614054))));
    return sign(x) * (1.0 - poly * exp(-ax * ax));
}

// C's powf, case by case (drivers' pow(x, y) is exp2(y * log2(x)), NaN for x < 0).
fn pow_c(x: f32, y: f32) -> f32 {
    if (y == 0.0 || x == 1.0) {
        return 1.0;
    }
    if (is_nan(x) || is_nan(y)) {
        return nan_f32();
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
        return nan_f32();
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

// The divisor WGSL integer division really uses: 0 (and i32::MIN / -1) become 1, so x / 0 == x,
// MIN / -1 == MIN, x % 0 == 0 on every backend (the CPU twin is `IntElem::guard`).
fn guard_i32(x: i32, y: i32) -> i32 {
    if (y == 0 || (x == bitcast<i32>(0x80000000u) && y == -1)) { return 1; }
    return y;
}

fn guard_u32(x: u32, y: u32) -> u32 {
    return select(y, 1u, y == 0u);
}

// Truncated remainder rebuilt from the division: GLSL leaves % of negative operands undefined
// (GL drivers differ), so `%` is never used on signed values.
fn rem_i32(x: i32, y: i32) -> i32 {
    let g = guard_i32(x, y);
    return x - (x / g) * g;
}

fn rem_u32(x: u32, y: u32) -> u32 {
    return x % guard_u32(x, y);
}

// Float -> integer with Rust `as` semantics: truncate toward zero, saturate, NaN -> 0.
fn f32_to_i32(f: f32) -> i32 {
    if (is_nan(f)) { return 0; }
    if (f >= 2147483648.0) { return 2147483647; }
    if (f < -2147483648.0) { return bitcast<i32>(0x80000000u); }
    return i32(f);
}

fn f32_to_u32_sat(f: f32, top: f32, max_value: u32) -> u32 {
    if (is_nan(f) || f < 0.0) { return 0u; }
    if (f >= top) { return max_value; }
    return u32(f);
}

// ---- Philox4x32-10 (the CPU twin is src/random.rs) --------------------------------------------

// The 64-bit product of two u32 as (high, low) words, from 16-bit halves (WGSL has no u64).
fn mulhilo(a: u32, b: u32) -> vec2<u32> {
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    let lo = (p00 & 0xffffu) | (mid << 16u);
    let hi = a1 * b1 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
    return vec2<u32>(hi, lo);
}

// Ten rounds of multiply-xor over the counter c with key k (Random123's philox4x32_10). A fixed
// count of 10 iterations, far from any driver's loop cap.
fn philox(c0: vec4<u32>, k0: vec2<u32>) -> vec4<u32> {
    var c = c0;
    var k = k0;
    for (var round = 0u; round < 10u; round = round + 1u) {
        if (round > 0u) {
            k = k + vec2<u32>(0x9E3779B9u, 0xBB67AE85u);
        }
        let p0 = mulhilo(0xD2511F53u, c.x);
        let p1 = mulhilo(0xCD9E8D57u, c.z);
        c = vec4<u32>(p1.x ^ c.y ^ k.x, p1.y, p0.x ^ c.w ^ k.y, p0.y);
    }
    return c;
}

// The words of element e of a random op with seed (s0, s1) and first offset (o0, o1): the
// counter is offset + e (64-bit, with carry).
fn philox_words(s0: u32, s1: u32, o0: u32, o1: u32, e: u32) -> vec4<u32> {
    let lo = o0 + e;
    let hi = o1 + select(0u, 1u, lo < o0);
    return philox(vec4<u32>(lo, hi, 0u, 0u), vec2<u32>(s0, s1));
}

// A word as a uniform f32 in [0, 1): its low 24 bits times 2^-24 (exact).
fn uniform_of(w: u32) -> f32 {
    return f32(w & 0xffffffu) * 5.9604644775390625e-8;
}

// normal_of (standard normals) lives in normal.wgsl, prepended to the kernels that draw them.
