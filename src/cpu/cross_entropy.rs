//! CPU cross-entropy rows and gradient: the fallback device and the oracle for
//! `shaders/cross_entropy.wgsl` (same formulas, f32 arithmetic).

/// What the kernels need to know about the targets.
pub(crate) struct CeSpec {
    pub ignore: Option<i64>,
    pub smoothing: f32,
}

impl CeSpec {
    /// Whether row target `t` takes part (not the ignored class).
    fn counts(&self, t: i64) -> bool {
        self.ignore != Some(t)
    }
}

/// `[loss[n], valid[n], lse[n]]` of the packed logits `x` `[n, c]`; targets are validated
/// (`0..c` or the ignored class) by the caller.
pub(crate) fn rows(x: &[f32], n: usize, c: usize, targets: &[i64], spec: &CeSpec) -> Vec<f32> {
    let mut out = super::alloc::zeros_f32(3 * n);
    for (i, row) in x.chunks_exact(c.max(1)).take(n).enumerate() {
        let bad = row.iter().any(|v| v.is_nan() || *v == f32::INFINITY);
        let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let s: f32 = if m == f32::NEG_INFINITY {
            0.0
        } else {
            row.iter().map(|v| (v - m).exp()).sum()
        };
        let lse = if bad { f32::NAN } else { m + s.ln() };
        out[2 * n + i] = lse;
        let t = targets[i];
        if !spec.counts(t) {
            continue;
        }
        let mut loss = lse - row[t as usize];
        if spec.smoothing > 0.0 {
            let mean = row.iter().sum::<f32>() / c as f32;
            loss = (1.0 - spec.smoothing) * loss + spec.smoothing * (lse - mean);
        }
        out[i] = loss;
        out[n + i] = 1.0;
    }
    out
}

/// The gradient `[n, c]` of the logits: `g[i] (softmax - (1 - ε) onehot - ε / c)`, zero in
/// ignored rows; `stats` is [`rows`]' output and `g` the per-row upstream gradient.
pub(crate) fn backward(
    x: &[f32],
    (n, c): (usize, usize),
    targets: &[i64],
    spec: &CeSpec,
    stats: &[f32],
    g: &[f32],
) -> Vec<f32> {
    let mut out = super::alloc::zeros_f32(n * c);
    for i in 0..n {
        let t = targets[i];
        if !spec.counts(t) {
            continue;
        }
        let lse = stats[2 * n + i];
        for j in 0..c {
            let mut d = (x[i * c + j] - lse).exp() - spec.smoothing / c as f32;
            if j as i64 == t {
                d -= 1.0 - spec.smoothing;
            }
            out[i * c + j] = g[i] * d;
        }
    }
    out
}
