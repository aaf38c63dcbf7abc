// layer_norm.wgsl: the norms of the row-op table (src/ops/rows.rs) over the last dim of a packed
// [nrows, len] tensor in ONE dispatch, one workgroup per row, f32 accumulation.
//
// Computes   OP_LAYER_NORM: dst = (x - mean) / sqrt(var + eps) * weight + bias (var biased)
//            OP_RMS_NORM:   dst = x / sqrt(mean(x²) + eps) * weight, mean(x²) = var + mean²
//            (the table appends the OP_* constants and `centered()`, true for layer_norm).
//            Each thread folds its elements k = lid, lid + 256, ... with Welford's update into
//            (count, mean, M2); the 256 triples are merged by row_tree.wgsl's fixed binary tree
//            in workgroup memory with Chan's formula (deterministic, no cancellation of a one-pass sum of
//            squares), then the row is read again and written. NaN propagates arithmetically.
// Declared   by the library from this file's SHADERS entry (src/gpu/shader_table.rs):
// Bindings   @group(0) @binding(0) src    : array<f32>, read-only, packed [nrows, len]
//            @group(0) @binding(1) weight : array<f32>, read-only, len (unused unless FLAGS & 1)
//            @group(0) @binding(2) bias   : array<f32>, read-only, len (unused unless FLAGS & 2)
//            @group(0) @binding(3) dst    : array<f32>, read-write, packed [nrows, len]
//            @group(0) @binding(4) params : array<u32>, read-only: [nrows, len, eps bits, flags]
// Dispatch   256 threads per workgroup, nrows workgroups on the 2-D grid (row = wid.y * nwg.x +
//            wid.x); workgroups past nrows do nothing (but still reach every barrier).

// A row's Welford statistics (count, mean, M2), merged by row_tree.wgsl (prepended).
struct RowStat {
    n: f32,
    mean: f32,
    m2: f32,
}

// Chan's merge of a (the lower threads) with b; an empty b leaves a as it is.
fn stat_merge(a: RowStat, b: RowStat) -> RowStat {
    if (b.n <= 0.0) {
        return a;
    }
    let nn = a.n + b.n;
    let d = b.mean - a.mean;
    return RowStat(nn, a.mean + d * (b.n / nn), a.m2 + b.m2 + d * d * (a.n * b.n / nn));
}

// Welford's update of st with x.
fn push(st: RowStat, x: f32) -> RowStat {
    let n = st.n + 1.0;
    let d = x - st.mean;
    let mean = st.mean + d / n;
    return RowStat(n, mean, st.m2 + d * (x - mean));
}

// Writes the normalised row of `count` elements at base, given its statistics.
fn write_row(base: u32, count: u32, first: u32, step: u32, st: RowStat) {
    var centre = st.mean;
    var sq = st.m2 / f32(params[1]);
    if (!centered()) {
        // The mean square about 0 from the statistics about the mean.
        sq = sq + st.mean * st.mean;
        centre = 0.0;
    }
    let rstd = 1.0 / sqrt(sq + bitcast<f32>(params[2]));
    let flags = params[3];
    for (var k = first; k < count; k = k + step) {
        var y = (src[base + k] - centre) * rstd;
        if ((flags & 1u) != 0u) {
            y = y * weight[k];
        }
        if ((flags & 2u) != 0u) {
            y = y + bias[k];
        }
        dst[base + k] = y;
    }
}

// What row_fold.wgsl's fold_row starts from and reads.
fn empty_stat() -> RowStat {
    return RowStat(0.0, 0.0, 0.0);
}

fn element(at: u32) -> f32 {
    return src[at];
}

@compute @workgroup_size(WG_SIZE)
fn layer_norm(inv: RowInv) {
    let row = group_index(inv.wid, inv.nwg);
    let count = row_count(row, params[1]);
    let base = row * params[1];
    write_row(base, count, inv.lid, WG_SIZE, row_merge(inv, fold_row(base, 1u, count, inv.lid, WG_SIZE)));
}

// One invocation per row: the autotuned variant for many rows (no workgroup merge, no barrier;
// a software adapter pays dearly for each barrier). Welford over the whole row, then the write
// pass. 256 rows per workgroup on the same 2-D grid (row = (wid.y * nwg.x + wid.x) * 256 + lid).
@compute @workgroup_size(WG_SIZE)
fn layer_norm_per_row(inv: Invocation) {
    let row = item(inv);
    if (row >= params[0]) { return; }
    let len = params[1];
    write_row(row * len, len, 0u, 1u, fold_row(row * len, 1u, len, 0u, 1u));
}
