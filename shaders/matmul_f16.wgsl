enable f16;
// matmul_f16.wgsl: matmul.wgsl in native f16 (`Shader::MatmulF16Acc`, adapters with
// SHADER_F16): f16 operands, accumulators, staged tiles and output (the opt-in of
// `wgtensor::set_f16_accumulation`).
alias Scalar = f16;

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
