// subgroup.wgsl: the builtins of a 256-invocation entry point that uses subgroup operations, as
// one parameter (common.wgsl's Invocation plus the subgroup's). Prepended by src/gpu/kernels.rs
// to the subgroup builds (row_subgroup.wgsl's row merge, reduce_subgroup.wgsl's first passes),
// which only adapters with the SUBGROUP feature compile.

struct SubgroupInv {
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) size: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) nsg: u32,
}
