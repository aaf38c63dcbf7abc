// conv2d.wgsl: 2-d convolution (cross-correlation) as an implicit GEMM: the im2col matrix is
// never written; each workgroup gathers its slice of it straight from the input into
// workgroup memory, beside the matching slice of the weight.
//
// Computes   for every image b, group g, output channel m < M (= out channels / groups) and
//            output position p = (oy, ox):
//              dst[b, g * M + m, oy, ox] = bias[g * M + m]
//                + Σ_{ci < cg, i < kh, j < kw} weight[g * M + m, ci, i, j]
//                                               * x[b, g * cg + ci, oy * sh + i * dh - ph,
//                                                                   ox * sw + j * dw - pw]
//            with taps outside the input read as 0 (so a NaN anywhere in a window propagates,
//            and padding never adds one). As a GEMM per group: M rows (output channels),
//            N = n * oh * ow columns (images and positions), K = cg * kh * kw (channel, tap) in
//            the weight's own order, summed in increasing k with one fma per k (the same order
//            for every shape, so the same input gives the same bits).
// Tiling     A workgroup of 16 x 8 invocations owns 32 rows x 128 columns. Per step of 16 k it
//            stages the weight slice [16 k][32 rows] and the gathered input slice
//            [16 k][128 columns] in workgroup memory as vec4s (each invocation gathers 4 columns
//            x 4 k and 4 weights), then each invocation multiplies its 4 rows x 8 columns in
//            registers: 3 vec4 reads feed 8 vec4 fmas. Rows, columns and k past the ends are
//            staged as 0 and never stored.
// Declared   by the library from this file's SHADERS entry (src/gpu/shader_table.rs):
// Bindings   @group(0) @binding(0) x      : array<f32>, read-only, packed [n, c, h, w]
//            @group(0) @binding(1) weight : array<f32>, read-only, packed [o, cg, kh, kw]
//            @group(0) @binding(2) bias   : array<f32>, read-only, [o] (any buffer when
//                                           params[17] is 0; never read then)
//            @group(0) @binding(3) dst    : array<f32>, read-write, packed [n, o, oh, ow]
//            @group(0) @binding(4) params : array<u32>, read-only:
//              [0] n [1] c [2] h [3] w [4] o [5] groups [6] cg [7] kh [8] kw
//              [9] sh [10] sw [11] ph [12] pw [13] dh [14] dw [15] oh [16] ow
//              [17] has bias [18] row tiles (ceil(M / 32)) [19] column tiles (ceil(N / 128))
// Dispatch   @workgroup_size(16, 4); column tile = wid.y * nwg.x + wid.x (the host folds the
//            column tiles into x and y to stay within 65,535 per dimension), wid.z = group *
//            row tiles + row tile. Workgroups past the last column tile run no step and store
//            nothing. The k loop runs ceil(K / 16) steps (K <= 2^19 by the host: at most 32,768,
//            below lavapipe's 65,535 iterations).

// a / d for a < 2^22 and d >= 1, by one f32 division: (a + 0.5) / d lies at least 0.5 / d
// from an integer and f32 rounding moves it by less, so the floor is exact. Software adapters
// run f32 division across SIMD lanes but integer division one lane at a time, and the k loop
// splits every k into (channel, tap row, tap column).
fn div_small(a: u32, d: u32) -> u32 {
    return u32((f32(a) + 0.5) / f32(d));
}

// The tile's rows BM and columns BN are the contract's (src/gpu/contract.rs).
const BK: u32 = 16u;

// [k][column / 4] and [k][row / 4].
var<workgroup> xs: array<vec4<f32>, 512>;
var<workgroup> ws: array<vec4<f32>, 128>;

@compute @workgroup_size(16, 4)
fn conv2d(inv: Invocation) {
    let wid = inv.wid;
    let lid = inv.lid;
    let n = params[0];
    let c = params[1];
    let h = params[2];
    let w = params[3];
    let o = params[4];
    let cg = params[6];
    let kh = params[7];
    let kw = params[8];
    let sh = params[9];
    let sw = params[10];
    let ph = i32(params[11]);
    let pw = i32(params[12]);
    let dh = params[13];
    let dw = params[14];
    let oh = params[15];
    let ow = params[16];
    let has_bias = params[17] != 0u;
    let row_tiles = params[18];
    let col_tiles = params[19];

    let big_m = o / params[5];
    let khw = kh * kw;
    let big_k = cg * khw;
    let l = oh * ow;
    let big_n = n * l;
    let hw = h * w;

    let tile = group_index(wid, inv.nwg);
    let g = wid.z / row_tiles;
    let m0 = (wid.z % row_tiles) * BM;
    let n0 = tile * BN;
    var steps = 0u;
    if (tile < col_tiles) {
        steps = (big_k + BK - 1u) / BK;
    }

    // The 4 columns this invocation gathers: where each window starts in its image (the
    // top-left tap, possibly in the padding), and its image's first element of this group.
    let gc = (lid % 32u) * 4u;
    let gk = (lid / 32u) * 8u;
    var base: array<u32, 4>;
    var y0: array<i32, 4>;
    var x0: array<i32, 4>;
    var live: array<bool, 4>;
    for (var e = 0u; e < 4u; e = e + 1u) {
        let col = n0 + gc + e;
        live[e] = col < big_n;
        let b = col / max(l, 1u);
        let pos = col % max(l, 1u);
        base[e] = (b * c + g * cg) * hw;
        y0[e] = i32((pos / max(ow, 1u)) * sh) - ph;
        x0[e] = i32((pos % max(ow, 1u)) * sw) - pw;
    }
    // The 8 weights this invocation stages: rows wm .. wm + 4 at k = wk and wk + 8.
    let wm = (lid % 8u) * 4u;
    let wk = lid / 8u;

    // The invocation's (x, y) in the 16 × 4 workgroup.
    let tx = lid % 16u;
    let ty = lid / 16u;
    var acc: array<vec4<f32>, 16>;
    for (var r = 0u; r < 16u; r = r + 1u) {
        acc[r] = vec4<f32>(0.0);
    }

    for (var s = 0u; s < steps; s = s + 1u) {
        let k0 = s * BK;
        // Input slice: k rows gk .. gk + 8, columns gc .. gc + 4.
        for (var kr = 0u; kr < 8u; kr = kr + 1u) {
            let k = k0 + gk + kr;
            var v = vec4<f32>(0.0);
            if (k < big_k) {
                let ci = div_small(k, khw);
                let t = k - ci * khw;
                let i = div_small(t, kw);
                let dy = i32(i * dh);
                let dx = i32((t - i * kw) * dw);
                let plane = ci * hw;
                for (var e = 0u; e < 4u; e = e + 1u) {
                    // Branch-free: a tap in the padding (a negative coordinate wraps past
                    // h or w) reads element 0 and keeps 0.
                    let iy = u32(y0[e] + dy);
                    let ix = u32(x0[e] + dx);
                    let ok = live[e] && iy < h && ix < w;
                    let at = select(0u, base[e] + plane + iy * w + ix, ok);
                    v[e] = select(0.0, x[at], ok);
                }
            }
            xs[(gk + kr) * (BN / 4u) + gc / 4u] = v;
        }
        // Weight slice: rows wm .. wm + 4 at k = k0 + wk and k0 + wk + 8.
        for (var kr = wk; kr < BK; kr = kr + 8u) {
            let k = k0 + kr;
            var v = vec4<f32>(0.0);
            if (k < big_k) {
                for (var e = 0u; e < 4u; e = e + 1u) {
                    let m = m0 + wm + e;
                    if (m < big_m) {
                        v[e] = weight[(g * big_m + m) * big_k + k];
                    }
                }
            }
            ws[kr * (BM / 4u) + wm / 4u] = v;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk = kk + 1u) {
            let a0 = ws[kk * (BM / 4u) + ty * 2u];
            let a1 = ws[kk * (BM / 4u) + ty * 2u + 1u];
            let b0 = xs[kk * (BN / 4u) + tx * 2u];
            let b1 = xs[kk * (BN / 4u) + tx * 2u + 1u];
            for (var r = 0u; r < 8u; r = r + 1u) {
                var ar = vec4<f32>(a1[r - 4u]);
                if (r < 4u) {
                    ar = vec4<f32>(a0[r]);
                }
                acc[r * 2u] = fma(ar, b0, acc[r * 2u]);
                acc[r * 2u + 1u] = fma(ar, b1, acc[r * 2u + 1u]);
            }
        }
        workgroupBarrier();
    }

    if (tile >= col_tiles) { return; }
    for (var q = 0u; q < 8u; q = q + 1u) {
        let col = n0 + tx * 8u + q;
        if (col >= big_n) {
            break;
        }
        let b = col / l;
        let pos = col % l;
        for (var r = 0u; r < 8u; r = r + 1u) {
            let m = m0 + ty * 8u + r;
            if (m < big_m) {
                let ch = g * big_m + m;
                var v = acc[r * 2u + q / 4u][q % 4u];
                if (has_bias) {
                    v = v + bias[ch];
                }
                dst[(b * o + ch) * l + pos] = v;
            }
        }
    }
}
