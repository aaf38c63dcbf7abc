// join.wgsl: copies one strided view into a region of a larger packed tensor (cat and stack).
//
// Computes   dst[dst_offset + sum_d idx_d * dst_strides[d]] = src[src_offset + sum_d idx_d *
//            src_strides[d]] for every multi-index idx of `shape` (element i row-major). cat runs
//            one dispatch per input, each with dst_offset at the input's start along the cat dim.
//            32-bit words are moved, never computed on: f32, i32 and u32 tensors all work and
//            NaN payloads pass through unchanged.
// Declared   by the library from this file's SHADERS entry (src/gpu/shader_table.rs):
// Bindings   @group(0) @binding(0) src    : array<u32>, read-only
//            @group(0) @binding(1) dst    : array<u32>, read-write
//            @group(0) @binding(2) params : array<u32>, read-only:
//              [n, ndim, src_offset, dst_offset, shape[ndim], src_strides[ndim], dst_strides[ndim]]
// Dispatch   256 threads per workgroup, one element per thread, ceil(n / 256) workgroups laid
//            out as a 2-D grid (x <= 65,535) and flattened as (wid.y * nwg.x + wid.x) * 256 + lid.

@compute @workgroup_size(WG_SIZE)
fn copy_into(inv: Invocation) {
    let i = item(inv);
    if (i >= params[0]) { return; }
    let nd = params[1];
    let s = strided_offset(i, params[2], nd, 4u, 4u + nd);
    let t = strided_offset(i, params[3], nd, 4u, 4u + 2u * nd);
    dst[t] = src[s];
}
