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
//              bit 0 set: A is k-contiguous (row-major; a.t() of a column-major matrix):
//                         one vec4 per row covers 4 consecutive k.
//              bit 0 clear: A is row-contiguous (A row stride 1, e.g. a.t() of a row-major
//                         matrix): one vec4 per k covers 4 consecutive rows.
//              bit 1 set: B is column-contiguous (row-major): one vec4 per k covers 4 columns.
//              bit 1 clear: B is k-contiguous (B = b.t() of a row-major b): one vec4 per column
//                         covers 4 consecutive k.
//            The host uses this shader only when every vec4 is whole and aligned: the contiguous
//            stride is 1; offsets, the other strides and all batch strides are multiples of 4;
//            K is a multiple of 4 (so are k0 and k1); a row-contiguous A has M % 4 == 0 and a
//            column-contiguous B has N % 4 == 0. Rows/columns past the end are read as the
//            tile's first row/column again (duplicates computed, never stored).
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

override OP: u32 = 3u;

@group(0) @binding(0) var<storage, read> lhs: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> rhs: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;
@group(0) @binding(3) var<storage, read> params: array<u32>;

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

// Column j of the 4×4 block whose rows are x, y, z, w (a transpose, for k-contiguous reads).
fn col(x: vec4<f32>, y: vec4<f32>, z: vec4<f32>, w: vec4<f32>, j: u32) -> vec4<f32> {
    return vec4<f32>(x[j], y[j], z[j], w[j]);
}

// The same 8x8-per-invocation body in four workgroup shapes (the autotuned variants
// register_vec4, _16x4, _4x16 and _16x16): the shape sets which outputs share a workgroup, and
// so cache reuse and how a driver packs invocations into SIMD lanes or subgroups.
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
    if (t.r0 >= t.m || t.c0 >= t.n) {
        return;
    }
    let k0 = t.k0;
    let k1 = t.k1;
    let a_ks = t.a_ks;
    let b_ks = t.b_ks;
    let ia = t.ia;
    let ib = t.ib;
    let a_k_contig = (OP & 1u) != 0u;
    let b_c_contig = (OP & 2u) != 0u;
    // acc[i]: row i, columns 0..3.
    var acc: array<vec4<f32>, 8>;
    for (var i = 0u; i < 8u; i = i + 1u) {
        acc[i] = vec4<f32>(0.0);
    }
    for (var k = k0; k < k1; k = k + 4u) {
        let step = k - k0;
        // a0[j] / a1[j]: rows 0..3 / 4..7 at k + j; b0[j]: the four columns at k + j.
        var a0: array<vec4<f32>, 4>;
        var a1: array<vec4<f32>, 4>;
        var b0: array<vec4<f32>, 4>;
        if (a_k_contig) {
            let x0 = lhs[(ia[0] + step) / 4u];
            let x1 = lhs[(ia[1] + step) / 4u];
            let x2 = lhs[(ia[2] + step) / 4u];
            let x3 = lhs[(ia[3] + step) / 4u];
            for (var j = 0u; j < 4u; j = j + 1u) {
                a0[j] = col(x0, x1, x2, x3, j);
            }
            if (tall) {
                let x4 = lhs[(ia[4] + step) / 4u];
                let x5 = lhs[(ia[5] + step) / 4u];
                let x6 = lhs[(ia[6] + step) / 4u];
                let x7 = lhs[(ia[7] + step) / 4u];
                for (var j = 0u; j < 4u; j = j + 1u) {
                    a1[j] = col(x4, x5, x6, x7, j);
                }
            }
        } else {
            for (var j = 0u; j < 4u; j = j + 1u) {
                a0[j] = lhs[(ia[0] + (step + j) * a_ks) / 4u];
                if (tall) {
                    a1[j] = lhs[(ia[4] + (step + j) * a_ks) / 4u];
                }
            }
        }
        if (b_c_contig) {
            for (var j = 0u; j < 4u; j = j + 1u) {
                b0[j] = rhs[(ib[0] + (step + j) * b_ks) / 4u];
            }
        } else {
            let y0 = rhs[(ib[0] + step) / 4u];
            let y1 = rhs[(ib[1] + step) / 4u];
            let y2 = rhs[(ib[2] + step) / 4u];
            let y3 = rhs[(ib[3] + step) / 4u];
            for (var j = 0u; j < 4u; j = j + 1u) {
                b0[j] = col(y0, y1, y2, y3, j);
            }
        }
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
    if (s.r0 >= s.m || s.c0 >= s.n) {
        return;
    }
    let k0 = s.k0;
    let k1 = s.k1;
    let a_ks = s.a_ks;
    let b_ks = s.b_ks;
    let ia = s.ia;
    let ib = s.ib;
    let a_k_contig = (OP & 1u) != 0u;
    let b_c_contig = (OP & 2u) != 0u;
    var t: Tile;
    for (var i = 0u; i < 8u; i = i + 1u) {
        t.lo[i] = vec4<f32>(0.0);
        t.hi[i] = vec4<f32>(0.0);
    }
    // (k1 - k0) / 4 <= 4,096 iterations, 4 k per iteration, 16 vec4 loads per 256 FMAs.
    for (var k = k0; k < k1; k = k + 4u) {
        let step = k - k0;
        // a0[j] / a1[j]: rows 0..3 / 4..7 at k + j; b0[j] / b1[j]: columns 0..3 / 4..7.
        var a0: array<vec4<f32>, 4>;
        var a1: array<vec4<f32>, 4>;
        var b0: array<vec4<f32>, 4>;
        var b1: array<vec4<f32>, 4>;
        if (a_k_contig) {
            let x0 = lhs[(ia[0] + step) / 4u];
            let x1 = lhs[(ia[1] + step) / 4u];
            let x2 = lhs[(ia[2] + step) / 4u];
            let x3 = lhs[(ia[3] + step) / 4u];
            let x4 = lhs[(ia[4] + step) / 4u];
            let x5 = lhs[(ia[5] + step) / 4u];
            let x6 = lhs[(ia[6] + step) / 4u];
            let x7 = lhs[(ia[7] + step) / 4u];
            for (var j = 0u; j < 4u; j = j + 1u) {
                a0[j] = col(x0, x1, x2, x3, j);
                a1[j] = col(x4, x5, x6, x7, j);
            }
        } else {
            for (var j = 0u; j < 4u; j = j + 1u) {
                a0[j] = lhs[(ia[0] + (step + j) * a_ks) / 4u];
                a1[j] = lhs[(ia[4] + (step + j) * a_ks) / 4u];
            }
        }
        if (b_c_contig) {
            for (var j = 0u; j < 4u; j = j + 1u) {
                b0[j] = rhs[(ib[0] + (step + j) * b_ks) / 4u];
                b1[j] = rhs[(ib[4] + (step + j) * b_ks) / 4u];
            }
        } else {
            let y0 = rhs[(ib[0] + step) / 4u];
            let y1 = rhs[(ib[1] + step) / 4u];
            let y2 = rhs[(ib[2] + step) / 4u];
            let y3 = rhs[(ib[3] + step) / 4u];
            let y4 = rhs[(ib[4] + step) / 4u];
            let y5 = rhs[(ib[5] + step) / 4u];
            let y6 = rhs[(ib[6] + step) / 4u];
            let y7 = rhs[(ib[7] + step) / 4u];
            for (var j = 0u; j < 4u; j = j + 1u) {
                b0[j] = col(y0, y1, y2, y3, j);
                b1[j] = col(y4, y5, y6, y7, j);
            }
        }
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
