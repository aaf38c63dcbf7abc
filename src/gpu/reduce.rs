//! GPU reductions: multi-pass dispatches of `shaders/reduce.wgsl`.
//!
//! A reduction is a set of rows (see [`Rows`]). Each pass splits every row into chunks, reduces
//! each chunk to one partial, and the next pass reduces the partials (rows of length `chunks`)
//! until one value per row is left. Per-invocation work is bounded (64 elements per thread plus
//! a 256-wide tree, or 256 elements in order), which keeps software drivers, that cut shader
//! loops after 65,535 iterations, correct on any size; and the tree is a function of the sizes
//! only, so the same input gives the same bits on an adapter, with no atomics.
//! 10 M elements take two passes: 611 workgroups of 16,384 elements, then one of 611.

use super::buffer::GpuBuffer;
use super::device::GpuDevice;
use super::kernels::{Bindings, Launch, Shader, WORKGROUP};
use super::params::{check_u32, extend, w};
use crate::cpu::reduce::{ReduceOp, Rows, SUM_EXP_CODE};
use crate::shape::Layout;
use crate::{DType, Result};

/// Elements per workgroup of `reduce_wg` (256 threads × 64; must match the shader). 64 per
/// thread made a 1 M sum on lavapipe 1.2x the cost of an elementwise pass, against 1.8x with 16
/// (each workgroup pays 8 barriers, which software drivers run as coroutine switches).
const WG_CHUNK: usize = 16384;
/// Longest chunk `reduce_thread` folds in one invocation (must not exceed the shader's cap).
const THREAD_CHUNK: usize = super::contract::reduce::THREAD_MAX;
/// Below this many rows, one thread per row leaves most of a GPU idle: use a workgroup per row.
const FEW_ROWS: usize = 256;
/// Longest chunk `reduce_subgroup` folds with one subgroup (must match the shader's cap).
const SUBGROUP_CHUNK: usize = super::contract::reduce::SUBGROUP_MAX;

/// Which kernel reduces `rows` rows of length `len`, and its chunk length. Short rows are folded
/// by one thread each (coalesced across neighbouring rows of a non-last-dim reduction); long rows,
/// or few rows, by a workgroup per 16,384-element chunk (coalesced along the row).
fn plan(rows: usize, len: usize) -> (&'static str, usize) {
    if len <= THREAD_CHUNK {
        ("reduce_thread", len)
    } else if len >= WG_CHUNK || rows < FEW_ROWS {
        ("reduce_wg", WG_CHUNK)
    } else {
        ("reduce_thread", THREAD_CHUNK)
    }
}

thread_local! {
    /// A first-pass kernel forced by a test on this thread (`testing::force_reduce_variant`).
    static FORCED: std::cell::Cell<Option<FirstPass>> = const { std::cell::Cell::new(None) };
}

/// Forces (or with `None`, stops forcing) the reduction first-pass variant `name` on this
/// thread; false for an unknown name. A subgroup variant forced on a device without subgroups
/// runs the heuristic's kernel.
pub(crate) fn force_variant(name: Option<&str>) -> bool {
    super::autotune::force_named(&FORCED, &FirstPass::ALL, FirstPass::name, name)
}

/// The first pass's kernel: the heuristic's ([`plan`]) or one the autotuner tries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FirstPass {
    /// Whatever [`plan`] picks.
    Plan,
    /// One invocation per chunk of at most 256 elements (`reduce_thread`).
    Thread,
    /// One workgroup per chunk of 16,384 elements (`reduce_wg`).
    Workgroup,
    /// `reduce_wg` whose threads merge by subgroup shuffles, then one barrier
    /// (`reduce_wg_subgroup`; adapters with `SUBGROUP`).
    SubgroupWorkgroup,
    /// One subgroup per chunk of at most 4,096 elements, lanes on consecutive elements: the
    /// coalesced layout for many mid-size rows (`reduce_subgroup`; adapters with `SUBGROUP`).
    Subgroup,
}

/// The packed sum's first passes (`sum.wgsl`).
const SUM_CANDIDATES: [FirstPass; 2] = [FirstPass::Thread, FirstPass::Workgroup];

impl FirstPass {
    /// Every variant a test may force.
    const ALL: [FirstPass; 4] = [
        FirstPass::Thread,
        FirstPass::Workgroup,
        FirstPass::SubgroupWorkgroup,
        FirstPass::Subgroup,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            FirstPass::Plan => "heuristic",
            FirstPass::Thread => "thread_per_chunk",
            FirstPass::Workgroup => "workgroup_per_chunk",
            FirstPass::SubgroupWorkgroup => "subgroup_workgroup_per_chunk",
            FirstPass::Subgroup => "subgroup_per_chunk",
        }
    }

    fn needs_subgroups(self) -> bool {
        matches!(self, FirstPass::SubgroupWorkgroup | FirstPass::Subgroup)
    }

    fn plan(self, rows: usize, len: usize) -> (&'static str, usize) {
        match self {
            FirstPass::Plan => plan(rows, len),
            FirstPass::Thread => ("reduce_thread", len.min(THREAD_CHUNK)),
            FirstPass::Workgroup => ("reduce_wg", WG_CHUNK),
            FirstPass::SubgroupWorkgroup => ("reduce_wg_subgroup", WG_CHUNK),
            FirstPass::Subgroup => ("reduce_subgroup", len.min(SUBGROUP_CHUNK)),
        }
    }
}

/// One pass's view of its input rows.
struct PassInput {
    out_shape: Vec<usize>,
    out_strides: Vec<usize>,
    offset: usize,
    len: usize,
    stride: usize,
}

impl GpuDevice {
    /// One value (or U32 index for argmax/argmin) per row of `rows`, over an f32, i32 or u32 view (integer sums and products wrap; no
    /// integer mean reaches here).
    pub(crate) fn reduce_typed(
        &self,
        name: &'static str,
        op: ReduceOp,
        dtype: DType,
        src: &GpuBuffer,
        layout: &Layout,
        rows: &Rows,
    ) -> Result<GpuBuffer> {
        check_u32(name, layout)?;
        let mean = (op == ReduceOp::Mean).then_some(rows.len as f32);
        // The shader's value kind: 0 f32, 1 i32, 2 u32 (OP = op | kind << 8).
        let kind = match dtype {
            DType::I32 => 1,
            DType::U32 => 2,
            _ => 0,
        };
        // One long packed f32 row summed: a first pass with vec4 loads, then the partials.
        let packed = rows.outputs() == 1 && rows.stride == 1 && rows.offset.is_multiple_of(4);
        if matches!(op, ReduceOp::Sum | ReduceOp::Mean)
            && dtype == DType::F32
            && packed
            && rows.len >= WG_CHUNK
            && src.buffer.size().is_multiple_of(16)
        {
            let first = self.tuned_first_pass("sum_vec4", &SUM_CANDIDATES, rows, |f| {
                self.sum_packed(name, op, mean, src, rows, f).map(drop)
            })?;
            return self.sum_packed(name, op, mean, src, rows, first);
        }
        // The first pass reduces elements; later passes combine partials (`ReduceOp::partials`).
        let codes = (op.code() | kind << 8, op.partials().code() | kind << 8);
        let candidates = self.reduce_candidates();
        let first = self.tuned_first_pass("reduce", &candidates, rows, |f| {
            self.passes(name, codes, op.is_arg(), mean, src, None, rows, f)
                .map(drop)
        })?;
        self.passes(name, codes, op.is_arg(), mean, src, None, rows, first)
    }

    /// The sum (or mean) of one packed f32 row of at least [`WG_CHUNK`] elements starting at a
    /// multiple of 4: a first pass of vec4 loads (`sum.wgsl`: a workgroup per 16,384 elements,
    /// or with `FirstPass::Thread` an invocation per 256, no barriers), then the partials.
    fn sum_packed(
        &self,
        name: &'static str,
        op: ReduceOp,
        mean: Option<f32>,
        src: &GpuBuffer,
        rows: &Rows,
        first: FirstPass,
    ) -> Result<GpuBuffer> {
        let (entry, chunk, threads_per_chunk) = match first {
            FirstPass::Thread => ("sum_wide_thread", THREAD_CHUNK, 1),
            // The packed sum's vec4 pass has no subgroup form: those variants mean its workgroup.
            _ => ("sum_wide", WG_CHUNK, WORKGROUP),
        };
        let chunks = rows.len.div_ceil(chunk);
        let partials = self.alloc_uninit(name, chunks as u64 * 4)?;
        self.launch(
            name,
            Launch {
                shader: Shader::Sum,
                entry,
                bind: Bindings {
                    op_code: None,
                    inputs: &[&src.buffer],
                    output: &partials.buffer,
                    meta: &[w(chunks), w(rows.len), w(rows.offset / 4)],
                },
                threads: chunks as u64 * threads_per_chunk,
            },
        )?;
        let rest = Rows {
            out_shape: vec![1],
            out_strides: vec![chunks],
            offset: 0,
            len: chunks,
            stride: 1,
        };
        let sums = op.partials().code();
        self.passes(
            name,
            (sums, sums),
            false,
            mean,
            &partials,
            None,
            &rest,
            FirstPass::Plan,
        )
    }

    /// The first pass's kernel for `rows`: the heuristic's in deterministic mode (the default:
    /// the variants sum in different orders); otherwise, where both kernels apply (rows longer
    /// than 256, or fewer than 256 rows), the autotuned one per class, the heuristic on a
    /// class's first call; elsewhere the heuristic. `run(k)` runs the whole reduction with first pass `k`.
    fn tuned_first_pass(
        &self,
        family: &str,
        candidates: &[FirstPass],
        rows: &Rows,
        run: impl Fn(FirstPass) -> Result<()>,
    ) -> Result<FirstPass> {
        if let Some(f) = FORCED.with(std::cell::Cell::get) {
            return Ok(if f.needs_subgroups() && !self.subgroups() {
                FirstPass::Plan
            } else {
                f
            });
        }
        let m = rows.outputs();
        if rows.len <= THREAD_CHUNK && m >= FEW_ROWS {
            return Ok(FirstPass::Plan);
        }
        let b = |x: usize| x.next_power_of_two();
        let key = super::autotune::class_key(family, &format!("rows{} len{}", b(m), b(rows.len)));
        let (chosen, tune_now) = self.0.tuner.lookup(&key);
        // Every variant sums in its own order (a thread's run, a workgroup tree, subgroup
        // butterflies): deterministic mode keeps the heuristic, whatever the cache says.
        let det = super::autotune::deterministic();
        if let Some(f) = chosen.and_then(|n| candidates.iter().copied().find(|f| f.name() == n)) {
            if !det {
                return Ok(f);
            }
        }
        // On a software adapter a workgroup's barriers are dear: chunks of one invocation.
        // Elsewhere long rows (or few) take a workgroup per chunk, and many mid-size rows a
        // subgroup each (coalesced, where one invocation per 256 elements is not); subgroup
        // merges where the family has them.
        let software = self.0.info.device_type == wgpu::DeviceType::Cpu;
        let has = |f: FirstPass| candidates.contains(&f);
        let heuristic = match plan(m, rows.len).0 {
            _ if software => FirstPass::Thread,
            "reduce_wg" if has(FirstPass::SubgroupWorkgroup) => FirstPass::SubgroupWorkgroup,
            "reduce_wg" => FirstPass::Workgroup,
            // Along a non-last dim, neighbouring invocations already read neighbouring rows.
            _ if rows.len > THREAD_CHUNK && rows.stride == 1 && has(FirstPass::Subgroup) => {
                FirstPass::Subgroup
            }
            _ => FirstPass::Thread,
        };
        // A search re-runs the reduction a dozen times: large classes keep the heuristic.
        if det || !tune_now || m as u64 * rows.len as u64 > 1 << 26 {
            self.0.tuner.note_heuristic(&key, heuristic.name());
            return Ok(heuristic);
        }
        let found = self.time_candidates("reduce autotune", candidates, FirstPass::name, run)?;
        let (winner, timings) = found.unwrap_or((heuristic, Vec::new()));
        self.0.tuner.record(&key, winner.name(), timings);
        Ok(winner)
    }

    /// The first-pass variants of dim reductions on this device (the subgroup ones where
    /// subgroups are on).
    pub(crate) fn reduce_candidates(&self) -> Vec<FirstPass> {
        FirstPass::ALL
            .into_iter()
            .filter(|f| !f.needs_subgroups() || self.subgroups())
            .collect()
    }

    /// Items `reduce_subgroup` gives each 256-thread workgroup: one per subgroup at the
    /// adapter's largest subgroup size, so that every item has a subgroup at any size.
    fn subgroup_items_per_workgroup(&self) -> usize {
        let largest = self.0.info.subgroup_max_size.clamp(4, 128) as usize;
        (WORKGROUP as usize / largest).max(1)
    }

    #[allow(clippy::too_many_arguments)]
    fn passes(
        &self,
        op: &'static str,
        (mut code, later): (u32, u32),
        arg: bool,
        mean: Option<f32>,
        src: &GpuBuffer,
        mut aux: Option<&GpuBuffer>,
        rows: &Rows,
        mut first: FirstPass,
    ) -> Result<GpuBuffer> {
        let m = rows.outputs();
        debug_assert!(m > 0 && rows.len > 0, "callers handle empty reductions");
        let mut input = PassInput {
            out_shape: rows.out_shape.clone(),
            out_strides: rows.out_strides.clone(),
            offset: rows.offset,
            len: rows.len,
            stride: rows.stride,
        };
        // The previous pass's partials; `None` while reading the tensor itself.
        let mut partials: Option<GpuBuffer> = None;
        loop {
            let (entry, chunk) = first.plan(m, input.len);
            // Later passes reduce partials: the heuristic's choice.
            first = FirstPass::Plan;
            let chunks = input.len.div_ceil(chunk);
            let items = m * chunks;
            let last = chunks == 1;
            // Arg partials carry (value, index) pairs; finished rows carry the index alone.
            let words = if arg && !last { 2 * items } else { items };
            // Every item is stored by its workgroup (callers handle empty reductions).
            let out = self.alloc_uninit(op, words as u64 * 4)?;
            let flags = u32::from(partials.is_some() && arg) | (u32::from(mean.is_some()) << 1);
            let mut params = vec![
                w(items),
                w(chunks),
                w(input.len),
                w(chunk),
                w(input.stride),
                w(input.offset),
                flags,
                mean.unwrap_or(1.0).to_bits(),
                w(input.out_shape.len()),
            ];
            extend(&mut params, &input.out_shape);
            extend(&mut params, &input.out_strides);
            let data = partials.as_ref().unwrap_or(src);
            // Kernels without an auxiliary input get the data bound twice (never read).
            let second = aux.unwrap_or(data);
            let per = self.subgroup_items_per_workgroup();
            let threads = match entry {
                "reduce_wg" | "reduce_wg_subgroup" => items as u64 * WORKGROUP,
                "reduce_subgroup" => items.div_ceil(per) as u64 * WORKGROUP,
                _ => items as u64,
            };
            let shader = if entry.contains("subgroup") {
                params.push(w(per));
                Shader::ReduceSubgroup
            } else {
                Shader::Reduce
            };
            self.launch(
                op,
                Launch {
                    shader,
                    entry,
                    bind: Bindings {
                        op_code: Some(code),
                        inputs: &[&data.buffer, &second.buffer],
                        output: &out.buffer,
                        meta: &params,
                    },
                    threads,
                },
            )?;
            if last {
                return Ok(out);
            }
            // Partials are packed row-major [m, chunks]: row o starts at o * chunks.
            input = PassInput {
                out_shape: vec![m],
                out_strides: vec![chunks],
                offset: 0,
                len: chunks,
                stride: 1,
            };
            if code == SUM_EXP_CODE {
                // The exponentials are taken; what remains is a plain sum of partials.
                aux = None;
            }
            code = later;
            partials = Some(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_are_bounded_and_shrink() {
        for (rows, len) in [
            (1, 10_000_000),
            (1, 300),
            (1000, 1000),
            (4, 5_000_000),
            (7, 1),
        ] {
            let mut len = len;
            let mut passes = 0;
            loop {
                let (_, chunk) = plan(rows, len);
                assert!(chunk <= WG_CHUNK);
                let chunks = len.div_ceil(chunk);
                passes += 1;
                if chunks == 1 {
                    break;
                }
                assert!(chunks < len);
                len = chunks;
            }
            assert!(passes <= 3, "{rows} rows of {len}: {passes} passes");
        }
    }
}
