// softmax.wgsl: softmax, log_softmax and softmin over one dim of a strided view in ONE dispatch,
// one workgroup per row, any row length.
//
// Computes   OP_SOFTMAX:     dst[e] = exp(x - m) / s
//            OP_LOG_SOFTMAX: dst[e] = (x - m) - log(s)
//            OP_SOFTMIN:     OP_SOFTMAX of -x (element() negates what it reads)
//            (the row-op table, src/ops/rows.rs, appends the OP_* constants), with m the row max and s = Σ exp(x - m). Online softmax: each thread walks its
//            elements k = lid, lid + 256, ... once, keeping a running max and a sum rescaled
//            whenever the max grows; the 256 (max, sum) pairs are merged (row_tree.wgsl: a fixed
//            tree in workgroup memory; row_subgroup.wgsl: subgroup operations and one barrier,
//            where the adapter has SUBGROUP), then the row is read a second time and
//            written. So a row costs one read pass + one write pass whatever its length (short
//            rows are not a separate path: the same loop runs once per thread).
//            Row semantics as the CPU oracle: a NaN or +inf in the row makes the whole row NaN
//            (inf - inf), a row of -inf only gives NaN (0 / 0), -inf elements give 0 (-inf).
// Rows       row r (r < nrows = outer * inner) is (o, i) = (r / inner, r % inner); element k sits
//            at base(r) + k * rstride in src, base(r) the address of packed index
//            o * len * inner + i unravelled through shape/strides, and at (o * len + k) * inner
//            + i in dst (packed row-major). Rows along a non-last dim are read strided in place:
//            making the view contiguous first would cost a copy dispatch and a third pass.
// Declared   by the library from this file's SHADERS entry (src/gpu/shader_table.rs):
// Bindings   @group(0) @binding(0) src    : array<f32>, read-only
//            @group(0) @binding(1) dst    : array<f32>, read-write, packed row-major
//            @group(0) @binding(2) params : array<u32>, read-only:
//                [nrows, len, inner, offset, rstride, ndim, shape[ndim], strides[ndim]]
// Dispatch   256 threads per workgroup, nrows workgroups on the 2-D grid (row = wid.y * nwg.x +
//            wid.x); workgroups past nrows do nothing (but still reach every barrier).

// A row's statistics: max, sum of exp(x - max), and whether a NaN or +inf was seen. The row
// merge (row_tree.wgsl or row_subgroup.wgsl, one of which is prepended: they define RowInv and
// row_merge) combines the threads' with stat_merge.
struct RowStat {
    m: f32,
    s: f32,
    bad: u32,
}

fn stat_merge(a: RowStat, b: RowStat) -> RowStat {
    let r = lse_merge(a.m, a.s, b.m, b.s);
    return RowStat(r.x, r.y, a.bad | b.bad);
}

// Folds element x into a running (max, sum of exp, bad) triple: NaN and +inf mark the row bad,
// -inf contributes nothing.
fn push(st: RowStat, x: f32) -> RowStat {
    if (is_nan(x) || bitcast<u32>(x) == INF_BITS) {
        return RowStat(st.m, st.s, 1u);
    }
    if (bitcast<u32>(x) == 0xff800000u) {
        return st;
    }
    let r = lse_merge(st.m, st.s, x, 1.0);
    return RowStat(r.x, r.y, st.bad);
}

// The output for input x of a row with statistics (rm, rs), ls = log(rs).
fn value(x: f32, rm: f32, rs: f32, ls: f32, nan_row: bool) -> f32 {
    if (nan_row) {
        return bitcast<f32>(NAN_BITS);
    }
    let d = x - rm;
    if (OP == OP_LOG_SOFTMAX) {
        return d - ls;
    }
    return exp(d) / rs;
}

// Where row r starts: x = its packed index o * len * inner + i in dst, y = the address of that
// index in src (the view's offset, shape and strides from params[3] on).
fn row_start(row: u32) -> vec2<u32> {
    let len = params[1];
    let inner = params[2];
    let out = (row / inner) * len * inner + row % inner;
    let nd = params[5];
    return vec2<u32>(out, strided_offset(out, params[3], nd, 6u, 6u + nd));
}

// What row_fold.wgsl's fold_row starts from and reads.
fn empty_stat() -> RowStat {
    return RowStat(bitcast<f32>(0xff800000u), 0.0, 0u);
}

fn element(at: u32) -> f32 {
    // softmin is the softmax of -x.
    if (OP == OP_SOFTMIN) {
        return -src[at];
    }
    return src[at];
}

// Writes elements k = first, first + step, ... < count of the row given its merged statistics.
fn write_row(at: vec2<u32>, count: u32, first: u32, step: u32, st: RowStat) {
    let inner = params[2];
    let rstride = params[4];
    // NaN / +inf anywhere, or nothing but -inf (s = 0): the whole row is NaN.
    let nan_row = st.bad != 0u || st.s == 0.0;
    let ls = log(st.s);
    for (var k = first; k < count; k = k + step) {
        dst[at.x + k * inner] = value(element(at.y + k * rstride), st.m, st.s, ls, nan_row);
    }
}

@compute @workgroup_size(WG_SIZE)
fn softmax(inv: RowInv) {
    let row = group_index(inv.wid, inv.nwg);
    let count = row_count(row, params[1]);
    let at = row_start(row);
    let st = row_merge(inv, fold_row(at.y, params[4], count, inv.lid, WG_SIZE));
    write_row(at, count, inv.lid, WG_SIZE, st);
}

// One invocation per row: the autotuned variant for many short rows (the workgroup-per-row
// entry above leaves most of its 256 threads idle on a row of 10 or 50). The same online
// (max, sum) pass, row semantics and write pass, with no workgroup merge and no barrier.
// Dispatch: 256 rows per workgroup on the same 2-D grid (row = (wid.y * nwg.x + wid.x) * 256
// + lid); invocations past nrows return.
@compute @workgroup_size(WG_SIZE)
fn softmax_per_row(inv: RowInv) {
    let row = flat_index(inv.wid, inv.nwg, inv.lid);
    if (row >= params[0]) { return; }
    let at = row_start(row);
    let len = params[1];
    write_row(at, len, 0u, 1u, fold_row(at.y, params[4], len, 0u, 1u));
}
