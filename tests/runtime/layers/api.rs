//! Autograd and the layers above the tensor layer (nn, optim, data, distributed, models) import
//! no file of `src/cpu/` or `src/gpu/`: they ask the tensor layer, `storage.rs` or a descriptor
//! in `src/ops/`, so a kernel change touches only its backend.

use super::{graph, read_src, synthetic, Edge};

/// Import edges from autograd and the layers above the tensor layer into a backend's files.
fn api_backend_edges(edges: &[Edge]) -> Vec<String> {
    const ABOVE: &[&str] = &[
        "autograd/",
        "nn/",
        "optim/",
        "data/",
        "distributed/",
        "models/",
    ];
    edges
        .iter()
        .filter(|e| ABOVE.iter().any(|p| e.from.starts_with(p)))
        .filter(|e| e.to.starts_with("cpu/") || e.to.starts_with("gpu/"))
        .map(|e| format!("src/{}:{} uses src/{} ({})", e.from, e.line, e.to, e.via))
        .collect()
}

#[test]
fn autograd_and_the_api_layers_call_no_backend_file() {
    let files = read_src();
    let edges = graph(&files);
    let leaks = api_backend_edges(&edges);
    assert!(
        leaks.is_empty(),
        "autograd, nn, optim, data, distributed and models reach a backend directly:\n{}\n\n\
         Ask the tensor layer (a crate-private Tensor method), storage.rs (host memory) or a \
         descriptor in src/ops/ instead: a kernel change must touch only src/cpu/ or src/gpu/.",
        leaks.join("\n")
    );
}

#[test]
fn checker_fails_on_an_injected_backend_call() {
    let mut files = synthetic(&[
        ("lib.rs", "mod cpu; mod optim; mod storage;"),
        ("cpu/mod.rs", "pub(crate) mod alloc;"),
        ("cpu/alloc.rs", "pub(crate) fn try_vec() {}"),
        (
            "storage.rs",
            "pub(crate) fn try_vec() { crate::cpu::alloc::try_vec() }",
        ),
        ("optim/mod.rs", "fn f() { crate::storage::try_vec(); }"),
    ]);
    assert!(api_backend_edges(&graph(&files)).is_empty());
    files.insert(
        "optim/mod.rs".into(),
        "fn f() {\n crate::cpu::alloc::try_vec(); }".into(),
    );
    assert_eq!(
        api_backend_edges(&graph(&files)),
        ["src/optim/mod.rs:2 uses src/cpu/alloc.rs (crate::cpu::alloc::try_vec)"]
    );
}
