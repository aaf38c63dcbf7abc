// quant.wgsl: ggml block-quantized matrices (QTensor), dequantized inside the kernels.
//
// A matrix is stored as two planes per row range ("part"), see src/cpu/quant.rs: `scales`, the
// f16 scales packed two per word (read with unpack2x16float), and `body`, the integer bodies of
// the blocks as bytes packed four per word (every block body is a whole number of words).
// Block types (params[6]): QTYPE_Q8_0, QTYPE_Q4_0, QTYPE_Q4_K, QTYPE_Q6_K, decoded exactly as
// ggml's dequantize_row_* (the CPU twin is `cpu::quant::dequantize_block`). The library appends
// the block-type table (src/gpu/shader_table.rs, from crate::QType and src/cpu/quant.rs): each
// type's QTYPE_* code, BLOCK_LEN_* elements, BODY_BYTES_* body bytes and SCALES_* f16 scales
// per block, and block_len(q).
//
// Computes   matvec:  dst[i, row0 + r] = sum_k W[r, k] * x[i, k]  (x @ W^T for this part's rows)
//            dequant: dst[row0 + r, k] = W[r, k]
//            gather:  dst[t, k] = W[ids[t] - row0, k] for ids inside this part; an id outside
//                     0..rows_total writes 0 and is reported to the error word (ids.wgsl) by
//                     the part holding row 0
// Declared   by the library from this file's SHADERS entry (src/gpu/shader_table.rs):
// Bindings   @group(0) @binding(0) scales : array<u32>, read-only
//            @group(0) @binding(1) body   : array<u32>, read-only
//            @group(0) @binding(2) aux    : array<u32>, read-only: x as f32 bits (matvec), ids
//                                           (gather), unused (dequant: any buffer)
//            @group(0) @binding(3) dst    : array<f32>, read-write
//            @group(0) @binding(4) params : array<u32>, read-only:
//                [rows, cols, blocks per row, m, row0, rows_total, qtype, x_offset,
//                 n, ids_offset, code]
// Dispatch   matvec: 64 threads per workgroup, one workgroup per (weight row, group of MT
//            activation rows): x and y flatten the row over a 2-D grid, z is the group; each
//            thread takes every 64th block of the row, then the workgroup adds the 64 partial
//            sums in a fixed tree (same bits on every run).
//            dequant, gather: 256 threads, one output element per thread (item()).

// matvec's block type (a QTYPE_* code) is OP, set per pipeline by the host. LANES (the lanes
// that share a weight row, 64: matvec_rows' tree takes 6 bits) and MT (activation rows per
// workgroup: each weight block is decoded once for all of them) are the contract's
// (src/gpu/contract.rs).

var<workgroup> partial: array<f32, LANES * MT>;

// Scale number i of the scales plane.
fn scale(i: u32) -> f32 {
    let w = unpack2x16float(scales[i >> 1u]);
    return select(w.x, w.y, (i & 1u) == 1u);
}

// Byte p of the body plane, unsigned and sign-extended.
fn ubyte(p: u32) -> u32 {
    return (body[p >> 2u] >> ((p & 3u) * 8u)) & 0xFFu;
}

fn sbyte(p: u32) -> i32 {
    return bitcast<i32>(ubyte(p) << 24u) >> 24u;
}

// ggml's get_scale_min_k4: the 6-bit scale and min of sub-block j of the Q4_K body at `base`.
fn scale_min_k4(base: u32, j: u32) -> vec2<u32> {
    if (j < 4u) {
        return vec2<u32>(ubyte(base + j) & 63u, ubyte(base + j + 4u) & 63u);
    }
    let s = (ubyte(base + j + 4u) & 15u) | ((ubyte(base + j - 4u) >> 6u) << 4u);
    let m = (ubyte(base + j + 4u) >> 4u) | ((ubyte(base + j) >> 6u) << 4u);
    return vec2<u32>(s, m);
}

// Element j of block b (numbered within the part) of a matrix of type q.
fn value(q: u32, b: u32, j: u32) -> f32 {
    if (q == QTYPE_Q8_0) {
        return f32(sbyte(b * BODY_BYTES_Q8_0 + j)) * scale(SCALES_Q8_0 * b);
    }
    if (q == QTYPE_Q4_0) {
        let v = ubyte(b * BODY_BYTES_Q4_0 + (j & 15u));
        let nib = select(v & 15u, v >> 4u, j >= 16u);
        return f32(i32(nib) - 8) * scale(SCALES_Q4_0 * b);
    }
    if (q == QTYPE_Q4_K) {
        let base = b * BODY_BYTES_Q4_K;
        let k = j / 64u;
        let l = j % 64u;
        let sm = scale_min_k4(base, 2u * k + select(0u, 1u, l >= 32u));
        let qb = ubyte(base + 12u + 32u * k + (l % 32u));
        let qv = select(qb & 15u, qb >> 4u, l >= 32u);
        let s = SCALES_Q4_K * b;
        return (scale(s) * f32(sm.x)) * f32(qv) - scale(s + 1u) * f32(sm.y);
    }
    let base = b * BODY_BYTES_Q6_K;
    let n = j / 128u;
    let l = j % 128u;
    let g = l / 32u;
    let ll = l % 32u;
    let qlb = ubyte(base + 64u * n + ll + 32u * (g & 1u));
    let nib = select(qlb & 15u, qlb >> 4u, g >= 2u);
    let qh = (ubyte(base + 128u + 32u * n + ll) >> (2u * g)) & 3u;
    let sc = sbyte(base + 192u + 8u * n + ll / 16u + 2u * g);
    return (scale(SCALES_Q6_K * b) * f32(sc)) * f32(i32(nib | (qh << 4u)) - 32);
}

// Element k of row r (numbered within the part) of a matrix of type q.
fn weight(q: u32, r: u32, k: u32) -> f32 {
    let bl = block_len(q);
    return value(q, r * params[2] + k / bl, k % bl);
}

fn xv(i: u32) -> f32 {
    return bitcast<f32>(aux[i]);
}

// Signed byte k (0..3) of a word.
fn lane(w: u32, k: u32) -> f32 {
    return f32(bitcast<i32>(w << (24u - 8u * k)) >> 24u);
}

// `acc` plus one Q8_0 block (global block gb) times the 32 activations from x index `xo`: the
// block's 8 words in order, each adding d * (its 4 products).
fn q8_0_block(gb: u32, xo: u32, acc: f32) -> f32 {
    let d = scale(gb);
    var a = acc;
    for (var w = 0u; w < 8u; w = w + 1u) {
        let word = body[gb * 8u + w];
        let x = xo + 4u * w;
        a = a + d * (lane(word, 0u) * xv(x) + lane(word, 1u) * xv(x + 1u) + lane(word, 2u) * xv(x + 2u) + lane(word, 3u) * xv(x + 3u));
    }
    return a;
}

// `acc` plus one Q4_0 block times its 32 activations: per body word, the low nibbles pair with
// x[4w..4w+4] and the high ones with x[16+4w..], as ggml lays them out.
fn q4_0_block(gb: u32, xo: u32, acc: f32) -> f32 {
    let d = scale(gb);
    var a = acc;
    for (var w = 0u; w < 4u; w = w + 1u) {
        let word = body[gb * 4u + w];
        let x = xo + 4u * w;
        var s = 0.0;
        for (var k = 0u; k < 4u; k = k + 1u) {
            let v = (word >> (8u * k)) & 0xFFu;
            s = s + f32(i32(v & 15u) - 8) * xv(x + k) + f32(i32(v >> 4u) - 8) * xv(x + k + 16u);
        }
        a = a + d * s;
    }
    return a;
}

// Lane `lane`'s share of activation row `t`'s dot product with weight row `r`: blocks lane,
// lane + LANES, ... in order, as invocation `lane` of a `matvec` workgroup sums them. `xr0` is
// row 0 of x at column 0. At most nb / 64 iterations (a row of 65,536 * 64 * 32 values would be
// needed to pass lavapipe's loop cap).
fn lane_sum(q: u32, r: u32, lane: u32, xr0: u32, acc: f32) -> f32 {
    let nb = params[2];
    let bl = block_len(q);
    var a = acc;
    for (var b = lane; b < nb; b = b + LANES) {
        let gb = r * nb + b;
        let xr = xr0 + b * bl;
        if (q == QTYPE_Q8_0) {
            a = q8_0_block(gb, xr, a);
        } else if (q == QTYPE_Q4_0) {
            a = q4_0_block(gb, xr, a);
        } else {
            for (var j = 0u; j < bl; j = j + 1u) {
                a = a + value(q, gb, j) * xv(xr + j);
            }
        }
    }
    return a;
}

@compute @workgroup_size(LANES)
fn matvec(inv: Invocation) {
    let rows = params[0];
    let cols = params[1];
    let m = params[3];
    // The block type as a pipeline constant: each type's matvec is compiled alone, without the
    // other types' decoding in its registers (params[6] holds the same code).
    let q = OP;
    let xoff = params[7];
    // Uniform per workgroup, so the early exit keeps the barriers below in uniform control flow.
    let r = group_index(inv.wid, inv.nwg);
    if (r >= rows) { return; }
    let i0 = inv.wid.z * MT;
    let mt = min(MT, m - i0);
    // Row i0 of x; row i0 + t is t * cols further. Four accumulators by name, not an array
    // indexed by the activation row: a dynamically indexed array lives in memory on GPUs, and
    // these sums are the kernel's inner loop (the blocks of Q8_0 and Q4_0 are decoded for each
    // row; their decode is a few integer ops against the loads it shares through the cache).
    let xr = xoff + i0 * cols;
    let a0 = lane_sum(q, r, inv.lid, xr, 0.0);
    var a1 = 0.0;
    var a2 = 0.0;
    var a3 = 0.0;
    if (mt > 1u) { a1 = lane_sum(q, r, inv.lid, xr + cols, 0.0); }
    if (mt > 2u) { a2 = lane_sum(q, r, inv.lid, xr + 2u * cols, 0.0); }
    if (mt > 3u) { a3 = lane_sum(q, r, inv.lid, xr + 3u * cols, 0.0); }
    partial[inv.lid] = a0;
    partial[LANES + inv.lid] = a1;
    partial[2u * LANES + inv.lid] = a2;
    partial[3u * LANES + inv.lid] = a3;
    workgroupBarrier();
    for (var s = LANES / 2u; s > 0u; s = s >> 1u) {
        if (inv.lid < s) {
            // Only the live rows: decode's single row pays one sum, not four.
            for (var t = 0u; t < mt; t = t + 1u) {
                partial[t * LANES + inv.lid] = partial[t * LANES + inv.lid] + partial[t * LANES + inv.lid + s];
            }
        }
        workgroupBarrier();
    }
    if (inv.lid < mt) {
        dst[(i0 + inv.lid) * params[5] + params[4] + r] = partial[inv.lid * LANES];
    }
}

// `matvec` with one invocation per weight row and no workgroup memory or barriers, for
// software adapters (lavapipe), which run a workgroup's invocations as a loop and each barrier
// as a switch between them: the invocation sums the 64 lanes' shares in `matvec`'s order and
// adds them in its tree's order, so both entries give the same bits. 64 weight rows per
// workgroup, spread over x and y; z as in `matvec`.
@compute @workgroup_size(LANES)
fn matvec_serial(inv: Invocation) {
    let rows = params[0];
    let cols = params[1];
    let m = params[3];
    let q = OP;
    let r = group_index(inv.wid, inv.nwg) * LANES + inv.lid;
    if (r >= rows) { return; }
    let i0 = inv.wid.z * MT;
    let mt = min(MT, m - i0);
    for (var t = 0u; t < mt; t = t + 1u) {
        let xr = params[7] + (i0 + t) * cols;
        var lanes: array<f32, LANES>;
        for (var l = 0u; l < LANES; l = l + 1u) {
            lanes[l] = lane_sum(q, r, l, xr, 0.0);
        }
        for (var s = LANES / 2u; s > 0u; s = s >> 1u) {
            for (var l = 0u; l < s; l = l + 1u) {
                lanes[l] = lanes[l] + lanes[l + s];
            }
        }
        dst[(i0 + t) * params[5] + params[4] + r] = lanes[0];
    }
}

// `matvec` for software adapters, 8 weight rows per invocation: the rows' lanes are summed side
// by side as two vec4s (rows 0..3 and 4..7), so each activation is loaded once for 8 rows, and
// Q8_0 and Q4_0 blocks are read a word at a time. Software adapters (lavapipe) turn every
// storage load into a loop over their SIMD lanes: loads, not arithmetic, set the speed, and
// this entry makes about one load per weight word (matvec_serial: five for Q8_0). Each row's
// arithmetic is `matvec`'s, operation for operation (vec4 arithmetic is per component): lane l's
// blocks l, l + 64, ... in order, then the 64 lane sums added in `matvec`'s tree, here as a
// binary counter over the lanes in bit-reversed order (the tree's leaves left to right), so
// all three entries give the same bits. 64 weight rows per workgroup (8 invocations), spread
// over x and y; z as in `matvec`. Rows past the end are read as the last row, never stored.
struct Rows8 {
    a: vec4<f32>,
    b: vec4<f32>,
}

fn rows8_add(x: Rows8, y: Rows8) -> Rows8 {
    return Rows8(x.a + y.a, x.b + y.b);
}

fn scale4(gb: vec4<u32>) -> vec4<f32> {
    return vec4<f32>(scale(gb.x), scale(gb.y), scale(gb.z), scale(gb.w));
}

fn body4(i: vec4<u32>) -> vec4<u32> {
    return vec4<u32>(body[i.x], body[i.y], body[i.z], body[i.w]);
}

// Signed byte k (0..3) of each word, as `lane` does for one.
fn lane4(w: vec4<u32>, k: u32) -> vec4<f32> {
    return vec4<f32>(bitcast<vec4<i32>>(w << vec4<u32>(24u - 8u * k)) >> vec4<u32>(24u));
}

fn x4(i: u32) -> vec4<f32> {
    return vec4<f32>(xv(i), xv(i + 1u), xv(i + 2u), xv(i + 3u));
}

// q8_0_block for 8 rows' blocks (global block numbers ga, gb) sharing the activations.
fn q8_0_block8(ga: vec4<u32>, gb: vec4<u32>, xo: u32, acc: Rows8) -> Rows8 {
    let da = scale4(ga);
    let db = scale4(gb);
    var r = acc;
    for (var w = 0u; w < 8u; w = w + 1u) {
        let x = x4(xo + 4u * w);
        let wa = body4(ga * 8u + w);
        let wb = body4(gb * 8u + w);
        r.a = r.a + da * (lane4(wa, 0u) * x.x + lane4(wa, 1u) * x.y + lane4(wa, 2u) * x.z + lane4(wa, 3u) * x.w);
        r.b = r.b + db * (lane4(wb, 0u) * x.x + lane4(wb, 1u) * x.y + lane4(wb, 2u) * x.z + lane4(wb, 3u) * x.w);
    }
    return r;
}

fn nib_lo(v: vec4<u32>) -> vec4<f32> {
    return vec4<f32>(vec4<i32>(v & vec4<u32>(15u)) - vec4<i32>(8));
}

fn nib_hi(v: vec4<u32>) -> vec4<f32> {
    return vec4<f32>(vec4<i32>(v >> vec4<u32>(4u)) - vec4<i32>(8));
}

// q4_0_block for 8 rows' blocks sharing the activations.
fn q4_0_block8(ga: vec4<u32>, gb: vec4<u32>, xo: u32, acc: Rows8) -> Rows8 {
    let da = scale4(ga);
    let db = scale4(gb);
    var r = acc;
    for (var w = 0u; w < 4u; w = w + 1u) {
        let wa = body4(ga * 4u + w);
        let wb = body4(gb * 4u + w);
        let lo = x4(xo + 4u * w);
        let hi = x4(xo + 4u * w + 16u);
        var sa = vec4<f32>(0.0);
        var sb = vec4<f32>(0.0);
        for (var k = 0u; k < 4u; k = k + 1u) {
            let sh = vec4<u32>(8u * k);
            let va = (wa >> sh) & vec4<u32>(0xFFu);
            let vb = (wb >> sh) & vec4<u32>(0xFFu);
            sa = sa + nib_lo(va) * lo[k] + nib_hi(va) * hi[k];
            sb = sb + nib_lo(vb) * lo[k] + nib_hi(vb) * hi[k];
        }
        r.a = r.a + da * sa;
        r.b = r.b + db * sb;
    }
    return r;
}

// Eight words of 4 rows each: a quarter-block's bytes of the K-quants, loaded once and read
// in the order `value` visits their elements.
struct Words8 {
    w0: vec4<u32>,
    w1: vec4<u32>,
    w2: vec4<u32>,
    w3: vec4<u32>,
    w4: vec4<u32>,
    w5: vec4<u32>,
    w6: vec4<u32>,
    w7: vec4<u32>,
}

fn words8(i: vec4<u32>) -> Words8 {
    return Words8(body4(i), body4(i + vec4<u32>(1u)), body4(i + vec4<u32>(2u)),
                  body4(i + vec4<u32>(3u)), body4(i + vec4<u32>(4u)), body4(i + vec4<u32>(5u)),
                  body4(i + vec4<u32>(6u)), body4(i + vec4<u32>(7u)));
}

// Byte i (0..11) of the 12 scale bytes s0, s1, s2 of a Q4_K block, for 4 rows.
fn byte12(s0: vec4<u32>, s1: vec4<u32>, s2: vec4<u32>, i: u32) -> vec4<u32> {
    let w = select(select(s0, s1, i >= 4u), s2, i >= 8u);
    return (w >> vec4<u32>(8u * (i % 4u))) & vec4<u32>(0xFFu);
}

// Four elements of a Q4_K word (nibbles at bit `sh` of each byte): `value`'s arithmetic.
fn q4_k_word(acc: vec4<f32>, w: vec4<u32>, sh: u32, d1: vec4<f32>, m1: vec4<f32>, x: vec4<f32>) -> vec4<f32> {
    var a = acc;
    a = a + (d1 * vec4<f32>((w >> vec4<u32>(sh)) & vec4<u32>(15u)) - m1) * x.x;
    a = a + (d1 * vec4<f32>((w >> vec4<u32>(8u + sh)) & vec4<u32>(15u)) - m1) * x.y;
    a = a + (d1 * vec4<f32>((w >> vec4<u32>(16u + sh)) & vec4<u32>(15u)) - m1) * x.z;
    a = a + (d1 * vec4<f32>((w >> vec4<u32>(24u + sh)) & vec4<u32>(15u)) - m1) * x.w;
    return a;
}

// 32 elements of a Q4_K sub-block for 8 rows: words qa (rows 0..3), qb (4..7), nibbles at
// `sh`, scales d1, mins m1; activations from xo.
fn q4_k_sub8(acc: Rows8, qa: Words8, qb: Words8, sh: u32, d1: Rows8, m1: Rows8, xo: u32) -> Rows8 {
    var r = acc;
    var x = x4(xo);
    r.a = q4_k_word(r.a, qa.w0, sh, d1.a, m1.a, x);
    r.b = q4_k_word(r.b, qb.w0, sh, d1.b, m1.b, x);
    x = x4(xo + 4u);
    r.a = q4_k_word(r.a, qa.w1, sh, d1.a, m1.a, x);
    r.b = q4_k_word(r.b, qb.w1, sh, d1.b, m1.b, x);
    x = x4(xo + 8u);
    r.a = q4_k_word(r.a, qa.w2, sh, d1.a, m1.a, x);
    r.b = q4_k_word(r.b, qb.w2, sh, d1.b, m1.b, x);
    x = x4(xo + 12u);
    r.a = q4_k_word(r.a, qa.w3, sh, d1.a, m1.a, x);
    r.b = q4_k_word(r.b, qb.w3, sh, d1.b, m1.b, x);
    x = x4(xo + 16u);
    r.a = q4_k_word(r.a, qa.w4, sh, d1.a, m1.a, x);
    r.b = q4_k_word(r.b, qb.w4, sh, d1.b, m1.b, x);
    x = x4(xo + 20u);
    r.a = q4_k_word(r.a, qa.w5, sh, d1.a, m1.a, x);
    r.b = q4_k_word(r.b, qb.w5, sh, d1.b, m1.b, x);
    x = x4(xo + 24u);
    r.a = q4_k_word(r.a, qa.w6, sh, d1.a, m1.a, x);
    r.b = q4_k_word(r.b, qb.w6, sh, d1.b, m1.b, x);
    x = x4(xo + 28u);
    r.a = q4_k_word(r.a, qa.w7, sh, d1.a, m1.a, x);
    r.b = q4_k_word(r.b, qb.w7, sh, d1.b, m1.b, x);
    return r;
}

// scale_min_k4 for 4 rows' scale words: (scale, min) of sub-block j.
fn scale_min4(s0: vec4<u32>, s1: vec4<u32>, s2: vec4<u32>, j: u32) -> array<vec4<f32>, 2> {
    if (j < 4u) {
        return array<vec4<f32>, 2>(vec4<f32>(byte12(s0, s1, s2, j) & vec4<u32>(63u)),
                                   vec4<f32>(byte12(s0, s1, s2, j + 4u) & vec4<u32>(63u)));
    }
    let hi = byte12(s0, s1, s2, j + 4u);
    let s = (hi & vec4<u32>(15u)) | ((byte12(s0, s1, s2, j - 4u) >> vec4<u32>(6u)) << vec4<u32>(4u));
    let m = (hi >> vec4<u32>(4u)) | ((byte12(s0, s1, s2, j) >> vec4<u32>(6u)) << vec4<u32>(4u));
    return array<vec4<f32>, 2>(vec4<f32>(s), vec4<f32>(m));
}

// A Q4_K block of 8 rows (global block numbers ga, gb) in `value`'s element order, each body
// word loaded once.
fn q4_k_block8(ga: vec4<u32>, gb: vec4<u32>, xo: u32, acc: Rows8) -> Rows8 {
    let wa = ga * (BODY_BYTES_Q4_K / 4u);
    let wb = gb * (BODY_BYTES_Q4_K / 4u);
    let sa0 = body4(wa);
    let sa1 = body4(wa + vec4<u32>(1u));
    let sa2 = body4(wa + vec4<u32>(2u));
    let sb0 = body4(wb);
    let sb1 = body4(wb + vec4<u32>(1u));
    let sb2 = body4(wb + vec4<u32>(2u));
    // d and dmin: scales 2g and 2g + 1, one word.
    let da = vec4<f32>(scale(SCALES_Q4_K * ga.x), scale(SCALES_Q4_K * ga.y), scale(SCALES_Q4_K * ga.z), scale(SCALES_Q4_K * ga.w));
    let db = vec4<f32>(scale(SCALES_Q4_K * gb.x), scale(SCALES_Q4_K * gb.y), scale(SCALES_Q4_K * gb.z), scale(SCALES_Q4_K * gb.w));
    let ma = vec4<f32>(scale(SCALES_Q4_K * ga.x + 1u), scale(SCALES_Q4_K * ga.y + 1u), scale(SCALES_Q4_K * ga.z + 1u), scale(SCALES_Q4_K * ga.w + 1u));
    let mb = vec4<f32>(scale(SCALES_Q4_K * gb.x + 1u), scale(SCALES_Q4_K * gb.y + 1u), scale(SCALES_Q4_K * gb.z + 1u), scale(SCALES_Q4_K * gb.w + 1u));
    var r = acc;
    for (var k = 0u; k < 4u; k = k + 1u) {
        let qa = words8(wa + vec4<u32>(3u + 8u * k));
        let qb = words8(wb + vec4<u32>(3u + 8u * k));
        for (var h = 0u; h < 2u; h = h + 1u) {
            let sma = scale_min4(sa0, sa1, sa2, 2u * k + h);
            let smb = scale_min4(sb0, sb1, sb2, 2u * k + h);
            let d1 = Rows8(da * sma[0], db * smb[0]);
            let m1 = Rows8(ma * sma[1], mb * smb[1]);
            r = q4_k_sub8(r, qa, qb, 4u * h, d1, m1, xo + 64u * k + 32u * h);
        }
    }
    return r;
}

// Four elements of a Q6_K word pair: low bits from ql at bit `shl` of each byte, high bits
// from qh at bit `shh`, times ds (d * the sub-block's scale): `value`'s arithmetic.
fn q6_k_word(acc: vec4<f32>, ql: vec4<u32>, qh: vec4<u32>, shl: u32, shh: u32, ds: vec4<f32>, x: vec4<f32>) -> vec4<f32> {
    var a = acc;
    for (var i = 0u; i < 4u; i = i + 1u) {
        let lo = (ql >> vec4<u32>(8u * i + shl)) & vec4<u32>(15u);
        let hi = (qh >> vec4<u32>(8u * i + shh)) & vec4<u32>(3u);
        a = a + (ds * vec4<f32>(vec4<i32>(lo | (hi << vec4<u32>(4u))) - vec4<i32>(32))) * x[i];
    }
    return a;
}

// Signed byte i (0..3) of each word.
fn sbyte4(w: vec4<u32>, i: u32) -> vec4<f32> {
    return vec4<f32>(bitcast<vec4<i32>>(w << vec4<u32>(24u - 8u * i)) >> vec4<u32>(24u));
}

// 32 elements of a Q6_K block (one g of one n) for 8 rows.
fn q6_k_sub8(acc: Rows8, la: Words8, lb: Words8, ha: Words8, hb: Words8, shl: u32, shh: u32,
             d0: Rows8, d1: Rows8, xo: u32) -> Rows8 {
    var r = acc;
    var x = x4(xo);
    r.a = q6_k_word(r.a, la.w0, ha.w0, shl, shh, d0.a, x);
    r.b = q6_k_word(r.b, lb.w0, hb.w0, shl, shh, d0.b, x);
    x = x4(xo + 4u);
    r.a = q6_k_word(r.a, la.w1, ha.w1, shl, shh, d0.a, x);
    r.b = q6_k_word(r.b, lb.w1, hb.w1, shl, shh, d0.b, x);
    x = x4(xo + 8u);
    r.a = q6_k_word(r.a, la.w2, ha.w2, shl, shh, d0.a, x);
    r.b = q6_k_word(r.b, lb.w2, hb.w2, shl, shh, d0.b, x);
    x = x4(xo + 12u);
    r.a = q6_k_word(r.a, la.w3, ha.w3, shl, shh, d0.a, x);
    r.b = q6_k_word(r.b, lb.w3, hb.w3, shl, shh, d0.b, x);
    x = x4(xo + 16u);
    r.a = q6_k_word(r.a, la.w4, ha.w4, shl, shh, d1.a, x);
    r.b = q6_k_word(r.b, lb.w4, hb.w4, shl, shh, d1.b, x);
    x = x4(xo + 20u);
    r.a = q6_k_word(r.a, la.w5, ha.w5, shl, shh, d1.a, x);
    r.b = q6_k_word(r.b, lb.w5, hb.w5, shl, shh, d1.b, x);
    x = x4(xo + 24u);
    r.a = q6_k_word(r.a, la.w6, ha.w6, shl, shh, d1.a, x);
    r.b = q6_k_word(r.b, lb.w6, hb.w6, shl, shh, d1.b, x);
    x = x4(xo + 28u);
    r.a = q6_k_word(r.a, la.w7, ha.w7, shl, shh, d1.a, x);
    r.b = q6_k_word(r.b, lb.w7, hb.w7, shl, shh, d1.b, x);
    return r;
}

// A Q6_K block of 8 rows in `value`'s element order, each body word loaded once: per half n,
// its 16 words of low bits, 8 of high bits and 2 of scales.
fn q6_k_block8(ga: vec4<u32>, gb: vec4<u32>, xo: u32, acc: Rows8) -> Rows8 {
    let wa = ga * (BODY_BYTES_Q6_K / 4u);
    let wb = gb * (BODY_BYTES_Q6_K / 4u);
    let da = scale4(SCALES_Q6_K * ga);
    let db = scale4(SCALES_Q6_K * gb);
    var r = acc;
    for (var n = 0u; n < 2u; n = n + 1u) {
        let la0 = words8(wa + vec4<u32>(16u * n));
        let la1 = words8(wa + vec4<u32>(16u * n + 8u));
        let lb0 = words8(wb + vec4<u32>(16u * n));
        let lb1 = words8(wb + vec4<u32>(16u * n + 8u));
        let ha = words8(wa + vec4<u32>(32u + 8u * n));
        let hb = words8(wb + vec4<u32>(32u + 8u * n));
        let sa0 = body4(wa + vec4<u32>(48u + 2u * n));
        let sa1 = body4(wa + vec4<u32>(49u + 2u * n));
        let sb0 = body4(wb + vec4<u32>(48u + 2u * n));
        let sb1 = body4(wb + vec4<u32>(49u + 2u * n));
        for (var g = 0u; g < 4u; g = g + 1u) {
            // Scale bytes 2g and 2g + 1 of this n's eight: word g / 2, bytes 2 (g % 2) + 0, 1.
            let swa = select(sa0, sa1, g >= 2u);
            let swb = select(sb0, sb1, g >= 2u);
            let i = 2u * (g & 1u);
            let d0 = Rows8(da * sbyte4(swa, i), db * sbyte4(swb, i));
            let d1 = Rows8(da * sbyte4(swa, i + 1u), db * sbyte4(swb, i + 1u));
            let shl = select(0u, 4u, g >= 2u);
            let xg = xo + 128u * n + 32u * g;
            if ((g & 1u) == 0u) {
                r = q6_k_sub8(r, la0, lb0, ha, hb, shl, 2u * g, d0, d1, xg);
            } else {
                r = q6_k_sub8(r, la1, lb1, ha, hb, shl, 2u * g, d0, d1, xg);
            }
        }
    }
    return r;
}

// Element j of 4 rows' blocks, as `value`.
fn value4(q: u32, b: vec4<u32>, j: u32) -> vec4<f32> {
    return vec4<f32>(value(q, b.x, j), value(q, b.y, j), value(q, b.z, j), value(q, b.w, j));
}

// lane_sum for 8 weight rows (ra: rows 0..3, rb: rows 4..7) at once.
fn lane_sum8(q: u32, ra: vec4<u32>, rb: vec4<u32>, lane: u32, xr0: u32) -> Rows8 {
    let nb = params[2];
    let bl = block_len(q);
    var acc = Rows8(vec4<f32>(0.0), vec4<f32>(0.0));
    for (var b = lane; b < nb; b = b + LANES) {
        let ga = ra * nb + vec4<u32>(b);
        let gb = rb * nb + vec4<u32>(b);
        let xr = xr0 + b * bl;
        if (q == QTYPE_Q8_0) {
            acc = q8_0_block8(ga, gb, xr, acc);
        } else if (q == QTYPE_Q4_0) {
            acc = q4_0_block8(ga, gb, xr, acc);
        } else if (q == QTYPE_Q4_K) {
            acc = q4_k_block8(ga, gb, xr, acc);
        } else if (q == QTYPE_Q6_K) {
            acc = q6_k_block8(ga, gb, xr, acc);
        } else {
            for (var j = 0u; j < bl; j = j + 1u) {
                let x = xv(xr + j);
                acc.a = acc.a + value4(q, ga, j) * x;
                acc.b = acc.b + value4(q, gb, j) * x;
            }
        }
    }
    return acc;
}

@compute @workgroup_size(8)
fn matvec_rows(inv: Invocation) {
    let rows = params[0];
    let cols = params[1];
    let m = params[3];
    let q = OP;
    let r0 = (group_index(inv.wid, inv.nwg) * 8u + inv.lid) * 8u;
    if (r0 >= rows) { return; }
    let last = vec4<u32>(rows - 1u);
    let ra = min(vec4<u32>(r0) + vec4<u32>(0u, 1u, 2u, 3u), last);
    let rb = min(vec4<u32>(r0) + vec4<u32>(4u, 5u, 6u, 7u), last);
    let i0 = inv.wid.z * MT;
    let mt = min(MT, m - i0);
    for (var t = 0u; t < mt; t = t + 1u) {
        let xr = params[7] + (i0 + t) * cols;
        // h[i]: the pending left subtree of 2^i lanes (a binary counter over the leaves); h[5],
        // the first half, becomes the total once the last leaf has been added to it.
        var h: array<Rows8, 6>;
        for (var p = 0u; p < LANES; p = p + 1u) {
            // The tree's leaf p is lane p with its 6 bits reversed.
            var v = lane_sum8(q, ra, rb, reverseBits(p) >> 26u, xr);
            // Leaf p completes one subtree per trailing one bit of p: each pending left subtree
            // takes the right one built so far, lowest level first, as `matvec`'s tree adds.
            let done = countTrailingZeros(~p);
            for (var i = 0u; i < done; i = i + 1u) {
                v = rows8_add(h[i], v);
            }
            h[min(done, 5u)] = v;
        }
        let total = h[5];
        let o = (i0 + t) * params[5] + params[4] + r0;
        let live = rows - r0;
        dst[o] = total.a.x;
        if (live > 1u) { dst[o + 1u] = total.a.y; }
        if (live > 2u) { dst[o + 2u] = total.a.z; }
        if (live > 3u) { dst[o + 3u] = total.a.w; }
        if (live > 4u) { dst[o + 4u] = total.b.x; }
        if (live > 5u) { dst[o + 5u] = total.b.y; }
        if (live > 6u) { dst[o + 6u] = total.b.z; }
        if (live > 7u) { dst[o + 7u] = total.b.w; }
    }
}

@compute @workgroup_size(WG_SIZE)
fn dequant(inv: Invocation) {
    // Past the output's rows for the invocations past its end (the grid is rounded up).
    let c = cell(item(inv), params[1]);
    if (c.x >= params[0]) { return; }
    dst[(params[4] + c.x) * params[1] + c.y] = weight(params[6], c.x, c.y);
}

@compute @workgroup_size(WG_SIZE)
fn gather(inv: Invocation) {
    let c = cell(item(inv), params[1]);
    if (c.x >= params[8]) { return; }
    let i = item(inv);
    let row0 = params[4];
    let id = aux[params[9] + c.x];
    let code = params[10];
    if (bad_id(code, id, params[5])) {
        if (row0 == 0u) {
            report_bad_id(code, id, params[5]);
            dst[i] = 0.0;
        }
        return;
    }
    if (id < row0 || id >= row0 + params[0]) { return; }
    dst[i] = weight(params[6], id - row0, c.y);
}
