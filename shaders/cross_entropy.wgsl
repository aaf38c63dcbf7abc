// cross_entropy.wgsl: log-softmax + negative log-likelihood over class ids in one pass per row
// (PyTorch's F.cross_entropy with ignore_index and label_smoothing), and its gradient.
//
// Computes   ce_forward, one workgroup per row i of the packed logits x [N, C]:
//              lse_i = log Σ_j exp(x_ij) (online max/sum, merged by row_tree.wgsl's fixed tree)
//              loss_i = (1 - ε)(lse_i - x_i,t) + ε (lse_i - Σ_j x_ij / C)   (ε term only if ε > 0)
//              valid_i = 1, or loss_i = valid_i = 0 when t = targets[i] is ignore_index;
//              a NaN or +inf in the row makes loss_i NaN (as log_softmax does).
//            A target outside 0..C is reported to the error word (ids.wgsl); its row gets 0.
//            dst = [loss[N], valid[N], lse[N]].
//            ce_backward, one thread per element: dst_ij = g_i (exp(x_ij - lse_i)
//              - (1 - ε)[j == t_i] - ε / C), and 0 in ignored or invalid rows; g_i is the
//              upstream gradient of row i (already scaled by the reduction).
// Declared   by the library from this file's SHADERS entry (src/gpu/shader_table.rs):
// Bindings   @group(0) @binding(0) x      : array<f32>, read-only, packed [N, C] from x_offset
//            @group(0) @binding(1) t      : array<u32>, read-only, u32 or i32 bits from t_offset
//            @group(0) @binding(2) lse    : array<f32>, read-only (backward: forward's dst)
//            @group(0) @binding(3) g      : array<f32>, read-only (backward: [N])
//            @group(0) @binding(4) dst    : array<f32>, read-write
//            @group(0) @binding(5) params : array<u32>, read-only:
//                [n, C, x_offset, t_offset, ignore bits, flags (1: has ignore), code, ε bits,
//                 lse_offset, g_offset]; n = N (forward) or N * C (backward)
// Dispatch   forward: 256 threads per row, N workgroups on the 2-D grid (row = wid.y * nwg.x +
//            wid.x), or ce_forward_per_row: one thread per row; backward: 256 threads per
//            workgroup, one element each.

const NEG_INF: u32 = 0xff800000u;

// A row's running statistics: (max, sum of exp) of the finite and +-inf-free values, the
// plain sum (for label smoothing) and whether a NaN or +inf was seen. Merged across the
// workgroup by row_tree.wgsl (prepended).
struct RowStat {
    m: f32,
    s: f32,
    sx: f32,
    bad: u32,
}

fn stat_merge(a: RowStat, b: RowStat) -> RowStat {
    let r = lse_merge(a.m, a.s, b.m, b.s);
    return RowStat(r.x, r.y, a.sx + b.sx, a.bad | b.bad);
}

fn push(a: RowStat, v: f32) -> RowStat {
    var r = RowStat(a.m, a.s, a.sx + v, a.bad);
    if (is_nan(v) || bitcast<u32>(v) == INF_BITS) {
        r.bad = 1u;
    } else if (bitcast<u32>(v) != NEG_INF) {
        let ms = lse_merge(a.m, a.s, v, 1.0);
        r.m = ms.x;
        r.s = ms.y;
    }
    return r;
}

// 0: an id in range; 1: ignored; 2: out of range.
fn target_kind(id: u32, classes: u32) -> u32 {
    if ((params[5] & 1u) != 0u && id == params[4]) {
        return 1u;
    }
    if (bad_id(params[6], id, classes)) {
        return 2u;
    }
    return 0u;
}

// What row_fold.wgsl's fold_row starts from and reads.
fn empty_stat() -> RowStat {
    return RowStat(bitcast<f32>(NEG_INF), 0.0, 0.0, 0u);
}

fn element(at: u32) -> f32 {
    return x[at];
}

@compute @workgroup_size(WG_SIZE)
fn ce_forward(inv: RowInv) {
    let row = group_index(inv.wid, inv.nwg);
    let nrows = params[0];
    let classes = params[1];
    let base = params[2] + row * classes;
    let st = row_merge(inv, fold_row(base, 1u, row_count(row, classes), inv.lid, WG_SIZE));
    if (inv.lid != 0u || row >= nrows) { return; }
    finish_row(row, nrows, classes, base, st);
}

// One invocation per row (the autotuned variant for many rows of few classes: no merge, no
// barrier). 256 rows per workgroup on the same 2-D grid (row = (wid.y * nwg.x + wid.x) * 256
// + lid).
@compute @workgroup_size(WG_SIZE)
fn ce_forward_per_row(inv: Invocation) {
    let row = item(inv);
    let nrows = params[0];
    if (row >= nrows) { return; }
    let classes = params[1];
    let base = params[2] + row * classes;
    finish_row(row, nrows, classes, base, fold_row(base, 1u, classes, 0u, 1u));
}

// Writes row `row`'s loss, validity and log-sum-exp from its merged statistics.
fn finish_row(row: u32, nrows: u32, classes: u32, base: u32, st: RowStat) {
    var l = st.m + log(st.s);
    if (st.bad != 0u) {
        l = bitcast<f32>(NAN_BITS);
    }
    let id = t[params[3] + row];
    let kind = target_kind(id, classes);
    var loss = 0.0;
    var valid = 0.0;
    if (kind == 2u) {
        report_bad_id(params[6], id, classes);
    } else if (kind == 0u) {
        valid = 1.0;
        let eps = bitcast<f32>(params[7]);
        loss = l - x[base + id];
        if (eps > 0.0) {
            loss = (1.0 - eps) * loss + eps * (l - st.sx / f32(classes));
        }
    }
    dst[row] = loss;
    dst[nrows + row] = valid;
    dst[2u * nrows + row] = l;
}

@compute @workgroup_size(WG_SIZE)
fn ce_backward(inv: Invocation) {
    let i = item(inv);
    if (i >= params[0]) { return; }
    // Class j of row row.
    let rj = cell(i, params[1]);
    let classes = params[1];
    let row = rj.x;
    let id = t[params[3] + row];
    // Reported by the forward pass; here the row only gets zeros.
    if (target_kind(id, classes) != 0u) {
        dst[i] = 0.0;
        return;
    }
    let eps = bitcast<f32>(params[7]);
    let gi = g[params[9] + row];
    var d = exp(x[params[2] + i] - lse[params[8] + row]) - eps / f32(classes);
    if (rj.y == id) {
        d = d - (1.0 - eps);
    }
    dst[i] = gi * d;
}
