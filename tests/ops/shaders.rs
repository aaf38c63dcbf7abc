//! Every WGSL shader is valid for naga 30 (the front end wgpu 30 uses), checked without a GPU:
//! both the sources embedded in the library and the files in `shaders/` on disk, and the two
//! lists name the same files with the same contents.

use naga::valid::{Capabilities, ValidationFlags, Validator};
use std::collections::BTreeMap;
use std::path::Path;

/// Parses and validates one WGSL source; panics with the file name and naga's full report.
fn validate(name: &str, source: &str) {
    let module = naga::front::wgsl::parse_str(source)
        .unwrap_or_else(|e| panic!("{name}: WGSL parse error:\n{}", e.emit_to_string(source)));
    Validator::new(ValidationFlags::all(), Capabilities::all())
        .validate(&module)
        .unwrap_or_else(|e| {
            panic!(
                "{name}: naga validation error:\n{}",
                e.emit_to_string(source)
            )
        });
    if name == "common.wgsl" {
        return;
    }
    // Every shader is a compute shader with at least one entry point.
    assert!(!module.entry_points.is_empty(), "{name}: no entry points");
    for ep in &module.entry_points {
        assert_eq!(
            ep.stage,
            naga::ShaderStage::Compute,
            "{name}: entry point {} is not a compute shader",
            ep.name
        );
        if name.starts_with("matmul")
            || name.starts_with("attention_decode")
            || name.starts_with("conv2d")
            || name.starts_with("attention_forward")
            || name.starts_with("attention_backward")
            || (name == "quant.wgsl" && ep.name.starts_with("matvec"))
        {
            // Matmul tiles its own 2-D workgroups, the quantized matvec takes one workgroup per
            // weight row (or 64 rows, one per invocation), decode attention 64 invocations per head, conv2d 16 x 8 per tile and fused attention 64
            // per tile of rows (all dispatched with
            // `launch_workgroups`); they must stay within WebGPU's default 256 invocations per
            // workgroup.
            let total: u32 = ep.workgroup_size.iter().product();
            assert!(
                total <= 256,
                "{name}: entry point {} has {total} invocations",
                ep.name
            );
        } else {
            assert_eq!(
                ep.workgroup_size,
                [256, 1, 1],
                "{name}: entry point {} must use @workgroup_size(256) (the launch code assumes it)",
                ep.name
            );
        }
    }
}

fn on_disk() -> BTreeMap<String, String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.extension().is_some_and(|e| e == "wgsl") {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            out.insert(name, text);
        }
    }
    out
}

/// Every shader as wgpu receives it: hand-written files and generated kernels, each with
/// `common.wgsl` prepended.
fn embedded() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (name, source) in wgtensor::testing::shader_sources() {
        let previous = out.insert(name.clone(), source);
        assert!(previous.is_none(), "shader {name} is listed twice");
    }
    out
}

/// The hand-written files as the library embeds them (without `common.wgsl`).
fn embedded_files() -> BTreeMap<String, String> {
    wgtensor::testing::shader_files()
        .into_iter()
        .map(|(n, s)| (n.to_string(), s.to_string()))
        .collect()
}

#[test]
fn embedded_shaders_validate() {
    let shaders = embedded();
    assert!(!shaders.is_empty(), "the library embeds no shaders");
    for (name, source) in &shaders {
        validate(name, source);
    }
}

#[test]
fn shader_files_on_disk_validate() {
    // Each file is valid once common.wgsl, its generated declarations (and ids.wgsl, for shaders
    // that report bad ids) are prepended, as the library does at embed time.
    let shaders = on_disk();
    assert!(!shaders.is_empty(), "shaders/ holds no .wgsl files");
    // The constants, element type and storage declarations of each file come from
    // src/gpu/contract.rs and its table entry (the files hold none).
    let declarations: BTreeMap<&str, String> = wgtensor::testing::shader_declarations()
        .into_iter()
        .collect();
    let common = &shaders["common.wgsl"];
    let ids = &shaders["ids.wgsl"];
    for (name, source) in &shaders {
        // Snippets are validated as part of every shader that includes them (the embedded
        // list covers both row merges and both reduce shaders).
        let snippets = [
            "common.wgsl",
            "ids.wgsl",
            "normal.wgsl",
            "row_tree.wgsl",
            "row_subgroup.wgsl",
            "reduce_subgroup.wgsl",
            "subgroup.wgsl",
            "row_fold.wgsl",
            "attention.wgsl",
            // The reduction table's part is appended by the library (src/ops/reduce.rs); the
            // embedded list holds the composed shader.
            "reduce.wgsl",
            // Likewise the row-op table's part (the `OP_*` codes, `centered()`, src/ops/rows.rs)
            "layer_norm.wgsl",
            "softmax.wgsl",
            // and the block-type table's (`QTYPE_*`, `BLOCK_LEN_*`, ..., src/gpu/shader_table.rs).
            "quant.wgsl",
            // The register tile and matmul's operand readers, composed below.
            "tile.wgsl",
            "matmul_read.wgsl",
            "matmul_f16_packed.wgsl",
        ];
        if snippets.contains(&name.as_str()) {
            continue;
        }
        let mut full = declarations[name.as_str()].clone();
        if source.contains("row_merge(") {
            full.push_str(&shaders["row_tree.wgsl"]);
        }
        if source.contains("fold_row(") {
            full.push_str(&shaders["row_fold.wgsl"]);
        }
        if source.contains("report_bad_id(") {
            full.push_str(ids);
        }
        let mut source = source.clone();
        if source.contains("finish_score(") {
            source.push_str(&shaders["attention.wgsl"]);
        }
        // Tile users get the register tile; matmul.wgsl its readers of `Scalar` arrays (the
        // embedded list validates all three element types).
        if source.contains("var t: Tile;") {
            source.push_str(&shaders["tile.wgsl"]);
        }
        if name == "matmul.wgsl" {
            source.push_str(&shaders["matmul_read.wgsl"]);
        }
        validate(name, &format!("{common}\n{full}\n{source}"));
    }
}

#[test]
fn contract_numbers_are_not_written_in_the_files() {
    // The workgroup size, the op-code override and the contract's constants are generated
    // (src/gpu/contract.rs); a file that declared or spelled them itself would state them twice.
    let generated: Vec<String> = wgtensor::testing::shader_declarations()
        .into_iter()
        .flat_map(|(_, d)| {
            d.lines()
                .filter_map(|l| l.strip_prefix("const "))
                .map(|l| l.split(':').next().unwrap_or("").to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(generated.iter().any(|n| n == "WG_SIZE"), "{generated:?}");
    for (name, text) in on_disk() {
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            let at = format!("{name}:{}", n + 1);
            assert!(!code.contains("override "), "{at}: declares an override");
            assert!(!code.contains("alias Scalar"), "{at}: declares `Scalar`");
            assert!(
                !code.contains("@workgroup_size(256)"),
                "{at}: spells WG_SIZE"
            );
            if let Some(decl) = code.trim_start().strip_prefix("const ") {
                let c = decl.split(':').next().unwrap_or("").trim();
                assert!(!generated.iter().any(|g| g == c), "{at}: declares {c}");
            }
        }
    }
}

#[test]
fn bindings_are_declared_once_from_the_table() {
    // No file declares a `@group(0)` binding itself (ids.wgsl's error word is `@group(1)`):
    // the layout is stated once, in each file's SHADERS entry.
    for (name, text) in on_disk() {
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            assert!(
                !code.contains("@group(0)"),
                "{name}:{}: declares a binding; state it in its SHADERS entry instead",
                n + 1
            );
        }
    }
    // Each entry's declarations follow the convention: `inputs` read-only arrays, the
    // read-write output, then params, numbered in order; the composed source holds them once.
    let lib = embedded();
    let listed = wgtensor::testing::shader_bindings();
    assert!(listed.len() >= 10, "{} files with bindings", listed.len());
    for (name, decls, inputs) in listed {
        let lines: Vec<&str> = decls.lines().collect();
        assert_eq!(lines.len(), inputs + 2, "{name}: {decls}");
        for (b, line) in lines.iter().enumerate() {
            let access = if b == inputs { "read_write" } else { "read" };
            assert!(
                line.starts_with(&format!("@group(0) @binding({b}) var<storage, {access}> ")),
                "{name}: binding {b} is `{line}`"
            );
        }
        assert!(
            lines[inputs + 1].ends_with(" params: array<u32>;"),
            "{name}"
        );
        assert_eq!(lib[name].matches(decls.as_str()).count(), 1, "{name}");
    }
}

#[test]
fn every_table_op_has_a_generated_kernel_per_dtype() {
    // The generated catalogue covers the table: a float op in f32 and f16, an integer op in
    // i32 and u32 too, conversions between all five dtypes.
    let lib = embedded();
    for name in [
        "unary.exp.F32",
        "unary.exp.F16",
        "unary.neg.I32",
        "binary.rem.U32",
        "cast.F16.U8",
    ] {
        for packing in ["packed", "strided"] {
            let key = format!("{name}/{packing}");
            assert!(lib.contains_key(&key), "no generated kernel {key}");
        }
    }
    assert!(
        !lib.contains_key("unary.exp.I32/packed"),
        "a float-only op got an integer kernel"
    );
}

#[test]
fn embedded_and_on_disk_lists_agree() {
    let (disk, lib) = (on_disk(), embedded_files());
    let disk_names: Vec<&String> = disk.keys().collect();
    let lib_names: Vec<&String> = lib.keys().collect();
    assert_eq!(
        lib_names, disk_names,
        "shaders embedded by the library (left) differ from shaders/*.wgsl on disk (right): \
         a file is not embedded, or an embedded shader has no file"
    );
    for (name, text) in &disk {
        assert_eq!(
            &lib[name], text,
            "{name}: the embedded source differs from the file on disk (stale build?)"
        );
    }
}

#[test]
fn validator_rejects_a_broken_shader() {
    // Guards the test itself: an invalid shader must fail, so the checks above are not vacuous.
    let bad = "@compute @workgroup_size(256) fn main() { let x: f32 = 1u; }";
    let parsed = naga::front::wgsl::parse_str(bad);
    let rejected = match parsed {
        Err(_) => true,
        Ok(m) => Validator::new(ValidationFlags::all(), Capabilities::all())
            .validate(&m)
            .is_err(),
    };
    assert!(rejected, "naga accepted a shader with a type error");
}

#[test]
fn only_the_native_f16_variants_need_shader_f16() {
    // Adapters without SHADER_F16 get every kernel but the native-f16 variants and the
    // f16-accumulation matmul (FAULTS row 12):
    // those must validate without the f16 capability, and the native ones must really need it.
    let without_f16 = Capabilities::all() - Capabilities::SHADER_FLOAT16;
    let lib = embedded();
    assert!(
        lib.keys().any(|k| k.ends_with("/native_f16")),
        "no native-f16 variant"
    );
    for (name, source) in &lib {
        let module = naga::front::wgsl::parse_str(source).expect("parsed above");
        let ok = Validator::new(ValidationFlags::all(), without_f16)
            .validate(&module)
            .is_ok();
        // The f16-accumulation matmul is only built for SHADER_F16 adapters too.
        let native = name.ends_with("/native_f16") || name.contains("(f16 accumulation)");
        assert_eq!(ok, !native, "{name} without SHADER_F16");
    }
}

#[test]
fn gpu_modules_import_each_other_one_way() {
    // The layering of src/gpu/mod.rs: `use super::x` between gpu files must form no cycle, and
    // src/device.rs uses gpu::registry but not the other way round.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/gpu");
    let mut edges: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        let mut deps: Vec<String> = text
            .split("super::")
            .skip(1)
            .map(|rest| {
                rest.split(|c: char| !c.is_alphanumeric() && c != '_')
                    .next()
                    .unwrap_or("")
                    .to_string()
            })
            .filter(|d| !d.is_empty() && *d != name && dir.join(format!("{d}.rs")).exists())
            .collect();
        deps.sort();
        deps.dedup();
        edges.insert(name, deps);
    }
    assert!(edges.len() > 5, "read the gpu modules: {edges:?}");
    // Depth-first search for a cycle.
    fn visit(
        n: &str,
        e: &BTreeMap<String, Vec<String>>,
        stack: &mut Vec<String>,
        done: &mut Vec<String>,
    ) {
        if done.iter().any(|d| d == n) {
            return;
        }
        if let Some(i) = stack.iter().position(|s| s == n) {
            panic!("import cycle among src/gpu files: {:?} -> {n}", &stack[i..]);
        }
        stack.push(n.to_string());
        for d in e.get(n).into_iter().flatten() {
            visit(d, e, stack, done);
        }
        stack.pop();
        done.push(n.to_string());
    }
    let mut done = Vec::new();
    for n in edges.keys() {
        visit(n, &edges, &mut Vec::new(), &mut done);
    }
    let registry = std::fs::read_to_string(dir.join("registry.rs")).unwrap();
    assert!(
        !registry.contains("crate::device::"),
        "gpu/registry.rs must not use crate::device"
    );
}

#[test]
fn no_shader_text_is_built_by_replacement() {
    // Variants come from named declarations (`alias Scalar`, entry points written in the
    // files, constants generated from the Rust tables), never from editing WGSL text: a
    // `.replace(` in the GPU layer or the op tables would make a shader no file states.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for dir in ["gpu", "ops"] {
        for entry in std::fs::read_dir(root.join(dir)).expect("src dir") {
            let path = entry.expect("directory entry").path();
            let text = std::fs::read_to_string(&path).expect("source file");
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                assert!(
                    !code.contains(".replace(") && !code.contains(".replacen("),
                    "{}:{}: WGSL built by string replacement",
                    path.display(),
                    n + 1
                );
            }
        }
    }
}
