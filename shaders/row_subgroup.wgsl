// row_subgroup.wgsl: the row merge of row_tree.wgsl with subgroup operations (adapters with the
// SUBGROUP feature): each subgroup merges its lanes in registers (subgroupMax / subgroupAdd /
// subgroupOr), lane 0 of each subgroup publishes one triple, thread 0 folds those, and a second
// barrier shares the row's triple: 2 barriers where the tree takes 9.

struct RowInv {
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) nsg: u32,
}

var<workgroup> wmax: array<f32, 256>;
var<workgroup> wsum: array<f32, 256>;
var<workgroup> wbad: array<u32, 256>;

fn row_merge(inv: RowInv, m: f32, s: f32, bad: u32) -> RowStat {
    let mm = subgroupMax(m);
    // Lanes without elements hold (-inf, 0): nothing to rescale.
    var scaled = 0.0;
    if (s != 0.0) {
        scaled = s * exp(m - mm);
    }
    let ss = subgroupAdd(scaled);
    let bb = subgroupOr(bad);
    if (inv.lane == 0u) {
        wmax[inv.sg] = mm;
        wsum[inv.sg] = ss;
        wbad[inv.sg] = bb;
    }
    workgroupBarrier();
    // One thread folds the subgroups' triples in subgroup order (fixed for an adapter: the
    // same input gives the same bits) and publishes the row's; a second barrier shares it.
    if (inv.lid == 0u) {
        var r = vec2<f32>(wmax[0], wsum[0]);
        var b = wbad[0];
        for (var i = 1u; i < inv.nsg; i = i + 1u) {
            r = merge(r.x, r.y, wmax[i], wsum[i]);
            b = b | wbad[i];
        }
        wmax[0] = r.x;
        wsum[0] = r.y;
        wbad[0] = b;
    }
    workgroupBarrier();
    return RowStat(wmax[0], wsum[0], wbad[0]);
}
