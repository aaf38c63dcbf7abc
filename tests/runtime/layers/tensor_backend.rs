//! The tensor layer asks the backend interface (`src/ops/backend.rs`, dispatched by
//! `src/tensor/dispatch.rs` and its family files in `src/tensor/dispatch/`) instead of choosing a backend itself: no file of the tensor layer
//! or above, outside the dispatch point, imports a file of `src/cpu/` or `src/gpu/` or matches
//! on where data lives (`Data::`, `DataN::`, `DataList::`, `DataMut::`, `Backend::`; in the
//! tensor layer also `.is_cpu()`, `.is_gpu()` and the raw data accessors `.host_data()`,
//! `.gpu_data()`, `.host_f32()`). The op families not yet moved behind the interface are
//! listed in [`NOT_YET_MOVED`], which only shrinks: a moved family stays moved, and a file
//! that no longer chooses must leave the list.

use super::parse::{drop_cfg_test, lex, Tok};
use super::{graph, read_src, synthetic, Edge};
use std::collections::{BTreeMap, BTreeSet};

/// Files that still choose a backend themselves (issue #37, item 1): each family left this
/// list when its ops moved behind the dispatch point, and the last one has. Never add a file
/// here: a new op family asks the backend interface from the start.
const NOT_YET_MOVED: &[&str] = &[];

/// The enums of the dispatch point whose variants say where data lives.
const PLACE_ENUMS: &[&str] = &["Data", "DataN", "DataList", "DataMut", "Backend"];

/// The methods that ask the tensor layer where its data lives (or read one backend's data),
/// checked in the tensor layer only: the layers above may ask `is_cpu()` of the public API.
const PLACE_METHODS: &[&str] = &["is_cpu", "is_gpu", "host_data", "gpu_data", "host_f32"];

/// Whether `file` is in the tensor layer or above it (the layers that must not choose).
fn checked(file: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "tensor/",
        "autograd/",
        "nn/",
        "optim/",
        "data/",
        "distributed/",
        "models/",
    ];
    (file == "tensor.rs" || PREFIXES.iter().any(|p| file.starts_with(p)))
        && !super::dispatch_point(file)
}

/// Every file that chooses a backend itself, with its first reason (`line: what`).
fn backend_choices(files: &BTreeMap<String, String>, edges: &[Edge]) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, (usize, String)> = BTreeMap::new();
    let mut note = |file: &str, line: usize, what: String| {
        let e = out.entry(file.to_string()).or_insert((line, what.clone()));
        if line < e.0 {
            *e = (line, what);
        }
    };
    for e in edges.iter().filter(|e| checked(&e.from)) {
        if e.to.starts_with("cpu/") || e.to.starts_with("gpu/") {
            note(&e.from, e.line, format!("uses src/{} ({})", e.to, e.via));
        }
    }
    for (file, text) in files.iter().filter(|(f, _)| checked(f)) {
        let toks = drop_cfg_test(lex(text));
        let tensor = file == "tensor.rs" || file.starts_with("tensor/");
        for w in toks.windows(3) {
            match (&w[0].0, &w[1].0, &w[2].0) {
                (Tok::Ident(a), Tok::Path, Tok::Ident(b)) if PLACE_ENUMS.contains(&a.as_str()) => {
                    note(file, w[0].1, format!("matches {a}::{b}"));
                }
                (Tok::Punct('.'), Tok::Ident(m), Tok::Punct('('))
                    if tensor && PLACE_METHODS.contains(&m.as_str()) =>
                {
                    note(file, w[1].1, format!("asks .{m}()"));
                }
                _ => {}
            }
        }
    }
    out.into_iter()
        .map(|(f, (line, what))| (f.clone(), format!("src/{f}:{line} {what}")))
        .collect()
}

/// The files that choose a backend but are not allowed to, and the allowed files that no longer
/// choose (to drop from the list), as readable lines.
fn ratchet(files: &BTreeMap<String, String>, allowed: &[&str]) -> (Vec<String>, Vec<String>) {
    let choices = backend_choices(files, &graph(files));
    let allowed: BTreeSet<&str> = allowed.iter().copied().collect();
    let new = choices
        .iter()
        .filter(|(f, _)| !allowed.contains(f.as_str()))
        .map(|(_, why)| why.clone())
        .collect();
    let done = allowed
        .iter()
        .filter(|f| !choices.contains_key(**f))
        .map(|f| f.to_string())
        .collect();
    (new, done)
}

#[test]
fn moved_families_ask_the_backend_interface() {
    let files = read_src();
    assert!(files.contains_key("ops/backend.rs"), "the interface moved");
    let (new, done) = ratchet(&files, NOT_YET_MOVED);
    assert!(
        new.is_empty(),
        "these files choose a backend themselves:\n{}\n\nAdd the op to \
         `BackendStorage` (src/ops/backend.rs), implement it in src/cpu/backend.rs and \
         src/gpu/backend.rs, and call it through src/tensor/dispatch.rs.",
        new.join("\n")
    );
    assert!(
        done.is_empty(),
        "these files no longer choose a backend: drop them from NOT_YET_MOVED in \
         tests/runtime/layers/tensor_backend.rs: {done:?}"
    );
}

#[test]
fn checker_fails_on_an_injected_backend_choice() {
    let clean = synthetic(&[
        ("lib.rs", "mod cpu; mod ops; mod tensor;"),
        ("cpu/mod.rs", "pub(crate) mod matmul;"),
        ("cpu/matmul.rs", "pub(crate) fn matmul() {}"),
        ("ops/mod.rs", "pub(crate) mod backend;"),
        ("ops/backend.rs", "pub(crate) trait BackendStorage {}"),
        ("tensor.rs", "mod dispatch; mod matmul;"),
        (
            "tensor/dispatch.rs",
            "fn f(d: Data) { match d { Data::Cpu(s) => crate::cpu::matmul::matmul(), _ => {} } }",
        ),
        (
            "tensor/matmul.rs",
            "// Data::Cpu in a comment\nfn f() { super::dispatch::f(); let _ = \"Data::Gpu\"; }",
        ),
    ]);
    assert_eq!(ratchet(&clean, &[]), (vec![], vec![]));
    // An allowance that is no longer needed is reported, so the list only shrinks.
    assert_eq!(
        ratchet(&clean, &["tensor/matmul.rs"]).1,
        ["tensor/matmul.rs"]
    );
    let injected = [
        (
            "fn f() {\n crate::cpu::matmul::matmul(); }",
            "src/tensor/matmul.rs:2 uses src/cpu/matmul.rs (crate::cpu::matmul::matmul)",
        ),
        (
            "fn f(t: &Tensor) {\n\n match t.data() { Data::Gpu(b) => {} _ => {} } }",
            "src/tensor/matmul.rs:3 matches Data::Gpu",
        ),
        (
            "fn f(d: &Device) { if let Backend::Cpu = backend(d) {} }",
            "src/tensor/matmul.rs:1 matches Backend::Cpu",
        ),
        (
            "fn f(t: &Tensor) -> bool {\n t.is_cpu() }",
            "src/tensor/matmul.rs:2 asks .is_cpu()",
        ),
    ];
    for (text, want) in injected {
        let mut files = clean.clone();
        files.insert("tensor/matmul.rs".into(), text.into());
        assert_eq!(ratchet(&files, &[]).0, [want], "{text}");
        // An allowed file may still choose.
        assert!(ratchet(&files, &["tensor/matmul.rs"]).0.is_empty());
    }
}
