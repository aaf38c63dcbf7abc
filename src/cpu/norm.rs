//! CPU layer_norm over the last dim: the fallback device and the oracle for
//! `shaders/layer_norm.wgsl`. Two passes per row (mean, then the centred sum of squares), f32
//! data with f64 row statistics, rayon over rows for large inputs.

use super::strided::PAR_THRESHOLD;
use rayon::prelude::*;

/// layer_norm of the packed `[rows, len]` data `x` (`len > 0`).
pub(crate) fn layer_norm(
    x: &[f32],
    len: usize,
    weight: Option<&[f32]>,
    bias: Option<&[f32]>,
    eps: f32,
) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    let row = |(o, xs): (&mut [f32], &[f32])| {
        let n = len as f64;
        let mean = xs.iter().map(|&v| v as f64).sum::<f64>() / n;
        let var = xs.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
        let rstd = 1.0 / (var + eps as f64).sqrt();
        for (k, (o, &v)) in o.iter_mut().zip(xs).enumerate() {
            let mut y = ((v as f64 - mean) * rstd) as f32;
            if let Some(w) = weight {
                y *= w[k];
            }
            if let Some(b) = bias {
                y += b[k];
            }
            *o = y;
        }
    };
    if x.len() >= PAR_THRESHOLD {
        out.par_chunks_mut(len).zip(x.par_chunks(len)).for_each(row);
    } else {
        out.chunks_mut(len).zip(x.chunks(len)).for_each(row);
    }
    out
}
