//! GPU softmax and log_softmax: one dispatch of `shaders/softmax.wgsl` for any row length and
//! any strided view, in one of two autotuned variants: one workgroup per row (online max/sum,
//! merged across the workgroup, then a write pass) or one invocation per row (for many short
//! rows).

use super::buffer::GpuBuffer;
use super::device::GpuDevice;
use super::kernels::{Launch, Shader, WORKGROUP};
use super::params::{check_u32, extend, w};
use crate::shape::Layout;
use crate::Result;
use std::cell::Cell;

thread_local! {
    /// Row-kernel dispatches (softmax, layer_norm) issued by this thread, for the tests'
    /// one-dispatch-per-op checks (`wgtensor::testing::row_dispatches`). Per thread so that
    /// tests running in parallel do not see each other's launches.
    static ROW_DISPATCHES: Cell<u64> = const { Cell::new(0) };
}

thread_local! {
    /// A row-kernel variant forced by a test on this thread (`testing::force_row_variant`).
    static FORCED: Cell<Option<RowKernel>> = const { Cell::new(None) };
}

/// The row-kernel variants (softmax.wgsl and layer_norm.wgsl each have both entries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RowKernel {
    /// One 256-thread workgroup per row; statistics merged with subgroup operations or a tree.
    Workgroup,
    /// One invocation per row, 256 rows per workgroup.
    PerRow,
}

impl RowKernel {
    pub(crate) const ALL: [RowKernel; 2] = [RowKernel::Workgroup, RowKernel::PerRow];

    pub(crate) fn name(self) -> &'static str {
        match self {
            RowKernel::Workgroup => "workgroup_per_row",
            RowKernel::PerRow => "invocation_per_row",
        }
    }
}

/// Forces (or with `None`, stops forcing) the row-kernel variant named `name` on this thread.
/// Returns false for an unknown name.
pub(crate) fn force_variant(name: Option<&str>) -> bool {
    let k = match name {
        None => None,
        Some(n) => match RowKernel::ALL.into_iter().find(|k| k.name() == n) {
            Some(k) => Some(k),
            None => return false,
        },
    };
    FORCED.with(|f| f.set(k));
    true
}

/// Row-kernel dispatches issued so far by the calling thread.
pub(crate) fn row_dispatches() -> u64 {
    ROW_DISPATCHES.with(Cell::get)
}

/// Counts one row-kernel dispatch on this thread.
pub(crate) fn count_row_dispatch() {
    ROW_DISPATCHES.with(|c| c.set(c.get() + 1));
}

impl GpuDevice {
    /// softmax (`log` false) or log_softmax over dim `d` of the non-empty view `layout` of `src`.
    pub(crate) fn softmax(
        &self,
        op: &'static str,
        src: &GpuBuffer,
        layout: &Layout,
        d: usize,
        log: bool,
    ) -> Result<GpuBuffer> {
        check_u32(op, layout)?;
        let n = layout.numel();
        let len = layout.shape[d];
        let nrows = n / len;
        let inner: usize = layout.shape[d + 1..].iter().product();
        // Every element is written by the kernel: no clear.
        let out = self.alloc_uninit(op, n as u64 * 4)?;
        let mut params = vec![
            w(nrows),
            w(len),
            w(inner),
            w(layout.offset),
            w(layout.strides[d]),
            w(layout.shape.len()),
        ];
        extend(&mut params, &layout.shape);
        extend(&mut params, &layout.strides);
        let kernel = self.row_kernel("softmax", nrows, len, |k| {
            self.softmax_launch(op, k, src, &out, &params, nrows, log)
        })?;
        self.softmax_launch(op, kernel, src, &out, &params, nrows, log)?;
        count_row_dispatch();
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    fn softmax_launch(
        &self,
        op: &'static str,
        kernel: RowKernel,
        src: &GpuBuffer,
        out: &GpuBuffer,
        params: &[u32],
        nrows: usize,
        log: bool,
    ) -> Result<()> {
        let (entry, threads) = match kernel {
            RowKernel::Workgroup => ("softmax", nrows as u64 * WORKGROUP),
            RowKernel::PerRow => ("softmax_per_row", nrows as u64),
        };
        self.launch(
            op,
            Launch {
                shader: if self.subgroups() {
                    Shader::SoftmaxSubgroup
                } else {
                    Shader::Softmax
                },
                entry,
                op_code: Some(u32::from(log)),
                inputs: &[&src.buffer],
                output: &out.buffer,
                meta: params,
                threads,
            },
        )
    }

    /// The row-kernel variant of `family` for `nrows` rows of `len`: a test's forced one, else
    /// the heuristic in deterministic mode (the default; the variants sum in different orders),
    /// else the autotuned one (classes bucketed to powers of two): the heuristic (one invocation per row for rows of at most 64, and for 16 rows or
    /// more on software adapters; else a workgroup per row) on a class's first call, a search on its
    /// second (`run` records one run of a candidate), the winner after.
    pub(crate) fn row_kernel(
        &self,
        family: &str,
        nrows: usize,
        len: usize,
        run: impl Fn(RowKernel) -> Result<()>,
    ) -> Result<RowKernel> {
        if let Some(k) = FORCED.with(Cell::get) {
            return Ok(k);
        }
        // A workgroup's barriers are cheap on a GPU and very dear on a software adapter (each
        // one switches every invocation out); short rows leave a workgroup mostly idle.
        let software = self.0.info.device_type == wgpu::DeviceType::Cpu;
        let heuristic = if (software && nrows >= 16) || len <= 64 {
            RowKernel::PerRow
        } else {
            RowKernel::Workgroup
        };
        let b = |x: usize| x.next_power_of_two();
        let key = super::autotune::class_key(family, &format!("rows{} len{}", b(nrows), b(len)));
        let (chosen, tune_now) = self.0.tuner.lookup(&key);
        // The two variants merge a row in different orders: deterministic mode (the default)
        // keeps the heuristic, whatever the cache says.
        let det = super::autotune::deterministic();
        if let Some(k) = chosen.and_then(|n| RowKernel::ALL.into_iter().find(|k| k.name() == n)) {
            if !det {
                return Ok(k);
            }
        }
        // Searching re-runs the softmax a dozen times: large classes keep the heuristic.
        if det || !tune_now || nrows as u64 * len as u64 > 1 << 26 {
            self.0.tuner.note_heuristic(&key, heuristic.name());
            return Ok(heuristic);
        }
        let found =
            self.time_candidates("softmax autotune", &RowKernel::ALL, RowKernel::name, run)?;
        let (winner, timings) = found.unwrap_or((heuristic, Vec::new()));
        self.0.tuner.record(&key, winner.name(), timings);
        Ok(winner)
    }
}
