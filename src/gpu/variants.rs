//! Kernel variants derived from a shader file by text at first use: one entry point copied
//! into several workgroup shapes (the autotuned variants) and the f16 builds of matmul.wgsl.
//! The file on disk stays the single source; `tests/shaders.rs` validates every variant with
//! naga as the library composes it.

/// `source` with its entry point `entry` (the `@compute @workgroup_size(..)` line, the `fn`
/// line and the body up to its closing `}` at column 0) copied once per `(name, size)`: one
/// body in the several workgroup shapes the autotuner times, written once in the file.
fn with_shapes(source: &str, entry: &str, shapes: &[(&str, &str)]) -> String {
    let head = format!("fn {entry}(");
    let at = source
        .find(&head)
        .and_then(|f| source[..f].rfind("@compute"))
        .expect("the shader file has the entry point it is copied from");
    let len = source[at..]
        .find("\n}\n")
        .expect("the entry point ends with `}` at column 0")
        + 3;
    let block = &source[at..at + len];
    let size = block.lines().next().unwrap_or_default();
    let mut out = source.to_string();
    for (name, shape) in shapes {
        out.push('\n');
        out.push_str(
            &block
                .replacen(size, &format!("@compute @workgroup_size({shape})"), 1)
                .replacen(&head, &format!("fn {name}("), 1),
        );
    }
    out
}

/// matmul.wgsl with the GEMV entries: `naive` in the shapes of one row (gemv_m1) and one
/// column (gemv_n1).
pub(crate) fn matmul() -> &'static str {
    static SOURCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SOURCE.get_or_init(|| {
        with_shapes(
            include_str!("../../shaders/matmul.wgsl"),
            "naive",
            &[("gemv_m1", "256, 1"), ("gemv_n1", "1, 256")],
        )
    })
}

/// matmul_vec4.wgsl with the 8x8-per-invocation entry in its other autotuned shapes.
pub(crate) fn matmul_vec4() -> &'static str {
    static SOURCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SOURCE.get_or_init(|| {
        with_shapes(
            include_str!("../../shaders/matmul_vec4.wgsl"),
            "register_tile",
            &[
                ("register_tile_16x4", "16, 4"),
                ("register_tile_4x16", "4, 16"),
                ("register_tile_16x16", "16, 16"),
            ],
        )
    })
}

/// matmul.wgsl (with its GEMV entries) reading both operands as packed f16 pairs (its
/// `SHADERS` entry binds them as `array<u32>`): the two element readers are replaced (the file
/// marks them); everything else is the same source.
pub(crate) fn matmul_f16() -> &'static str {
    static SOURCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SOURCE.get_or_init(|| {
        matmul()
            .replace(
                "return lhs[i];",
                "return unpack2x16float(lhs[i >> 1u])[i & 1u];",
            )
            .replace(
                "return rhs[i];",
                "return unpack2x16float(rhs[i >> 1u])[i & 1u];",
            )
    })
}

/// matmul.wgsl with f16 everywhere it holds values: operands bound as `array<f16>` (read in
/// place, any strides; its `SHADERS` entry declares them), accumulators, staged tiles and the
/// output. The register tile and its rank-1 update come from common.wgsl's f32 ones, renamed.
/// Validated with naga like every shader (tests/shaders.rs) and run against the CPU where an
/// adapter has `SHADER_F16`.
pub(crate) fn matmul_f16_acc() -> &'static str {
    static SOURCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SOURCE.get_or_init(|| {
        let common = include_str!("../../shaders/common.wgsl");
        let start = common
            .find("struct Tile {")
            .expect("common.wgsl has the register tile");
        let end = common[start..]
            .find("// ----")
            .map_or(common.len(), |e| start + e);
        let tile = common[start..end]
            .replace("Tile", "Tile16")
            .replace("rank1", "rank1_16")
            .replace("f32", "f16");
        let body = matmul()
            .replace("vec4<f32>", "vec4<f16>")
            .replace("-> f32 {", "-> f16 {")
            .replace("v: f32)", "v: f16)")
            .replace("= 0.0;", "= f16(0.0);")
            .replace("var t: Tile;", "var t: Tile16;")
            .replace("rank1(&t,", "rank1_16(&t,");
        format!("enable f16;\n{body}\n{tile}")
    })
}
