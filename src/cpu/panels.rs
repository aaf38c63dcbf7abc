//! `x @ W^T` for many activation rows (prefill) when `W` is stored narrower than f32 (ggml
//! blocks, f16): weight rows are widened [`PANEL_ROWS`] at a time into a buffer each rayon task
//! reuses and multiplied with all of `x` by gemm in f32. Widening a panel once per call beats
//! a dot product per output at that size, and beats widening the whole matrix first (a
//! `[rows, cols]` f32 copy per call, written to memory and read back).
//!
//! Each output comes from one gemm call over its panel on one thread, and panels are a fixed
//! number of rows, so results do not depend on the thread count.

use rayon::prelude::*;

/// Weight rows per widened panel: a fixed count (not derived from the thread count), so every
/// output comes from the same gemm call at any thread count; 64 rows of 4096 f32 stay within
/// a core's L2.
pub(crate) const PANEL_ROWS: usize = 64;

/// `x @ W^T` for `x` `[m, cols]` f32 and a `[rows, cols]` weight that `widen(r0, np, buf)`
/// writes to `buf` (`np * cols` f32, rows `r0..r0 + np`); returns `[m, rows]`.
///
/// Each panel's gemm writes its columns `r0..r0 + np` of the output in place (column stride
/// `rows`): no `[rows, m]` result to transpose afterwards (a tenth of a quantized prefill).
pub(crate) fn matmul_t_panels(
    op: &'static str,
    rows: usize,
    cols: usize,
    x: &[f32],
    m: usize,
    widen: impl Fn(usize, usize, &mut [f32]) + Sync,
) -> crate::Result<Vec<f32>> {
    let mut out = super::alloc::try_vec::<f32>(op, rows * m)?;
    out.resize(rows * m, 0.0);
    if cols == 0 || m == 0 || rows == 0 {
        return Ok(out);
    }
    assert!(x.len() >= m * cols);
    /// The output's base, shared by the panel tasks: each writes only its own columns.
    #[derive(Clone, Copy)]
    struct Out(*mut f32);
    // SAFETY: the tasks write disjoint columns of one live allocation (see below).
    unsafe impl Send for Out {}
    unsafe impl Sync for Out {}
    let base = Out(out.as_mut_ptr());
    (0..rows.div_ceil(PANEL_ROWS))
        .into_par_iter()
        .for_each_init(Vec::new, |w: &mut Vec<f32>, t| {
            // The whole `Out` (Send + Sync), not its raw pointer field, moves into the task.
            let base = &base;
            let (r0, np) = (t * PANEL_ROWS, PANEL_ROWS.min(rows - t * PANEL_ROWS));
            w.resize(np * cols, 0.0);
            widen(r0, np, w);
            // SAFETY: `w` is `np x cols` (row stride cols), `x` `m x cols` read as the
            // `cols x m` matrix x^T (row stride 1, column stride cols); the destination is
            // the `np x m` block of `out` at column offset r0 (element (j, i) at
            // `i * rows + r0 + j`), inside `out` (`rows * m`) and written by this task alone
            // (panels cover disjoint columns); `out` outlives the parallel loop. With
            // `read_dst = false` gemm only stores there.
            unsafe {
                gemm::gemm(
                    np,
                    m,
                    cols,
                    base.0.add(r0),
                    rows as isize,
                    1,
                    false,
                    w.as_ptr(),
                    1,
                    cols as isize,
                    x.as_ptr(),
                    cols as isize,
                    1,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
            }
        });
    Ok(out)
}

/// `[rows, m]` to `[m, rows]` (nothing to move for one activation row).
pub(crate) fn transpose(t: Vec<f32>, rows: usize, m: usize) -> Vec<f32> {
    if m == 1 {
        return t;
    }
    let mut out = vec![0f32; rows * m];
    for r in 0..rows {
        for i in 0..m {
            out[i * rows + r] = t[r * m + i];
        }
    }
    out
}
