// where.wgsl: dst[i] = mask[i] != 0 ? on_true[i] : on_false[i], with broadcasting.
//
// Computes   a selection of 32-bit words (f32 tensors), element i of the broadcast shape taking
//            on_true where the U8 mask byte is non-zero, else on_false. Words are moved, never
//            computed on, so NaN payloads pass through unchanged.
// Bindings   @group(0) @binding(0) mask     : array<u32>, read-only, U8 elements packed 4 per
//                                             word little-endian (byte p is bits 8 * (p % 4) of
//                                             word p / 4)
//            @group(0) @binding(1) on_true  : array<u32>, read-only
//            @group(0) @binding(2) on_false : array<u32>, read-only
//            @group(0) @binding(3) dst      : array<u32>, read-write, n elements, packed row-major
//            @group(0) @binding(4) params   : array<u32>, read-only:
//              [n, ndim, mask_offset, true_offset, false_offset, shape[ndim],
//               mask_strides[ndim], true_strides[ndim], false_strides[ndim]]
//              (ndim = 0: all three contiguous; broadcast dims have stride 0)
// Dispatch   256 threads per workgroup, one element per thread, ceil(n / 256) workgroups laid
//            out as a 2-D grid (x <= 65,535) and flattened as (wid.y * nwg.x + wid.x) * 256 + lid.

@group(0) @binding(0) var<storage, read> mask: array<u32>;
@group(0) @binding(1) var<storage, read> on_true: array<u32>;
@group(0) @binding(2) var<storage, read> on_false: array<u32>;
@group(0) @binding(3) var<storage, read_write> dst: array<u32>;
@group(0) @binding(4) var<storage, read> params: array<u32>;

@compute @workgroup_size(256)
fn where_cond(@builtin(workgroup_id) wid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (i >= params[0]) {
        return;
    }
    let nd = params[1];
    var m = params[2] + i;
    var t = params[3] + i;
    var f = params[4] + i;
    if (nd > 0u) {
        m = params[2];
        t = params[3];
        f = params[4];
        var rem = i;
        // At most ndim iterations.
        for (var k = nd; k > 0u; k = k - 1u) {
            let d = k - 1u;
            let idx = rem % params[5u + d];
            rem = rem / params[5u + d];
            m = m + idx * params[5u + nd + d];
            t = t + idx * params[5u + 2u * nd + d];
            f = f + idx * params[5u + 3u * nd + d];
        }
    }
    let byte = (mask[m / 4u] >> (8u * (m % 4u))) & 0xffu;
    if (byte != 0u) {
        dst[i] = on_true[t];
    } else {
        dst[i] = on_false[f];
    }
}
