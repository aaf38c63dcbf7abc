// gather.wgsl: index_select, the gather behind nn::Embedding.
//
// Computes   dst[i] = src at the view coordinates of output element i, with the coordinate of
//            dim d replaced by ids[ids_offset + c_d] (c = i unravelled over the output shape,
//            which is the view's shape with shape[d] replaced by the number of ids).
//            The host validates every id (< dim_size) before launching; an id that is still out
//            of range writes NaN instead of reading outside the view.
// Bindings   @group(0) @binding(0) src    : array<f32>, read-only, the table (any strided view)
//            @group(0) @binding(1) ids    : array<u32>, read-only (i32 ids share the bits: all
//                                           are validated non-negative)
//            @group(0) @binding(2) dst    : array<f32>, read-write, n elements, packed row-major
//            @group(0) @binding(3) params : array<u32>, read-only:
//                [n, ndim, src_offset, d, ids_offset, dim_size, out_shape[ndim], strides[ndim]]
// Dispatch   256 threads per workgroup, one element per thread, ceil(n / 256) workgroups laid
//            out as a 2-D grid (x <= 65,535) and flattened as (wid.y * nwg.x + wid.x) * 256 + lid.

@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;
@group(0) @binding(3) var<storage, read> params: array<u32>;

@compute @workgroup_size(256)
fn gather(inv: Invocation) {
    let i = item(inv);
    if (i >= params[0]) {
        return;
    }
    let nd = params[1];
    let d = params[3];
    let ids_offset = params[4];
    let dim_size = params[5];
    var at = params[2];
    var rem = i;
    // At most ndim iterations.
    for (var k = nd; k > 0u; k = k - 1u) {
        let j = k - 1u;
        let size = params[6u + j];
        var c = rem % size;
        rem = rem / size;
        if (j == d) {
            c = ids[ids_offset + c];
            if (c >= dim_size) {
                dst[i] = bitcast<f32>(NAN_BITS);
                return;
            }
        }
        at = at + c * params[6u + nd + j];
    }
    dst[i] = src[at];
}
