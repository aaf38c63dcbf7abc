// matmul_vec4.wgsl: the register-tiled matmul of matmul.wgsl (entry `register_tile`) with vec4 loads,
// for operands whose storage allows them.
//
// Computes   for every batch b, row i < M, column j < N:
//              dst[c(b) + i * N + j] (+)= Σ_{k0 <= k < k1} A[b, i, k] * B[b, k, j]
//            over one chunk [k0, k1) of K (at most 16,384 wide; chunks after the first add to
//            dst), 4×4 outputs per invocation held in registers, no workgroup memory, no
//            barriers: the variant for software adapters such as lavapipe.
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
//            column-contiguous B has N % 4 == 0. Rows/columns along a strided dim are clamped
//            to the last one on load (duplicates computed, never stored).
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
// Dispatch   @workgroup_size(8, 8), grid (ceil(N/32), ceil(M/32), batches) counted from the
//            row/column origin and the first batch; every store guarded.

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

// acc_r += a[r] * b_k for the four rows r, one k at a time.
struct Acc {
    r0: vec4<f32>,
    r1: vec4<f32>,
    r2: vec4<f32>,
    r3: vec4<f32>,
}

fn step(acc: ptr<function, Acc>, a: vec4<f32>, b: vec4<f32>) {
    (*acc).r0 = fma(vec4<f32>(a.x), b, (*acc).r0);
    (*acc).r1 = fma(vec4<f32>(a.y), b, (*acc).r1);
    (*acc).r2 = fma(vec4<f32>(a.z), b, (*acc).r2);
    (*acc).r3 = fma(vec4<f32>(a.w), b, (*acc).r3);
}

@compute @workgroup_size(8, 8)
fn register_tile(@builtin(global_invocation_id) gid: vec3<u32>) {
    let m = params[0];
    let n = params[1];
    let r0 = params[2] + gid.y * 4u;
    let c0 = params[3] + gid.x * 4u;
    if (r0 >= m || c0 >= n) {
        return;
    }
    let k0 = params[4];
    let k1 = params[5];
    let add = params[6] != 0u;
    let a_rs = params[8];
    let a_ks = params[9];
    let b_ks = params[11];
    let b_cs = params[12];
    let batch = params[13] + gid.z;
    let nd = params[14];
    var a = params[7];
    var b = params[10];
    var rem = batch;
    // At most nd iterations (the batch rank).
    for (var k = nd; k > 0u; k = k - 1u) {
        let d = k - 1u;
        let size = params[15u + d];
        let idx = rem % size;
        rem = rem / size;
        a = a + idx * params[15u + nd + d];
        b = b + idx * params[15u + 2u * nd + d];
    }
    let a_k_contig = (OP & 1u) != 0u;
    let b_c_contig = (OP & 2u) != 0u;
    // Element indices of the first vec4 each lane reads; divided by 4 at the load (exact: the
    // host checked alignment). A k-contiguous A reads 4 rows, a row-contiguous A one run.
    let rl = m - 1u;
    let cl = n - 1u;
    var ia: vec4<u32>;
    if (a_k_contig) {
        ia = vec4<u32>(r0, min(r0 + 1u, rl), min(r0 + 2u, rl), min(r0 + 3u, rl)) * a_rs
            + vec4<u32>(a + k0 * a_ks);
    } else {
        ia = vec4<u32>(a + r0 + k0 * a_ks);
    }
    var ib: vec4<u32>;
    if (b_c_contig) {
        ib = vec4<u32>(b + c0 + k0 * b_ks);
    } else {
        ib = vec4<u32>(c0, min(c0 + 1u, cl), min(c0 + 2u, cl), min(c0 + 3u, cl)) * b_cs
            + vec4<u32>(b + k0 * b_ks);
    }
    var acc: Acc;
    acc.r0 = vec4<f32>(0.0);
    acc.r1 = vec4<f32>(0.0);
    acc.r2 = vec4<f32>(0.0);
    acc.r3 = vec4<f32>(0.0);
    // (k1 - k0) / 4 <= 4,096 iterations, 4 k per iteration.
    for (var k = k0; k < k1; k = k + 4u) {
        // av[j] = A rows r0..r0+3 at k + j; bv[j] = B columns c0..c0+3 at k + j.
        var av: array<vec4<f32>, 4>;
        var bv: array<vec4<f32>, 4>;
        if (a_k_contig) {
            let x = lhs[ia.x / 4u];
            let y = lhs[ia.y / 4u];
            let z = lhs[ia.z / 4u];
            let w = lhs[ia.w / 4u];
            av[0] = vec4<f32>(x.x, y.x, z.x, w.x);
            av[1] = vec4<f32>(x.y, y.y, z.y, w.y);
            av[2] = vec4<f32>(x.z, y.z, z.z, w.z);
            av[3] = vec4<f32>(x.w, y.w, z.w, w.w);
            ia = ia + vec4<u32>(4u);
        } else {
            av[0] = lhs[ia.x / 4u];
            av[1] = lhs[(ia.x + a_ks) / 4u];
            av[2] = lhs[(ia.x + 2u * a_ks) / 4u];
            av[3] = lhs[(ia.x + 3u * a_ks) / 4u];
            ia = ia + vec4<u32>(4u * a_ks);
        }
        if (b_c_contig) {
            bv[0] = rhs[ib.x / 4u];
            bv[1] = rhs[(ib.x + b_ks) / 4u];
            bv[2] = rhs[(ib.x + 2u * b_ks) / 4u];
            bv[3] = rhs[(ib.x + 3u * b_ks) / 4u];
            ib = ib + vec4<u32>(4u * b_ks);
        } else {
            let x = rhs[ib.x / 4u];
            let y = rhs[ib.y / 4u];
            let z = rhs[ib.z / 4u];
            let w = rhs[ib.w / 4u];
            bv[0] = vec4<f32>(x.x, y.x, z.x, w.x);
            bv[1] = vec4<f32>(x.y, y.y, z.y, w.y);
            bv[2] = vec4<f32>(x.z, y.z, z.z, w.z);
            bv[3] = vec4<f32>(x.w, y.w, z.w, w.w);
            ib = ib + vec4<u32>(4u);
        }
        step(&acc, av[0], bv[0]);
        step(&acc, av[1], bv[1]);
        step(&acc, av[2], bv[2]);
        step(&acc, av[3], bv[3]);
    }
    let c = batch * m * n;
    store4(c, n, m, add, r0, c0, acc.r0);
    store4(c, n, m, add, r0 + 1u, c0, acc.r1);
    store4(c, n, m, add, r0 + 2u, c0, acc.r2);
    store4(c, n, m, add, r0 + 3u, c0, acc.r3);
}
