//! CPU `x · Wᵀ` for one activation row `x` `[K]` and a weight `W` `[N, K]` with contiguous rows
//! (`nn.Linear`'s layout; the decode step of a language model), in f32 or f16 weights.
//!
//! gemm's general path packs the transposed operand and runs its matrix-vector case on one
//! thread, several times slower than memory bandwidth allows. Here every output is one row's
//! dot product: rows are split across rayon's threads, four rows share each load of `x`, and
//! each row keeps two 8-lane fused-multiply-add chains. The arithmetic is fixed (see
//! [`dot_order`]), so AVX2 and the portable loop give the same bits, independent of the thread
//! count.

use half::f16;
use rayon::prelude::*;

/// A weight element the kernel reads: f32 or f16 (widened exactly to f32).
pub(crate) trait Elem: Copy + Send + Sync {
    fn f32(self) -> f32;
}

impl Elem for f32 {
    #[inline(always)]
    fn f32(self) -> f32 {
        self
    }
}

impl Elem for f16 {
    #[inline(always)]
    fn f32(self) -> f32 {
        self.to_f32()
    }
}

/// The order every output is computed in: element `i` of a 16-element step goes to lane
/// `i % 8` of chain `i / 8` by `fma(w, x, acc)`; the tail past the last full step continues
/// the same mapping; then the two chains are added lane by lane and the 8 lanes in a fixed
/// tree. This is the portable definition the AVX2 kernel reproduces exactly.
fn dot_order<W: Elem>(w: &[W], x: &[f32]) -> f32 {
    let mut acc = [[0f32; 8]; 2];
    for (i, (&a, &b)) in w.iter().zip(x).enumerate() {
        let t = i % 16;
        acc[t / 8][t % 8] = a.f32().mul_add(b, acc[t / 8][t % 8]);
    }
    finish(acc)
}

#[inline(always)]
fn finish(acc: [[f32; 8]; 2]) -> f32 {
    let s: [f32; 8] = std::array::from_fn(|l| acc[0][l] + acc[1][l]);
    ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::finish;
    use half::f16;
    use std::arch::x86_64::*;

    /// 8 weights from `p` as f32.
    pub(super) trait Load: Copy {
        /// # Safety
        /// `p` points at 8 readable elements; AVX2 and F16C are available.
        unsafe fn load8(p: *const Self) -> __m256;
    }

    impl Load for f32 {
        #[inline(always)]
        unsafe fn load8(p: *const f32) -> __m256 {
            // SAFETY: the caller guarantees 8 readable f32s.
            unsafe { _mm256_loadu_ps(p) }
        }
    }

    impl Load for f16 {
        #[inline(always)]
        unsafe fn load8(p: *const f16) -> __m256 {
            // SAFETY: the caller guarantees 8 readable f16s (16 bytes); F16C widens exactly.
            unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
        }
    }

    /// `R` rows (each `x.len()` elements, `ROWS[r]`) dotted with `x` in `dot_order`'s order.
    ///
    /// # Safety
    /// AVX2, FMA and F16C are available; every row holds at least `x.len()` elements.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_rows<W: Load + super::Elem, const R: usize>(
        rows: [&[W]; R],
        x: &[f32],
        out: &mut [f32],
    ) {
        let k = x.len();
        let steps = k / 16;
        let mut a0 = [_mm256_setzero_ps(); R];
        let mut a1 = [_mm256_setzero_ps(); R];
        for s in 0..steps {
            let i = 16 * s;
            // SAFETY: i + 16 <= k, inside x and every row.
            unsafe {
                let x0 = _mm256_loadu_ps(x.as_ptr().add(i));
                let x1 = _mm256_loadu_ps(x.as_ptr().add(i + 8));
                for r in 0..R {
                    let p = rows[r].as_ptr().add(i);
                    a0[r] = _mm256_fmadd_ps(W::load8(p), x0, a0[r]);
                    a1[r] = _mm256_fmadd_ps(W::load8(p.add(8)), x1, a1[r]);
                }
            }
        }
        for r in 0..R {
            let mut acc = [[0f32; 8]; 2];
            // SAFETY: each array is 8 f32s, one __m256.
            unsafe {
                _mm256_storeu_ps(acc[0].as_mut_ptr(), a0[r]);
                _mm256_storeu_ps(acc[1].as_mut_ptr(), a1[r]);
            }
            for i in 16 * steps..k {
                let t = i - 16 * steps;
                acc[t / 8][t % 8] = rows[r][i].f32().mul_add(x[i], acc[t / 8][t % 8]);
            }
            out[r] = finish(acc);
        }
    }
}

/// Whether the AVX2 kernel runs (`WGTENSOR_MATVEC_SCALAR=1` forces the portable loop, which
/// the tests compare with).
fn use_avx2() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| super::avx2_fma_f16c("WGTENSOR_MATVEC_SCALAR"))
}

/// Rows per rayon task: about 64 KiB of weights each, at least 4 tasks per thread for balance.
fn rows_per_task(n: usize, k: usize, elem: usize) -> usize {
    (65_536 / (k * elem).max(1))
        .clamp(4, 1024)
        .min(n.div_ceil(4 * rayon::current_num_threads()).max(4))
        .next_multiple_of(4)
}

/// `out[j] = Σ_i w[q + j * row_stride + i] · x[i]` for `j < n`, `i < x.len()`.
///
/// The caller guarantees `q + (n - 1) * row_stride + x.len() <= w.len()`.
pub(crate) fn matvec_t<W: Elem + ElemSimd>(
    x: &[f32],
    w: &[W],
    q: usize,
    n: usize,
    row_stride: usize,
    out: &mut [f32],
) {
    let k = x.len();
    assert!(n == out.len() && (n == 0 || q + (n - 1) * row_stride + k <= w.len()));
    let row = |j: usize| &w[q + j * row_stride..q + j * row_stride + k];
    let per = rows_per_task(n, k, std::mem::size_of::<W>());
    let avx2 = use_avx2();
    out.par_chunks_mut(per).enumerate().for_each(|(t, chunk)| {
        let base = t * per;
        let mut j = 0;
        if avx2 {
            while j + 4 <= chunk.len() {
                let r = base + j;
                W::dot4(
                    [row(r), row(r + 1), row(r + 2), row(r + 3)],
                    x,
                    &mut chunk[j..j + 4],
                );
                j += 4;
            }
        }
        for (o, r) in chunk[j..].iter_mut().zip(base + j..) {
            *o = dot_order(row(r), x);
        }
    });
}

/// [`matvec_t`] for `m` activation rows `x` `[m, k]` at once (a batched decode step):
/// `out[i * n + j] = Σ_l w[q + j * row_stride + l] · x[i * k + l]`, each output with the bits
/// [`matvec_t`] gives its row alone. Each task takes a chunk of weight rows (about 64 KiB) and
/// runs it against every activation row while it is in cache, so the weights are read from
/// memory once for all `m` rows.
///
/// The caller guarantees `x.len() == m * k`, `out.len() == m * n` and
/// `q + (n - 1) * row_stride + k <= w.len()`.
pub(crate) fn matvec_t_rows<W: Elem + ElemSimd>(
    x: &[f32],
    m: usize,
    w: &[W],
    q: usize,
    n: usize,
    row_stride: usize,
    out: &mut [f32],
) {
    let k = x.len() / m.max(1);
    assert!(x.len() == m * k && out.len() == m * n);
    assert!(n == 0 || q + (n - 1) * row_stride + k <= w.len());
    let row = |j: usize| &w[q + j * row_stride..q + j * row_stride + k];
    let per = rows_per_task(n, k, std::mem::size_of::<W>());
    let avx2 = use_avx2();
    /// The output's base, shared by the tasks: each writes only its own columns.
    #[derive(Clone, Copy)]
    struct Out(*mut f32);
    // SAFETY: the tasks write disjoint columns of one live allocation (see below).
    unsafe impl Send for Out {}
    unsafe impl Sync for Out {}
    let base_ptr = Out(out.as_mut_ptr());
    (0..n.div_ceil(per)).into_par_iter().for_each(|t| {
        let base_ptr = &base_ptr;
        let (base, len) = (t * per, per.min(n - t * per));
        // SAFETY: columns `base..base + len` of row `i` lie inside `out` (`m * n`), and this
        // task alone writes them (tasks cover disjoint columns); `out` outlives the parallel
        // loop. Each call makes one short-lived slice, so no two overlap.
        let cols = |i: usize, j: usize, len: usize| unsafe {
            std::slice::from_raw_parts_mut(base_ptr.0.add(i * n + base + j), len)
        };
        let mut j = 0;
        if avx2 {
            // Four weight rows (a few KiB, held in L1) against every activation row before
            // the next four: the task's whole chunk re-read once per activation row came
            // from L2, which could not feed the FMAs (48% of a batch-8 decode's time).
            while j + 4 <= len {
                let r = base + j;
                let rows = [row(r), row(r + 1), row(r + 2), row(r + 3)];
                // The next four rows come from memory while these compute: a part of them
                // is prefetched before each activation row's pass. Without it the first
                // pass over each group waited on DRAM, with the FMAs idle.
                let next = (j + 8 <= len).then(|| [row(r + 4), row(r + 5), row(r + 6), row(r + 7)]);
                for i in 0..m {
                    if let Some(next) = next {
                        prefetch_part(next, i, m);
                    }
                    W::dot4(rows, &x[i * k..(i + 1) * k], cols(i, j, 4));
                }
                j += 4;
            }
        }
        for i in 0..m {
            let xi = &x[i * k..(i + 1) * k];
            for (o, r) in cols(i, j, len - j).iter_mut().zip(base + j..) {
                *o = dot_order(row(r), xi);
            }
        }
    });
}

/// Prefetches part `part` of `parts` of each row's bytes into L1 (a hint: it never faults and
/// changes no value).
#[inline]
fn prefetch_part<W>(rows: [&[W]; 4], part: usize, parts: usize) {
    #[cfg(target_arch = "x86_64")]
    for r in rows {
        let bytes = std::mem::size_of_val(r);
        let (lo, hi) = (bytes * part / parts, bytes * (part + 1) / parts);
        let p = r.as_ptr() as *const i8;
        let mut off = lo & !63;
        while off < hi {
            // SAFETY: `off < bytes`, so the address lies inside the row; a prefetch reads
            // nothing the program sees.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.add(off))
            };
            off += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (rows, part, parts);
}

/// Dispatch to the AVX2 kernel for each weight type (only called once AVX2 was detected).
pub(crate) trait ElemSimd: Elem + Sized {
    fn dot4(rows: [&[Self]; 4], x: &[f32], out: &mut [f32]);
}

/// The one AVX2 kernel, instantiated for each weight type.
macro_rules! elem_simd {
    ($($t:ty),*) => {$(
        impl ElemSimd for $t {
            fn dot4(rows: [&[$t]; 4], x: &[f32], out: &mut [f32]) {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: only called after `use_avx2`; every row holds x.len() elements.
                unsafe {
                    avx2::dot_rows::<$t, 4>(rows, x, out)
                };
                #[cfg(not(target_arch = "x86_64"))]
                for (o, r) in out.iter_mut().zip(rows) {
                    *o = dot_order(r, x);
                }
            }
        }
    )*};
}

elem_simd!(f32, f16);

#[cfg(test)]
mod tests {
    use super::*;

    /// Both tests' operands: `xs` activations and `ws` weights of small mixed values, and the
    /// weights rounded to f16.
    fn operands(xs: usize, ws: usize) -> (Vec<f32>, Vec<f32>, Vec<f16>) {
        let x: Vec<f32> = (0..xs)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
            .collect();
        let w: Vec<f32> = (0..ws)
            .map(|i| ((i * 53 % 31) as f32 - 15.0) / 13.0)
            .collect();
        let wh: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
        (x, w, wh)
    }

    /// Several activation rows at once give each row the bits of its matvec alone, in f32 and
    /// f16 weights, tails included.
    #[test]
    fn rows_equal_each_row_alone() {
        for (m, k, n) in [
            (2usize, 17usize, 9usize),
            (8, 768, 70),
            (3, 100, 1),
            (16, 33, 130),
        ] {
            let (x, w, wh) = operands(m * k, n * k + 5);
            let mut a = vec![0f32; m * n];
            matvec_t_rows(&x, m, &w, 5, n, k, &mut a);
            let mut b = vec![0f32; m * n];
            matvec_t_rows(&x, m, &wh, 5, n, k, &mut b);
            for i in 0..m {
                let mut one = vec![0f32; n];
                matvec_t(&x[i * k..(i + 1) * k], &w, 5, n, k, &mut one);
                assert_eq!(a[i * n..(i + 1) * n], one[..], "f32 m {m} k {k} row {i}");
                matvec_t(&x[i * k..(i + 1) * k], &wh, 5, n, k, &mut one);
                assert_eq!(b[i * n..(i + 1) * n], one[..], "f16 m {m} k {k} row {i}");
            }
        }
    }

    /// The AVX2 kernel and the portable order agree bit for bit, for every tail length, in
    /// f32 and f16 weights; and both are close to a plain f64 dot product.
    #[test]
    fn simd_matches_the_portable_order() {
        for k in [1usize, 7, 8, 15, 16, 17, 31, 33, 100, 768] {
            let n = 9;
            let (x, w, wh) = operands(k, n * k + 3);
            let mut a = vec![0f32; n];
            matvec_t(&x, &w, 3, n, k, &mut a);
            let mut b = vec![0f32; n];
            matvec_t(&x, &wh, 3, n, k, &mut b);
            for j in 0..n {
                let r = &w[3 + j * k..3 + (j + 1) * k];
                assert_eq!(a[j].to_bits(), dot_order(r, &x).to_bits(), "k {k} row {j}");
                let rh = &wh[3 + j * k..3 + (j + 1) * k];
                assert_eq!(
                    b[j].to_bits(),
                    dot_order(rh, &x).to_bits(),
                    "f16 k {k} row {j}"
                );
                let exact: f64 = r.iter().zip(&x).map(|(&p, &q)| p as f64 * q as f64).sum();
                assert!(
                    (a[j] as f64 - exact).abs() <= 1e-4 * (1.0 + exact.abs()),
                    "k {k}"
                );
            }
        }
    }
}
