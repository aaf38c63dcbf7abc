// row_tree.wgsl: how a 256-thread workgroup merges its threads' (max, sum of exp, bad) row
// statistics without subgroup operations: a fixed binary tree in workgroup memory (8 barriers,
// the same order on every run). Prepended to softmax.wgsl where the adapter has no SUBGROUP
// feature; row_subgroup.wgsl is the other implementation of the same two names.

struct RowInv {
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
}

var<workgroup> wmax: array<f32, 256>;
var<workgroup> wsum: array<f32, 256>;
var<workgroup> wbad: array<u32, 256>;

// (row max, row sum of exp(x - max), any bad) of the workgroup; every thread gets it.
fn row_merge(inv: RowInv, m: f32, s: f32, bad: u32) -> RowStat {
    let lid = inv.lid;
    wmax[lid] = m;
    wsum[lid] = s;
    wbad[lid] = bad;
    workgroupBarrier();
    for (var h = 128u; h > 0u; h = h >> 1u) {
        if (lid < h) {
            let r = merge(wmax[lid], wsum[lid], wmax[lid + h], wsum[lid + h]);
            wmax[lid] = r.x;
            wsum[lid] = r.y;
            wbad[lid] = wbad[lid] | wbad[lid + h];
        }
        workgroupBarrier();
    }
    return RowStat(wmax[0], wsum[0], wbad[0]);
}
