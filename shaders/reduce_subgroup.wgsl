// reduce_subgroup.wgsl: first passes of reduce.wgsl's reductions with subgroup operations
// (adapters with the SUBGROUP feature); composed after reduce.wgsl, whose params, loads, stores
// and `combine` it shares, so every op keeps its NaN, tie and wrap-around rules (subgroup.wgsl,
// prepended, defines SubgroupInv).
//
// Lanes merge through butterflies of subgroupShuffleXor and `combine` (not subgroupAdd or
// subgroupMax, whose NaN handling WGSL leaves to the driver). At each level the lane holding
// the lower indices goes first, so lane 0 ends with the same pairwise tree over consecutive
// lanes as the workgroup tree: for a given subgroup size the same input gives the same bits.
//
// Dispatch   reduce_wg_subgroup: as reduce_wg (one 256-thread workgroup per item, L = 16384);
//                                the subgroups merge in registers, lane 0 of each publishes one
//                                value and thread 0 folds them in order: 1 barrier, not 9.
//            reduce_subgroup:    one subgroup per item (L <= SUBGROUP_MAX elements, lanes read
//                                consecutive elements: coalesced, no barrier); P items per
//                                256-thread workgroup, P = params[9 + 2 * ndim] (the host's
//                                256 / largest subgroup size, so every item has a subgroup;
//                                spare subgroups of smaller sizes return at once).

// The longest chunk reduce_subgroup folds, SUBGROUP_MAX (src/gpu/contract.rs): at most 1,024
// loop iterations with 4 lanes.

// The subgroup's merge of `acc` (valid in lane 0).
fn subgroup_merge(acc: Acc, lane: u32, size: u32) -> Acc {
    var a = acc;
    for (var s = 1u; s < size; s = s << 1u) {
        let other = Acc(subgroupShuffleXor(a.v, s), subgroupShuffleXor(a.i, s));
        if ((lane & s) == 0u) {
            a = combine(a, other);
        } else {
            a = combine(other, a);
        }
    }
    return a;
}

@compute @workgroup_size(WG_SIZE)
fn reduce_wg_subgroup(inv: SubgroupInv) {
    let item = inv.wid.y * inv.nwg.x + inv.wid.x;
    // Uniform per workgroup (the grid is rounded up), so the barrier below stays uniform.
    if (item >= params[0]) { return; }
    let merged = subgroup_merge(fold_wg(item, inv.lid), inv.lane, inv.size);
    if (inv.lane == 0u) {
        tree_v[inv.sg] = merged.v;
        tree_i[inv.sg] = merged.i;
    }
    workgroupBarrier();
    if (inv.lid == 0u) {
        var r = Acc(tree_v[0], tree_i[0]);
        for (var s = 1u; s < inv.nsg; s = s + 1u) {
            r = combine(r, Acc(tree_v[s], tree_i[s]));
        }
        store(item, r);
    }
}

@compute @workgroup_size(WG_SIZE)
fn reduce_subgroup(inv: SubgroupInv) {
    let per = params[9u + 2u * params[8]];
    // Both exits are uniform per subgroup: the merge below runs in whole subgroups.
    if (inv.sg >= per) { return; }
    let item = (inv.wid.y * inv.nwg.x + inv.wid.x) * per + inv.sg;
    if (item >= params[0]) { return; }
    let c = chunk_of(item, min(params[3], SUBGROUP_MAX));
    var acc = identity();
    for (var r = c.start + inv.lane; r < c.end; r = r + inv.size) {
        acc = combine(acc, load(c.o, r, c.base));
    }
    let merged = subgroup_merge(acc, inv.lane, inv.size);
    if (inv.lane == 0u) {
        store(item, merged);
    }
}
