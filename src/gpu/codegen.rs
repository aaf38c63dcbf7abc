//! Generated elementwise kernels: every elementwise op of every dtype (unary, binary, scalar,
//! comparisons, `where`, `clamp`, `to_dtype`, strided copies) is an [`Expr`] program over input
//! views, and this module writes the WGSL for it. A single op is a program of one node; a fused
//! chain is a program of many, evaluated in registers, one pass over memory.
//!
//! The WGSL of each op comes from the op table (`src/ops/mod.rs`); the helpers (`is_nan`, f16
//! packing, `pow_c`, integer guards) from `shaders/common.wgsl`, prepended to every kernel.
//!
//! Kernel shape (for `k` inputs):
//! - `@binding(0..k)` inputs as `array<u32>` words (f16 two per word, u8 four per word);
//!   `@binding(k)` the output words; `@binding(k + 1)` `params: array<u32>`:
//!   `[n, ndim, offset[k], scalar[s], shape[ndim], strides_0[ndim], .., strides_{k-1}[ndim]]`.
//! - One invocation per output WORD (1, 2 or 4 elements), so packed outputs never race;
//!   256-invocation workgroups on a 2-D grid (`flat_index`); stores guarded by `n`.
//! - Inputs known (at generation) to be packed read `offset + e`; strided ones unravel `e` over
//!   `shape` once for all of them (at most `ndim` iterations, far from lavapipe's loop cap).
//! - Values live in their compute type: f32 for F32 and F16 (every F16 result is rounded to f16,
//!   so a fused chain gives the bits of the op-by-op path), i32 for I32, u32 for U32 and U8.

use super::bindings::declare;
use crate::ops::program::Dist;
pub(crate) use crate::ops::program::{Expr, NodeId, Program};
use crate::ops::{BinaryOp, CmpOp, UnaryOp};
use crate::DType;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Mutex, OnceLock};

/// A generated kernel: its WGSL and the number of input bindings. Interned for the life of the
/// process (one per distinct program and input packing), so pipelines can key on its address.
#[derive(Debug)]
pub(crate) struct Generated {
    pub label: String,
    pub source: String,
    pub inputs: usize,
    /// More than one op in one kernel (counted as `KernelStats::fused_kernels`).
    pub fused: bool,
}

/// What distinguishes two kernels: the program and which inputs are packed (bit k: input k is
/// read as `offset + e`).
#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    program: Program,
    packed: u64,
    native_f16: bool,
    wide: bool,
}

/// The kernel for `program` with the given packed-input mask, generated on first use. With
/// `native_f16` (the device has `SHADER_F16`), f16 inputs are bound as `array<f16>` and read with
/// the hardware conversion (exact), instead of being unpacked from words; results are identical.
///
/// `wide`: every input is packed 32-bit data starting at a multiple of 4 elements, and the
/// output is 32-bit. Each invocation then loads and stores whole `vec4<u32>`s (four elements):
/// 16-byte accesses a GPU coalesces, a quarter of the invocations, no per-element params read.
pub(crate) fn kernel(
    program: &Program,
    packed: u64,
    native_f16: bool,
    wide: bool,
    label: &str,
) -> &'static Generated {
    static KERNELS: OnceLock<Mutex<HashMap<Key, &'static Generated>>> = OnceLock::new();
    let map = KERNELS.get_or_init(Default::default);
    let native_f16 = native_f16 && program.inputs.contains(&DType::F16);
    let key = Key {
        program: program.clone(),
        packed,
        native_f16,
        wide,
    };
    let mut m = map.lock().unwrap_or_else(|p| p.into_inner());
    m.entry(key).or_insert_with(|| {
        let source = if wide {
            generate_wide(program)
        } else {
            generate(program, packed, native_f16)
        };
        // Leaked on purpose: kernels are few (one per op chain and dtype) and live as long as
        // the pipelines compiled from them.
        let ops = program
            .nodes
            .iter()
            .filter(|(e, _)| !matches!(e, Expr::Input(_) | Expr::Scalar(_) | Expr::Index))
            .count();
        Box::leak(Box::new(Generated {
            label: label.to_string(),
            source,
            inputs: program.inputs.len(),
            fused: ops > 1,
        }))
    })
}

/// The WGSL compute type of a dtype.
fn ty(d: DType) -> &'static str {
    match d {
        DType::F32 | DType::F16 => "f32",
        DType::I32 => "i32",
        DType::U32 | DType::U8 => "u32",
    }
}

fn is_float(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16)
}

/// Elements per 32-bit word.
pub(crate) fn per_word(d: DType) -> usize {
    4 / d.size_in_bytes()
}

/// Writes the WGSL of `program` (without `common.wgsl`, which `kernels.rs` prepends).
fn generate(p: &Program, packed: u64, native_f16: bool) -> String {
    let k = p.inputs.len();
    let head = 2 + k + p.scalars;
    let mut s = String::new();
    let mut fns = String::new();
    let mut have_fns: Vec<String> = Vec::new();
    if native_f16 {
        // Hoisted before common.wgsl by `kernels::compose`.
        s.push_str("enable f16;\n");
    }
    let elems = p.inputs.iter().enumerate().map(|(i, &d)| {
        let elem = if native_f16 && d == DType::F16 {
            "f16"
        } else {
            "u32"
        };
        (format!("in{i}"), elem)
    });
    s.push_str(&declare(elems, ("dst", "u32")));
    s.push('\n');

    // element(e): the output element e as canonical bits of the output dtype.
    let mut body = String::new();
    let strided: Vec<usize> = (0..k).filter(|&i| packed & (1 << i) == 0).collect();
    for i in 0..k {
        let _ = writeln!(
            body,
            "    var p{i} = params[{}]{};",
            2 + i,
            if strided.contains(&i) { "" } else { " + e" }
        );
    }
    if !strided.is_empty() {
        let _ = writeln!(body, "    let nd = params[1];\n    var rem = e;");
        let _ = writeln!(body, "    for (var k = nd; k > 0u; k = k - 1u) {{");
        let _ = writeln!(
            body,
            "        let d = k - 1u;\n        let size = params[{head}u + d];"
        );
        let _ = writeln!(
            body,
            "        let idx = rem % size;\n        rem = rem / size;"
        );
        for &i in &strided {
            let _ = writeln!(
                body,
                "        p{i} = p{i} + idx * params[{head}u + nd * {}u + d];",
                i + 1
            );
        }
        let _ = writeln!(body, "    }}");
    }
    for (n, &(expr, dt)) in p.nodes.iter().enumerate() {
        let v = match expr {
            Expr::Input(i) if native_f16 && dt == DType::F16 => format!("f32(in{i}[p{i}])"),
            Expr::Input(i) => load(i, dt),
            _ => node_expr(p, expr, dt, &mut fns, &mut have_fns),
        };
        let _ = writeln!(body, "    let v{n}: {} = {v};", ty(dt));
    }
    let last = p.nodes.len() - 1;
    let out = p.out_dtype();
    let bits = match out {
        DType::F32 => format!("bitcast<u32>(v{last})"),
        DType::F16 => format!("f32_to_f16(v{last})"),
        DType::I32 => format!("bitcast<u32>(v{last})"),
        DType::U32 => format!("v{last}"),
        DType::U8 => format!("(v{last} & 0xffu)"),
    };
    let _ = writeln!(body, "    return {bits};");

    let per = per_word(out);
    let shift = 32 / per;
    // Straight-line stores: a loop with a divergent `e < n` test per element made llvmpipe
    // run f16 and u8 outputs 1.2-1.3x slower.
    let store = if per == 1 {
        "    dst[w] = element(w);\n".to_string()
    } else {
        let mut st = String::from("    var word = 0u;\n");
        for j in 0..per {
            // Past n: element n - 1 computed again and dropped by the select (no branch).
            let _ = writeln!(
                st,
                "    word = word | (select(0u, element(min(w * {per}u + {j}u, n - 1u)), \
                 w * {per}u + {j}u < n) << {}u);",
                shift * j
            );
        }
        st.push_str("    dst[w] = word;\n");
        st
    };
    write_main(&mut s, &fns, "", &body, per, &store);
    s
}

/// The kernel's tail: `fns`, `element(e{args})` with `body`, and `main`, whose invocation `w`
/// covers elements `w * per..` of `n = params[0]`, returns past the end, then runs `store`.
fn write_main(s: &mut String, fns: &str, args: &str, body: &str, per: usize, store: &str) {
    let _ = write!(
        s,
        "{fns}
fn element(e: u32{args}) -> u32 {{
{body}}}

@compute @workgroup_size(WG_SIZE)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {{
    let w = flat_index(wid, nwg, lid);
    let n = params[0];
    // The grid is rounded up to whole workgroups: invocations past the end must not store.
    if (w >= (n + {per}u - 1u) / {per}u) {{
        return;
    }}
{store}}}
"
    );
}

/// The `wide` variant of [`generate`]: inputs and output bound as `array<vec4<u32>>`, four
/// elements per invocation, the last partial vector computed whole (see the shader comment).
fn generate_wide(p: &Program) -> String {
    let k = p.inputs.len();
    let mut s = String::new();
    let mut fns = String::new();
    let mut have_fns: Vec<String> = Vec::new();
    let elems = (0..k).map(|i| (format!("in{i}"), "vec4<u32>"));
    s.push_str(&declare(elems, ("dst", "vec4<u32>")));
    s.push('\n');
    let mut body = String::new();
    for (n, &(expr, dt)) in p.nodes.iter().enumerate() {
        let v = match expr {
            Expr::Input(i) => from_bits(&format!("x{i}"), dt),
            _ => node_expr(p, expr, dt, &mut fns, &mut have_fns),
        };
        let _ = writeln!(body, "    let v{n}: {} = {v};", ty(dt));
    }
    let last = p.nodes.len() - 1;
    let bits = match p.out_dtype() {
        DType::F32 | DType::I32 => format!("bitcast<u32>(v{last})"),
        _ => format!("v{last}"),
    };
    let _ = writeln!(body, "    return {bits};");
    let args: String = (0..k).map(|i| format!(", x{i}: u32")).collect();
    let call = |j: &str| -> String {
        let xs: String = (0..k).map(|i| format!(", q{i}{j}")).collect();
        format!(
            "element(e + {}u{xs})",
            ["x", "y", "z", "w"]
                .iter()
                .position(|c| *c == &j[1..])
                .unwrap_or(0)
        )
    };
    let loads: String = (0..k)
        .map(|i| format!("    let q{i} = in{i}[params[{}] / 4u + w];\n", 2 + i))
        .collect();
    // The last vector is computed whole, also where it runs past n: its lanes past n read the
    // inputs' buffers past the views (inside them: buffers are whole vectors) and land in the
    // fresh output's buffer past the tensor, where nothing reads them. No tail branch: a
    // divergent scalar path made llvmpipe run every vector 1.8x slower.
    let store = format!(
        "    let e = w * 4u;\n{loads}    dst[w] = vec4<u32>({}, {}, {}, {});\n",
        call(".x"),
        call(".y"),
        call(".z"),
        call(".w"),
    );
    write_main(&mut s, &fns, &args, &body, 4, &store);
    s
}

/// The WGSL expression of node `expr` (not an input) of type `dt`; f16 results are rounded
/// where the op-by-op path would store them.
fn node_expr(
    p: &Program,
    expr: Expr,
    dt: DType,
    fns: &mut String,
    have_fns: &mut Vec<String>,
) -> String {
    let k = p.inputs.len();
    let v = match expr {
        Expr::Input(i) => load(i, dt),
        Expr::Scalar(j) => from_bits(&format!("params[{}]", 2 + k + j), dt),
        Expr::Index => "e".to_string(),
        Expr::Random(d, [s0, s1, o0, o1]) => {
            let w = format!("philox_words(v{s0}, v{s1}, v{o0}, v{o1}, e)");
            match d {
                Dist::Uniform => format!("uniform_of({w}.x)"),
                Dist::Normal => format!("normal_of({w}.x, {w}.y)"),
            }
        }
        Expr::Unary(op, a) => {
            let name = op_fn(fns, have_fns, Op::U(op), dt);
            format!("{name}(v{a})")
        }
        Expr::Binary(op, a, b) => {
            let name = op_fn(fns, have_fns, Op::B(op), dt);
            format!("{name}(v{a}, v{b})")
        }
        Expr::Compare(op, a, b) => compare(op, a, b, p.nodes[a].1),
        Expr::Where(m, a, b) => format!("select(v{b}, v{a}, v{m} != 0u)"),
        Expr::Clamp(x, lo, hi) if is_float(dt) => format!(
            "select(min(max(v{x}, v{lo}), v{hi}), nan_f32(), \
             is_nan(v{x}) || is_nan(v{lo}) || is_nan(v{hi}))"
        ),
        Expr::Clamp(x, lo, hi) => format!("min(max(v{x}, v{lo}), v{hi})"),
        Expr::Cast(a) => cast(&format!("v{a}"), p.nodes[a].1, dt),
    };
    match expr {
        Expr::Unary(..) | Expr::Binary(..) | Expr::Clamp(..) if dt == DType::F16 => {
            format!("round_f16({v})")
        }
        _ => v,
    }
}

/// Loads element `p{i}` of input `i` into its compute type.
fn load(i: usize, dt: DType) -> String {
    match dt {
        DType::F32 => format!("bitcast<f32>(in{i}[p{i}])"),
        DType::F16 => format!("f16_to_f32(in{i}[p{i} >> 1u] >> ((p{i} & 1u) * 16u))"),
        DType::I32 => format!("bitcast<i32>(in{i}[p{i}])"),
        DType::U32 => format!("in{i}[p{i}]"),
        DType::U8 => format!("((in{i}[p{i} >> 2u] >> ((p{i} & 3u) * 8u)) & 0xffu)"),
    }
}

/// Canonical bits (a `u32` expression) as a value of `dt`'s compute type.
fn from_bits(bits: &str, dt: DType) -> String {
    match ty(dt) {
        "f32" => format!("bitcast<f32>({bits})"),
        "i32" => format!("bitcast<i32>({bits})"),
        _ => bits.to_string(),
    }
}

#[derive(Clone, Copy)]
enum Op {
    U(UnaryOp),
    B(BinaryOp),
}

/// Emits (once) the WGSL function of a table op for `dt` and returns its name.
fn op_fn(fns: &mut String, have: &mut Vec<String>, op: Op, dt: DType) -> String {
    let t = ty(dt);
    let name = match op {
        Op::U(o) => format!("u_{}_{t}", o.name()),
        Op::B(o) => format!("b_{}_{t}", o.name()),
    };
    if have.contains(&name) {
        return name;
    }
    have.push(name.clone());
    // The tensor layer rejects float-only ops on integers before a kernel is built; an integer
    // body is therefore present whenever one is asked for (identity as a defensive default).
    let (params, body) = match op {
        Op::U(o) if t == "f32" => (
            "x: f32".to_string(),
            format!("if (is_nan(x)) {{ return x; }}\n    {}", o.wgsl()),
        ),
        Op::U(o) => (
            format!("x: {t}"),
            o.wgsl_int(t).unwrap_or_else(|| "return x;".into()),
        ),
        Op::B(o) if t == "f32" => ("x: f32, y: f32".to_string(), o.wgsl().to_string()),
        Op::B(o) => (
            format!("x: {t}, y: {t}"),
            o.wgsl_int(t).unwrap_or_else(|| "return x;".into()),
        ),
    };
    let _ = writeln!(fns, "fn {name}({params}) -> {t} {{\n    {body}\n}}\n");
    name
}

fn compare(op: CmpOp, a: NodeId, b: NodeId, operand: DType) -> String {
    let test = format!("select(0u, 1u, v{a} {} v{b})", op.wgsl());
    if is_float(operand) {
        // IEEE: the unordered result is the table's `holds(None)`. Spelled out on the bits,
        // since WGSL compilers may assume floats are never NaN.
        let unordered = if op.holds(None) { "1u" } else { "0u" };
        format!("select({test}, {unordered}, is_nan(v{a}) || is_nan(v{b}))")
    } else {
        test
    }
}

/// `x` (compute type of `from`) converted to `to` with Rust `as` semantics.
fn cast(x: &str, from: DType, to: DType) -> String {
    use DType::*;
    match (from, to) {
        _ if from == to => x.to_string(),
        (F32, F16) => format!("round_f16({x})"),
        (F16, F32) => x.to_string(),
        (F32 | F16, I32) => format!("f32_to_i32({x})"),
        (F32 | F16, U32) => format!("f32_to_u32_sat({x}, 4294967296.0, 0xffffffffu)"),
        (F32 | F16, U8) => format!("f32_to_u32_sat({x}, 255.0, 255u)"),
        (I32 | U32 | U8, F32) => format!("f32({x})"),
        (I32 | U32 | U8, F16) => format!("round_f16(f32({x}))"),
        (I32, U32) => format!("bitcast<u32>({x})"),
        (I32, U8) => format!("(bitcast<u32>({x}) & 0xffu)"),
        (U32 | U8, I32) => format!("bitcast<i32>({x})"),
        (U32, U8) => format!("({x} & 0xffu)"),
        (U8, U32) => x.to_string(),
        _ => x.to_string(),
    }
}

/// Every op of the table in every dtype it supports, each as a one-node kernel (packed and
/// strided), for naga validation in the tests.
pub(crate) fn catalogue() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut add = |name: String, p: Program| {
        for packed in [0u64, !0] {
            let kind = if packed == 0 { "strided" } else { "packed" };
            out.push((format!("{name}/{kind}"), generate(&p, packed, false)));
            if p.inputs.contains(&DType::F16) {
                out.push((
                    format!("{name}/{kind}/native_f16"),
                    generate(&p, packed, true),
                ));
            }
        }
        let word = |d: DType| matches!(d, DType::F32 | DType::I32 | DType::U32);
        if word(p.out_dtype()) && p.inputs.iter().all(|&d| word(d)) {
            out.push((format!("{name}/wide"), generate_wide(&p)));
        }
    };
    let dtypes = [DType::F32, DType::F16, DType::I32, DType::U32];
    for &op in UnaryOp::ALL {
        for d in dtypes {
            if op.float_only() && !is_float(d) {
                continue;
            }
            let mut p = Program::default();
            let x = p.input(d);
            p.push(Expr::Unary(op, x), d);
            add(format!("unary.{}.{d:?}", op.name()), p);
        }
    }
    for &op in BinaryOp::ALL {
        for d in dtypes {
            if op.float_only() && !is_float(d) {
                continue;
            }
            let mut p = Program::default();
            let (x, y) = (p.input(d), p.input(d));
            p.push(Expr::Binary(op, x, y), d);
            add(format!("binary.{}.{d:?}", op.name()), p);
        }
    }
    add("arange".to_string(), Program::arange());
    for d in [Dist::Uniform, Dist::Normal] {
        let mut p = Program::default();
        let w = [0; 4].map(|_| p.scalar(DType::U32));
        p.push(Expr::Random(d, w), DType::F32);
        add(format!("random.{d:?}"), p);
    }
    let all = [DType::F32, DType::F16, DType::I32, DType::U32, DType::U8];
    for from in all {
        for to in all {
            let mut p = Program::default();
            let x = p.input(from);
            p.push(Expr::Cast(x), to);
            add(format!("cast.{from:?}.{to:?}"), p);
        }
        let mut p = Program::default();
        let (x, s) = (p.input(from), p.scalar(from));
        p.push(Expr::Compare(CmpOp::Ne, x, s), DType::U8);
        add(format!("compare_scalar.{from:?}"), p);
        let mut p = Program::default();
        let (m, a, b) = (p.input(DType::U8), p.input(from), p.input(from));
        p.push(Expr::Where(m, a, b), from);
        add(format!("where.{from:?}"), p);
        if from != DType::U8 {
            let mut p = Program::default();
            let (x, lo, hi) = (p.input(from), p.scalar(from), p.scalar(from));
            p.push(Expr::Clamp(x, lo, hi), from);
            add(format!("clamp.{from:?}"), p);
        }
    }
    out
}
