//! The `@group(0)` storage declarations of every kernel, written from one list per kernel: a
//! hand-written shader's `SHADERS` entry (`shader_table.rs`) or a generated kernel's inputs
//! (`codegen.rs`). The shader files declare no bindings of their own, so the layout the host
//! binds (`KernelCache::layout`: the input count) and the one the WGSL reads cannot disagree.
//!
//! The convention every kernel follows: `@binding(0..k)` the read-only inputs, `@binding(k)` the
//! read-write output, `@binding(k + 1)` the read-only `params: array<u32>` (sizes, offsets,
//! strides, scalars; bound at a dynamic offset).

use std::fmt::{Display, Write as _};

/// A binding's name and element type: `("q", "f32")` declares `q: array<f32>`.
pub(crate) type Binding = (&'static str, &'static str);

/// The storage bindings of a hand-written kernel, in binding order (params follow the output).
#[derive(Debug)]
pub(crate) struct Bindings {
    /// The read-only inputs, `@binding(0..k)`.
    pub inputs: &'static [Binding],
    /// The read-write output, `@binding(k)`.
    pub output: Binding,
}

impl Bindings {
    pub(crate) const fn new(inputs: &'static [Binding], output: Binding) -> Self {
        Bindings { inputs, output }
    }

    /// The WGSL declarations of these bindings and the params after them.
    pub(crate) fn wgsl(&self) -> String {
        declare(self.inputs.iter().copied(), self.output)
    }
}

/// The declarations of `inputs` (`@binding(0..k)`, read-only), the output `(name, element)`
/// (`@binding(k)`, read-write) and `params: array<u32>` (`@binding(k + 1)`).
pub(crate) fn declare<N: Display>(
    inputs: impl IntoIterator<Item = (N, &'static str)>,
    output: (&str, &str),
) -> String {
    let mut s = String::new();
    let mut k = 0;
    for (name, elem) in inputs {
        let _ = writeln!(
            s,
            "@group(0) @binding({k}) var<storage, read> {name}: array<{elem}>;"
        );
        k += 1;
    }
    let (name, elem) = output;
    let _ = writeln!(
        s,
        "@group(0) @binding({k}) var<storage, read_write> {name}: array<{elem}>;"
    );
    let _ = writeln!(
        s,
        "@group(0) @binding({}) var<storage, read> params: array<u32>;",
        k + 1
    );
    s
}

#[cfg(test)]
mod tests {
    use super::Bindings;

    #[test]
    fn declarations_follow_the_convention() {
        let b = Bindings {
            inputs: &[("x", "f32"), ("t", "u32")],
            output: ("dst", "f32"),
        };
        assert_eq!(
            b.wgsl(),
            "@group(0) @binding(0) var<storage, read> x: array<f32>;\n\
             @group(0) @binding(1) var<storage, read> t: array<u32>;\n\
             @group(0) @binding(2) var<storage, read_write> dst: array<f32>;\n\
             @group(0) @binding(3) var<storage, read> params: array<u32>;\n"
        );
    }
}
