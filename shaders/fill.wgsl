// fill.wgsl: arange directly on the device, with no host data (constant fills of every dtype
// are generated kernels, src/gpu/codegen.rs).
//
// Computes   arange: dst[i] = start + f32(i) * step   (the same formula as src/cpu/elementwise.rs)
// Bindings   @group(0) @binding(0) dst  : array<f32>, read-write, n elements
//            @group(0) @binding(1) params : array<u32>, read-only: [n, bitcast<u32>(start),
//                bitcast<u32>(step)]
// Dispatch   256 threads per workgroup, one element per thread, ceil(n / 256) workgroups laid
//            out as a 2-D grid (x <= 65,535) and flattened as (wid.y * nwg.x + wid.x) * 256 + lid.

@group(0) @binding(0) var<storage, read_write> dst: array<f32>;
@group(0) @binding(1) var<storage, read> params: array<u32>;

@compute @workgroup_size(256)
fn arange(inv: Invocation) {
    let i = item(inv);
    if (i >= params[0]) {
        return;
    }
    dst[i] = bitcast<f32>(params[1]) + f32(i) * bitcast<f32>(params[2]);
}
