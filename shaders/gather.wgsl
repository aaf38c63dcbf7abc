// gather.wgsl: index_select (the gather behind nn::Embedding) and gather along a dim.
//
// Computes   dst[i] = src at the view coordinates c of output element i (c = i unravelled over
//            the output shape), with c[d] replaced by
//              MODE 0 (index_select): ids[ids_offset + c[d]]   (the output is the view with
//                                     shape[d] replaced by the number of ids)
//              MODE 1 (gather):       ids[ids_offset + i]      (the output has the index's
//                                     shape, no larger than the view's in any other dim)
//            An id outside 0..dim_size writes 0 and is reported to the error word (ids.wgsl):
//            nothing is read outside the view, and the host never checks ids before launching.
// Declared   by the library from this file's SHADERS entry (src/gpu/shader_table.rs):
// Bindings   @group(0) @binding(0) src    : array<f32>, read-only, the table (any strided view)
//            @group(0) @binding(1) ids    : array<u32>, read-only (u32 or i32 bits, see `code`)
//            @group(0) @binding(2) dst    : array<f32>, read-write, n elements, packed row-major
//            @group(0) @binding(3) params : array<u32>, read-only:
//                [n, ndim, src_offset, d, ids_offset, dim_size, code, mode,
//                 out_shape[ndim], strides[ndim]]
// Dispatch   256 threads per workgroup, one element per thread, on the 2-D grid (item()).

@compute @workgroup_size(WG_SIZE)
fn gather(inv: Invocation) {
    let i = item(inv);
    if (i >= params[0]) { return; }
    let nd = params[1];
    let d = params[3];
    let dim_size = params[5];
    let code = params[6];
    let walk = strided_offset_but(i, params[2], nd, 8u, 8u + nd, d);
    // index_select takes the id at the output's coordinate along d, gather the element's own.
    let id = ids[params[4] + select(i, walk.y, params[7] == 0u)];
    if (bad_id(code, id, dim_size)) {
        report_bad_id(code, id, dim_size);
        dst[i] = 0.0;
        return;
    }
    dst[i] = src[walk.x + id * params[8u + nd + d]];
}
