//! CPU matmul through the `gemm` crate: the fallback device's kernel and the oracle the GPU
//! kernels (`shaders/matmul*.wgsl`) are tested against.
//!
//! Views go to gemm as row and column strides, so transposed, narrowed and broadcast operands
//! are never copied. Batches are a loop over per-matrix gemm calls: threads go inside each
//! product when products are large, across the batch when they are small.

use super::alloc::try_vec;
use super::strided::walk;
use crate::shape::Layout;
use crate::Result;
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Below this many multiply-adds per matrix, a batch runs its products in parallel (one thread
/// each) instead of splitting each product: a 64×64×64 product is done in microseconds, less
/// than gemm's own thread hand-off.
const SMALL_PRODUCT: usize = 64 * 64 * 64;

/// Most parts one product is cut into: enough for 16 cores, few enough that re-packing the
/// shared operand once per part (see [`split`]) stays small next to the product.
const MAX_PARTS: usize = 16;
/// Fewest output rows or columns in a part. Each part re-packs all of the operand it shares
/// with the others (B for row parts, A for column parts), at tens of multiply-adds' cost an
/// element once that operand is past L2: on 2 threads a `[1024, 1024]²` product in 64-row
/// parts ran 1.5-1.7x slower than in 512-row halves, in 256-row parts about as fast.
const MIN_SIDE: usize = 256;
/// The fewest rows or columns of a part whose shared operand fits in [`CACHED`] elements
/// (1 MiB): it packs from cache, cheaply (a weight gradient `[64, 2048]ᵀ · [2048, 256]` in
/// 64-column parts ran within the noise of 128-column halves on 2 threads).
const MIN_SIDE_CACHED: usize = 64;
/// See [`MIN_SIDE_CACHED`].
const CACHED: usize = 1 << 18;
/// Most activation rows `x · Wᵀ` runs as row dot products ([`super::matvec::matvec_t_rows`])
/// rather than through gemm: a batched decode step of up to 16 sequences.
const BATCHED_DECODE_ROWS: usize = 16;
/// Fewest multiply-adds in a part: about 60 µs of one core, well past rayon's hand-off.
const MIN_WORK: usize = 1 << 21;
/// Fewest rows or columns of each half when a product whose shared operand is past cache
/// still splits in two: one part leaves every other core idle, where halves of this size
/// re-pack the shared operand at about a fifth of their own cost. A BERT feed-forward's down
/// projection (`[416, 1536] · [1536, 384]`, a third of the model's work) ran on one core
/// under [`MIN_SIDE`] alone.
const MIN_HALF: usize = 128;

/// How a product `[m, k] · [k, n]` is cut for threads: `(rows, parts)`, parts of output rows
/// when `rows` else of columns, along the longer side. A function of the shape alone (never of
/// the thread count), since gemm's bits depend on the shape of each call ([`Mat::run_split`]).
/// A power of two, so that parts spread evenly over 2, 4, 8 or 16 cores.
fn split(m: usize, n: usize, k: usize) -> (bool, usize) {
    let rows = m > n;
    let shared = k.saturating_mul(if rows { n } else { m });
    let min_side = if shared <= CACHED {
        MIN_SIDE_CACHED
    } else {
        MIN_SIDE
    };
    let side = m.max(n);
    let most = (side / min_side)
        .max(if side >= 2 * MIN_HALF { 2 } else { 1 })
        .min(m.saturating_mul(n).saturating_mul(k) / MIN_WORK)
        .clamp(1, MAX_PARTS);
    // The largest power of two not above `most`.
    (rows, 1 << most.ilog2())
}

/// `A · B` for the views `la` of `a` (`[..batch, M, K]`) and `lb` of `b` (`[..batch, K, N]`,
/// same batch dims), packed row-major as `[..batch, M, N]`.
pub(crate) fn matmul(a: &[f32], la: &Layout, b: &[f32], lb: &Layout) -> Result<Vec<f32>> {
    matmul_bias(a, la, b, lb, None)
}

/// [`matmul`] plus a bias row (`N` values) added to every output row: a linear layer's
/// `x · Wᵀ + b` in one pass over the output, with the bits of the product followed by the add
/// (see [`Mat::gemm`]).
pub(crate) fn matmul_bias(
    a: &[f32],
    la: &Layout,
    b: &[f32],
    lb: &Layout,
    bias: Option<&[f32]>,
) -> Result<Vec<f32>> {
    let nd = la.shape.len();
    let (m, k, n) = (la.shape[nd - 2], la.shape[nd - 1], lb.shape[nd - 1]);
    let batch_shape = &la.shape[..nd - 2];
    let batches: usize = batch_shape.iter().product();
    let total = batches * m * n;
    // A huge output is an out-of-memory error, not an abort.
    let mut out = try_vec::<f32>("matmul", total)?;
    if total == 0 || k == 0 {
        // An empty sum is 0 (plus the bias, added as the op would).
        out.resize(total, 0.0);
        if let Some(bias) = bias {
            add_rows(&mut out, bias);
        }
        return Ok(out);
    }
    // Storage index of each batch's first element of A and B.
    let mut starts = Vec::with_capacity(batches);
    walk(
        batch_shape,
        [&la.strides[..nd - 2], &lb.strides[..nd - 2]],
        [la.offset, lb.offset],
        0..batches,
        |[p, q]| starts.push((p, q)),
    );
    let mat = Mat {
        m,
        k,
        n,
        a_rs: la.strides[nd - 2],
        a_ks: la.strides[nd - 1],
        b_ks: lb.strides[nd - 2],
        b_cs: lb.strides[nd - 1],
        bias,
    };
    // One activation row against a weight with contiguous rows (`x · Wᵀ`, a decode step):
    // the row-parallel kernel, several times faster than gemm's matrix-vector case.
    if batches == 1 && m == 1 && mat.a_ks == 1 && mat.b_ks == 1 {
        let (p, q) = starts[0];
        out.resize(n, 0.0);
        super::matvec::matvec_t(&a[p..p + k], b, q, n, mat.b_cs, &mut out);
        if let Some(bias) = bias {
            add_rows(&mut out, bias);
        }
        return Ok(out);
    }
    // A few activation rows (a batched decode step): the same kernel, each chunk of weight
    // rows run against every activation row while in cache; gemm would pack the transposed
    // weight first, reading and writing it once more per call.
    if batches == 1 && m <= BATCHED_DECODE_ROWS && mat.a_ks == 1 && mat.a_rs == k && mat.b_ks == 1 {
        let (p, q) = starts[0];
        out.resize(m * n, 0.0);
        super::matvec::matvec_t_rows(&a[p..p + m * k], m, b, q, n, mat.b_cs, &mut out);
        if let Some(bias) = bias {
            add_rows(&mut out, bias);
        }
        return Ok(out);
    }
    // gemm writes every output element without reading it, so the output is not zeroed
    // first: that pass alone costs ~2% of a 1024³ product.
    let spare = &mut out.spare_capacity_mut()[..total];
    // Activations `[..batch, M, K]` against one shared matrix (`x · Wᵀ` of a linear layer):
    // the batch folds into M when A's rows are evenly strided across it, so one large product
    // runs (what PyTorch does) instead of `batches` small ones.
    if batches > 1 && lb.strides[..nd - 2].iter().all(|&s| s == 0) && rows_fold(la) {
        let mat = Mat {
            m: batches * m,
            ..mat
        };
        let (p, q) = starts[0];
        mat.run((a, p), (b, q), spare, mat.m * n * k >= SMALL_PRODUCT);
        // SAFETY: `Mat::run` wrote all `batches · m · n` slots.
        unsafe { out.set_len(total) };
        return Ok(out);
    }
    let small = m * n * k < SMALL_PRODUCT;
    if batches > 1 && small {
        spare
            .par_chunks_mut(m * n)
            .zip(starts)
            .for_each(|(c, (p, q))| mat.run((a, p), (b, q), c, false));
    } else {
        for (c, (p, q)) in spare.chunks_mut(m * n).zip(starts) {
            mat.run((a, p), (b, q), c, !small);
        }
    }
    // SAFETY: every m×n block of the first `total` slots was written by `Mat::run`.
    unsafe { out.set_len(total) };
    Ok(out)
}

/// Whether the batch dims and the row dim of `l` (`[..batch, M, K]`) walk one evenly strided
/// sequence of rows, so the batch can be read as more rows of one matrix.
fn rows_fold(l: &Layout) -> bool {
    let nd = l.shape.len();
    let mut expect = l.strides[nd - 2] * l.shape[nd - 2];
    for i in (0..nd - 2).rev() {
        if l.shape[i] != 1 && l.strides[i] != expect {
            return false;
        }
        expect *= l.shape[i];
    }
    true
}

/// `row[j] += bias[j]` for every packed row of `out` (`bias.len()` wide): the add op's `x + b`,
/// operands in its order.
fn add_rows(out: &mut [f32], bias: &[f32]) {
    for row in out.chunks_exact_mut(bias.len().max(1)) {
        add_row(row, bias);
    }
}

#[inline]
fn add_row(row: &mut [f32], bias: &[f32]) {
    for (x, &b) in row.iter_mut().zip(bias) {
        *x += b;
    }
}

/// One product's sizes and strides (in elements), and the bias row added to its output.
#[derive(Clone, Copy)]
struct Mat<'a> {
    m: usize,
    k: usize,
    n: usize,
    a_rs: usize,
    a_ks: usize,
    b_ks: usize,
    b_cs: usize,
    bias: Option<&'a [f32]>,
}

impl Mat<'_> {
    /// `c = A · B` with A's element (0, 0) at `a[p]` and B's at `b[q]`; `c` is packed `M × N`
    /// and fully written (its previous contents are never read).
    fn run(
        &self,
        (a, p): (&[f32], usize),
        (b, q): (&[f32], usize),
        c: &mut [MaybeUninit<f32>],
        threads: bool,
    ) {
        let &Mat {
            m,
            k,
            n,
            a_rs,
            a_ks,
            b_ks,
            b_cs,
            ..
        } = self;
        // Every index gemm forms is in bounds: the views were validated against their storage
        // when they were made, so p + (m-1)*a_rs + (k-1)*a_ks < a.len() (likewise for b), and c
        // holds m * n elements.
        assert!(m > 0 && n > 0 && k > 0 && c.len() == m * n);
        assert!(p + (m - 1) * a_rs + (k - 1) * a_ks < a.len());
        assert!(q + (k - 1) * b_ks + (n - 1) * b_cs < b.len());
        if threads {
            let (rows, parts) = split(m, n, k);
            if parts > 1 {
                return self.run_split((a, p), (b, q), c, (rows, parts));
            }
        }
        // SAFETY: bounds asserted above; `c` is exclusively borrowed and does not alias `a`/`b`.
        unsafe {
            self.gemm(
                (m, n),
                0,
                c.as_mut_ptr().cast::<f32>(),
                a.as_ptr().add(p),
                b.as_ptr().add(q),
            )
        }
    }

    /// One single-threaded gemm call: `dst[m × n]` (row stride `self.n`) `:= A · B` with A at
    /// `a` and B at `b` read through this product's strides.
    ///
    /// # Safety
    /// Every element `a + i * a_rs + l * a_ks` and `b + l * b_ks + j * b_cs` (`i < m`, `l < k`,
    /// `j < n`) is readable, every `dst + i * self.n + j` writable and touched by no other
    /// thread during the call, and `dst` does not alias `a` or `b`. With `read_dst = false`
    /// gemm computes `dst := 1.0 · lhs · rhs` and only stores to dst (it zeroes alpha and takes
    /// its write-only paths), so `dst` may be uninitialised.
    ///
    /// With a bias, output column `j` (of the whole product: this call's columns start at `c0`)
    /// gets `bias[c0 + j]` added. Where gemm computes each element's whole sum in registers
    /// and then `dst + 1.0 · sum` with one rounding (its microkernel, one depth block: K up to
    /// 512, gemm's smallest block) the rows are filled with the bias first and gemm reads them
    /// back: one pass over the output instead of two, the same bits as the product followed
    /// by the add. Its other paths (K <= 2, a single row or column, tiny outputs) accumulate
    /// into `dst` term by term, so there the bias is added afterwards.
    unsafe fn gemm(
        &self,
        (m, n): (usize, usize),
        c0: usize,
        dst: *mut f32,
        a: *const f32,
        b: *const f32,
    ) {
        let bias = self.bias.map(|v| &v[c0..c0 + n]);
        let fused = bias.is_some() && self.k > 2 && self.k <= 512 && m > 1 && n > 1 && m * n > 256;
        if let (Some(bias), true) = (bias, fused) {
            for r in 0..m {
                // SAFETY: row `r` of this call's block is the caller's (contract above).
                unsafe { std::ptr::copy_nonoverlapping(bias.as_ptr(), dst.add(r * self.n), n) };
            }
        }
        // SAFETY: the caller's contract; with `fused` every element gemm reads was written above.
        unsafe {
            gemm::gemm(
                m,
                n,
                self.k,
                dst,
                1,
                self.n as isize,
                fused,
                a,
                self.a_ks as isize,
                self.a_rs as isize,
                b,
                self.b_cs as isize,
                self.b_ks as isize,
                if fused { 1.0 } else { 0.0 },
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
        if let (Some(bias), false) = (bias, fused) {
            for r in 0..m {
                // SAFETY: as above; gemm wrote the whole block.
                add_row(
                    unsafe { std::slice::from_raw_parts_mut(dst.add(r * self.n), n) },
                    bias,
                );
            }
        }
    }

    /// [`Mat::run`] in `parts` parts of output rows (`rows`) or columns, as [`split`] cut
    /// them, each one single-threaded gemm call, run in parallel. gemm's own threading scaled a
    /// `[2048, 64] · [64, 64]` product by 1.2-1.4x on 2 cores where a split gave 1.6-1.9x: each
    /// part packs its own small operand instead of threads waiting on one packing.
    ///
    /// gemm picks its kernel and its depth blocking from the shape of each call (a block of at
    /// most 16 × 16 outputs sums in horizontal dot products; one row or column is a matrix-
    /// vector product; an output past 64 × 64 takes a cache-derived depth block where a
    /// smaller one takes K up to 512), so the bits of an element depend on the part that holds
    /// it. The parts therefore follow the shape alone, never the thread count: a 7-core machine
    /// gives the bits of a 2-core one.
    fn run_split(
        &self,
        (a, p): (&[f32], usize),
        (b, q): (&[f32], usize),
        c: &mut [MaybeUninit<f32>],
        (rows, parts): (bool, usize),
    ) {
        let Mat { m, n, .. } = *self;
        if rows {
            let per = m.div_ceil(parts);
            c.par_chunks_mut(per * n).enumerate().for_each(|(i, part)| {
                let sub = Mat {
                    m: part.len() / n,
                    ..*self
                };
                sub.run((a, p + i * per * self.a_rs), (b, q), part, false);
            });
        } else {
            let cols = n.div_ceil(parts);
            let parts = n.div_ceil(cols);
            // Column parts of a row-major `c` interleave, so they are written through a
            // pointer: part `i` stores only columns `i * cols..` of each row.
            let base = OutPtr::uninit(c);
            (0..parts).into_par_iter().for_each(|i| {
                let (c0, nc) = (i * cols, cols.min(n - i * cols));
                // SAFETY: as in `run` (`c` holds m * n elements; `b`'s bound covers every
                // column); the parts' column ranges are disjoint, so no two threads write
                // one element, and `c` outlives the parallel loop.
                unsafe {
                    self.gemm(
                        (m, nc),
                        c0,
                        base.at(c0),
                        a.as_ptr().add(p),
                        b.as_ptr().add(q + c0 * self.b_cs),
                    )
                }
            });
        }
    }
}

/// An output buffer that parallel tasks write in place, each task elements of its own: the
/// column parts of [`Mat::run_split`], and the fused attention's tasks, whose rows interleave
/// with other tasks' rows in a strided layout (so no task may hold a slice of the whole span).
#[derive(Clone, Copy)]
pub(crate) struct OutPtr {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: the tasks sharing an `OutPtr` write disjoint elements, and the buffer outlives the
// parallel loop that shares it (the contracts of `slice`, `mm` and `run_split`).
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    pub(crate) fn new(v: &mut [f32]) -> OutPtr {
        OutPtr {
            ptr: v.as_mut_ptr(),
            len: v.len(),
        }
    }

    fn uninit(v: &mut [MaybeUninit<f32>]) -> OutPtr {
        OutPtr {
            ptr: v.as_mut_ptr().cast::<f32>(),
            len: v.len(),
        }
    }

    /// The address of element `at` (`at <= len`).
    fn at(self, at: usize) -> *mut f32 {
        assert!(at <= self.len);
        // SAFETY: in bounds or one past the end (asserted).
        unsafe { self.ptr.add(at) }
    }

    /// The `n` elements from `at`.
    ///
    /// # Safety
    /// No other thread touches these elements while the slice lives, and the buffer outlives
    /// it.
    #[inline]
    pub(crate) unsafe fn slice<'a>(self, at: usize, n: usize) -> &'a mut [f32] {
        assert!(at + n <= self.len, "output row out of bounds");
        // SAFETY: in bounds (asserted); exclusive by the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(at), n) }
    }

    /// The block `dst[m × n]` from element `at`, row stride `ldd`, `:= (accumulate ? dst :
    /// 0) + beta · A · B`, with A `m × k` read at strides `(a_rs, a_cs)` and B `k × n` at
    /// `(b_rs, b_cs)`; single-threaded (the caller runs tasks in parallel).
    ///
    /// # Safety
    /// No other thread touches the block while the call runs.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) unsafe fn mm(
        self,
        (m, n, k): (usize, usize, usize),
        (at, ldd): (usize, usize),
        accumulate: bool,
        beta: f32,
        (a, a_rs, a_cs): (&[f32], usize, usize),
        (b, b_rs, b_cs): (&[f32], usize, usize),
    ) {
        if m == 0 || n == 0 {
            return;
        }
        assert!(
            at + (m - 1) * ldd + n <= self.len,
            "output block out of bounds"
        );
        let dst = self.at(at);
        if k == 0 {
            if !accumulate {
                for r in 0..m {
                    // SAFETY: row `r` of the block is in bounds (asserted) and the caller's.
                    unsafe { std::slice::from_raw_parts_mut(dst.add(r * ldd), n).fill(0.0) };
                }
            }
            return;
        }
        // The bounds of every index gemm reads (internal invariants of the callers' blocking).
        assert!((m - 1) * a_rs + (k - 1) * a_cs < a.len());
        assert!((k - 1) * b_rs + (n - 1) * b_cs < b.len());
        // SAFETY: the asserts above bound every element gemm reads or writes; the block is the
        // caller's alone and aliases neither operand. With `accumulate = false` gemm never
        // reads dst.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                dst,
                1,
                ldd as isize,
                accumulate,
                a.as_ptr(),
                a_cs as isize,
                a_rs as isize,
                b.as_ptr(),
                b_cs as isize,
                b_rs as isize,
                1.0,
                beta,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
    }
}

/// `dst[m × n]` (row stride `ldd`) `= (accumulate ? dst : 0) + beta · A · B` ([`OutPtr::mm`]
/// on a borrowed buffer): the tile product of the fused attention and of convolution.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(crate) fn mm(
    dims: (usize, usize, usize),
    dst: &mut [f32],
    ldd: usize,
    accumulate: bool,
    beta: f32,
    a: (&[f32], usize, usize),
    b: (&[f32], usize, usize),
) {
    // SAFETY: `dst` is exclusively borrowed: no other thread touches it.
    unsafe { OutPtr::new(dst).mm(dims, (0, ldd), accumulate, beta, a, b) }
}
