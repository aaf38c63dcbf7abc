// row_tree.wgsl: how a 256-thread workgroup merges its threads' statistics of one row without
// subgroup operations: a fixed binary tree in workgroup memory (8 barriers, the same order on
// every run). The row shaders (softmax.wgsl, layer_norm.wgsl, cross_entropy.wgsl) come after it
// and define `RowStat` and `stat_merge(a, b)` (a from the lower threads); row_subgroup.wgsl is
// the other implementation of `RowInv` and `row_merge`, where the adapter has SUBGROUP.

alias RowInv = Invocation;

var<workgroup> wstat: array<RowStat, 256>;

// The merge of every thread's `st` of the workgroup, in thread order; every thread gets it.
fn row_merge(inv: RowInv, st: RowStat) -> RowStat {
    let lid = inv.lid;
    wstat[lid] = st;
    workgroupBarrier();
    for (var h = 128u; h > 0u; h = h >> 1u) {
        if (lid < h) {
            wstat[lid] = stat_merge(wstat[lid], wstat[lid + h]);
        }
        workgroupBarrier();
    }
    return wstat[0];
}
