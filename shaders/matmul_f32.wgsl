// matmul_f32.wgsl: matmul.wgsl's element type and readers for f32 operands (`Shader::Matmul`).
alias Scalar = f32;

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
