// tile.wgsl: the 8×8 register tile of matmul.wgsl and matmul_vec4.wgsl, in the element type
// `Scalar` that the library declares for the shader composed with it (src/gpu/shader_table.rs).

// The 8×8 register tile: lo[r] holds columns 0..3 of row r, hi[r] columns 4..7.
struct Tile {
    lo: array<vec4<Scalar>, 8>,
    hi: array<vec4<Scalar>, 8>,
}

// tile += a ⊗ b for one k: a = rows 0..3 (a0) and 4..7 (a1), b = columns 0..3 (b0), 4..7 (b1).
fn rank1(t: ptr<function, Tile>, a0: vec4<Scalar>, a1: vec4<Scalar>, b0: vec4<Scalar>, b1: vec4<Scalar>) {
    (*t).lo[0] = fma(vec4<Scalar>(a0.x), b0, (*t).lo[0]);
    (*t).hi[0] = fma(vec4<Scalar>(a0.x), b1, (*t).hi[0]);
    (*t).lo[1] = fma(vec4<Scalar>(a0.y), b0, (*t).lo[1]);
    (*t).hi[1] = fma(vec4<Scalar>(a0.y), b1, (*t).hi[1]);
    (*t).lo[2] = fma(vec4<Scalar>(a0.z), b0, (*t).lo[2]);
    (*t).hi[2] = fma(vec4<Scalar>(a0.z), b1, (*t).hi[2]);
    (*t).lo[3] = fma(vec4<Scalar>(a0.w), b0, (*t).lo[3]);
    (*t).hi[3] = fma(vec4<Scalar>(a0.w), b1, (*t).hi[3]);
    (*t).lo[4] = fma(vec4<Scalar>(a1.x), b0, (*t).lo[4]);
    (*t).hi[4] = fma(vec4<Scalar>(a1.x), b1, (*t).hi[4]);
    (*t).lo[5] = fma(vec4<Scalar>(a1.y), b0, (*t).lo[5]);
    (*t).hi[5] = fma(vec4<Scalar>(a1.y), b1, (*t).hi[5]);
    (*t).lo[6] = fma(vec4<Scalar>(a1.z), b0, (*t).lo[6]);
    (*t).hi[6] = fma(vec4<Scalar>(a1.z), b1, (*t).hi[6]);
    (*t).lo[7] = fma(vec4<Scalar>(a1.w), b0, (*t).lo[7]);
    (*t).hi[7] = fma(vec4<Scalar>(a1.w), b1, (*t).hi[7]);
}
