//! GPU `scatter_add` / `index_add` by `shaders/scatter.wgsl`, deterministic without float
//! atomics: the contributions are keyed by their target, sorted by (target, position) with a
//! bitonic network, and each run of equal targets is summed in position order by one thread
//! per column, the order the CPU oracle uses. Dispatches: keys, one local sort, then per stage
//! past 512 pairs its global steps and one local merge, then the sums (4 for up to 512 ids,
//! 15 for 8,192).

use super::buffer::GpuBuffer;
// Pairs sorted inside one workgroup (the block of `sort_block` / `sort_merge`).
use super::contract::scatter::BLOCK;
use super::device::GpuDevice;
use super::gather::Ids;
use super::ids;
use super::kernels::{Bindings, Launch, Shader};
use super::params::{check_u32, extend, w};
use crate::shape::Layout;
use crate::Result;

impl GpuDevice {
    /// Adds the packed values `src` (`ids.2` contributions of `r` floats each, from element
    /// `src_offset`) into `base`, a packed f32 buffer of `bound * r` elements, in place.
    /// Contribution `k` (`k` unravelled over `shape`, the index's shape) goes to the element of
    /// `base` (strides `out_strides`, counted in rows of `r`) at its coordinates with the one of
    /// dim `d` replaced by `ids[k]`, which must lie in `0..bound`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn scatter_add_into(
        &self,
        op: &'static str,
        base: &GpuBuffer,
        ids: Ids<'_>,
        shape: &[usize],
        d: usize,
        out_strides: &[usize],
        bound: usize,
        (src, src_offset, r): (&GpuBuffer, usize, usize),
    ) -> Result<()> {
        let (id_buf, id_offset, count, signed) = ids;
        if count == 0 || r == 0 {
            return Ok(());
        }
        let npairs = count.next_power_of_two().max(BLOCK);
        check_u32(op, &Layout::contiguous(&[npairs * 2]))?;
        check_u32(op, &Layout::contiguous(&[npairs, r]))?;
        let pairs = self.alloc_uninit(op, npairs as u64 * 8)?;
        let mut params = vec![
            w(npairs),
            w(count),
            w(shape.len()),
            w(d),
            w(id_offset),
            w(bound),
            ids::code(op, signed),
            0,
        ];
        extend(&mut params, shape);
        extend(&mut params, out_strides);
        let dummy = &self.0.errors.dummy;
        let run = |entry: &'static str,
                   inputs: [&wgpu::Buffer; 2],
                   output: &wgpu::Buffer,
                   meta: &[u32],
                   threads: usize| {
            self.launch(
                op,
                Launch {
                    shader: Shader::Scatter,
                    entry,
                    bind: Bindings {
                        op_code: None,
                        inputs: &inputs,
                        output,
                        meta,
                    },
                    threads: threads as u64,
                },
            )
        };
        run(
            "scatter_keys",
            [&id_buf.buffer, dummy],
            &pairs.buffer,
            &params,
            npairs,
        )?;
        let half = npairs / 2;
        run(
            "sort_block",
            [dummy, dummy],
            &pairs.buffer,
            &[w(npairs), w(npairs)],
            half,
        )?;
        let mut k = 2 * BLOCK;
        while k <= npairs {
            let mut j = k / 2;
            while j >= BLOCK {
                run(
                    "sort_step",
                    [dummy, dummy],
                    &pairs.buffer,
                    &[w(k), w(j), w(half)],
                    half,
                )?;
                j /= 2;
            }
            run(
                "sort_merge",
                [dummy, dummy],
                &pairs.buffer,
                &[w(k), w(npairs)],
                half,
            )?;
            k *= 2;
        }
        let threads = npairs * r;
        run(
            "segment_sum",
            [&pairs.buffer, &src.buffer],
            &base.buffer,
            &[w(threads), w(npairs), w(r), w(src_offset)],
            threads,
        )
    }
}
