//! Elementwise programs ([`Program`], recorded by the tensor layer's lazy fusion) run on the
//! host in one pass over memory: the output is cut into blocks of [`BLOCK`] elements (fixed
//! split points, spread over threads for large outputs), and each node is evaluated over the
//! whole block into a per-thread scratch column before the next node runs. A chain of k ops
//! then reads its inputs and writes its output once, with no intermediate tensor, and the
//! columns stay in the first-level caches.
//!
//! Every node calls the very scalar function the op-by-op kernels call (`elementwise.rs`,
//! `typed.rs`, the table of `src/ops/`), and values live in the compute type of their dtype
//! (f32 for F32 and F16, with every F16 result rounded to f16 where the op-by-op path stores
//! it; i32; u32 for U32 and U8), so a fused program gives the op-by-op path's bits.

use super::normal::{normal, uniform, words, Dist};
use super::storage::CpuStorage;
use super::strided::{try_vec, walk, PAR_THRESHOLD};
use super::typed::clamp1;
use crate::ops::backend::ProgramCall;
use crate::ops::program::{Expr, Program};
use crate::ops::{
    BinaryFn, BinaryOp, BinaryVisitor, CmpOp, IntElem, UnaryFn, UnaryOp, UnaryVisitor,
};
use crate::shape::Layout;
use crate::{DType, Error, Result};
use half::f16;
use rayon::prelude::*;
use std::cell::RefCell;
use std::mem::MaybeUninit;

/// Elements per block: 48 scratch columns of 4096 words (the most nodes a program holds) stay
/// within a core's second-level cache, and a block is long enough for the loops to vectorise.
pub(crate) const BLOCK: usize = 4096;

/// Elements per parallel task (a multiple of [`BLOCK`]): large enough to amortise scheduling.
const TASK: usize = 4 * BLOCK;

/// One node's values over a block, in the compute type of its dtype.
enum Col {
    F(Vec<f32>),
    I(Vec<i32>),
    U(Vec<u32>),
}

impl Col {
    fn f(&self) -> Result<&[f32]> {
        match self {
            Col::F(v) => Ok(v),
            _ => Err(bug("a float operand holds integers")),
        }
    }

    /// Empties the column and makes it hold `kind`'s type, keeping the allocation when the type
    /// is already right (the scratch is reused block after block).
    fn reset(&mut self, kind: Kind) -> &mut Col {
        let same = matches!(
            (&*self, kind),
            (Col::F(_), Kind::F) | (Col::I(_), Kind::I) | (Col::U(_), Kind::U)
        );
        if !same {
            *self = match kind {
                Kind::F => Col::F(Vec::with_capacity(BLOCK)),
                Kind::I => Col::I(Vec::with_capacity(BLOCK)),
                Kind::U => Col::U(Vec::with_capacity(BLOCK)),
            };
        }
        match self {
            Col::F(v) => v.clear(),
            Col::I(v) => v.clear(),
            Col::U(v) => v.clear(),
        }
        self
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    F,
    I,
    U,
}

fn kind(d: DType) -> Kind {
    match d {
        DType::F32 | DType::F16 => Kind::F,
        DType::I32 => Kind::I,
        DType::U32 | DType::U8 => Kind::U,
    }
}

fn bug(what: &str) -> Error {
    Error::InvalidArgument {
        op: "fused elementwise",
        message: format!("{what} (a wgtensor bug: the tensor layer checks dtypes first)"),
    }
}

/// An f32 rounded to the nearest f16, as f32 (exact): what the op-by-op path stores for F16.
#[inline(always)]
fn r16(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

thread_local! {
    /// Each thread's scratch columns, reused by every program it runs (no allocation per op).
    static SCRATCH: RefCell<Vec<Col>> = const { RefCell::new(Vec::new()) };
}

/// Runs `call` (its scalar parameters canonical bits, as for the GPU kernel) and returns the
/// packed output in the program's output dtype.
///
/// # Errors
/// [`Error::OutOfMemory`] naming `call.name` when the host cannot allocate the output.
pub(crate) fn run(call: &ProgramCall<CpuStorage>) -> Result<CpuStorage> {
    let ProgramCall {
        name,
        program,
        views: inputs,
        scalars,
        ..
    } = *call;
    let n = call.n();
    if program.nodes.is_empty() || inputs.len() != program.inputs.len() {
        return Err(bug("a program without nodes or with unbound inputs"));
    }
    let job = Job {
        program,
        inputs,
        scalars,
    };
    Ok(match program.out_dtype() {
        DType::F32 => CpuStorage::F32(job.fill(name, n, |c, o| store(c.f()?, o, |x| x))?),
        DType::F16 => CpuStorage::F16(job.fill(name, n, |c, o| store(c.f()?, o, f16::from_f32))?),
        DType::I32 => CpuStorage::I32(job.fill(name, n, |c, o| match c {
            Col::I(v) => store(v, o, |x| x),
            _ => Err(bug("an i32 output holds another type")),
        })?),
        DType::U32 => CpuStorage::U32(job.fill(name, n, |c, o| match c {
            Col::U(v) => store(v, o, |x| x),
            _ => Err(bug("a u32 output holds another type")),
        })?),
        DType::U8 => CpuStorage::U8(job.fill(name, n, |c, o| match c {
            Col::U(v) => store(v, o, |x| x as u8),
            _ => Err(bug("a u8 output holds another type")),
        })?),
    })
}

/// Writes a block's last column to its output slots, converted by `f`.
#[inline(always)]
fn store<S: Copy, T>(col: &[S], out: &mut [MaybeUninit<T>], f: impl Fn(S) -> T) -> Result<()> {
    if col.len() != out.len() {
        return Err(bug("a block's column and output differ in length"));
    }
    for (o, &x) in out.iter_mut().zip(col) {
        o.write(f(x));
    }
    Ok(())
}

struct Job<'a> {
    program: &'a Program,
    inputs: &'a [(&'a CpuStorage, &'a Layout)],
    scalars: &'a [u32],
}

impl Job<'_> {
    /// The output, block by block: every block evaluated into the calling thread's scratch and
    /// stored through `put(last column, block's slots)`.
    fn fill<T: Send>(
        &self,
        name: &'static str,
        n: usize,
        put: impl Fn(&Col, &mut [MaybeUninit<T>]) -> Result<()> + Sync,
    ) -> Result<Vec<T>> {
        let mut v: Vec<T> = try_vec(name, n)?;
        let spare = &mut v.spare_capacity_mut()[..n];
        let task = |start: usize, out: &mut [MaybeUninit<T>]| -> Result<()> {
            SCRATCH.with(|s| {
                let mut cols = s.borrow_mut();
                for (b, block) in out.chunks_mut(BLOCK).enumerate() {
                    let last = self.eval(&mut cols, start + b * BLOCK, block.len())?;
                    put(last, block)?;
                }
                Ok(())
            })
        };
        if n >= PAR_THRESHOLD {
            spare
                .par_chunks_mut(TASK)
                .enumerate()
                .try_for_each(|(i, chunk)| task(i * TASK, chunk))?;
        } else {
            task(0, spare)?;
        }
        // SAFETY: every task wrote all of its slots (each block stores `block.len()` values),
        // and an error returned above before this point.
        unsafe { v.set_len(n) };
        Ok(v)
    }

    /// Evaluates every node over elements `start..start + m`; returns the last node's column.
    fn eval<'c>(&self, cols: &'c mut Vec<Col>, start: usize, m: usize) -> Result<&'c Col> {
        let nodes = &self.program.nodes;
        while cols.len() < nodes.len() {
            cols.push(Col::F(Vec::with_capacity(BLOCK)));
        }
        for (i, &(expr, dt)) in nodes.iter().enumerate() {
            let (done, rest) = cols.split_at_mut(i);
            let out = rest[0].reset(kind(dt));
            self.node(done, out, expr, dt, start, m)?;
        }
        Ok(&cols[nodes.len() - 1])
    }

    fn node(
        &self,
        done: &[Col],
        out: &mut Col,
        expr: Expr,
        dt: DType,
        start: usize,
        m: usize,
    ) -> Result<()> {
        let col = |k: usize| done.get(k).ok_or_else(|| bug("a node reads a later node"));
        match expr {
            Expr::Input(k) => {
                let &(s, l) = self
                    .inputs
                    .get(k)
                    .ok_or_else(|| bug("a program reads an unbound input"))?;
                gather(s, l, out, start, m)
            }
            Expr::Scalar(k) => {
                let bits = *self
                    .scalars
                    .get(k)
                    .ok_or_else(|| bug("a program reads a missing scalar"))?;
                match out {
                    Col::F(v) => v.resize(m, f32::from_bits(bits)),
                    Col::I(v) => v.resize(m, bits as i32),
                    Col::U(v) => v.resize(m, bits),
                }
                Ok(())
            }
            Expr::Index => match out {
                Col::U(v) => {
                    v.extend((start..start + m).map(|e| e as u32));
                    Ok(())
                }
                _ => Err(bug("an index node is not u32")),
            },
            Expr::Random(dist, w) => {
                let word = |k: usize| match col(w[k])? {
                    Col::U(v) => v.first().copied().ok_or_else(|| bug("an empty block")),
                    _ => Err(bug("a random node's seed is not u32")),
                };
                let seed = u64::from(word(0)?) | (u64::from(word(1)?) << 32);
                let offset = u64::from(word(2)?) | (u64::from(word(3)?) << 32);
                let Col::F(v) = out else {
                    return Err(bug("a random node is not a float"));
                };
                let draw = |e: usize| {
                    let w = words(seed, offset, e as u64);
                    match dist {
                        Dist::Uniform => uniform(w[0]),
                        Dist::Normal => normal(w[0], w[1]),
                    }
                };
                if dt == DType::F16 {
                    v.extend((start..start + m).map(|e| r16(draw(e))));
                } else {
                    v.extend((start..start + m).map(draw));
                }
                Ok(())
            }
            Expr::Unary(op, a) => op.visit(Unary(col(a)?, out, dt)),
            Expr::Binary(op, a, b) => op.visit(Binary(col(a)?, col(b)?, out, dt)),
            Expr::Compare(op, a, b) => compare(op, col(a)?, col(b)?, out),
            Expr::Where(c, a, b) => select(col(c)?, col(a)?, col(b)?, out),
            Expr::Clamp(x, lo, hi) => clamp(col(x)?, col(lo)?, col(hi)?, out, dt),
            Expr::Cast(a) => cast(col(a)?, self.program.nodes[a].1, out, dt),
        }
    }
}

/// Elements `start..start + m` of the view `l` of `s` (walked over its own shape, which is the
/// program's or, for a packed view, has as many elements), widened to the compute type.
fn gather(s: &CpuStorage, l: &Layout, out: &mut Col, start: usize, m: usize) -> Result<()> {
    fn go<T: Copy, U: Clone>(
        v: &[T],
        l: &Layout,
        out: &mut Vec<U>,
        start: usize,
        m: usize,
        f: impl Fn(T) -> U,
    ) {
        if l.is_contiguous() {
            let base = l.offset + start;
            out.extend(v[base..base + m].iter().map(|&x| f(x)));
        } else if l.strides.iter().all(|&s| s == 0) {
            // One value broadcast (a 0-d operand such as a constant): no walk per element.
            out.extend(std::iter::repeat_n(f(v[l.offset]), m));
        } else if l.strides.last() == Some(&1) {
            // Packed rows (a bias broadcast over rows, a narrowed view): copy row runs.
            let d = l.shape.len();
            let inner = l.shape[d - 1];
            let (mut e, end) = (start, start + m);
            while e < end {
                let (mut r, col) = (e / inner, e % inner);
                let mut at = l.offset + col;
                for i in (0..d - 1).rev() {
                    at += (r % l.shape[i]) * l.strides[i];
                    r /= l.shape[i];
                }
                let len = (inner - col).min(end - e);
                out.extend(v[at..at + len].iter().map(|&x| f(x)));
                e += len;
            }
        } else {
            walk(
                &l.shape,
                [&l.strides],
                [l.offset],
                start..start + m,
                |[p]| {
                    out.push(f(v[p]));
                },
            );
        }
    }
    match (s, out) {
        (CpuStorage::F32(v), Col::F(o)) => go(v, l, o, start, m, |x| x),
        (CpuStorage::F16(v), Col::F(o)) => go(v, l, o, start, m, f16::to_f32),
        (CpuStorage::I32(v), Col::I(o)) => go(v, l, o, start, m, |x| x),
        (CpuStorage::U32(v), Col::U(o)) => go(v, l, o, start, m, |x| x),
        (CpuStorage::U8(v), Col::U(o)) => go(v, l, o, start, m, u32::from),
        _ => return Err(bug("an input's storage differs from its dtype")),
    }
    Ok(())
}

struct Unary<'a>(&'a Col, &'a mut Col, DType);

impl UnaryVisitor for Unary<'_> {
    type Out = Result<()>;
    fn visit<F: UnaryFn>(self, _: UnaryOp) -> Result<()> {
        // The column paired with itself: `Second` reads only the first of each pair.
        let Unary(x, out, dt) = self;
        map2::<Second<F>>(x, x, out, dt, "a unary op on an unsupported dtype")
    }
}

/// A unary op as a binary one of its operand and itself, so both arities share [`map2`].
struct Second<F>(std::marker::PhantomData<F>);

impl<F: UnaryFn> BinaryFn for Second<F> {
    #[inline(always)]
    fn f32(a: f32, _: f32) -> f32 {
        F::f32(a)
    }
    #[inline(always)]
    fn int<T: IntElem>(a: T, _: T) -> T {
        F::int(a)
    }
}

struct Binary<'a>(&'a Col, &'a Col, &'a mut Col, DType);

impl BinaryVisitor for Binary<'_> {
    type Out = Result<()>;
    fn visit<F: BinaryFn>(self, _: BinaryOp) -> Result<()> {
        let Binary(x, y, out, dt) = self;
        map2::<F>(x, y, out, dt, "a binary op on an unsupported dtype")
    }
}

/// `F` of the columns `x` and `y` element by element onto `out`, in the result dtype `dt`
/// (f16 results rounded as they are stored); `unsupported` names the bug of another dtype.
fn map2<F: BinaryFn>(
    x: &Col,
    y: &Col,
    out: &mut Col,
    dt: DType,
    unsupported: &'static str,
) -> Result<()> {
    match (x, y, out, dt) {
        (Col::F(x), Col::F(y), Col::F(o), DType::F16) => {
            o.extend(x.iter().zip(y).map(|(&a, &b)| r16(F::f32(a, b))))
        }
        (Col::F(x), Col::F(y), Col::F(o), _) => {
            o.extend(x.iter().zip(y).map(|(&a, &b)| F::f32(a, b)))
        }
        (Col::I(x), Col::I(y), Col::I(o), DType::I32) => {
            o.extend(x.iter().zip(y).map(|(&a, &b)| F::int(a, b)))
        }
        (Col::U(x), Col::U(y), Col::U(o), DType::U32) => {
            o.extend(x.iter().zip(y).map(|(&a, &b)| F::int(a, b)))
        }
        _ => return Err(bug(unsupported)),
    }
    Ok(())
}

/// 1 or 0 by the table's `holds` on the operands' ordering (NaN: unordered), as `typed::compare`.
fn compare(op: CmpOp, a: &Col, b: &Col, out: &mut Col) -> Result<()> {
    let Col::U(o) = out else {
        return Err(bug("a comparison is not u8"));
    };
    let f = |c: Option<std::cmp::Ordering>| u32::from(op.holds(c));
    match (a, b) {
        (Col::F(x), Col::F(y)) => o.extend(x.iter().zip(y).map(|(p, q)| f(p.partial_cmp(q)))),
        (Col::I(x), Col::I(y)) => o.extend(x.iter().zip(y).map(|(p, q)| f(p.partial_cmp(q)))),
        (Col::U(x), Col::U(y)) => o.extend(x.iter().zip(y).map(|(p, q)| f(p.partial_cmp(q)))),
        _ => return Err(bug("a comparison of two dtypes")),
    }
    Ok(())
}

fn select(mask: &Col, a: &Col, b: &Col, out: &mut Col) -> Result<()> {
    let Col::U(m) = mask else {
        return Err(bug("a where mask is not u8"));
    };
    match (a, b, out) {
        (Col::F(x), Col::F(y), Col::F(o)) => {
            o.extend((0..m.len()).map(|j| if m[j] != 0 { x[j] } else { y[j] }))
        }
        (Col::I(x), Col::I(y), Col::I(o)) => {
            o.extend((0..m.len()).map(|j| if m[j] != 0 { x[j] } else { y[j] }))
        }
        (Col::U(x), Col::U(y), Col::U(o)) => {
            o.extend((0..m.len()).map(|j| if m[j] != 0 { x[j] } else { y[j] }))
        }
        _ => return Err(bug("a where of two dtypes")),
    }
    Ok(())
}

fn clamp(x: &Col, lo: &Col, hi: &Col, out: &mut Col, dt: DType) -> Result<()> {
    match (x, lo, hi, out) {
        (Col::F(x), Col::F(a), Col::F(b), Col::F(o)) => {
            let c = (0..x.len()).map(|j| clamp1(x[j], a[j], b[j]));
            if dt == DType::F16 {
                o.extend(c.map(r16));
            } else {
                o.extend(c);
            }
        }
        (Col::I(x), Col::I(a), Col::I(b), Col::I(o)) => {
            o.extend((0..x.len()).map(|j| x[j].max(a[j]).min(b[j])))
        }
        (Col::U(x), Col::U(a), Col::U(b), Col::U(o)) => {
            o.extend((0..x.len()).map(|j| x[j].max(a[j]).min(b[j])))
        }
        _ => return Err(bug("a clamp of mixed dtypes")),
    }
    Ok(())
}

/// Rust `as` conversion from `from` to `to`, as `typed::convert` (float -> int truncates and
/// saturates, NaN -> 0; int -> int keeps the low bits; int -> f16 rounds once through f32).
fn cast(x: &Col, from: DType, out: &mut Col, to: DType) -> Result<()> {
    use DType::*;
    match (x, out) {
        (Col::F(v), Col::F(o)) if to == F16 && from != F16 => o.extend(v.iter().map(|&f| r16(f))),
        (Col::F(v), Col::F(o)) => o.extend_from_slice(v),
        (Col::F(v), Col::I(o)) => o.extend(v.iter().map(|&f| f as i32)),
        (Col::F(v), Col::U(o)) if to == U8 => o.extend(v.iter().map(|&f| u32::from(f as u8))),
        (Col::F(v), Col::U(o)) => o.extend(v.iter().map(|&f| f as u32)),
        (Col::I(v), Col::F(o)) if to == F16 => o.extend(v.iter().map(|&i| r16(i as f32))),
        (Col::I(v), Col::F(o)) => o.extend(v.iter().map(|&i| i as f32)),
        (Col::I(v), Col::I(o)) => o.extend_from_slice(v),
        (Col::I(v), Col::U(o)) if to == U8 => o.extend(v.iter().map(|&i| u32::from(i as u8))),
        (Col::I(v), Col::U(o)) => o.extend(v.iter().map(|&i| i as u32)),
        (Col::U(v), Col::F(o)) if to == F16 => o.extend(v.iter().map(|&u| r16(u as f32))),
        (Col::U(v), Col::F(o)) => o.extend(v.iter().map(|&u| u as f32)),
        (Col::U(v), Col::I(o)) => o.extend(v.iter().map(|&u| u as i32)),
        (Col::U(v), Col::U(o)) if to == U8 && from != U8 => {
            o.extend(v.iter().map(|&u| u32::from(u as u8)))
        }
        (Col::U(v), Col::U(o)) => o.extend_from_slice(v),
    }
    Ok(())
}

#[cfg(test)]
#[path = "fused_tests.rs"]
mod tests;
