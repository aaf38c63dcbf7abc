// row_fold.wgsl: one thread's pass over its elements of a row, shared by the row shaders
// (softmax.wgsl, layer_norm.wgsl, cross_entropy.wgsl). Each defines RowStat, `empty_stat()`,
// `push(st, x)` and `element(at)`; src/gpu/kernels.rs composes this file with them.

// The statistics of elements k = first, first + step, ... < count of the row whose element k is
// at base + k * stride (first = lid and step = 256 in a workgroup per row, 0 and 1 in a thread
// per row).
fn fold_row(base: u32, stride: u32, count: u32, first: u32, step: u32) -> RowStat {
    var st = empty_stat();
    for (var k = first; k < count; k = k + step) {
        st = push(st, element(base + k * stride));
    }
    return st;
}
