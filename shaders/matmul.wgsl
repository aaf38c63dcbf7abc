// matmul.wgsl: batched matrix products (f32, or f16 by the composed element file) over strided views, C[b] (+)= A[b] · B[b].
//
// Computes   for every batch b, row i < M, column j < N:
//              dst[c(b) + i * N + j] (+)= Σ_{k0 <= k < k1} A[b, i, k] * B[b, k, j]
//            over ONE chunk [k0, k1) of the inner dim. The host splits K into chunks (at most
//            16,384 wide) and dispatches them in order, the first storing and the rest adding
//            (params[5]): lavapipe silently ends any shader loop after 65,535 iterations, so no
//            loop here may depend on the full K. A and B are read through their strides, so
//            transposed, permuted, narrowed and broadcast (stride 0) views need no copy.
// Entries    naive    one output per invocation: the baseline the benchmarks compare against.
//            gemv_t   a few rows times a matrix read along K (x · Wᵀ): 32 invocations per
//                     output, partial sums added in a fixed tree (see its entry at the end)
//            gemv_rows
//                     gemv_t's shape for software adapters: 8 outputs per invocation, K read
//                     two at a time, the register kernels' arithmetic (see its entry at the end)
//            gemv_m1, gemv_n1
//                     the naive loop in 256 × 1 (rows of few outputs: M = 1, a row vector
//                     times a matrix) or 1 × 256 workgroups (N = 1, a matrix times a vector),
//                     so no invocation of a 16 × 16 workgroup idles on a missing row or column.
//            register_tile
//                     8×8 outputs per invocation kept in registers, no workgroup memory and no
//                     barriers: the variant for software adapters. lavapipe runs an invocation
//                     as one SIMD lane: arithmetic is 8 lanes wide, but every storage (and
//                     workgroup-memory) load is a loop over the lanes, so loads, not FMAs, set
//                     the speed, and barriers are coroutine switches. 16 loads feed 64 FMAs
//                     here (naive: 2 loads per FMA). Out-of-range rows/columns are read as the
//                     tile's first row/column (computing duplicates that are never stored), so
//                     the K loop has no branches; any shape and any strides.
//            tiled    64×64 output tile per workgroup staged through workgroup memory in 16-deep
//                     K slices (each element of A and B is fetched from memory once per tile,
//                     not once per output), 4×4 outputs per invocation read from the staged
//                     tiles as vec4: the variant for hardware GPUs.
//            tiled_double
//                     `tiled` double-buffered: the next slice is fetched into registers before
//                     the current one's FMAs and staged into a second buffer after them, one
//                     barrier per slice (see its entry below).
// Declared   by the library from this file's SHADERS entry (src/gpu/shader_table.rs):
// Bindings   @group(0) @binding(0) lhs    : array<f32>, read-only (A)
//            @group(0) @binding(1) rhs    : array<f32>, read-only (B)
//            @group(0) @binding(2) dst    : array<f32>, read-write, batches × M × N packed row-major
//            @group(0) @binding(3) params : array<u32>, read-only:
//              [0] M  [1] N  [2] row origin  [3] column origin (both in elements, for grids split
//              over several dispatches)  [4] k0  [5] k1  [6] accumulate (0: store, 1: add to dst)
//              [7] A offset  [8] A row stride  [9] A inner (k) stride
//              [10] B offset [11] B inner (k) stride  [12] B column stride
//              [13] first batch of this dispatch  [14] batch ndim = nd
//              [15 ..] batch shape[nd], A batch strides[nd], B batch strides[nd]
// Dispatch   naive: @workgroup_size(16, 16), grid (ceil(N/16), ceil(M/16), batches);
//            gemv_m1: (256, 1), grid (ceil(N/256), M, batches); gemv_n1: (1, 256), grid
//            (N, ceil(M/256), batches);
//            register_tile: @workgroup_size(8, 8), grid (ceil(N/64), ceil(M/64), batches);
//            tiled, tiled_double: @workgroup_size(16, 16), grid (ceil(N/64), ceil(M/64), batches);
//            x/y count from the row/column origin, z from the first batch; every store guarded.

// The element type `Scalar` of accumulators, staged tiles and the output is generated per
// variant (the matmul rows of src/gpu/shader_table.rs); element i of A / B (`ld_a`, `ld_b`)
// comes from the file composed with this one: matmul_read.wgsl (arrays of `Scalar`: f32, or f16
// throughout with `SHADER_F16`) or matmul_f16_packed.wgsl (f16 operands read in place as packed
// pairs, f32 accumulation). One body, three element types.

// One batch's problem, decoded from params.
struct Problem {
    m: u32,
    n: u32,
    k0: u32,
    k1: u32,
    a: u32,      // storage index of A[b, 0, k0]
    a_rs: u32,
    a_ks: u32,
    b: u32,      // storage index of B[b, k0, 0]
    b_ks: u32,
    b_cs: u32,
    c: u32,      // storage index of dst[b, 0, 0]
    add: bool,
}

fn problem(z: u32) -> Problem {
    var p: Problem;
    p.m = params[0];
    p.n = params[1];
    p.k0 = params[4];
    p.k1 = params[5];
    p.add = params[6] != 0u;
    p.a_rs = params[8];
    p.a_ks = params[9];
    p.b_ks = params[11];
    p.b_cs = params[12];
    let batch = params[13] + z;
    let nd = params[14];
    // The batch index unravelled over the batch dims, once per operand.
    let a = strided_offset(batch, params[7], nd, 15u, 15u + nd);
    let b = strided_offset(batch, params[10], nd, 15u, 15u + 2u * nd);
    p.a = a + p.k0 * p.a_ks;
    p.b = b + p.k0 * p.b_ks;
    p.c = batch * p.m * p.n;
    return p;
}

// The guarded store every entry ends with: the grid is rounded up to whole tiles.
fn store(p: Problem, row: u32, col: u32, v: Scalar) {
    if (row < p.m && col < p.n) {
        let i = p.c + row * p.n + col;
        if (p.add) {
            dst[i] = dst[i] + v;
        } else {
            dst[i] = v;
        }
    }
}

fn store4(p: Problem, row: u32, col: u32, v: vec4<Scalar>) {
    store(p, row, col, v.x);
    store(p, row, col + 1u, v.y);
    store(p, row, col + 2u, v.z);
    store(p, row, col + 3u, v.w);
}

// A 4×4 block of outputs of the tiled entries: r[i] holds row i's 4 columns.
struct Acc4 {
    r: array<vec4<Scalar>, 4>,
}

// acc += a ⊗ b for one k: a = the block's 4 rows, b = its 4 columns.
fn acc_rank1(acc: ptr<function, Acc4>, a: vec4<Scalar>, b: vec4<Scalar>) {
    (*acc).r[0] = fma(vec4<Scalar>(a.x), b, (*acc).r[0]);
    (*acc).r[1] = fma(vec4<Scalar>(a.y), b, (*acc).r[1]);
    (*acc).r[2] = fma(vec4<Scalar>(a.z), b, (*acc).r[2]);
    (*acc).r[3] = fma(vec4<Scalar>(a.w), b, (*acc).r[3]);
}

// Rows r0..r0+3 of a 4×4 block of outputs from column c0 (the tiled entries' epilogue).
// Constant indices only: a dynamically indexed accumulator can spill out of registers.
fn store_4x4(p: Problem, r0: u32, c0: u32, acc: Acc4) {
    store4(p, r0, c0, acc.r[0]);
    store4(p, r0 + 1u, c0, acc.r[1]);
    store4(p, r0 + 2u, c0, acc.r[2]);
    store4(p, r0 + 3u, c0, acc.r[3]);
}

// The first output (row, column) of block (y, x) of `per` × `per` outputs: the grid counts
// from the dispatch's row and column origin (params[2], params[3]).
fn block_origin(y: u32, x: u32, per: u32) -> vec2<u32> {
    return vec2<u32>(params[2] + y * per, params[3] + x * per);
}

// Σ over this chunk of A[row, k] * B[k, col], one k at a time (k1 - k0 <= 16,384 iterations).
fn dot(p: Problem, row: u32, col: u32) -> Scalar {
    var ia = p.a + row * p.a_rs;
    var ib = p.b + col * p.b_cs;
    var acc = Scalar(0.0);
    for (var k = p.k0; k < p.k1; k = k + 1u) {
        acc = acc + ld_a(ia) * ld_b(ib);
        ia = ia + p.a_ks;
        ib = ib + p.b_ks;
    }
    return acc;
}

// One output per invocation at (row origin + gid.y, column origin + gid.x): the body of the
// naive and GEMV entries, which differ only in their workgroup shape.
fn one_output(gid: vec3<u32>) {
    let p = problem(gid.z);
    let at = block_origin(gid.y, gid.x, 1u);
    if (at.x >= p.m || at.y >= p.n) { return; }
    store(p, at.x, at.y, dot(p, at.x, at.y));
}

@compute @workgroup_size(16, 16)
fn naive(@builtin(global_invocation_id) gid: vec3<u32>) {
    one_output(gid);
}

@compute @workgroup_size(256, 1)
fn gemv_m1(@builtin(global_invocation_id) gid: vec3<u32>) {
    one_output(gid);
}

@compute @workgroup_size(1, 256)
fn gemv_n1(@builtin(global_invocation_id) gid: vec3<u32>) {
    one_output(gid);
}

@compute @workgroup_size(8, 8)
fn register_tile(@builtin(global_invocation_id) gid: vec3<u32>) {
    let p = problem(gid.z);
    let at = block_origin(gid.y, gid.x, 8u);
    let r0 = at.x;
    let c0 = at.y;
    // No barrier follows, so whole-tile-outside invocations may leave early.
    if (r0 >= p.m || c0 >= p.n) { return; }
    // Rows (columns) past the end are read as the tile's first row (column) again: computed,
    // never stored, and the K loop stays free of branches.
    var ia: array<u32, 8>;
    var ib: array<u32, 8>;
    for (var i = 0u; i < 8u; i = i + 1u) {
        ia[i] = p.a + select(r0 + i, r0, r0 + i >= p.m) * p.a_rs;
        ib[i] = p.b + select(c0 + i, c0, c0 + i >= p.n) * p.b_cs;
    }
    var t: Tile;
    for (var i = 0u; i < 8u; i = i + 1u) {
        t.lo[i] = vec4<Scalar>(0.0);
        t.hi[i] = vec4<Scalar>(0.0);
    }
    // k1 - k0 <= 16,384 iterations; 16 loads per 64 FMAs.
    var ka = 0u;
    var kb = 0u;
    for (var k = p.k0; k < p.k1; k = k + 1u) {
        let a0 = vec4<Scalar>(ld_a(ia[0] + ka), ld_a(ia[1] + ka), ld_a(ia[2] + ka), ld_a(ia[3] + ka));
        let a1 = vec4<Scalar>(ld_a(ia[4] + ka), ld_a(ia[5] + ka), ld_a(ia[6] + ka), ld_a(ia[7] + ka));
        let b0 = vec4<Scalar>(ld_b(ib[0] + kb), ld_b(ib[1] + kb), ld_b(ib[2] + kb), ld_b(ib[3] + kb));
        let b1 = vec4<Scalar>(ld_b(ib[4] + kb), ld_b(ib[5] + kb), ld_b(ib[6] + kb), ld_b(ib[7] + kb));
        rank1(&t, a0, a1, b0, b1);
        ka = ka + p.a_ks;
        kb = kb + p.b_ks;
    }
    for (var i = 0u; i < 8u; i = i + 1u) {
        store4(p, r0 + i, c0, t.lo[i]);
        store4(p, r0 + i, c0 + 4u, t.hi[i]);
    }
}

// TILE (the output tile's edge) and DEPTH (a slice's K depth) are the contract's
// (src/gpu/contract.rs). Staged slices, K-major so an invocation reads its 4 rows (or columns) as one vec4:
// tile_a[k * A_STRIDE + r / 4] holds A rows r..r+3 at depth k; tile_b likewise for B columns
// (stride 16).
// OP selects the A stride: 0 packs the depths TILE / 4 = 16 vec4s apart, so the 16 consecutive
// invocations that stage consecutive k of one row all store to one workgroup-memory bank
// (16-way conflicts on GPUs with 32 4-byte banks); OP_TILED_PADDED (the `tiled_padded` variant)
// pads each depth to 17 vec4s, which spreads them over 8 banks (2-way). The autotuner picks per
// adapter.
const ROW_VECS: u32 = TILE / 4u;
// A tiled workgroup: ROW_VECS × ROW_VECS invocations of 4×4 outputs, each staging 4 elements
// of A and 4 of B per slice.
const TILED_INVOCATIONS: u32 = ROW_VECS * ROW_VECS;
var<workgroup> tile_a: array<vec4<Scalar>, DEPTH * (ROW_VECS + 1u)>;
var<workgroup> tile_b: array<vec4<Scalar>, DEPTH * ROW_VECS>;

@compute @workgroup_size(ROW_VECS, ROW_VECS)
fn tiled(@builtin(workgroup_id) wid: vec3<u32>,
         @builtin(local_invocation_id) lid: vec3<u32>,
         @builtin(local_invocation_index) li: u32) {
    let p = problem(wid.z);
    let a_stride = select(ROW_VECS, ROW_VECS + 1u, OP == OP_TILED_PADDED);
    let at = block_origin(wid.y, wid.x, TILE);
    let tr = at.x;
    let tc = at.y;
    // Zeros: WGSL initializes function variables.
    var acc: Acc4;
    // No early return: every invocation must reach every barrier. At most 16,384 / 16 = 1,024
    // slices per dispatch.
    for (var ks = p.k0; ks < p.k1; ks = ks + DEPTH) {
        // Each invocation stages 4 elements of A and 4 of B. Consecutive invocations take
        // consecutive k of A and consecutive columns of B, so row-major operands are read in
        // contiguous runs. Elements past the edges are staged as zeros.
        for (var s = 0u; s < 4u; s = s + 1u) {
            let e = li + TILED_INVOCATIONS * s;
            let ak = e % DEPTH;
            let ar = e / DEPTH;
            var va = Scalar(0.0);
            if (tr + ar < p.m && ks + ak < p.k1) {
                va = ld_a(p.a + (tr + ar) * p.a_rs + (ks + ak - p.k0) * p.a_ks);
            }
            tile_a[ak * a_stride + ar / 4u][ar % 4u] = va;
            let bc = e % TILE;
            let bk = e / TILE;
            var vb = Scalar(0.0);
            if (tc + bc < p.n && ks + bk < p.k1) {
                vb = ld_b(p.b + (ks + bk - p.k0) * p.b_ks + (tc + bc) * p.b_cs);
            }
            tile_b[bk * ROW_VECS + bc / 4u][bc % 4u] = vb;
        }
        workgroupBarrier();
        for (var k = 0u; k < DEPTH; k = k + 1u) {
            acc_rank1(&acc, tile_a[k * a_stride + lid.y], tile_b[k * ROW_VECS + lid.x]);
        }
        // The next slice overwrites the tiles: everyone must be done reading them.
        workgroupBarrier();
    }
    store_4x4(p, tr + lid.y * 4u, tc + lid.x * 4u, acc);
}

// tiled_double: `tiled` with two staging buffers and a register prefetch. While the workgroup
// multiplies the slice staged in one buffer, each invocation already holds its 8 elements of
// the next slice (fetched before the FMAs, so memory latency hides behind them) and stores
// them into the other buffer afterwards: one barrier per 16-deep slice instead of two. Two
// unpadded buffers pairs take 16 KiB of workgroup memory, WebGPU's default limit.
const SLICE_VECS: u32 = DEPTH * ROW_VECS;
var<workgroup> dbl_a: array<vec4<Scalar>, 2u * SLICE_VECS>;
var<workgroup> dbl_b: array<vec4<Scalar>, 2u * SLICE_VECS>;

// One invocation's share of a slice: 4 elements of A and 4 of B (zeros past the edges).
struct Staged {
    a: vec4<Scalar>,
    b: vec4<Scalar>,
}

fn fetch_slice(p: Problem, tr: u32, tc: u32, ks: u32, li: u32) -> Staged {
    var out = Staged(vec4<Scalar>(0.0), vec4<Scalar>(0.0));
    for (var s = 0u; s < 4u; s = s + 1u) {
        let e = li + TILED_INVOCATIONS * s;
        let ak = e % DEPTH;
        let ar = e / DEPTH;
        if (tr + ar < p.m && ks + ak < p.k1) {
            out.a[s] = ld_a(p.a + (tr + ar) * p.a_rs + (ks + ak - p.k0) * p.a_ks);
        }
        let bc = e % TILE;
        let bk = e / TILE;
        if (tc + bc < p.n && ks + bk < p.k1) {
            out.b[s] = ld_b(p.b + (ks + bk - p.k0) * p.b_ks + (tc + bc) * p.b_cs);
        }
    }
    return out;
}

fn put_slice(buf: u32, v: Staged, li: u32) {
    for (var s = 0u; s < 4u; s = s + 1u) {
        let e = li + TILED_INVOCATIONS * s;
        let ar = e / DEPTH;
        dbl_a[buf * SLICE_VECS + (e % DEPTH) * ROW_VECS + ar / 4u][ar % 4u] = v.a[s];
        let bc = e % TILE;
        dbl_b[buf * SLICE_VECS + (e / TILE) * ROW_VECS + bc / 4u][bc % 4u] = v.b[s];
    }
}

@compute @workgroup_size(ROW_VECS, ROW_VECS)
fn tiled_double(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(local_invocation_id) lid: vec3<u32>,
                @builtin(local_invocation_index) li: u32) {
    let p = problem(wid.z);
    let at = block_origin(wid.y, wid.x, TILE);
    let tr = at.x;
    let tc = at.y;
    // Zeros: WGSL initializes function variables.
    var acc: Acc4;
    put_slice(0u, fetch_slice(p, tr, tc, p.k0, li), li);
    workgroupBarrier();
    var cur = 0u;
    // No early return: every invocation reaches every barrier. At most 1,024 slices.
    for (var ks = p.k0; ks < p.k1; ks = ks + DEPTH) {
        let more = ks + DEPTH < p.k1;
        var next = Staged(vec4<Scalar>(0.0), vec4<Scalar>(0.0));
        if (more) {
            next = fetch_slice(p, tr, tc, ks + DEPTH, li);
        }
        let base = cur * SLICE_VECS;
        for (var k = 0u; k < DEPTH; k = k + 1u) {
            acc_rank1(&acc, dbl_a[base + k * ROW_VECS + lid.y], dbl_b[base + k * ROW_VECS + lid.x]);
        }
        // The other buffer was last read in the previous slice, before the barrier that ended
        // it: writing it now races with no reader.
        if (more) {
            put_slice(1u - cur, next, li);
        }
        workgroupBarrier();
        cur = 1u - cur;
    }
    store_4x4(p, tr + lid.y * 4u, tc + lid.x * 4u, acc);
}

// gemv_t: a few rows of A times B read along K (B[k, col] consecutive in k: a weight matrix used
// transposed, x · Wᵀ, as decode's matrix-vector products are). GEMV_T_COLS (8, the contract's)
// output columns of one row per workgroup, 32 invocations each: 256 invocations. Invocation `lane` of a column takes
// k = k0 + lane + 32 i, so the 32 read consecutive elements of the column together; component
// i % 4 of acc0 (i % 8 < 4) or acc1 sums every 8th such k. The 32 partial sums then meet in a
// fixed tree in workgroup memory: the same order on every run and adapter, whatever its
// subgroup size. Dispatch: grid (ceil(N/8), M, batches) from the row/column origin.
const GEMV_T_SIZE: u32 = GEMV_T_COLS * 32u;
var<workgroup> gemv_part: array<vec4<Scalar>, GEMV_T_SIZE>;

@compute @workgroup_size(GEMV_T_SIZE)
fn gemv_t(@builtin(workgroup_id) wid: vec3<u32>,
          @builtin(local_invocation_index) li: u32) {
    let p = problem(wid.z);
    let lane = li & 31u;
    let row = params[2] + wid.y;
    let col = params[3] + wid.x * GEMV_T_COLS + (li >> 5u);
    let live = row < p.m && col < p.n;
    var acc0 = vec4<Scalar>(0.0);
    var acc1 = vec4<Scalar>(0.0);
    if (live) {
        let ia = p.a + row * p.a_rs;
        let ib = p.b + col * p.b_cs;
        // At most 16,384 / 256 = 64 iterations per chunk.
        for (var k = lane; k < p.k1 - p.k0; k = k + 256u) {
            var a0 = vec4<Scalar>(0.0);
            var b0 = vec4<Scalar>(0.0);
            var a1 = vec4<Scalar>(0.0);
            var b1 = vec4<Scalar>(0.0);
            let n = p.k1 - p.k0;
            if (k + 224u < n) {
                // The whole run is inside the chunk: no per-load guards.
                a0 = vec4<Scalar>(ld_a(ia + k * p.a_ks), ld_a(ia + (k + 32u) * p.a_ks),
                               ld_a(ia + (k + 64u) * p.a_ks), ld_a(ia + (k + 96u) * p.a_ks));
                b0 = vec4<Scalar>(ld_b(ib + k * p.b_ks), ld_b(ib + (k + 32u) * p.b_ks),
                               ld_b(ib + (k + 64u) * p.b_ks), ld_b(ib + (k + 96u) * p.b_ks));
                a1 = vec4<Scalar>(ld_a(ia + (k + 128u) * p.a_ks), ld_a(ia + (k + 160u) * p.a_ks),
                               ld_a(ia + (k + 192u) * p.a_ks), ld_a(ia + (k + 224u) * p.a_ks));
                b1 = vec4<Scalar>(ld_b(ib + (k + 128u) * p.b_ks), ld_b(ib + (k + 160u) * p.b_ks),
                               ld_b(ib + (k + 192u) * p.b_ks), ld_b(ib + (k + 224u) * p.b_ks));
            } else {
                for (var u = 0u; u < 4u; u = u + 1u) {
                    let k0 = k + 32u * u;
                    let k1 = k0 + 128u;
                    if (k0 < n) {
                        a0[u] = ld_a(ia + k0 * p.a_ks);
                        b0[u] = ld_b(ib + k0 * p.b_ks);
                    }
                    if (k1 < n) {
                        a1[u] = ld_a(ia + k1 * p.a_ks);
                        b1[u] = ld_b(ib + k1 * p.b_ks);
                    }
                }
            }
            acc0 = fma(a0, b0, acc0);
            acc1 = fma(a1, b1, acc1);
        }
    }
    gemv_part[li] = acc0 + acc1;
    workgroupBarrier();
    for (var s = 16u; s > 0u; s = s >> 1u) {
        if (lane < s) {
            gemv_part[li] = gemv_part[li] + gemv_part[li + s];
        }
        workgroupBarrier();
    }
    if (live && lane == 0u) {
        let v = gemv_part[li];
        store(p, row, col, (v.x + v.y) + (v.z + v.w));
    }
}

// gemv_rows: gemv_t's shape (a few rows of A times B read along K) for software adapters, with
// register_tile's arithmetic: one fma per k in k order from zero, so the same bits as the
// register kernels. An invocation takes one row of A and 8 columns of B and steps K two at a
// time (ld_a2, ld_b2: one packed word of f16), so each element of A is loaded once for 8
// outputs and each pair of B once: about one load per weight word, where lavapipe (which turns
// each storage load into a loop over its SIMD lanes) is bound by loads. No workgroup memory, no
// barriers. The host uses it only with A and B contiguous along K, K even, and (f16) every
// offset and stride even. Columns past the end are read as the first column again, never
// stored. Dispatch: 8 invocations per workgroup, grid (ceil(N/64), M, batches) from the
// row/column origin.
@compute @workgroup_size(8)
fn gemv_rows(@builtin(global_invocation_id) gid: vec3<u32>) {
    let p = problem(gid.z);
    let row = params[2] + gid.y;
    let c0 = params[3] + gid.x * 8u;
    if (row >= p.m || c0 >= p.n) { return; }
    let ia = p.a + row * p.a_rs;
    let cl = min(vec4<u32>(c0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(p.n - 1u));
    let ch = min(vec4<u32>(c0) + vec4<u32>(4u, 5u, 6u, 7u), vec4<u32>(p.n - 1u));
    let bl = vec4<u32>(p.b) + cl * p.b_cs;
    let bh = vec4<u32>(p.b) + ch * p.b_cs;
    var lo = vec4<Scalar>(0.0);
    var hi = vec4<Scalar>(0.0);
    // (k1 - k0) / 2 <= 8,192 iterations.
    for (var k = 0u; k < p.k1 - p.k0; k = k + 2u) {
        let a = ld_a2(ia + k);
        let l0 = ld_b2(bl.x + k);
        let l1 = ld_b2(bl.y + k);
        let l2 = ld_b2(bl.z + k);
        let l3 = ld_b2(bl.w + k);
        let h0 = ld_b2(bh.x + k);
        let h1 = ld_b2(bh.y + k);
        let h2 = ld_b2(bh.z + k);
        let h3 = ld_b2(bh.w + k);
        lo = fma(vec4<Scalar>(a.x), vec4<Scalar>(l0.x, l1.x, l2.x, l3.x), lo);
        hi = fma(vec4<Scalar>(a.x), vec4<Scalar>(h0.x, h1.x, h2.x, h3.x), hi);
        lo = fma(vec4<Scalar>(a.y), vec4<Scalar>(l0.y, l1.y, l2.y, l3.y), lo);
        hi = fma(vec4<Scalar>(a.y), vec4<Scalar>(h0.y, h1.y, h2.y, h3.y), hi);
    }
    store4(p, row, c0, lo);
    store4(p, row, c0 + 4u, hi);
}
