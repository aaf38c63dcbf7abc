//! The fused Adam step on host data: new parameter, first and second moments in one pass over
//! memory instead of a dozen allocating elementwise ops. The same f32 operations in the same
//! order as the op-by-op path (`src/optim/adam.rs`), so the same bits; chunks are cut at fixed
//! points, so any thread count gives the same result too.

use super::alloc::try_vec;
use super::strided::PAR_THRESHOLD;
use crate::ops::geometry::AdamStep;
use crate::Result;

/// New `(parameter, m, v)` from parameter `ps`, gradient `gs` and the previous moments (`None`
/// on the first step), all packed and of one length.
pub(crate) fn adam_step(
    ps: &[f32],
    gs: &[f32],
    old: Option<(&[f32], &[f32])>,
    hyper: &AdamStep,
) -> Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
    let AdamStep {
        b1,
        b2,
        lr,
        eps,
        step,
    } = *hyper;
    let bc1 = 1.0 - b1.powi(step);
    let bc2 = 1.0 - b2.powi(step);
    let (sq2, scale) = (bc2.sqrt(), lr / bc1);
    let n = ps.len();
    let mut np = try_vec::<f32>("Adam::step", n)?;
    let mut nm = try_vec::<f32>("Adam::step", n)?;
    let mut nv = try_vec::<f32>("Adam::step", n)?;
    np.resize(n, 0.0);
    nm.resize(n, 0.0);
    nv.resize(n, 0.0);
    // Plain zipped slices (no indexing) so the loop vectorises, sqrt and division included.
    let zeros;
    let (m0, v0, keep) = match old {
        Some((m, v)) => (m, v, 1.0f32),
        None => {
            zeros = vec![0f32; n];
            (&zeros[..], &zeros[..], 0.0)
        }
    };
    let chunk = |at: usize, np: &mut [f32], nm: &mut [f32], nv: &mut [f32]| {
        let end = at + np.len();
        let ins = ps[at..end]
            .iter()
            .zip(&gs[at..end])
            .zip(m0[at..end].iter().zip(&v0[at..end]));
        let outs = np.iter_mut().zip(nm.iter_mut().zip(nv.iter_mut()));
        for ((op, (om, ov)), ((&p, &g), (&m, &v))) in outs.zip(ins) {
            // On the first step there is no m or v: keep = 0 drops them exactly as the
            // op-by-op path, which starts from (1 - β1) g and (1 - β2) g².
            let m = if keep == 0.0 {
                g * (1.0 - b1)
            } else {
                m * b1 + g * (1.0 - b1)
            };
            let v = if keep == 0.0 {
                g * g * (1.0 - b2)
            } else {
                v * b2 + g * g * (1.0 - b2)
            };
            *op = p - m / (v.sqrt() / sq2 + eps) * scale;
            *om = m;
            *ov = v;
        }
    };
    const CHUNK: usize = 1 << 14;
    if n >= PAR_THRESHOLD {
        use rayon::prelude::*;
        np.par_chunks_mut(CHUNK)
            .zip(nm.par_chunks_mut(CHUNK).zip(nv.par_chunks_mut(CHUNK)))
            .enumerate()
            .for_each(|(k, (a, (b, c)))| chunk(k * CHUNK, a, b, c));
    } else {
        chunk(0, &mut np, &mut nm, &mut nv);
    }
    Ok((np, nm, nv))
}
