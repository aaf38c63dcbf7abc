//! The host/shader contract: every number that both the launch code and a shader depend on
//! (workgroup sizes, tile and block sizes, op codes, params slots), stated once here. The host
//! code reads these constants by name; the shaders read the same names as WGSL `const`
//! declarations that [`declare`] writes from these lists and `shader_table.rs` composes into
//! each shader (as it does its bindings), so no such number is written in a `.wgsl` file.
//!
//! A leaf: it imports no other `gpu` file, so any of them may import it.

use std::fmt::Write as _;

/// Named constants as the WGSL declares them: `("TILE", 64)` is `const TILE: u32 = 64u;`.
pub(crate) type Consts = &'static [(&'static str, u32)];

/// Modules of named constants, each with `CONSTS`, their [`Consts`] list: every constant is
/// declared in WGSL under its Rust name, so a name and its value are written once.
macro_rules! shared {
    ($($(#[$mdoc:meta])* $module:ident {
        $($(#[$doc:meta])* $name:ident: $ty:ty = $value:expr,)*
    })*) => {
        $(
            $(#[$mdoc])*
            pub(crate) mod $module {
                $($(#[$doc])* pub(crate) const $name: $ty = $value;)*

                /// This module's constants as the WGSL declares them (a `Consts` list).
                pub(crate) const CONSTS: &[(&str, u32)] =
                    &[$((stringify!($name), $name as u32)),*];
            }
        )*
    };
}

/// Threads per workgroup of every one-dimensional shader (`@workgroup_size(WG_SIZE)`) and of
/// every generated kernel: a multiple of every vendor's SIMD width (32 on NVIDIA, 64 on AMD,
/// 8-32 on Intel/Apple) and within WebGPU's default limit. The launch code sizes grids by it.
pub(crate) const WORKGROUP: u64 = 256;

/// The pipeline-overridable constant that selects a variant of a shader (an op code, a block
/// type, an operand layout): declared in every shader (default 0) under this name, and set from
/// `Launch::op_code` by the pipeline cache.
pub(crate) const OP_OVERRIDE: &str = "OP";

/// Declared in every shader: the workgroup size and the op-code override.
pub(crate) const COMMON: Consts = &[("WG_SIZE", WORKGROUP as u32)];

shared! {
    /// matmul.wgsl and matmul_vec4.wgsl.
    matmul {
        /// Output rows and columns of a `tiled` workgroup's tile.
        TILE: usize = 64,
        /// The K depth of one staged slice of the `tiled` kernels.
        DEPTH: usize = 16,
        /// matmul.wgsl's `OP` for the `tiled` entry with the A tile padded against bank
        /// conflicts (0: unpadded).
        OP_TILED_PADDED: u32 = 1,
        /// matmul_vec4.wgsl's `OP` bits: A is contiguous along K (else along its rows) ...
        OP_A_K_CONTIGUOUS: u32 = 1,
        /// ... and B is contiguous along its columns (else along K).
        OP_B_COLUMN_CONTIGUOUS: u32 = 2,
        /// Output columns of a `gemv_t` workgroup (32 invocations each).
        GEMV_T_COLS: usize = 8,
    }
    /// quant.wgsl.
    quant {
        /// Lanes sharing a weight row in the matvec entries (a `matvec` workgroup; the weight
        /// rows of a `matvec_serial` or `matvec_rows` workgroup).
        LANES: usize = 64,
        /// Activation rows per matvec workgroup (its `z` index counts groups of them).
        MT: usize = 4,
    }
    /// reduce.wgsl and reduce_subgroup.wgsl.
    reduce {
        /// The longest row chunk `reduce_thread` (one invocation per item) folds.
        THREAD_MAX: usize = 256,
        /// The longest row chunk `reduce_subgroup` (one subgroup per item) folds.
        SUBGROUP_MAX: usize = 4096,
        /// The op code of softmax's sum of `exp(x - aux[o])`, past the reduction table's codes.
        OP_SUM_EXP: u32 = crate::cpu::reduce::SUM_EXP_CODE,
    }
    /// scatter.wgsl.
    scatter {
        /// Pairs one workgroup sorts in workgroup memory (two per invocation).
        BLOCK: usize = 512,
    }
    /// conv2d.wgsl: output channels (rows) and output positions (columns) of a workgroup's tile.
    conv {
        BM: usize = 32,
        BN: usize = 128,
    }
    /// attention_forward.wgsl and attention_backward.wgsl (through attention.wgsl's helpers).
    attention {
        /// Rows per workgroup and output dims per chunk.
        TILE: usize = 64,
        /// Rows of the streamed loop per step.
        STEP: usize = 16,
        /// Where the pass index sits in a kernel's params.
        P_PASS: usize = 26,
    }
    /// attention_decode.wgsl.
    decode {
        /// Invocations per workgroup (one workgroup per query head) and positions per tile.
        TILE: usize = 64,
    }
}

/// The WGSL declarations of every shader's constants ([`COMMON`], the `OP` override) and of
/// `consts`, one per line.
pub(crate) fn declare(consts: Consts) -> String {
    let mut s = String::from("// Generated from src/gpu/contract.rs.\n");
    for (name, value) in COMMON.iter().chain(consts) {
        let _ = writeln!(s, "const {name}: u32 = {value}u;");
    }
    let _ = writeln!(s, "override {OP_OVERRIDE}: u32 = 0u;");
    s
}
