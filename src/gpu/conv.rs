//! GPU convolution as an implicit GEMM: one dispatch of `shaders/conv2d.wgsl` (workgroups of
//! 16 x 8 invocations, each workgroup 32 output channels x 128 output positions; see the
//! shader's header). No im2col matrix is written.

use super::buffer::GpuBuffer;
use super::device::GpuDevice;
use super::kernels::{grid, Bindings, Launch, Shader};
use super::params::w;
use crate::ops::geometry::Geom;
use crate::{Error, Result};

/// Output channels and output positions one workgroup covers (the shader's `BM` and `BN`).
const ROWS: usize = super::contract::conv::BM;
const COLS: usize = super::contract::conv::BN;

/// The widest K (`in_channels / groups * kh * kw`) the kernel takes: its k loop (16 per step)
/// then runs at most 32,768 steps, below lavapipe's limit of 65,535 iterations per loop.
const MAX_K: usize = 1 << 19;

/// Whether `geo` fits the kernel: every index it forms stays in `u32` (and window origins in
/// `i32`), K is at most [`MAX_K`], and the row tiles times the groups fit one grid dimension
/// of `max_dim`. Shapes that do not fit take the gather + matmul path.
pub(crate) fn conv2d_fits(geo: &Geom, max_dim: u32) -> bool {
    let Geom {
        n,
        c,
        h,
        w,
        o,
        g,
        k,
        p,
        out,
        ..
    } = *geo;
    let limit = (u32::MAX as usize) - (1 << 16);
    let prod = |v: &[usize]| {
        v.iter()
            .try_fold(1usize, |a, &b| a.checked_mul(b))
            .filter(|&x| x <= limit)
    };
    let kk = (c / g.max(1)) * k[0] * k[1];
    let z = (o / g.max(1)).div_ceil(ROWS) * g;
    prod(&[n, c, h, w]).is_some()
        && prod(&[n, o, out[0], out[1]]).is_some()
        && prod(&[o, kk]).is_some()
        && (h + 2 * p[0]) < (i32::MAX as usize)
        && (w + 2 * p[1]) < (i32::MAX as usize)
        && kk <= MAX_K
        && z >= 1
        && z <= max_dim as usize
}

impl GpuDevice {
    /// The largest workgroup count of one grid dimension on this adapter.
    pub(crate) fn max_workgroups_per_dim(&self) -> u32 {
        self.0.limits.max_compute_workgroups_per_dimension
    }

    /// `conv2d` of the packed f32 buffers `x` `[n, c, h, w]` and `weight` `[o, c / g, kh, kw]`
    /// plus the packed `bias` `[o]` when given; returns the packed `[n, o, oh, ow]` output. The
    /// caller has checked [`conv2d_fits`].
    pub(crate) fn conv2d(
        &self,
        x: &GpuBuffer,
        weight: &GpuBuffer,
        bias: Option<&GpuBuffer>,
        geo: &Geom,
    ) -> Result<GpuBuffer> {
        let op = "conv2d";
        let [oh, ow] = geo.out;
        let cols = geo.n * oh * ow;
        let out = self.alloc_uninit(op, (cols * geo.o) as u64 * 4)?;
        if cols == 0 || geo.o == 0 {
            return Ok(out);
        }
        let row_tiles = (geo.o / geo.g).div_ceil(ROWS);
        let col_tiles = cols.div_ceil(COLS);
        let params = [
            w(geo.n),
            w(geo.c),
            w(geo.h),
            w(geo.w),
            w(geo.o),
            w(geo.g),
            w(geo.c / geo.g),
            w(geo.k[0]),
            w(geo.k[1]),
            w(geo.s[0]),
            w(geo.s[1]),
            w(geo.p[0]),
            w(geo.p[1]),
            w(geo.d[0]),
            w(geo.d[1]),
            w(oh),
            w(ow),
            u32::from(bias.is_some()),
            w(row_tiles),
            w(col_tiles),
        ];
        let max = self.max_workgroups_per_dim();
        let (gx, gy) = grid(col_tiles as u64, max).ok_or_else(|| Error::InvalidArgument {
            op,
            message: format!(
                "{cols} output positions ({col_tiles} tiles of {COLS}) exceed this adapter's \
                 dispatch grid; split the batch"
            ),
        })?;
        // Without a bias the weight is bound in its place (the kernel never reads it then).
        let b = bias.unwrap_or(weight);
        self.launch_workgroups(
            op,
            Launch {
                shader: Shader::Conv2d,
                entry: "conv2d",
                bind: Bindings {
                    op_code: None,
                    inputs: &[&x.buffer, &weight.buffer, &b.buffer],
                    output: &out.buffer,
                    meta: &params,
                },
                threads: (cols * geo.o) as u64,
            },
            [gx, gy, w(row_tiles * geo.g)],
        )?;
        Ok(out)
    }
}
