// matmul_vec4.wgsl: the register-tiled matmul of matmul.wgsl (entry `register_tile`) with vec4 loads,
// for operands whose storage allows them.
//
// Computes   for every batch b, row i < M, column j < N:
//              dst[c(b) + i * N + j] (+)= Σ_{k0 <= k < k1} A[b, i, k] * B[b, k, j]
//            over one chunk [k0, k1) of K (at most 16,384 wide; chunks after the first add to
//            dst), 8×8 outputs per invocation held in registers, no workgroup memory, no
//            barriers: the variant for software adapters such as lavapipe, where each load is a
//            loop over SIMD lanes and a vec4 load costs about one scalar load: 16 vec4 loads
//            feed 256 FMAs.
// Layouts    The override constant OP selects how each operand is read, so each combination
//            compiles to straight-line loads:
//              OP_A_K_CONTIGUOUS set: A is k-contiguous (row-major; a.t() of a column-major matrix):
//                         one vec4 per row covers 4 consecutive k.
//              OP_A_K_CONTIGUOUS clear: A is row-contiguous (A row stride 1, e.g. a.t() of a row-major
//                         matrix): one vec4 per k covers 4 consecutive rows.
//              OP_B_COLUMN_CONTIGUOUS set: B is column-contiguous (row-major): one vec4 per
//                         k covers 4 columns.
//              OP_B_COLUMN_CONTIGUOUS clear: B is k-contiguous (B = b.t() of a row-major b): one vec4 per column
//                         covers 4 consecutive k.
//            The host uses this shader only when every vec4 is whole and aligned: the contiguous
//            stride is 1; offsets, the other strides and all batch strides are multiples of 4;
//            K is a multiple of 4 (so are k0 and k1); a row-contiguous A has M % 4 == 0 and a
//            column-contiguous B has N % 4 == 0. Rows/columns past the end are read as the
//            tile's first row/column again (duplicates computed, never stored).
// Declared   by the library from this file's SHADERS entry (src/gpu/shader_table.rs):
// Bindings   @group(0) @binding(0) lhs    : array<vec4<f32>>, read-only (A)
//            @group(0) @binding(1) rhs    : array<vec4<f32>>, read-only (B)
//            @group(0) @binding(2) dst    : array<f32>, read-write, batches × M × N packed row-major
//            @group(0) @binding(3) params : array<u32>, read-only, in ELEMENTS (not vec4s), the
//              same layout as matmul.wgsl:
//              [0] M  [1] N  [2] row origin  [3] column origin  [4] k0  [5] k1  [6] accumulate
//              [7] A offset  [8] A row stride  [9] A k stride
//              [10] B offset [11] B k stride  [12] B column stride
//              [13] first batch of this dispatch  [14] batch ndim = nd
//              [15 ..] batch shape[nd], A batch strides[nd], B batch strides[nd]
// Dispatch   @workgroup_size(X, Y) (8x8, 16x4, 4x16 or 16x16 by entry point) with 8×8
//            outputs per invocation, grid (ceil(N/(8X)), ceil(M/(8Y)), batches); the r4x4 and
//            r8x4 entries cover 64×64 outputs per workgroup, grid (ceil(N/64), ceil(M/64),
//            batches); counted from the row/column origin and the first batch; every store
//            guarded.

// OP (generated, src/gpu/contract.rs): the operand layout, OP_A_K_CONTIGUOUS and/or
// OP_B_COLUMN_CONTIGUOUS. tile.wgsl's element type `Scalar` is f32 (generated from this file's
// SHADERS entry): this file reads and accumulates f32.

fn store(c: u32, n: u32, m: u32, add: bool, row: u32, col: u32, v: f32) {
    if (row < m && col < n) {
        let i = c + row * n + col;
        if (add) {
            dst[i] = dst[i] + v;
        } else {
            dst[i] = v;
        }
    }
}

fn store4(c: u32, n: u32, m: u32, add: bool, row: u32, col: u32, v: vec4<f32>) {
    store(c, n, m, add, row, col, v.x);
    store(c, n, m, add, row, col + 1u, v.y);
    store(c, n, m, add, row, col + 2u, v.z);
    store(c, n, m, add, row, col + 3u, v.w);
}

// The columns of the 4×4 block whose rows are x, y, z, w (a transpose, for k-contiguous reads).
fn transposed(x: vec4<f32>, y: vec4<f32>, z: vec4<f32>, w: vec4<f32>) -> array<vec4<f32>, 4> {
    var c: array<vec4<f32>, 4>;
    for (var j = 0u; j < 4u; j = j + 1u) {
        c[j] = vec4<f32>(x[j], y[j], z[j], w[j]);
    }
    return c;
}

// Rows r .. r + 4 of tile t's A at k + j (j < 4), k = k0 + step, from 4 vec4 loads: with a
// k-contiguous A one vec4 per row, transposed; otherwise one vec4 per k.
fn quad_a(t: TileStart, r: u32, step: u32) -> array<vec4<f32>, 4> {
    var a: array<vec4<f32>, 4>;
    if ((OP & OP_A_K_CONTIGUOUS) != 0u) {
        let x0 = lhs[(t.ia[r] + step) / 4u];
        let x1 = lhs[(t.ia[r + 1u] + step) / 4u];
        let x2 = lhs[(t.ia[r + 2u] + step) / 4u];
        let x3 = lhs[(t.ia[r + 3u] + step) / 4u];
        a = transposed(x0, x1, x2, x3);
    } else {
        for (var j = 0u; j < 4u; j = j + 1u) {
            a[j] = lhs[(t.ia[r] + (step + j) * t.a_ks) / 4u];
        }
    }
    return a;
}

// Columns c .. c + 4 of B at k + j (j < 4), as quad_a: one vec4 per k with a
// column-contiguous B; otherwise one vec4 per column, transposed.
fn quad_b(t: TileStart, c: u32, step: u32) -> array<vec4<f32>, 4> {
    var b: array<vec4<f32>, 4>;
    if ((OP & OP_B_COLUMN_CONTIGUOUS) != 0u) {
        for (var j = 0u; j < 4u; j = j + 1u) {
            b[j] = rhs[(t.ib[c] + (step + j) * t.b_ks) / 4u];
        }
    } else {
        let y0 = rhs[(t.ib[c] + step) / 4u];
        let y1 = rhs[(t.ib[c + 1u] + step) / 4u];
        let y2 = rhs[(t.ib[c + 2u] + step) / 4u];
        let y3 = rhs[(t.ib[c + 3u] + step) / 4u];
        b = transposed(y0, y1, y2, y3);
    }
    return b;
}

// The 8x8-per-invocation body in the workgroup shapes of the autotuned variants
// (register_vec4 is the 8×8 one; register_tile_16x4, _4x16 and _16x16): the shape sets which
// outputs share a workgroup, and so cache reuse and how a driver packs invocations into SIMD
// lanes or subgroups.
@compute @workgroup_size(8, 8)
fn register_tile(@builtin(global_invocation_id) gid: vec3<u32>) {
    tile8(gid);
}

@compute @workgroup_size(16, 4)
fn register_tile_16x4(@builtin(global_invocation_id) gid: vec3<u32>) {
    tile8(gid);
}

@compute @workgroup_size(4, 16)
fn register_tile_4x16(@builtin(global_invocation_id) gid: vec3<u32>) {
    tile8(gid);
}

@compute @workgroup_size(16, 16)
fn register_tile_16x16(@builtin(global_invocation_id) gid: vec3<u32>) {
    tile8(gid);
}

// The smaller register tiles, four columns wide: 4×4 outputs (16×16 invocations, a 64×64
// workgroup tile) and 8×4 (16×8 invocations, 64×64). Fewer accumulators per invocation than
// tile8's 64: on hardware GPUs that buys occupancy (more invocations resident to hide memory
// latency) at the cost of fewer FMAs per load; which wins depends on the GPU, so the autotuner
// times them (register_vec4_r4x4, register_vec4_r8x4).
@compute @workgroup_size(16, 16)
fn register_tile_r4x4(@builtin(global_invocation_id) gid: vec3<u32>) {
    tile_c4(gid, false);
}

@compute @workgroup_size(16, 8)
fn register_tile_r8x4(@builtin(global_invocation_id) gid: vec3<u32>) {
    tile_c4(gid, true);
}

// 4 columns × 4 rows (tall = false) or 8 rows (tall = true) per invocation; `tall` is a
// constant at each call, so drivers (which inline) compile each entry without its branches.
// Loads follow tile8.
fn tile_c4(gid: vec3<u32>, tall: bool) {
    let rows = select(4u, 8u, tall);
    let t = tile_start(gid, rows, 4u);
    if (t.r0 >= t.m || t.c0 >= t.n) { return; }
    // acc[i]: row i, columns 0..3 (zero-initialized, like every WGSL var without an initializer).
    var acc: array<vec4<f32>, 8>;
    for (var k = t.k0; k < t.k1; k = k + 4u) {
        let step = k - t.k0;
        // a0[j] / a1[j]: rows 0..3 / 4..7 at k + j; b0[j]: the four columns at k + j.
        let a0 = quad_a(t, 0u, step);
        var a1: array<vec4<f32>, 4>;
        if (tall) {
            a1 = quad_a(t, 4u, step);
        }
        let b0 = quad_b(t, 0u, step);
        for (var j = 0u; j < 4u; j = j + 1u) {
            for (var i = 0u; i < 4u; i = i + 1u) {
                acc[i] = fma(vec4<f32>(a0[j][i]), b0[j], acc[i]);
                if (tall) {
                    acc[4u + i] = fma(vec4<f32>(a1[j][i]), b0[j], acc[4u + i]);
                }
            }
        }
    }
    let c = t.batch * t.m * t.n;
    for (var i = 0u; i < rows; i = i + 1u) {
        store4(c, t.n, t.m, t.add, t.r0 + i, t.c0, acc[i]);
    }
}

// Where invocation `gid`'s rows × cols outputs start, and what every tile kernel reads from
// params: sizes, K range, strides, and each row's (column's) first element in A (B). Rows
// (columns) past the end are read as the tile's first row (column) again: computed, never
// stored, and the K loop stays free of branches. Along a contiguous dim a later vec4 is either
// whole (M or N is a multiple of 4) or, clamped, the first one again.
struct TileStart {
    m: u32,
    n: u32,
    r0: u32,
    c0: u32,
    k0: u32,
    k1: u32,
    add: bool,
    a_ks: u32,
    b_ks: u32,
    batch: u32,
    ia: array<u32, 8>,
    ib: array<u32, 8>,
}

fn tile_start(gid: vec3<u32>, rows: u32, cols: u32) -> TileStart {
    var t: TileStart;
    t.m = params[0];
    t.n = params[1];
    t.r0 = params[2] + gid.y * rows;
    t.c0 = params[3] + gid.x * cols;
    t.k0 = params[4];
    t.k1 = params[5];
    t.add = params[6] != 0u;
    let a_rs = params[8];
    t.a_ks = params[9];
    t.b_ks = params[11];
    let b_cs = params[12];
    t.batch = params[13] + gid.z;
    let nd = params[14];
    // The batch index unravelled over the batch dims, once per operand.
    let a = strided_offset(t.batch, params[7], nd, 15u, 15u + nd);
    let b = strided_offset(t.batch, params[10], nd, 15u, 15u + 2u * nd);
    for (var i = 0u; i < 8u; i = i + 1u) {
        t.ia[i] = a + select(t.r0 + i, t.r0, t.r0 + i >= t.m) * a_rs + t.k0 * t.a_ks;
        t.ib[i] = b + select(t.c0 + i, t.c0, t.c0 + i >= t.n) * b_cs + t.k0 * t.b_ks;
    }
    return t;
}

fn tile8(gid: vec3<u32>) {
    let s = tile_start(gid, 8u, 8u);
    if (s.r0 >= s.m || s.c0 >= s.n) { return; }
    // Zero-initialized, like every WGSL var without an initializer.
    var t: Tile;
    // (k1 - k0) / 4 <= 4,096 iterations, 4 k per iteration, 16 vec4 loads per 256 FMAs.
    for (var k = s.k0; k < s.k1; k = k + 4u) {
        let step = k - s.k0;
        // a0[j] / a1[j]: rows 0..3 / 4..7 at k + j; b0[j] / b1[j]: columns 0..3 / 4..7.
        let a0 = quad_a(s, 0u, step);
        let a1 = quad_a(s, 4u, step);
        let b0 = quad_b(s, 0u, step);
        let b1 = quad_b(s, 4u, step);
        for (var j = 0u; j < 4u; j = j + 1u) {
            rank1(&t, a0[j], a1[j], b0[j], b1[j]);
        }
    }
    let c = s.batch * s.m * s.n;
    for (var i = 0u; i < 8u; i = i + 1u) {
        store4(c, s.n, s.m, s.add, s.r0 + i, s.c0, t.lo[i]);
        store4(c, s.n, s.m, s.add, s.r0 + i, s.c0 + 4u, t.hi[i]);
    }
}
