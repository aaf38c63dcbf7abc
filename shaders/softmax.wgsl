// softmax.wgsl: the last pass of softmax and log_softmax over one dim of a strided view, once
// reduce.wgsl has produced every row's max m and sum s of exp(x - m).
//
// Computes   OP 0 (softmax):     dst[i] = exp(x - m[o]) / s[o]
//            OP 1 (log_softmax): dst[i] = (x - m[o]) - log(s[o])
//            where x is element i (row-major) of the view and o = (i / (R * inner)) * inner
//            + i % inner its row (R = size of the softmax dim, inner = product of the dims after
//            it). Subtracting the row max keeps exp from overflowing. A NaN in the row (hence in
//            m or s) gives NaN, tested on the bits since WGSL may assume floats are never NaN.
// Bindings   @group(0) @binding(0) src    : array<f32>, read-only
//            @group(0) @binding(1) rowmax : array<f32>, read-only, one per row
//            @group(0) @binding(2) rowsum : array<f32>, read-only, one per row
//            @group(0) @binding(3) dst    : array<f32>, read-write, n elements, packed row-major
//            @group(0) @binding(4) params : array<u32>, read-only:
//                [n, ndim, offset, R, inner, shape[ndim], strides[ndim]]   (ndim = 0: contiguous)
// Dispatch   256 threads per workgroup, one element per thread, ceil(n / 256) workgroups laid
//            out as a 2-D grid (x <= 65,535) and flattened as (wid.y * nwg.x + wid.x) * 256 + lid.

override OP: u32 = 0u;

@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read> rowmax: array<f32>;
@group(0) @binding(2) var<storage, read> rowsum: array<f32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;
@group(0) @binding(4) var<storage, read> params: array<u32>;

@compute @workgroup_size(256)
fn softmax(inv: Invocation) {
    let i = item(inv);
    if (i >= params[0]) {
        return;
    }
    let nd = params[1];
    var at = params[2] + i;
    if (nd > 0u) {
        at = params[2];
        var rem = i;
        // At most ndim iterations.
        for (var k = nd; k > 0u; k = k - 1u) {
            let d = k - 1u;
            let size = params[5u + d];
            at = at + (rem % size) * params[5u + nd + d];
            rem = rem / size;
        }
    }
    let len = params[3];
    let inner = params[4];
    let o = (i / (len * inner)) * inner + i % inner;
    let d = src[at] - rowmax[o];
    let s = rowsum[o];
    if (is_nan(d) || is_nan(s)) {
        dst[i] = bitcast<f32>(NAN_BITS);
        return;
    }
    if (OP == 1u) {
        dst[i] = d - log(s);
    } else {
        dst[i] = exp(d) / s;
    }
}
