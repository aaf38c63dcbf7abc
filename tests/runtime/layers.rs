//! The layering of `src/`, checked at file granularity: every `use crate::...` (grouped, renamed
//! and glob forms), every `super::`/`self::` path and every inline `crate::x::y` path in code is
//! resolved to the file that defines it, and the test fails when a file imports a file of a
//! higher layer or when the file graph has a cycle. The layers are the table [`LAYERS`], the
//! same as in `src/lib.rs`'s module doc.
//!
//! A small hand parser, no dependency: comments, string and char literals are blanked first, and
//! `#[cfg(test)]` items are skipped (a unit test may exercise its file through the layers above).
//! A path resolves to the longest prefix that is a module file; a name a module re-exports
//! (`crate::Tensor`, `crate::nn::Linear`, globs included) is followed to the file that defines it,
//! and the `pub use` line itself is no edge (a module's face is not a use of its own).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Layers of `src/`, bottom to top. A file may import files of its own layer (without a cycle)
/// and of the layers below it, never of a layer above. The same as `src/lib.rs`'s module doc.
const LAYERS: &[(&str, &[&str])] = &[
    ("base", &["dtype.rs", "shape.rs", "error.rs", "ops/"]),
    ("backends", &["cpu/", "gpu/"]),
    (
        "device",
        &["device.rs", "storage.rs", "memory.rs", "random.rs"],
    ),
    (
        "tensor",
        &[
            "tensor.rs",
            "tensor/",
            "autograd/",
            "autotune.rs",
            "profile.rs",
            // The op tables as the tests see them: calls ops on tensors.
            "ops/testing.rs",
        ],
    ),
    (
        "api",
        &["nn/", "optim/", "data/", "distributed/", "models/"],
    ),
    ("root", &["lib.rs"]),
];

fn layer_of(file: &str) -> Option<usize> {
    // A file named exactly wins over a folder prefix (`ops/testing.rs` over `ops/`).
    let exact = LAYERS.iter().position(|(_, p)| p.contains(&file));
    exact.or_else(|| {
        LAYERS.iter().position(|(_, prefixes)| {
            prefixes
                .iter()
                .any(|p| p.ends_with('/') && file.starts_with(p))
        })
    })
}

// ---------------------------------------------------------------------------------------------
#[path = "layers/parse.rs"]
mod parse;
// Autograd and the API layers reach no backend file.
#[path = "layers/api.rs"]
mod api;
// The tensor layer asks the backend interface instead of choosing a backend itself.
#[path = "layers/tensor_backend.rs"]
mod tensor_backend;
use parse::*;

/// One import edge: `from` uses `to` through `via` at `line`.
#[derive(Clone, Debug)]
struct Edge {
    from: String,
    to: String,
    via: String,
    line: usize,
}

/// The module path of a file relative to `src/` (`cpu/mod.rs` and `cpu.rs` are both `cpu`).
fn module_of(file: &str) -> Vec<String> {
    let stem = file.trim_end_matches(".rs");
    let mut parts: Vec<String> = stem.split('/').map(String::from).collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// The absolute module path of `f` (without `crate`), or `None` for a path into another crate.
fn absolute(
    f: &Found,
    modules: &BTreeMap<Vec<String>, String>,
    aliases: &BTreeMap<String, Vec<String>>,
) -> Option<Vec<String>> {
    let first = f.path.first()?.as_str();
    match first {
        "crate" => Some(f.path[1..].to_vec()),
        "self" => Some(f.module.iter().chain(&f.path[1..]).cloned().collect()),
        "super" => {
            let ups = f.path.iter().take_while(|s| *s == "super").count();
            let base = f.module.len().checked_sub(ups)?;
            Some(
                f.module[..base]
                    .iter()
                    .chain(&f.path[ups..])
                    .cloned()
                    .collect(),
            )
        }
        _ => {
            let mut child = f.module.clone();
            child.push(first.to_string());
            if modules.contains_key(&child) {
                Some(
                    child
                        .into_iter()
                        .chain(f.path[1..].iter().cloned())
                        .collect(),
                )
            } else {
                let target = aliases.get(first)?;
                Some(target.iter().chain(&f.path[1..]).cloned().collect())
            }
        }
    }
}

/// Builds the file graph of `files` (path relative to `src/` -> text).
fn graph(files: &BTreeMap<String, String>) -> Vec<Edge> {
    let modules: BTreeMap<Vec<String>, String> =
        files.keys().map(|f| (module_of(f), f.clone())).collect();
    let found: BTreeMap<&String, Vec<Found>> = files
        .iter()
        .map(|(f, text)| (f, paths_of(text, &module_of(f))))
        .collect();
    // Names each module re-exports (`pub use`), to follow `crate::Tensor` or `crate::nn::Linear`
    // to the file that defines the item: a re-export is the module's face, not a use of its own.
    let mut exports: BTreeMap<(Vec<String>, String), Vec<String>> = BTreeMap::new();
    let mut globs: BTreeMap<Vec<String>, Vec<Vec<String>>> = BTreeMap::new();
    for paths in found.values() {
        for f in paths.iter().filter(|f| f.in_use && f.public_use) {
            let Some(abs) = absolute(f, &modules, &BTreeMap::new()) else {
                continue;
            };
            match f.binds.as_deref() {
                Some("*") => globs.entry(f.module.clone()).or_default().push(abs),
                Some(name) => {
                    exports.insert((f.module.clone(), name.to_string()), abs);
                }
                None => {}
            }
        }
    }
    // Whether the file of module `m` defines an item called `name` (for glob re-exports).
    let defines = |m: &[String], name: &str| -> bool {
        let Some(text) = modules.get(m).and_then(|f| files.get(f)) else {
            return false;
        };
        [
            "fn",
            "struct",
            "enum",
            "trait",
            "type",
            "const",
            "static",
            "macro_rules!",
            "mod",
        ]
        .iter()
        .any(|kw| text.contains(&format!("{kw} {name}")) || text.contains(&format!("{kw} {name}<")))
    };
    let resolve = |abs: &[String]| -> Option<String> {
        let mut abs = abs.to_vec();
        for _ in 0..8 {
            let k = (0..=abs.len())
                .rev()
                .find(|k| modules.contains_key(&abs[..*k]))?;
            let file = modules[&abs[..k]].clone();
            if k < abs.len() {
                let module = abs[..k].to_vec();
                if let Some(target) = exports.get(&(module.clone(), abs[k].clone())) {
                    abs = target.iter().chain(&abs[k + 1..]).cloned().collect();
                    continue;
                }
                let from_glob = globs
                    .get(&module)
                    .into_iter()
                    .flatten()
                    .find(|g| defines(g, &abs[k]));
                if let Some(g) = from_glob {
                    abs = g.iter().chain(&abs[k..]).cloned().collect();
                    continue;
                }
            }
            return Some(file);
        }
        None
    };
    let mut edges = Vec::new();
    for (file, paths) in &found {
        // Names this file binds with `use`, for inline paths that start with one (`gpu::x`).
        let mut aliases: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for f in paths.iter().filter(|f| f.in_use) {
            if let (Some(name), Some(abs)) = (&f.binds, absolute(f, &modules, &aliases)) {
                if name != "*" {
                    aliases.insert(name.clone(), abs);
                }
            }
        }
        for f in paths.iter().filter(|f| !f.public_use) {
            let Some(abs) = absolute(f, &modules, &aliases) else {
                continue;
            };
            let Some(to) = resolve(&abs) else { continue };
            if &to != *file {
                edges.push(Edge {
                    from: (*file).clone(),
                    to,
                    via: f.path.join("::"),
                    line: f.line,
                });
            }
        }
    }
    edges
}

/// Every import of a file from a higher layer, as readable lines.
fn upward(edges: &[Edge]) -> Vec<String> {
    // One line per pair of files: the first path that makes the edge, and how many more do.
    let mut pairs: BTreeMap<(&str, &str), (&Edge, usize)> = BTreeMap::new();
    for e in edges {
        let (Some(a), Some(b)) = (layer_of(&e.from), layer_of(&e.to)) else {
            continue;
        };
        if b > a {
            let entry = pairs.entry((&e.from, &e.to)).or_insert((e, 0));
            if e.line < entry.0.line {
                entry.0 = e;
            }
            entry.1 += 1;
        }
    }
    pairs
        .values()
        .map(|(e, n)| {
            let (a, b) = (layer_of(&e.from).unwrap_or(0), layer_of(&e.to).unwrap_or(0));
            let more = if *n > 1 {
                format!(" (and {} more)", n - 1)
            } else {
                String::new()
            };
            format!(
                "src/{}:{} ({}) imports src/{} ({}) via {}{more}",
                e.from, e.line, LAYERS[a].0, e.to, LAYERS[b].0, e.via
            )
        })
        .collect()
}

/// Files that no layer lists.
fn unlayered(files: &BTreeMap<String, String>) -> Vec<String> {
    files
        .keys()
        .filter(|f| layer_of(f).is_none())
        .cloned()
        .collect()
}

/// One cycle per strongly connected component of the file graph (Tarjan), each printed as
/// `a -> b -> ... -> a` with the path that makes every step.
fn cycles(edges: &[Edge]) -> Vec<String> {
    let mut adj: BTreeMap<&str, BTreeMap<&str, &Edge>> = BTreeMap::new();
    for e in edges {
        adj.entry(&e.from).or_default().entry(&e.to).or_insert(e);
        adj.entry(&e.to).or_default();
    }
    let nodes: Vec<&str> = adj.keys().copied().collect();
    let index_of: BTreeMap<&str, usize> = nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    // Iterative-free recursive Tarjan: the graph has about a hundred nodes.
    struct T<'a> {
        adj: &'a BTreeMap<&'a str, BTreeMap<&'a str, &'a Edge>>,
        index_of: &'a BTreeMap<&'a str, usize>,
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        sccs: Vec<Vec<usize>>,
        nodes: &'a [&'a str],
    }
    fn strong(t: &mut T, v: usize) {
        t.index[v] = Some(t.next);
        t.low[v] = t.next;
        t.next += 1;
        t.stack.push(v);
        t.on[v] = true;
        let succ: Vec<usize> = t.adj[t.nodes[v]].keys().map(|w| t.index_of[w]).collect();
        for w in succ {
            match t.index[w] {
                None => {
                    strong(t, w);
                    t.low[v] = t.low[v].min(t.low[w]);
                }
                Some(iw) if t.on[w] => t.low[v] = t.low[v].min(iw),
                _ => {}
            }
        }
        if Some(t.low[v]) == t.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on[w] = false;
                scc.push(w);
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                t.sccs.push(scc);
            }
        }
    }
    let n = nodes.len();
    let mut t = T {
        adj: &adj,
        index_of: &index_of,
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        sccs: Vec::new(),
        nodes: &nodes,
    };
    for v in 0..n {
        if t.index[v].is_none() {
            strong(&mut t, v);
        }
    }
    let mut out = Vec::new();
    for scc in &t.sccs {
        // A shortest cycle through the component's first node (breadth-first inside it).
        let members: BTreeSet<&str> = scc.iter().map(|v| nodes[*v]).collect();
        let start = *members.iter().next().expect("non-empty component");
        let mut parent: BTreeMap<&str, &str> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        let mut end = None;
        'bfs: while let Some(v) = queue.pop_front() {
            for w in adj[v].keys().filter(|w| members.contains(*w)) {
                if *w == start {
                    end = Some(v);
                    break 'bfs;
                }
                if !parent.contains_key(w) {
                    parent.insert(w, v);
                    queue.push_back(w);
                }
            }
        }
        let mut back = Vec::new();
        let mut v = end.expect("a strongly connected component has a cycle");
        while v != start {
            back.push(v);
            v = parent[v];
        }
        back.reverse();
        let chain: Vec<&str> = [start].into_iter().chain(back).chain([start]).collect();
        let steps: Vec<String> = chain
            .windows(2)
            .map(|w| {
                let e = adj[w[0]][w[1]];
                format!(
                    "  src/{}:{} -> src/{} (via {})",
                    e.from, e.line, e.to, e.via
                )
            })
            .collect();
        out.push(format!(
            "cycle of {} files through src/{start}:\n{}",
            members.len(),
            steps.join("\n")
        ));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The one dispatch point

/// Whether `file` is part of the one dispatch point: `tensor/dispatch.rs` and the files of its
/// module folder `tensor/dispatch/`, which hold its functions by family.
fn dispatch_point(file: &str) -> bool {
    file == "tensor/dispatch.rs" || file.starts_with("tensor/dispatch/")
}

/// The backends' names that only `tensor/dispatch.rs` decides with: the GPU handle and buffer
/// types, `Device::as_gpu(` and the `Storage` variants. The layers above the tensor never name
/// them (nor `CpuStorage`): they read data through the tensor layer's accessors.
const BACKEND_NAMES: &[&str] = &[
    "as_gpu(",
    "Storage::Cpu",
    "Storage::Gpu",
    "GpuDevice",
    "GpuBuffer",
];

/// Where the tensor layer names the GPU's types outside the dispatch point, and why. Each of these
/// gets its `GpuDevice` from `backend()` (or a `GpuBuffer` from `data()`) and drives machinery
/// that exists only on a GPU; none of them decides CPU or GPU. Empty now: kept so a future
/// GPU-only helper states its reason here rather than in a comment of its own.
const TENSOR_GPU_NAMES: &[(&str, &str, &str)] = &[];

/// One allowance, for the checker's own tests: the allowed name stays allowed in its file and
/// only there, whatever the real list holds.
const EXAMPLE_GPU_NAMES: &[(&str, &str, &str)] = &[(
    "tensor/attention_fused.rs",
    "GpuDevice",
    "an example allowance",
)];

/// Every use of a backend name where the dispatch point should decide instead, as readable
/// lines; `allowed` lists the tensor layer's permitted `(file, name, why)` uses.
fn backend_leaks(files: &BTreeMap<String, String>, allowed: &[(&str, &str, &str)]) -> Vec<String> {
    const ABOVE: &[&str] = &[
        "autograd/",
        "nn/",
        "optim/",
        "data/",
        "distributed/",
        "models/",
    ];
    let mut out = Vec::new();
    for (file, text) in files {
        let tensor = file == "tensor.rs" || file.starts_with("tensor/");
        let above = ABOVE.iter().any(|p| file.starts_with(p));
        if !(tensor || above) || dispatch_point(file) {
            continue;
        }
        let toks = drop_cfg_test(lex(text));
        let ident = |i: usize| match toks.get(i) {
            Some((Tok::Ident(s), _)) => s.as_str(),
            _ => "",
        };
        for (i, (tok, line)) in toks.iter().enumerate() {
            let next = toks.get(i + 1).map(|t| &t.0);
            let name = match (tok, next) {
                (Tok::Ident(s), Some(Tok::Punct('('))) if s == "as_gpu" => "as_gpu(".to_string(),
                (Tok::Ident(s), Some(Tok::Path)) if s == "Storage" => {
                    format!("Storage::{}", ident(i + 2))
                }
                (Tok::Ident(s), _) => s.clone(),
                _ => continue,
            };
            let banned = BACKEND_NAMES.contains(&name.as_str()) || (above && name == "CpuStorage");
            if !banned {
                continue;
            }
            let permitted = allowed.iter().any(|(f, n, _)| f == file && *n == name);
            if !permitted {
                out.push(format!("src/{file}:{line} names {name}"));
            }
        }
    }
    out
}

fn read_src() -> BTreeMap<String, String> {
    fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).expect("read src/") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                walk(&path, root, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(root).expect("under src/");
                let rel = rel.to_string_lossy().replace('\\', "/");
                out.insert(
                    rel,
                    std::fs::read_to_string(&path).expect("read a source file"),
                );
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    walk(&root, &root, &mut out);
    out
}

// ---------------------------------------------------------------------------------------------
// The checks

#[test]
fn src_imports_run_one_way_without_cycles() {
    let files = read_src();
    assert!(files.len() > 50, "read src/: {} files", files.len());
    let edges = graph(&files);
    assert!(
        edges.len() > 100,
        "found the imports: {} edges",
        edges.len()
    );
    let mut problems = Vec::new();
    for f in unlayered(&files) {
        problems.push(format!(
            "src/{f} is in no layer: add it to LAYERS in tests/runtime/layers.rs"
        ));
    }
    problems.extend(upward(&edges));
    problems.extend(cycles(&edges));
    assert!(
        problems.is_empty(),
        "the layering of src/ (bottom to top: {}) is broken:\n{}\n\nMove the item down to the \
         lower layer, or let the upper layer register a hook the lower one calls.",
        LAYERS.iter().map(|l| l.0).collect::<Vec<_>>().join(" -> "),
        problems.join("\n")
    );
}

fn synthetic(files: &[(&str, &str)]) -> BTreeMap<String, String> {
    files
        .iter()
        .map(|(f, t)| (f.to_string(), t.to_string()))
        .collect()
}

fn targets(files: &BTreeMap<String, String>, from: &str) -> BTreeSet<String> {
    graph(files)
        .into_iter()
        .filter(|e| e.from == from)
        .map(|e| e.to)
        .collect()
}

#[test]
fn checker_reads_grouped_renamed_inline_and_relative_paths() {
    let files = synthetic(&[
        (
            "lib.rs",
            "mod cpu; mod dtype; mod shape; mod tensor;\npub use tensor::Tensor;\n",
        ),
        ("dtype.rs", "pub enum DType {}"),
        ("shape.rs", "pub struct Layout;"),
        ("tensor.rs", "pub struct Tensor;"),
        ("cpu/mod.rs", "mod a; mod b; pub(crate) use a::Kernel;"),
        ("cpu/a.rs", "pub struct Kernel;"),
        (
            "cpu/b.rs",
            "// use crate::tensor::Tensor;  (a comment is no import)\n\
             /* crate::tensor::Tensor */\n\
             use crate::{dtype::DType as D, shape::{self}};\n\
             use super::Kernel;\n\
             fn f() -> &'static str { let _ = 'x'; \"crate::tensor::Tensor\" }\n\
             fn g() { shape::Layout; crate::Tensor::new(); }\n\
             #[cfg(test)]\nmod tests { use crate::tensor::Nothing; }\n",
        ),
    ]);
    let got = targets(&files, "cpu/b.rs");
    let want: BTreeSet<String> = ["dtype.rs", "shape.rs", "cpu/a.rs", "tensor.rs"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(got, want, "re-exports are followed to the defining file");
    // Grouped and inline paths in the same file count once per path, each with its line.
    let lines: BTreeSet<usize> = graph(&files)
        .iter()
        .filter(|e| e.from == "cpu/b.rs")
        .map(|e| e.line)
        .collect();
    assert_eq!(lines, BTreeSet::from([3, 4, 6]));
    // A re-export is no use of the re-exporting file; a glob re-export is followed too.
    assert!(targets(&files, "cpu/mod.rs").is_empty());
    let mut files = files;
    files.insert(
        "cpu/mod.rs".into(),
        "mod a; mod b; pub(crate) use a::*;".into(),
    );
    assert!(targets(&files, "cpu/b.rs").contains("cpu/a.rs"));
}

#[test]
fn checker_fails_on_an_injected_upward_edge() {
    let mut files = synthetic(&[
        ("lib.rs", "mod cpu; mod tensor;"),
        ("cpu/mod.rs", "pub(crate) fn add() {}"),
        ("tensor.rs", "use crate::cpu::add;\npub struct Tensor;"),
    ]);
    assert!(upward(&graph(&files)).is_empty());
    assert!(cycles(&graph(&files)).is_empty());
    files.insert(
        "cpu/mod.rs".into(),
        "pub(crate) fn add() { let _ = crate::tensor::Tensor; }".into(),
    );
    let up = upward(&graph(&files));
    assert_eq!(
        up,
        ["src/cpu/mod.rs:1 (backends) imports src/tensor.rs (tensor) via crate::tensor::Tensor"]
    );
}

#[test]
fn checker_fails_on_an_injected_cycle() {
    let mut files = synthetic(&[
        ("lib.rs", "mod gpu;"),
        ("gpu/mod.rs", "mod a; mod b; mod c;"),
        ("gpu/a.rs", "use super::b::B;\npub struct A;"),
        ("gpu/b.rs", "use super::c::C;\npub struct B;"),
        ("gpu/c.rs", "pub struct C;"),
    ]);
    assert!(cycles(&graph(&files)).is_empty());
    files.insert("gpu/c.rs".into(), "pub struct C(crate::gpu::a::A);".into());
    let found = cycles(&graph(&files));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        found[0],
        "cycle of 3 files through src/gpu/a.rs:\n  \
         src/gpu/a.rs:1 -> src/gpu/b.rs (via super::b::B)\n  \
         src/gpu/b.rs:1 -> src/gpu/c.rs (via super::c::C)\n  \
         src/gpu/c.rs:1 -> src/gpu/a.rs (via crate::gpu::a::A)"
    );
    // Every file of src/ is in a layer, so an upward edge cannot hide in an unlisted file.
    assert!(layer_of("gpu/a.rs").is_some() && layer_of("nowhere.rs").is_none());
}

#[test]
fn only_the_dispatch_point_decides_cpu_or_gpu() {
    let files = read_src();
    assert!(
        files.contains_key("tensor/dispatch.rs"),
        "the dispatch point moved"
    );
    let leaks = backend_leaks(&files, TENSOR_GPU_NAMES);
    assert!(
        leaks.is_empty(),
        "these sites decide CPU or GPU themselves (or reach a backend's types from above the \
         tensor layer):\n{}\n\nMatch on `backend(device)` or `data()` from \
         src/tensor/dispatch.rs, or give the tensor layer a crate-private accessor; a GPU-only \
         helper of the tensor layer that must name the type goes in TENSOR_GPU_NAMES with its \
         reason.",
        leaks.join("\n")
    );
    // Every allowance is still needed, so the list cannot outgrow the code.
    for (file, name, why) in TENSOR_GPU_NAMES {
        let text = files.get(*file).map(String::as_str).unwrap_or("");
        let toks = drop_cfg_test(lex(text));
        assert!(
            match name.split_once("::") {
                Some((a, b)) => toks.windows(3).any(|w| {
                    w[0].0 == Tok::Ident(a.into())
                        && w[1].0 == Tok::Path
                        && w[2].0 == Tok::Ident(b.into())
                }),
                None => toks.iter().any(|(t, _)| *t == Tok::Ident(name.to_string())),
            },
            "src/{file} no longer names {name} ({why}): drop it from TENSOR_GPU_NAMES"
        );
    }
}

#[test]
fn checker_fails_on_an_injected_backend_name() {
    let clean = synthetic(&[
        (
            "tensor/dispatch.rs",
            "fn f(d: &Device) { d.as_gpu(); Storage::Cpu; }",
        ),
        ("tensor/attention_fused.rs", "fn f(g: &GpuDevice) {}"),
        (
            "optim/mod.rs",
            "// d.as_gpu() in a comment\nfn f() { let s = \"GpuBuffer\"; }",
        ),
        ("gpu/mod.rs", "pub struct GpuDevice; pub struct GpuBuffer;"),
    ]);
    assert!(
        backend_leaks(&clean, EXAMPLE_GPU_NAMES).is_empty(),
        "{:?}",
        backend_leaks(&clean, EXAMPLE_GPU_NAMES)
    );
    let injected = [
        (
            "tensor/pad.rs",
            "fn f(t: &Tensor) {\n if let Some(g) = t.device().as_gpu() {} }",
            "src/tensor/pad.rs:2 names as_gpu(",
        ),
        (
            "tensor/view.rs",
            "fn f(s: &Storage) { match s { Storage::Gpu(b) => {} } }",
            "src/tensor/view.rs:1 names Storage::Gpu",
        ),
        (
            "tensor/matmul.rs",
            "fn f(b: &GpuBuffer) {}",
            "src/tensor/matmul.rs:1 names GpuBuffer",
        ),
        (
            "tensor/attention_fused.rs",
            "use crate::gpu::{GpuBuffer, GpuDevice};",
            "src/tensor/attention_fused.rs:1 names GpuBuffer",
        ),
        (
            "optim/mod.rs",
            "fn f(g: &crate::gpu::GpuDevice) {}",
            "src/optim/mod.rs:1 names GpuDevice",
        ),
        (
            "nn/io.rs",
            "use crate::storage::CpuStorage;",
            "src/nn/io.rs:1 names CpuStorage",
        ),
        (
            "distributed/buffers.rs",
            "fn f() { Storage::Cpu(v); }",
            "src/distributed/buffers.rs:1 names Storage::Cpu",
        ),
    ];
    for (file, text, want) in injected {
        let mut files = clean.clone();
        files.insert(file.to_string(), text.to_string());
        assert_eq!(
            backend_leaks(&files, EXAMPLE_GPU_NAMES),
            [want],
            "injected into {file}"
        );
    }
}
