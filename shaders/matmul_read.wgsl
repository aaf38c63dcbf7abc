// matmul_read.wgsl: matmul.wgsl's operand readers for operands bound as arrays of its element
// type `Scalar` (generated per variant from the matmul rows of src/gpu/shader_table.rs: f32 for
// `Shader::Matmul`, f16 for `Shader::MatmulF16Acc` on adapters with SHADER_F16, the opt-in of
// `wgtensor::set_f16_accumulation`).

fn ld_a(i: u32) -> Scalar {
    return lhs[i];
}

fn ld_b(i: u32) -> Scalar {
    return rhs[i];
}

// Elements i and i + 1 (gemv_rows).
fn ld_a2(i: u32) -> vec2<Scalar> {
    return vec2<Scalar>(lhs[i], lhs[i + 1u]);
}

fn ld_b2(i: u32) -> vec2<Scalar> {
    return vec2<Scalar>(rhs[i], rhs[i + 1u]);
}
