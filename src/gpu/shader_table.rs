//! What each kernel is: the [`Shader`] enum, the table of hand-written shaders ([`SHADERS`]:
//! file, composition and binding list of each) and the composition of a source as wgpu
//! receives it (`common.wgsl`, the bindings declared from the entry, then the body). The
//! pipeline cache (`kernels.rs`) asks a shader only for [`Shader::source`],
//! [`Shader::inputs`], [`Shader::checked`] and a label.

use super::bindings::Bindings;
use super::codegen::Generated;
use super::contract::{self, declare, Consts};
use crate::ops::{ReduceOp, RowFamily, RowOp};
use crate::QType;

/// The hand-written shader files, plus the generated elementwise kernels (`codegen.rs`). Each
/// file is valid WGSL once `shaders/common.wgsl` and its entry's generated declarations (the
/// contract's constants, `contract.rs`; its element type; its bindings) are prepended (done
/// here, at embed time); `tests/ops/shaders.rs` validates every composed shader with naga.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Shader {
    Reduce,
    /// reduce.wgsl followed by reduce_subgroup.wgsl's first passes (adapters with `SUBGROUP`).
    ReduceSubgroup,
    Softmax,
    /// softmax.wgsl with its row merge in subgroup operations (adapters with `SUBGROUP`).
    SoftmaxSubgroup,
    LayerNorm,
    Join,
    Matmul,
    /// matmul.wgsl reading f16 operands in place (packed pairs), accumulating in f32.
    MatmulF16,
    /// matmul.wgsl in native f16 (`SHADER_F16`): f16 operands, accumulators and output (the
    /// opt-in of `wgtensor::set_f16_accumulation`).
    MatmulF16Acc,
    MatmulVec4,
    Gather,
    /// The first pass of an f32 sum over a packed row, four elements per load.
    Sum,
    /// scatter_add / index_add: key building, a bitonic sort and ordered segment sums.
    Scatter,
    /// Fused log-softmax + negative log-likelihood, forward and backward.
    CrossEntropy,
    /// Fused attention forward (attention_forward.wgsl + the helpers of attention.wgsl).
    AttentionForward,
    /// Fused attention backward: dq (and dS), dk and dv (attention_backward.wgsl + helpers).
    AttentionBackward,
    /// Block-quantized matrices: matvec/matmul, dequantize and row gather.
    Quant,
    /// Attention of one query position over a KV cache, online softmax in one pass.
    AttentionDecode,
    /// 2-d convolution as an implicit GEMM (no im2col buffer).
    Conv2d,
    /// A generated elementwise kernel (one per op chain, dtypes and input packing).
    Generated(GeneratedRef),
}

/// A generated kernel, compared and hashed by address: kernels are interned, so the address
/// identifies the source without hashing it on every launch.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GeneratedRef(pub &'static Generated);

impl PartialEq for GeneratedRef {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.0, other.0)
    }
}

impl Eq for GeneratedRef {}

impl std::hash::Hash for GeneratedRef {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::ptr::hash(self.0, state)
    }
}

/// The helpers every shader shares (`is_nan`, f16 packing, `pow_c`, ...).
pub(crate) const COMMON: &str = include_str!("../../shaders/common.wgsl");

/// The error word's binding and helpers, prepended to the shaders that read ids.
#[allow(dead_code)]
pub(crate) const IDS: &str = include_str!("../../shaders/ids.wgsl");

/// The contract's declarations, `common.wgsl`, then `body`; `enable` directives of `body`
/// (which WGSL wants before any declaration) go first.
pub(crate) fn compose(body: &str) -> String {
    compose_bound(&declare(&[]), body)
}

/// [`compose`] with `decls` (generated declarations: the contract's constants, a
/// [`Bindings`] list) between `common.wgsl` and `body`: WGSL module-scope declarations may come
/// in any order, so where they stand changes nothing in the compiled kernel.
fn compose_bound(decls: &str, body: &str) -> String {
    // Normals are drawn in integer fixed point (bit-identical on every device); its tables
    // only go into the kernels that use them.
    let normal = if body.contains("normal_of(") {
        NORMAL
    } else {
        ""
    };
    // `enable` directives must precede every declaration: hoist them above common.wgsl.
    let mut enables = String::new();
    let (decls, body) = (hoist(decls, &mut enables), hoist(body, &mut enables));
    format!("{enables}{COMMON}\n{normal}\n{decls}{body}")
}

/// `text` without its leading `enable` directives, which go to `enables`.
fn hoist<'a>(mut text: &'a str, enables: &mut String) -> &'a str {
    while let Some((line, tail)) = text
        .strip_prefix("enable ")
        .and_then(|r| r.split_once('\n'))
    {
        enables.push_str("enable ");
        enables.push_str(line);
        enables.push('\n');
        text = tail;
    }
    text
}

/// A thread's pass over its elements of a row, composed into every row shader.
#[allow(dead_code)]
pub(crate) const ROW_FOLD: &str = include_str!("../../shaders/row_fold.wgsl");

/// The row merge snippets of softmax (without and with subgroup operations).
#[allow(dead_code)]
pub(crate) const ROW_TREE: &str = include_str!("../../shaders/row_tree.wgsl");
#[allow(dead_code)]
pub(crate) const ROW_SUBGROUP: &str = include_str!("../../shaders/row_subgroup.wgsl");

/// reduce.wgsl with the reduction table's part appended (its op codes and per-op cases,
/// `ReduceOp::wgsl`), built on first use.
fn reduce() -> &'static str {
    static SOURCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SOURCE.get_or_init(|| {
        let file = include_str!("../../shaders/reduce.wgsl");
        format!("{file}{}", ReduceOp::wgsl())
    })
}

/// [`reduce`] followed by reduce_subgroup.wgsl's first passes.
fn reduce_subgroup() -> &'static str {
    static SOURCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SOURCE.get_or_init(|| format!("{}{SUBGROUP}{REDUCE_SUBGROUP}", reduce()))
}

/// The fused attention's helpers (composed after attention_forward/backward.wgsl).
#[allow(dead_code)]
pub(crate) const ATTENTION: &str = include_str!("../../shaders/attention.wgsl");

/// `SubgroupInv`, the entry parameter of the kernels that use subgroup operations.
pub(crate) const SUBGROUP: &str = include_str!("../../shaders/subgroup.wgsl");

/// The subgroup first passes of reductions (composed after reduce.wgsl and subgroup.wgsl).
pub(crate) const REDUCE_SUBGROUP: &str = include_str!("../../shaders/reduce_subgroup.wgsl");

/// `normal_of`: standard normals from Philox words in integer fixed point.
pub(crate) const NORMAL: &str = include_str!("../../shaders/normal.wgsl");

/// How the source of a [`ShaderDef`] is assembled after `common.wgsl`.
pub(crate) enum Body {
    /// Files concatenated at compile time ([`wgsl!`]).
    Text(&'static str),
    /// A file followed by source generated from the Rust tables (op codes, block sizes),
    /// built on first use.
    Built(fn() -> &'static str),
}

/// One hand-written kernel: everything the pipeline cache and the tests ask of it.
pub(crate) struct ShaderDef {
    pub shader: Shader,
    /// The file name, as labels and errors report it; a variant of a file names it with its
    /// twist in parentheses (and is then no file of its own).
    pub label: &'static str,
    /// The file as written on disk (for a variant, the file it starts from).
    pub raw: &'static str,
    /// What wgpu compiles after `common.wgsl`.
    pub body: Body,
    /// Its storage bindings, declared from here (the files declare none).
    pub bindings: &'static Bindings,
    /// Whether it reads ids and so binds the device's error word as `@group(1)`.
    pub checked: bool,
    /// Whether naga adds its counter against infinite loops (see [`KernelCache::pipeline`]).
    pub bounded_loops: bool,
    /// The contract's constants it reads beyond those of every shader (`contract.rs`).
    pub consts: Consts,
    /// `Scalar`, the element type of a body written over it (`None`: the body declares none).
    pub scalar: Option<&'static str>,
}

impl ShaderDef {
    const fn new(
        shader: Shader,
        label: &'static str,
        raw: &'static str,
        bindings: &'static Bindings,
    ) -> Self {
        ShaderDef {
            shader,
            label,
            raw,
            body: Body::Text(raw),
            bindings,
            checked: false,
            bounded_loops: true,
            consts: &[],
            scalar: None,
        }
    }

    /// Reads the contract's `consts` too.
    const fn consts(mut self, consts: Consts) -> Self {
        self.consts = consts;
        self
    }

    /// Its body is written over `alias Scalar = scalar;`.
    const fn scalar(mut self, scalar: &'static str) -> Self {
        self.scalar = Some(scalar);
        self
    }

    /// The generated declarations that precede its body: `enable f16;` where `Scalar` is f16,
    /// the contract's constants, `Scalar`, then the bindings.
    pub(crate) fn declarations(&self) -> String {
        let mut s = String::new();
        if self.scalar == Some("f16") {
            s += "enable f16;\n";
        }
        s += &declare(self.consts);
        if let Some(t) = self.scalar {
            s += &format!("alias Scalar = {t};\n");
        }
        s + &self.bindings.wgsl()
    }

    /// Compiled as `body` rather than the file alone.
    const fn body(mut self, body: Body) -> Self {
        self.body = body;
        self
    }

    /// Reads ids: `ids.wgsl` goes first and the error word is bound.
    const fn checked(mut self, body: &'static str) -> Self {
        self.body = Body::Text(body);
        self.checked = true;
        self
    }

    /// Built without naga's loop counters.
    const fn unbounded(mut self) -> Self {
        self.bounded_loops = false;
        self
    }
}

/// `shaders/` files concatenated at compile time, in order.
macro_rules! wgsl {
    ($($file:literal),+) => { concat!($(include_str!(concat!("../../shaders/", $file))),+) };
}

/// The table entry of `$file`, compiled as it is unless a builder below says otherwise.
macro_rules! shader {
    ($shader:expr, $file:literal, $bindings:expr) => {
        ShaderDef::new($shader, $file, wgsl!($file), $bindings)
    };
}

/// The register tile and matmul.wgsl's element files (`Scalar` and the operand readers), by
/// file name: the matmul entries compose them.
#[allow(dead_code)]
pub(crate) const MATMUL_PARTS: [(&str, &str); 3] = [
    ("tile.wgsl", wgsl!("tile.wgsl")),
    ("matmul_read.wgsl", wgsl!("matmul_read.wgsl")),
    ("matmul_f16_packed.wgsl", wgsl!("matmul_f16_packed.wgsl")),
];

/// A row of the matmul variants: matmul.wgsl (after the register tile) with the file of its
/// operand readers; `Scalar`, its accumulators' and output's type, is the output binding's.
macro_rules! matmul {
    ($shader:expr, $twist:literal, $readers:literal, $bindings:expr) => {
        ShaderDef::new(
            $shader,
            concat!("matmul.wgsl", $twist),
            wgsl!("matmul.wgsl"),
            $bindings,
        )
        .body(Body::Text(wgsl!($readers, "tile.wgsl", "matmul.wgsl")))
        .scalar($bindings.output.1)
        .consts(contract::matmul::CONSTS)
        .unbounded()
    };
}

/// A fused attention pass: its entry points, then attention.wgsl's helpers, which both read
/// the attention constants.
macro_rules! attention {
    ($shader:expr, $file:literal, $bindings:expr) => {
        shader!($shader, $file, $bindings)
            .body(Body::Text(wgsl!($file, "attention.wgsl")))
            .consts(contract::attention::CONSTS)
    };
}

/// softmax.wgsl after the row merge (a workgroup tree), with the softmax family's op codes
/// appended (`RowOp::codes_wgsl`), built on first use.
fn softmax() -> &'static str {
    static SOURCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SOURCE.get_or_init(|| {
        let file = wgsl!("row_tree.wgsl", "row_fold.wgsl", "softmax.wgsl");
        format!("{file}{}", RowOp::codes_wgsl(RowFamily::Softmax))
    })
}

/// [`softmax`] with the row merge in subgroup operations (adapters with `SUBGROUP`).
fn softmax_subgroup() -> &'static str {
    static SOURCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SOURCE.get_or_init(|| {
        let file = wgsl!(
            "subgroup.wgsl",
            "row_subgroup.wgsl",
            "row_fold.wgsl",
            "softmax.wgsl"
        );
        format!("{file}{}", RowOp::codes_wgsl(RowFamily::Softmax))
    })
}

/// A block type's code in quant.wgsl's `params[6]`: its place in [`QType::ALL`], which the
/// shader names as the `QTYPE_*` constants ([`quant`]).
pub(crate) fn qtype_code(q: QType) -> u32 {
    QType::ALL.iter().position(|&t| t == q).unwrap_or_default() as u32
}

/// ids.wgsl and quant.wgsl with the block-type table appended, built on first use: for each
/// [`QType`] its code (`QTYPE_Q8_0`, ...: the value of `params[6]`), elements per block
/// (`BLOCK_LEN_*`), body bytes per block (`BODY_BYTES_*`, the body plane of
/// `src/cpu/quant.rs`) and f16 scales per block (`SCALES_*`), and `block_len(q)` over them.
fn quant() -> &'static str {
    static SOURCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SOURCE.get_or_init(|| {
        let mut s = String::from(wgsl!("ids.wgsl", "quant.wgsl"));
        s += "\n// The block-type table (crate::QType, src/cpu/quant.rs).\n";
        for q in QType::ALL {
            let n = q.as_str();
            s += &format!("const QTYPE_{n}: u32 = {}u;\n", qtype_code(q));
            s += &format!("const BLOCK_LEN_{n}: u32 = {}u;\n", q.block_len());
            s += &format!("const BODY_BYTES_{n}: u32 = {}u;\n", q.body_bytes());
            s += &format!("const SCALES_{n}: u32 = {}u;\n", q.scale_halfs());
        }
        s += "\n// Elements per block of a matrix of type q.\nfn block_len(q: u32) -> u32 {\n";
        let (last, rest) = QType::ALL.split_last().expect("QType::ALL is not empty");
        for q in rest {
            let n = q.as_str();
            s += &format!("    if (q == QTYPE_{n}) {{\n        return BLOCK_LEN_{n};\n    }}\n");
        }
        s += &format!("    return BLOCK_LEN_{};\n}}\n", last.as_str());
        s
    })
}

/// layer_norm.wgsl after the row merge, with the row-op table's part appended (the norms' op
/// codes and `centered()`, `RowOp::norm_wgsl`), built on first use.
fn norm() -> &'static str {
    static SOURCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SOURCE.get_or_init(|| {
        let file = wgsl!("row_tree.wgsl", "row_fold.wgsl", "layer_norm.wgsl");
        format!("{file}{}", RowOp::norm_wgsl())
    })
}

// The binding list of each shader file (names and element types as its body reads them); a
// file that several entries compile states it once. Meanings and params layouts are in each
// file's header.

/// reduce.wgsl: the data (f32 bits, or (value, index) pairs) and an auxiliary input (softmax's
/// row maxima; other ops bind the data there too).
const REDUCE: Bindings = Bindings::new(&[("src", "u32"), ("aux", "u32")], ("dst", "u32"));
const SOFTMAX: Bindings = Bindings::new(&[("src", "f32")], ("dst", "f32"));
/// layer_norm.wgsl: the input, weight and bias.
const LAYER_NORM: Bindings = Bindings::new(
    &[("src", "f32"), ("weight", "f32"), ("bias", "f32")],
    ("dst", "f32"),
);
/// cross_entropy.wgsl: logits, targets, per-row log-sum-exp and per-row gradient scale.
const CROSS_ENTROPY: Bindings = Bindings::new(
    &[("x", "f32"), ("t", "u32"), ("lse", "f32"), ("g", "f32")],
    ("dst", "f32"),
);
const JOIN: Bindings = Bindings::new(&[("src", "u32")], ("dst", "u32"));
const MATMUL: Bindings = Bindings::new(&[("lhs", "f32"), ("rhs", "f32")], ("dst", "f32"));
/// matmul.wgsl reading f16 operands in place as packed pairs (its `ld_a`/`ld_b` unpack them).
const MATMUL_F16: Bindings = Bindings::new(&[("lhs", "u32"), ("rhs", "u32")], ("dst", "f32"));
/// matmul.wgsl in native f16: operands and output.
const MATMUL_F16_ACC: Bindings = Bindings::new(&[("lhs", "f16"), ("rhs", "f16")], ("dst", "f16"));
const MATMUL_VEC4: Bindings = Bindings::new(
    &[("lhs", "vec4<f32>"), ("rhs", "vec4<f32>")],
    ("dst", "f32"),
);
/// gather.wgsl: the table and the ids.
const GATHER: Bindings = Bindings::new(&[("src", "f32"), ("ids", "u32")], ("dst", "f32"));
/// scatter.wgsl: ids or sorted pairs, and the values to add.
const SCATTER: Bindings = Bindings::new(&[("a", "u32"), ("b", "f32")], ("out", "u32"));
const SUM: Bindings = Bindings::new(&[("src", "vec4<f32>")], ("dst", "f32"));
/// quant.wgsl: the per-block scales, the packed weights, and the activations or ids.
const QUANT: Bindings = Bindings::new(
    &[("scales", "u32"), ("body", "u32"), ("aux", "u32")],
    ("dst", "f32"),
);
/// attention_decode.wgsl: the query and the key and value caches.
const ATTENTION_DECODE: Bindings =
    Bindings::new(&[("q", "f32"), ("k", "f32"), ("v", "f32")], ("dst", "f32"));
/// conv2d.wgsl: the input, the weight and the bias.
const CONV2D: Bindings = Bindings::new(
    &[("x", "f32"), ("weight", "f32"), ("bias", "f32")],
    ("dst", "f32"),
);
/// The fused attention's inputs: q, k, v and the mask (read by attention.wgsl's helpers in both
/// passes), then the backward's dO and [lse, D].
const ATTENTION_INPUTS: [(&str, &str); 6] = [
    ("q", "f32"),
    ("k", "f32"),
    ("v", "f32"),
    ("mask", "f32"),
    ("g", "f32"),
    ("stats", "f32"),
];
const ATTENTION_FORWARD: Bindings = Bindings::new(ATTENTION_INPUTS.split_at(4).0, ("dst", "f32"));
const ATTENTION_BACKWARD: Bindings = Bindings::new(&ATTENTION_INPUTS, ("dst", "f32"));

/// Every hand-written kernel. Row shaders start with a row merge (`row_tree.wgsl`, or
/// `subgroup.wgsl` and `row_subgroup.wgsl` on adapters with `SUBGROUP`) and the row pass
/// (`row_fold.wgsl`); shaders that read ids with `ids.wgsl`;
/// the fused attention's entry points come before their shared helpers.
pub(crate) const SHADERS: [ShaderDef; 19] = [
    shader!(Shader::Reduce, "reduce.wgsl", &REDUCE)
        .body(Body::Built(reduce))
        .consts(contract::reduce::CONSTS),
    ShaderDef::new(
        Shader::ReduceSubgroup,
        "reduce.wgsl (subgroups)",
        wgsl!("reduce.wgsl"),
        &REDUCE,
    )
    .body(Body::Built(reduce_subgroup))
    .consts(contract::reduce::CONSTS),
    shader!(Shader::Softmax, "softmax.wgsl", &SOFTMAX).body(Body::Built(softmax)),
    ShaderDef::new(
        Shader::SoftmaxSubgroup,
        "softmax.wgsl (subgroups)",
        wgsl!("softmax.wgsl"),
        &SOFTMAX,
    )
    .body(Body::Built(softmax_subgroup)),
    shader!(Shader::LayerNorm, "layer_norm.wgsl", &LAYER_NORM).body(Body::Built(norm)),
    shader!(Shader::CrossEntropy, "cross_entropy.wgsl", &CROSS_ENTROPY).checked(wgsl!(
        "ids.wgsl",
        "row_tree.wgsl",
        "row_fold.wgsl",
        "cross_entropy.wgsl"
    )),
    shader!(Shader::Join, "join.wgsl", &JOIN),
    // The matmul variants: one body in three element types (shader, label, operand readers,
    // bindings), then the vec4 kernel over the same register tile.
    matmul!(Shader::Matmul, "", "matmul_read.wgsl", &MATMUL),
    matmul!(
        Shader::MatmulF16,
        " (f16 operands)",
        "matmul_f16_packed.wgsl",
        &MATMUL_F16
    ),
    matmul!(
        Shader::MatmulF16Acc,
        " (f16 accumulation)",
        "matmul_read.wgsl",
        &MATMUL_F16_ACC
    ),
    shader!(Shader::MatmulVec4, "matmul_vec4.wgsl", &MATMUL_VEC4)
        .body(Body::Text(wgsl!("tile.wgsl", "matmul_vec4.wgsl")))
        .scalar("f32")
        .consts(contract::matmul::CONSTS)
        .unbounded(),
    shader!(Shader::Gather, "gather.wgsl", &GATHER).checked(wgsl!("ids.wgsl", "gather.wgsl")),
    shader!(Shader::Scatter, "scatter.wgsl", &SCATTER)
        .checked(wgsl!("ids.wgsl", "scatter.wgsl"))
        .consts(contract::scatter::CONSTS),
    shader!(Shader::Sum, "sum.wgsl", &SUM),
    shader!(Shader::Quant, "quant.wgsl", &QUANT)
        .checked(wgsl!("ids.wgsl", "quant.wgsl"))
        .body(Body::Built(quant))
        .consts(contract::quant::CONSTS),
    shader!(
        Shader::AttentionDecode,
        "attention_decode.wgsl",
        &ATTENTION_DECODE
    )
    .consts(contract::decode::CONSTS),
    // Every loop of conv2d.wgsl is bounded by its params (at most 32,768 k steps).
    shader!(Shader::Conv2d, "conv2d.wgsl", &CONV2D)
        .consts(contract::conv::CONSTS)
        .unbounded(),
    attention!(
        Shader::AttentionForward,
        "attention_forward.wgsl",
        &ATTENTION_FORWARD
    ),
    attention!(
        Shader::AttentionBackward,
        "attention_backward.wgsl",
        &ATTENTION_BACKWARD
    ),
];

impl Shader {
    /// Every hand-written shader, for tests that validate them all.
    #[allow(dead_code)]
    pub(crate) fn all() -> impl Iterator<Item = Shader> {
        SHADERS.iter().map(|d| d.shader)
    }

    /// The table entry of a hand-written shader (`None` for a generated kernel).
    fn def(self) -> Option<&'static ShaderDef> {
        SHADERS.iter().find(|d| d.shader == self)
    }

    /// The label: the file name of a hand-written shader.
    pub(crate) fn file(self) -> &'static str {
        match (self, self.def()) {
            (Shader::Generated(g), _) => &g.0.label,
            (_, Some(d)) => d.label,
            (_, None) => "unlisted shader",
        }
    }

    /// The file as written on disk (checked shaders without `ids.wgsl`).
    #[allow(dead_code)]
    pub(crate) fn raw(self) -> &'static str {
        self.def().map_or_else(|| self.body(), |d| d.raw)
    }

    /// The shader as compiled, without `common.wgsl` (checked shaders start with `ids.wgsl`).
    pub(crate) fn body(self) -> &'static str {
        match (self, self.def()) {
            (Shader::Generated(g), _) => &g.0.source,
            (
                _,
                Some(ShaderDef {
                    body: Body::Text(t),
                    ..
                }),
            ) => t,
            (
                _,
                Some(ShaderDef {
                    body: Body::Built(f),
                    ..
                }),
            ) => f(),
            (_, None) => "",
        }
    }

    /// The source handed to wgpu: `common.wgsl`, the bindings of a hand-written shader's
    /// entry, then the shader.
    pub(crate) fn source(self) -> String {
        match self.def() {
            Some(d) => compose_bound(&d.declarations(), self.body()),
            None => compose(self.body()),
        }
    }

    /// Whether the shader reads ids and so binds the device's error word as `@group(1)`.
    pub(crate) fn checked(self) -> bool {
        self.def().is_some_and(|d| d.checked)
    }

    /// Whether naga bounds the shader's loops (every shader but the matmuls).
    pub(crate) fn bounded_loops(self) -> bool {
        self.def().is_none_or(|d| d.bounded_loops)
    }

    /// Read-only input bindings before the output.
    pub(crate) fn inputs(self) -> usize {
        match (self, self.def()) {
            (Shader::Generated(g), _) => g.0.inputs,
            (_, Some(d)) => d.bindings.inputs.len(),
            (_, None) => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Shader, SHADERS};

    #[test]
    fn each_shader_has_one_table_entry() {
        for (i, d) in SHADERS.iter().enumerate() {
            let first = SHADERS.iter().position(|e| e.shader == d.shader);
            assert_eq!(first, Some(i), "{} is listed twice", d.label);
            assert_eq!(d.shader.file(), d.label);
            assert!(
                d.shader.body().contains(d.raw) || d.label.contains('('),
                "{}",
                d.label
            );
            assert_eq!(d.shader.inputs(), d.bindings.inputs.len());
            // The declarations come from the entry, not the file: one place states the layout.
            let declared = d
                .raw
                .lines()
                .any(|l| !l.trim_start().starts_with("//") && l.contains("@binding"));
            assert!(!declared, "{} declares its own bindings", d.label);
            let source = d.shader.source();
            for b in 0..=d.shader.inputs() + 1 {
                let decl = format!("@group(0) @binding({b}) ");
                assert_eq!(
                    source.lines().filter(|l| l.starts_with(&decl)).count(),
                    1,
                    "{}: binding {b}",
                    d.label
                );
            }
        }
        assert!(Shader::all().count() == SHADERS.len());
    }
}
