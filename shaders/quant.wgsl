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

const WG: u32 = 64u;
// matvec's block type (a QTYPE_* code), set per pipeline by the host.
override OP: u32 = 0u;
// Activation rows per workgroup: each weight block is decoded once for all of them.
const MT: u32 = 4u;

var<workgroup> partial: array<f32, 256>; // WG * MT

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
// lane + WG, ... in order, as invocation `lane` of a `matvec` workgroup sums them. `xr0` is
// row 0 of x at column 0. At most nb / 64 iterations (a row of 65,536 * 64 * 32 values would be
// needed to pass lavapipe's loop cap).
fn lane_sum(q: u32, r: u32, lane: u32, xr0: u32, acc: f32) -> f32 {
    let nb = params[2];
    let bl = block_len(q);
    var a = acc;
    for (var b = lane; b < nb; b = b + WG) {
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

@compute @workgroup_size(64)
fn matvec(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let rows = params[0];
    let cols = params[1];
    let m = params[3];
    // The block type as a pipeline constant: each type's matvec is compiled alone, without the
    // other types' decoding in its registers (params[6] holds the same code).
    let q = OP;
    let xoff = params[7];
    // Uniform per workgroup, so the early exit keeps the barriers below in uniform control flow.
    let r = group_index(wid, nwg);
    if (r >= rows) {
        return;
    }
    let i0 = wid.z * MT;
    let mt = min(MT, m - i0);
    // Row i0 of x; row i0 + t is t * cols further. Four accumulators by name, not an array
    // indexed by the activation row: a dynamically indexed array lives in memory on GPUs, and
    // these sums are the kernel's inner loop (the blocks of Q8_0 and Q4_0 are decoded for each
    // row; their decode is a few integer ops against the loads it shares through the cache).
    let xr = xoff + i0 * cols;
    let a0 = lane_sum(q, r, lid, xr, 0.0);
    var a1 = 0.0;
    var a2 = 0.0;
    var a3 = 0.0;
    if (mt > 1u) { a1 = lane_sum(q, r, lid, xr + cols, 0.0); }
    if (mt > 2u) { a2 = lane_sum(q, r, lid, xr + 2u * cols, 0.0); }
    if (mt > 3u) { a3 = lane_sum(q, r, lid, xr + 3u * cols, 0.0); }
    partial[lid] = a0;
    partial[WG + lid] = a1;
    partial[2u * WG + lid] = a2;
    partial[3u * WG + lid] = a3;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            // Only the live rows: decode's single row pays one sum, not four.
            for (var t = 0u; t < mt; t = t + 1u) {
                partial[t * WG + lid] = partial[t * WG + lid] + partial[t * WG + lid + s];
            }
        }
        workgroupBarrier();
    }
    if (lid < mt) {
        dst[(i0 + lid) * params[5] + params[4] + r] = partial[lid * WG];
    }
}

// `matvec` with one invocation per weight row and no workgroup memory or barriers, for
// software adapters (lavapipe), which run a workgroup's invocations as a loop and each barrier
// as a switch between them: the invocation sums the 64 lanes' shares in `matvec`'s order and
// adds them in its tree's order, so both entries give the same bits. 64 weight rows per
// workgroup, spread over x and y; z as in `matvec`.
@compute @workgroup_size(64)
fn matvec_serial(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let rows = params[0];
    let cols = params[1];
    let m = params[3];
    let q = OP;
    let r = group_index(wid, nwg) * WG + lid;
    if (r >= rows) {
        return;
    }
    let i0 = wid.z * MT;
    let mt = min(MT, m - i0);
    for (var t = 0u; t < mt; t = t + 1u) {
        let xr = params[7] + (i0 + t) * cols;
        var lanes: array<f32, 64>; // WG
        for (var l = 0u; l < WG; l = l + 1u) {
            lanes[l] = lane_sum(q, r, l, xr, 0.0);
        }
        for (var s = WG / 2u; s > 0u; s = s >> 1u) {
            for (var l = 0u; l < s; l = l + 1u) {
                lanes[l] = lanes[l] + lanes[l + s];
            }
        }
        dst[(i0 + t) * params[5] + params[4] + r] = lanes[0];
    }
}

@compute @workgroup_size(256)
fn dequant(inv: Invocation) {
    // Past the output's rows for the invocations past its end (the grid is rounded up).
    let c = cell(item(inv), params[1]);
    if (c.x >= params[0]) {
        return;
    }
    dst[(params[4] + c.x) * params[1] + c.y] = weight(params[6], c.x, c.y);
}

@compute @workgroup_size(256)
fn gather(inv: Invocation) {
    let c = cell(item(inv), params[1]);
    if (c.x >= params[8]) {
        return;
    }
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
    if (id < row0 || id >= row0 + params[0]) {
        return;
    }
    dst[i] = weight(params[6], id - row0, c.y);
}
