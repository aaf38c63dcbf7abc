// typed.wgsl: elementwise kernels for the dtypes other than f32 (f16, i32, u32, u8), and dtype
// conversion between all five. f32 tensors use unary/binary/compare/where.wgsl; this file serves
// every adapter, with or without SHADER_F16 (typed_f16.wgsl is the native-f16 variant).
//
// Storage   every buffer is bound as array<u32> words. f16 packs two elements per word (element
//           e in half e & 1, low half first), u8 packs four (byte e & 3), 32-bit dtypes one.
//           Loads widen an element to 32 "canonical" bits: f32 bits for f16 (math in f32),
//           i32 / u32 bits for the integer dtypes (u8 zero-extended).
//           A thread owns one output WORD: it computes the 1, 2 or 4 elements that share it and
//           writes the word once, so packed f16 / u8 outputs never race between threads.
// Computes  OP (override) = code | dtype_a << 8 | dtype_b << 12 | dtype_out << 16, dtype codes
//           0 f32, 1 f16, 2 i32, 3 u32, 4 u8; `code` is the UnaryOp / BinaryOp / CmpOp code of
//           src/ops.rs and src/cpu/compare.rs. Float math follows unary.wgsl / binary.wgsl;
//           integer math follows WGSL: wrapping + - * neg, and a divisor of 0 (or i32::MIN / -1)
//           replaced by 1, so x / 0 == x, MIN / -1 == MIN, x % 0 == 0, MIN % -1 == 0
//           (the CPU twins are in src/ops.rs). f32 -> f16 rounds to nearest even in software:
//           pack2x16float leaves the rounding mode to the implementation and is indeterminate
//           past 65504, where `half` (the CPU) gives inf. Float -> int truncates toward zero and
//           saturates, NaN -> 0 (Rust `as`); int -> int reinterprets / truncates bits (Rust `as`).
// Bindings  @binding(0) a, @binding(1) b, @binding(2) c : array<u32>, read-only (unused slots
//           repeat a); @binding(3) dst : array<u32>, read-write; @binding(4) params : array<u32>:
//             [n, ndim, off_a, off_b, off_c, s0, s1, flags, shape[ndim], strides_a[ndim],
//              strides_b[ndim], strides_c[ndim]]   (ndim = 0: every view is packed)
//           s0 / s1: scalar or clamp bounds as canonical bits; flags & 1: scalar first.
// Entries   convert (a: dtype_a -> dtype_out), unary, binary, scalar (a op s0), compare and
//           compare_scalar (-> u8 mask), clamp (s0 <= a <= s1), where_cond (a: u8 mask selects
//           b or c, dtype_b).
// Dispatch  256 threads per workgroup, one output word per thread, ceil(words / 256)
//           workgroups on a 2-D grid flattened as (wid.y * nwg.x + wid.x) * 256 + lid.

override OP: u32 = 0u;

@group(0) @binding(0) var<storage, read> a: array<u32>;
@group(0) @binding(1) var<storage, read> b: array<u32>;
@group(0) @binding(2) var<storage, read> c: array<u32>;
@group(0) @binding(3) var<storage, read_write> dst: array<u32>;
@group(0) @binding(4) var<storage, read> params: array<u32>;

const HEAD: u32 = 8u;
const NAN_BITS: u32 = 0x7fc00000u;
const INF_BITS: u32 = 0x7f800000u;

fn code() -> u32 { return OP & 0xffu; }
fn dt_a() -> u32 { return (OP >> 8u) & 0xfu; }
fn dt_b() -> u32 { return (OP >> 12u) & 0xfu; }
fn dt_out() -> u32 { return (OP >> 16u) & 0xfu; }

// 0 float (f32, f16), 1 signed (i32), 2 unsigned (u32, u8).
fn kind(dt: u32) -> u32 {
    if (dt <= 1u) { return 0u; }
    if (dt == 2u) { return 1u; }
    return 2u;
}

// Elements per 32-bit word.
fn per_word(dt: u32) -> u32 {
    switch dt {
        case 1u: { return 2u; }
        case 4u: { return 4u; }
        default: { return 1u; }
    }
}

fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

fn is_inf(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u;
}

// ---- packing ------------------------------------------------------------------------------

// f32 -> f16 bits, round to nearest even, overflow to inf, NaN stays a quiet NaN (as `half`).
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

// The word holding element e of a buffer of dtype dt, and the element widened to 32 bits.
fn word_of(e: u32, dt: u32) -> u32 {
    switch dt {
        case 1u: { return e >> 1u; }
        case 4u: { return e >> 2u; }
        default: { return e; }
    }
}

fn widen(word: u32, dt: u32, e: u32) -> u32 {
    switch dt {
        // f16 -> f32 is exact.
        case 1u: { return bitcast<u32>(unpack2x16float(word)[e & 1u]); }
        case 4u: { return (word >> (8u * (e & 3u))) & 0xffu; }
        default: { return word; }
    }
}

fn load_a(e: u32) -> u32 { return widen(a[word_of(e, dt_a())], dt_a(), e); }
fn load_b(e: u32) -> u32 { return widen(b[word_of(e, dt_b())], dt_b(), e); }
fn load_c(e: u32) -> u32 { return widen(c[word_of(e, dt_b())], dt_b(), e); }

// Canonical bits narrowed to dtype dt and shifted into slot j of a word.
fn narrow(bits: u32, dt: u32, j: u32) -> u32 {
    switch dt {
        case 1u: { return f32_to_f16(bitcast<f32>(bits)) << (16u * j); }
        case 4u: { return (bits & 0xffu) << (8u * j); }
        default: { return bits; }
    }
}

// Storage index (in elements) of element i of view v (0 a, 1 b, 2 c).
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

// ---- conversion ---------------------------------------------------------------------------

fn f_to_i(f: f32) -> u32 {
    if (is_nan(f)) { return 0u; }
    if (f >= 2147483648.0) { return 0x7fffffffu; }
    if (f < -2147483648.0) { return 0x80000000u; }
    return bitcast<u32>(i32(f));
}

fn f_to_u(f: f32, top: f32, max_bits: u32) -> u32 {
    if (is_nan(f) || f < 0.0) { return 0u; }
    if (f >= top) { return max_bits; }
    return u32(f);
}

fn cvt(x: u32, src_dt: u32, to: u32) -> u32 {
    let k = kind(src_dt);
    switch to {
        case 0u, 1u: {
            if (k == 1u) { return bitcast<u32>(f32(bitcast<i32>(x))); }
            if (k == 2u) { return bitcast<u32>(f32(x)); }
            return x;
        }
        case 2u: {
            if (k == 0u) { return f_to_i(bitcast<f32>(x)); }
            return x;
        }
        case 3u: {
            if (k == 0u) { return f_to_u(bitcast<f32>(x), 4294967296.0, 0xffffffffu); }
            return x;
        }
        default: {
            if (k == 0u) { return f_to_u(bitcast<f32>(x), 255.0, 255u); }
            return x & 0xffu;
        }
    }
}

// ---- float math (as unary.wgsl / binary.wgsl) ---------------------------------------------

fn erf_approx(x: f32) -> f32 {
    let ax = abs(x);
    let t = 1.0 / (1.0 + 0.3275911 * ax);
    let poly = t * (0.2548296 + t * (-0.28449674 + t * (1.4214137 + t * (-1.4531521 + t * 1.0614054))));
    return sign(x) * (1.0 - poly * exp(-ax * ax));
}

fn unary_f(x: f32) -> f32 {
    if (is_nan(x)) {
        return x;
    }
    switch code() {
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
            if (bitcast<u32>(x) == 0xff800000u) { return 0.0; }
            return 0.5 * x * (1.0 + erf_approx(x * 0.70710678118654752));
        }
        case 9u: { return sin(x); }
        case 10u: { return cos(x); }
        default: { return x; }
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

fn binary_f(x: f32, y: f32) -> f32 {
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

// ---- integer math (WGSL semantics, spelled out so every backend agrees) -------------------

fn guard_i(x: i32, y: i32) -> i32 {
    if (y == 0 || (x == bitcast<i32>(0x80000000u) && y == -1)) { return 1; }
    return y;
}

fn guard_u(y: u32) -> u32 {
    return select(y, 1u, y == 0u);
}

fn unary_i(x: i32) -> i32 {
    switch code() {
        case 0u: { return 0 - x; }
        case 1u: { return select(x, 0 - x, x < 0); }
        case 5u: { return max(x, 0); }
        default: { return x; }
    }
}

fn unary_u(x: u32) -> u32 {
    switch code() {
        case 0u: { return 0u - x; }
        case 5u: { return x; }
        default: { return x; }
    }
}

fn binary_i(x: i32, y: i32) -> i32 {
    switch code() {
        case 0u: { return x + y; }
        case 1u: { return x - y; }
        case 2u: { return x * y; }
        case 3u: { return x / guard_i(x, y); }
        case 4u: { return max(x, y); }
        case 5u: { return min(x, y); }
        case 7u: {
            // Not `%`: GLSL leaves % of negative operands undefined (and GL drivers differ), so
            // the truncated remainder is rebuilt from the division, as naga does for SPIR-V.
            let g = guard_i(x, y);
            return x - (x / g) * g;
        }
        default: { return x; }
    }
}

fn binary_u(x: u32, y: u32) -> u32 {
    switch code() {
        case 0u: { return x + y; }
        case 1u: { return x - y; }
        case 2u: { return x * y; }
        case 3u: { return x / guard_u(y); }
        case 4u: { return max(x, y); }
        case 5u: { return min(x, y); }
        case 7u: { return x % guard_u(y); }
        default: { return x; }
    }
}

// ---- per-element ops on canonical bits of dtype dt ----------------------------------------

fn unary_bits(x: u32, dt: u32) -> u32 {
    switch kind(dt) {
        case 0u: { return bitcast<u32>(unary_f(bitcast<f32>(x))); }
        case 1u: { return bitcast<u32>(unary_i(bitcast<i32>(x))); }
        default: { return unary_u(x); }
    }
}

fn binary_bits(x: u32, y: u32, dt: u32) -> u32 {
    switch kind(dt) {
        case 0u: { return bitcast<u32>(binary_f(bitcast<f32>(x), bitcast<f32>(y))); }
        case 1u: { return bitcast<u32>(binary_i(bitcast<i32>(x), bitcast<i32>(y))); }
        default: { return binary_u(x, y); }
    }
}

// -1 less, 0 equal, 1 greater; 2 unordered (NaN).
fn order(x: u32, y: u32, dt: u32) -> i32 {
    switch kind(dt) {
        case 0u: {
            let fx = bitcast<f32>(x);
            let fy = bitcast<f32>(y);
            if (is_nan(fx) || is_nan(fy)) { return 2; }
            return select(select(0, 1, fx > fy), -1, fx < fy);
        }
        case 1u: {
            let ix = bitcast<i32>(x);
            let iy = bitcast<i32>(y);
            return select(select(0, 1, ix > iy), -1, ix < iy);
        }
        default: { return select(select(0, 1, x > y), -1, x < y); }
    }
}

fn compare_bits(x: u32, y: u32, dt: u32) -> u32 {
    let o = order(x, y, dt);
    if (o == 2) {
        return select(0u, 1u, code() == 1u);
    }
    var r: bool;
    switch code() {
        case 0u: { r = o == 0; }
        case 1u: { r = o != 0; }
        case 2u: { r = o < 0; }
        case 3u: { r = o <= 0; }
        case 4u: { r = o > 0; }
        default: { r = o >= 0; }
    }
    return select(0u, 1u, r);
}

fn clamp_bits(x: u32, lo: u32, hi: u32, dt: u32) -> u32 {
    if (order(x, lo, dt) == 2 || order(x, hi, dt) == 2) {
        return NAN_BITS;
    }
    var up = x;
    if (order(lo, x, dt) > 0) { up = lo; }
    if (order(up, hi, dt) > 0) { up = hi; }
    return up;
}

fn element(e: u32, entry: u32) -> u32 {
    switch entry {
        case 0u: { return cvt(load_a(position(e, 0u)), dt_a(), dt_out()); }
        case 1u: { return unary_bits(load_a(position(e, 0u)), dt_a()); }
        case 2u: { return binary_bits(load_a(position(e, 0u)), load_b(position(e, 1u)), dt_a()); }
        case 3u: {
            let x = load_a(position(e, 0u));
            if ((params[7] & 1u) != 0u) {
                return binary_bits(params[5], x, dt_a());
            }
            return binary_bits(x, params[5], dt_a());
        }
        case 4u: { return compare_bits(load_a(position(e, 0u)), load_b(position(e, 1u)), dt_a()); }
        case 5u: { return compare_bits(load_a(position(e, 0u)), params[5], dt_a()); }
        case 6u: { return clamp_bits(load_a(position(e, 0u)), params[5], params[6], dt_a()); }
        default: {
            if (load_a(position(e, 0u)) != 0u) {
                return load_b(position(e, 1u));
            }
            return load_c(position(e, 2u));
        }
    }
}

// Computes the elements of output word w and stores the word once.
fn run(wid: vec3<u32>, nwg: vec3<u32>, lid: u32, entry: u32) {
    let w = (wid.y * nwg.x + wid.x) * 256u + lid;
    let per = per_word(dt_out());
    let n = params[0];
    let first = w * per;
    // The grid is rounded up to whole workgroups: threads past the end must not store.
    if (w >= (n + per - 1u) / per) {
        return;
    }
    var word = 0u;
    for (var j = 0u; j < per; j = j + 1u) {
        if (first + j < n) {
            word = word | narrow(element(first + j, entry), dt_out(), j);
        }
    }
    dst[w] = word;
}

@compute @workgroup_size(256)
fn convert(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    run(wid, nwg, lid, 0u);
}

@compute @workgroup_size(256)
fn unary(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    run(wid, nwg, lid, 1u);
}

@compute @workgroup_size(256)
fn binary(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    run(wid, nwg, lid, 2u);
}

@compute @workgroup_size(256)
fn scalar(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    run(wid, nwg, lid, 3u);
}

@compute @workgroup_size(256)
fn compare(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    run(wid, nwg, lid, 4u);
}

@compute @workgroup_size(256)
fn compare_scalar(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    run(wid, nwg, lid, 5u);
}

@compute @workgroup_size(256)
fn clamp_values(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    run(wid, nwg, lid, 6u);
}

@compute @workgroup_size(256)
fn where_cond(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    run(wid, nwg, lid, 7u);
}
