// row_subgroup.wgsl: the row merge of row_tree.wgsl with subgroup operations (adapters with the
// SUBGROUP feature): each subgroup merges its lanes in registers (stat_subgroup), lane 0 of each
// subgroup publishes one statistic, thread 0 folds those with the row shader's `stat_merge`, and
// a second barrier shares the row's: 2 barriers where the tree takes 9. stat_subgroup merges
// the (max, sum of exp, bad) statistics of softmax.wgsl, the one row shader run this way.
// subgroup.wgsl (prepended) defines SubgroupInv.

alias RowInv = SubgroupInv;

// The merge of a subgroup's lanes: subgroupMax / subgroupAdd / subgroupOr.
fn stat_subgroup(st: RowStat) -> RowStat {
    let mm = subgroupMax(st.m);
    // Lanes without elements hold (-inf, 0): nothing to rescale.
    var scaled = 0.0;
    if (st.s != 0.0) {
        scaled = st.s * exp(st.m - mm);
    }
    return RowStat(mm, subgroupAdd(scaled), subgroupOr(st.bad));
}

var<workgroup> wstat: array<RowStat, 256>;

fn row_merge(inv: RowInv, st: RowStat) -> RowStat {
    let merged = stat_subgroup(st);
    if (inv.lane == 0u) {
        wstat[inv.sg] = merged;
    }
    workgroupBarrier();
    // One thread folds the subgroups' statistics in subgroup order (fixed for an adapter: the
    // same input gives the same bits) and publishes the row's; a second barrier shares it.
    if (inv.lid == 0u) {
        var r = wstat[0];
        for (var i = 1u; i < inv.nsg; i = i + 1u) {
            r = stat_merge(r, wstat[i]);
        }
        wstat[0] = r;
    }
    workgroupBarrier();
    return wstat[0];
}
