// matmul_f16_packed.wgsl: matmul.wgsl over f16 operands bound as packed pairs (array<u32>),
// element i being half i % 2 of word i / 2, accumulated in f32 (`Shader::MatmulF16`): f16
// operands are multiplied where they are, with no f32 copies, on adapters without SHADER_F16.
// `Scalar` (f32) is generated from its row of the matmul variants (src/gpu/shader_table.rs).

fn ld_a(i: u32) -> Scalar {
    return unpack2x16float(lhs[i >> 1u])[i & 1u];
}

fn ld_b(i: u32) -> Scalar {
    return unpack2x16float(rhs[i >> 1u])[i & 1u];
}

// Elements i and i + 1 for an even i: one word (gemv_rows).
fn ld_a2(i: u32) -> vec2<Scalar> {
    return unpack2x16float(lhs[i >> 1u]);
}

fn ld_b2(i: u32) -> vec2<Scalar> {
    return unpack2x16float(rhs[i >> 1u]);
}
