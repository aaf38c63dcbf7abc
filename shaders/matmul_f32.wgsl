// matmul_f32.wgsl: matmul.wgsl's element type and readers for f32 operands (`Shader::Matmul`).
alias Scalar = f32;

fn ld_a(i: u32) -> Scalar {
    return lhs[i];
}

fn ld_b(i: u32) -> Scalar {
    return rhs[i];
}
