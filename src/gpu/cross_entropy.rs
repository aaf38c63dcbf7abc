//! GPU cross-entropy by `shaders/cross_entropy.wgsl`: the forward is one workgroup per row
//! (log-sum-exp, the picked logit, label smoothing and ignore_index in one pass), the backward
//! one thread per logit. Targets are never read on the host: an out-of-range target reports to
//! the error word (`ids.rs`).

use super::buffer::GpuBuffer;
use super::device::GpuDevice;
use super::gather::Ids;
use super::ids;
use super::kernels::{Launch, Shader, WORKGROUP};
use super::params::{check_u32, w};
use super::softmax::RowKernel;
use crate::shape::Layout;
use crate::Result;

/// The options the kernels read, as words: `[ignore bits, flags, code, ε bits]`.
pub(crate) struct CeWords {
    /// The ignored class as the targets' bits (`None` when no target can equal it).
    pub ignore: Option<u32>,
    pub smoothing: f32,
}

impl CeWords {
    fn words(&self, op: &'static str, signed: bool) -> [u32; 4] {
        [
            self.ignore.unwrap_or(0),
            u32::from(self.ignore.is_some()),
            ids::code(op, signed),
            self.smoothing.to_bits(),
        ]
    }
}

impl GpuDevice {
    /// Per-row `[loss[N], valid[N], lse[N]]` of the packed logits `[n, c]` (from element
    /// `x_offset` of `x`).
    pub(crate) fn cross_entropy_rows(
        &self,
        op: &'static str,
        (x, x_offset): (&GpuBuffer, usize),
        (n, c): (usize, usize),
        targets: Ids<'_>,
        opts: &CeWords,
    ) -> Result<GpuBuffer> {
        check_u32(op, &Layout::contiguous(&[n, c]))?;
        let out = self.alloc_uninit(op, 3 * n as u64 * 4)?;
        let (t, t_offset, _, signed) = targets;
        let mut params = vec![w(n), w(c), w(x_offset), w(t_offset)];
        params.extend(opts.words(op, signed));
        params.extend([0, 0]);
        let dummy = &self.0.errors.dummy;
        let launch = |k: RowKernel| {
            let (entry, threads) = match k {
                RowKernel::Workgroup => ("ce_forward", n as u64 * WORKGROUP),
                RowKernel::PerRow => ("ce_forward_per_row", n as u64),
            };
            self.launch(
                op,
                Launch {
                    shader: Shader::CrossEntropy,
                    entry,
                    op_code: None,
                    inputs: &[&x.buffer, &t.buffer, dummy, dummy],
                    output: &out.buffer,
                    meta: &params,
                    threads,
                },
            )
        };
        launch(self.row_kernel("cross_entropy", n, c, launch)?)?;
        super::softmax::count_row_dispatch();
        Ok(out)
    }

    /// The gradient `[n, c]` of the logits given the forward's rows (`lse` at `stats[2n..]`)
    /// and the per-row upstream gradient `g` (from element `g_offset`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn cross_entropy_backward(
        &self,
        op: &'static str,
        (x, x_offset): (&GpuBuffer, usize),
        (n, c): (usize, usize),
        targets: Ids<'_>,
        opts: &CeWords,
        stats: &GpuBuffer,
        (g, g_offset): (&GpuBuffer, usize),
    ) -> Result<GpuBuffer> {
        check_u32(op, &Layout::contiguous(&[n, c]))?;
        let total = n * c;
        let out = self.alloc_uninit(op, total as u64 * 4)?;
        let (t, t_offset, _, signed) = targets;
        let mut params = vec![w(total), w(c), w(x_offset), w(t_offset)];
        params.extend(opts.words(op, signed));
        params.extend([w(2 * n), w(g_offset)]);
        self.launch(
            op,
            Launch {
                shader: Shader::CrossEntropy,
                entry: "ce_backward",
                op_code: None,
                inputs: &[&x.buffer, &t.buffer, &stats.buffer, &g.buffer],
                output: &out.buffer,
                meta: &params,
                threads: total as u64,
            },
        )?;
        Ok(out)
    }
}
