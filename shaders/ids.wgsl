// ids.wgsl: the device-side error word, prepended to every shader that reads ids (gather,
// scatter, cross_entropy). A kernel that meets an out-of-range id never reads or writes outside
// a tensor: it uses zeros instead and reports the id here. Each launch has a word of its own;
// the host copies it back with the next readback of the data it wrote (or of data derived from
// it), or at synchronize, and turns it into Error::IndexOutOfRange (src/gpu/ids.rs).
//
// Bindings   @group(1) @binding(0) id_errors : [reported, id bits, bound, op code], read-write

@group(1) @binding(0) var<storage, read_write> id_errors: array<atomic<u32>, 4>;

// Records a bad id: the first report keeps its id, bound and op; later ones change nothing.
fn report_bad_id(code: u32, id: u32, bound: u32) {
    if (atomicOr(&id_errors[0], 1u) == 0u) {
        atomicStore(&id_errors[1], id);
        atomicStore(&id_errors[2], bound);
        atomicStore(&id_errors[3], code);
    }
}

// Whether id (u32 bits of a u32 or i32 id; code bit 8 = signed) lies outside 0..bound.
fn bad_id(code: u32, id: u32, bound: u32) -> bool {
    return id >= bound || ((code & 0x100u) != 0u && id >= 0x80000000u);
}
