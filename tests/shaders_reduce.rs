//! naga validation (the front end wgpu uses) of the shaders of the reduce, softmax, compare,
//! where and join families, without a GPU.

const FAMILIES: [&str; 5] = [
    "reduce.wgsl",
    "softmax.wgsl",
    "compare.wgsl",
    "where.wgsl",
    "join.wgsl",
];

#[test]
fn reduction_family_shaders_validate() {
    let sources = wgtensor::testing::shader_sources();
    for file in FAMILIES {
        let (_, src) = sources
            .iter()
            .find(|(f, _)| *f == file)
            .unwrap_or_else(|| panic!("{file} is not embedded"));
        // The file on disk is the one embedded.
        let disk =
            std::fs::read_to_string(format!("{}/shaders/{file}", env!("CARGO_MANIFEST_DIR")))
                .unwrap();
        assert_eq!(&disk, src, "{file}: embedded source differs from disk");
        let module = naga::front::wgsl::parse_str(src)
            .unwrap_or_else(|e| panic!("{file}: {}", e.emit_to_string(src)));
        naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::empty(),
        )
        .validate(&module)
        .unwrap_or_else(|e| panic!("{file}: {}", e.emit_to_string(src)));
    }
}
