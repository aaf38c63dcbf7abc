//! A pending fused program whose output is larger than one GPU binding
//! (`max_storage_buffer_binding_size`), run in blocks of rows (dim 0): `rand`, `randn`,
//! `bernoulli` and dropout masks of any size, and every elementwise chain over them.
//!
//! Each block runs the program over its rows, with each input narrowed to those rows (copied into
//! a bindable buffer when its own buffer is too large to bind), and the blocks are joined by
//! buffer copies. Element `e` of a block is element `base + e` of the whole output: `Expr::Index`
//! nodes read `base + e`, and Philox draws start at `offset + base`, so the values are the ones an
//! unsplit kernel would compute (and the CPU's, element for element).
//!
//! Here in the GPU backend, beside `elementwise.rs` which runs one block: only a GPU has a
//! binding limit, so the tensor layer hands a pending program to `BackendDevice::run_fused`
//! ([`GpuDevice::run_pending`]) and never decides whether it is split.

use super::{GpuBuffer, GpuDevice};
use crate::ops::backend::ProgramCall;
use crate::ops::program::{Expr, NodeId, Program};
use crate::ops::BinaryOp;
use crate::shape::Layout;
use crate::{DType, Error, Result};

impl GpuDevice {
    /// Runs the pending program `call` as one kernel when its output fits one binding, else in
    /// blocks of rows (see the module doc), into one packed output buffer.
    pub(crate) fn run_pending(&self, call: &ProgramCall<GpuBuffer>) -> Result<GpuBuffer> {
        if needed(self, call) {
            run(self, call)
        } else {
            self.run_program(call)
        }
    }
}

/// Whether `p`'s output is too large for one binding of `g` (so [`run`] must split it).
fn needed(g: &GpuDevice, p: &ProgramCall<GpuBuffer>) -> bool {
    let bytes = p.n() as u64 * p.program.out_dtype().size_in_bytes() as u64;
    bytes > g.binding_limit()
}

/// Runs `p` on `g` in blocks of rows, each within one binding, into one packed output buffer.
fn run(g: &GpuDevice, p: &ProgramCall<GpuBuffer>) -> Result<GpuBuffer> {
    let (views, pn) = (p.views, p.n());
    let limit = g.binding_limit();
    let too_large = |bytes: u64| Error::BufferTooLarge {
        op: p.name,
        device: g.label().to_string(),
        adapter: g.adapter_name(),
        bytes,
        limit,
        limit_name:
            "max_storage_buffer_binding_size (a strided operand of a too-wide row cannot be split)",
    };
    // Packed inputs (and none at all) follow the flat index: split as one long row of elements.
    let flat = views.iter().all(|(_, l)| l.is_contiguous());
    let shape: Vec<usize> = if flat || p.shape.is_empty() {
        vec![pn]
    } else {
        p.shape.to_vec()
    };
    let layouts: Vec<Layout> = views
        .iter()
        .map(|(_, l)| {
            if flat {
                Layout {
                    shape: vec![pn],
                    strides: vec![1],
                    offset: l.offset,
                }
            } else {
                (*l).clone()
            }
        })
        .collect();
    let out_size = p.program.out_dtype().size_in_bytes() as u64;
    let rows = shape[0];
    let row_elems = pn / rows.max(1);
    let mut per_block = (limit / (row_elems as u64 * out_size).max(1)) as usize;
    for (k, (b, _)) in views.iter().enumerate() {
        if b.size > limit {
            let isize = p.program.inputs[k].size_in_bytes() as u64;
            per_block = per_block.min(rows_per_block(&layouts[k], isize, limit));
        }
    }
    // Every block but the last fills whole 4-byte words of the output (u8 four per word).
    let step = 4 / gcd(row_elems.max(1), 4);
    per_block -= per_block % step;
    if per_block == 0 {
        return Err(too_large(pn as u64 * out_size));
    }
    let mut blocks: Vec<(GpuBuffer, u64)> = Vec::new();
    let mut r0 = 0;
    while r0 < rows {
        let n = per_block.min(rows - r0);
        let base = r0 * row_elems;
        // The inputs' rows r0..r0 + n, bound whole where they fit, else copied out.
        let mut owned: Vec<(Option<GpuBuffer>, Layout)> = Vec::with_capacity(views.len());
        for (k, (b, _)) in views.iter().enumerate() {
            let l = &layouts[k];
            let mut nl = l.clone();
            nl.shape[0] = n;
            nl.offset = l.offset + r0 * l.strides[0];
            if b.size <= limit {
                owned.push((None, nl));
                continue;
            }
            let isize = p.program.inputs[k].size_in_bytes() as u64;
            let start = nl.offset as u64 * isize;
            let aligned = start - start % 4;
            let end = (nl.span() as u64 * isize).next_multiple_of(4).min(b.size);
            if end - aligned > limit {
                return Err(too_large(end - aligned));
            }
            let copy = g.extract(p.name, b, aligned, end - aligned)?;
            nl.offset = ((start - aligned) / isize) as usize;
            owned.push((Some(copy), nl));
        }
        let block_views: Vec<(&GpuBuffer, &Layout)> = owned
            .iter()
            .zip(views)
            .map(|((copy, l), (b, _))| (copy.as_ref().unwrap_or(b), l))
            .collect();
        let (program, scalars) = rebase(p, base)?;
        let elems = n * row_elems;
        let out = g.run_program(&ProgramCall {
            name: p.name,
            program: &program,
            views: &block_views,
            scalars: &scalars,
            shape: &[elems],
        })?;
        blocks.push((out, elems as u64 * out_size));
        r0 += n;
    }
    let parts: Vec<(&GpuBuffer, u64)> = blocks.iter().map(|(b, len)| (b, *len)).collect();
    g.assemble(p.name, &parts)
}

/// `p`'s program for the block starting at element `base`: every `Index` reads `base + e` and
/// every Philox draw starts `base` counters later. Returns the program and its scalars.
fn rebase(p: &ProgramCall<GpuBuffer>, base: usize) -> Result<(Program, Vec<u32>)> {
    if base == 0 {
        return Ok((p.program.clone(), p.scalars.to_vec()));
    }
    let base32 = u32::try_from(base).map_err(|_| Error::InvalidArgument {
        op: p.name,
        message: format!("block start {base} exceeds the u32 index a kernel forms"),
    })?;
    let mut out = Program {
        nodes: Vec::with_capacity(p.program.nodes.len() + 4),
        inputs: p.program.inputs.clone(),
        scalars: 0,
    };
    let mut scalars = Vec::with_capacity(p.scalars.len() + 3);
    let mut scalar = |out: &mut Program, bits: u32, dt: DType| {
        scalars.push(bits);
        out.scalar(dt)
    };
    // The value of an original scalar node (Philox offsets are always scalars).
    let value = |id: NodeId| match p.program.nodes[id].0 {
        Expr::Scalar(k) => Ok(p.scalars[k]),
        _ => Err(Error::InvalidArgument {
            op: p.name,
            message: "a random draw whose offset is not a parameter (a wgtensor bug)".into(),
        }),
    };
    let mut map: Vec<NodeId> = Vec::with_capacity(p.program.nodes.len());
    for &(e, dt) in &p.program.nodes {
        let m = |i: NodeId| map[i];
        let id = match e {
            Expr::Input(k) => out.push(Expr::Input(k), dt),
            Expr::Scalar(k) => scalar(&mut out, p.scalars[k], dt),
            Expr::Index => {
                let i = out.push(Expr::Index, DType::U32);
                let b = scalar(&mut out, base32, DType::U32);
                out.push(Expr::Binary(BinaryOp::Add, i, b), dt)
            }
            Expr::Random(d, [s0, s1, o0, o1]) => {
                let offset =
                    (u64::from(value(o1)?) << 32 | u64::from(value(o0)?)).wrapping_add(base as u64);
                let lo = scalar(&mut out, offset as u32, DType::U32);
                let hi = scalar(&mut out, (offset >> 32) as u32, DType::U32);
                out.push(Expr::Random(d, [m(s0), m(s1), lo, hi]), dt)
            }
            Expr::Unary(op, a) => out.push(Expr::Unary(op, m(a)), dt),
            Expr::Binary(op, a, b) => out.push(Expr::Binary(op, m(a), m(b)), dt),
            Expr::Compare(op, a, b) => out.push(Expr::Compare(op, m(a), m(b)), dt),
            Expr::Where(c, a, b) => out.push(Expr::Where(m(c), m(a), m(b)), dt),
            Expr::Clamp(x, a, b) => out.push(Expr::Clamp(m(x), m(a), m(b)), dt),
            Expr::Cast(a) => out.push(Expr::Cast(m(a)), dt),
        };
        map.push(id);
    }
    Ok((out, scalars))
}

/// How many rows (dim 0) of the view `l` fit one binding (0 when none can).
fn rows_per_block(l: &Layout, esize: u64, limit: u64) -> usize {
    let stride0 = l.strides.first().copied().unwrap_or(0) as u64 * esize;
    let rest = Layout {
        shape: l.shape.iter().skip(1).copied().collect(),
        strides: l.strides.iter().skip(1).copied().collect(),
        offset: 0,
    }
    .span() as u64
        * esize;
    // Room for the 4-byte alignment of a copied block's start.
    limit
        .saturating_sub(rest + 4)
        .checked_div(stride0)
        .unwrap_or(0) as usize
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
