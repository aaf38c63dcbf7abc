//! GPU kernels of quantized matrices (`shaders/quant.wgsl`): `x @ W^T`, dequantize and the row
//! gather of embeddings, one launch per part (row range) of the matrix, each binding only its
//! own planes, so matrices past one storage binding run.

// Activation rows per matvec workgroup.
use super::buffer::GpuBuffer;
use super::contract::quant::{LANES, MT};
use super::device::GpuDevice;
use super::ids;
use super::kernels::{Bindings, Launch, Shader};
use super::params::w;
use super::shader_table::qtype_code;
use crate::ops::backend::{QMatrix, QPart};
use crate::{Error, Result};

/// quant.wgsl's three entries of `x @ W^T`, which give the same bits: `matvec` (a workgroup
/// per weight row, its 64 lanes' sums merged in workgroup memory), `matvec_serial` (an
/// invocation per weight row adding the same lanes' sums in the same order, no barriers) and
/// `matvec_rows` (`matvec_serial` for 8 weight rows per invocation, each activation loaded once
/// for all 8: software adapters' choice).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MatvecKernel {
    Workgroup,
    Serial,
    Rows,
}

impl MatvecKernel {
    pub(crate) const ALL: [MatvecKernel; 3] = [
        MatvecKernel::Workgroup,
        MatvecKernel::Serial,
        MatvecKernel::Rows,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            MatvecKernel::Workgroup => "matvec",
            MatvecKernel::Serial => "matvec_serial",
            MatvecKernel::Rows => "matvec_rows",
        }
    }

    /// Weight rows per workgroup.
    fn rows_per_group(self) -> usize {
        match self {
            MatvecKernel::Workgroup => 1,
            MatvecKernel::Serial | MatvecKernel::Rows => LANES,
        }
    }
}

thread_local! {
    /// A matvec entry forced by a test on this thread (`testing::force_quant_matvec`).
    static FORCED: std::cell::Cell<Option<MatvecKernel>> = const { std::cell::Cell::new(None) };
}

/// Forces (or with `None`, stops forcing) the quantized matvec entry `name` on this thread;
/// false for an unknown name.
pub(crate) fn force_matvec(name: Option<&str>) -> bool {
    super::autotune::force_named(&FORCED, &MatvecKernel::ALL, MatvecKernel::name, name)
}

/// Elements a u32 index in the shaders can address.
fn check_u32(op: &'static str, what: &str, n: usize) -> Result<()> {
    if n > u32::MAX as usize {
        return Err(Error::InvalidArgument {
            op,
            message: format!(
                "{what} has {n} elements, more than the 2^32 a GPU kernel indexes; split it"
            ),
        });
    }
    Ok(())
}

impl GpuDevice {
    /// The common params of a part: `[rows, cols, blocks per row, m, row0, rows_total, qtype,
    /// x_offset, n, ids_offset, code]`.
    fn quant_params(mat: &QMatrix<'_, GpuBuffer>, p: &QPart<'_, GpuBuffer>) -> Vec<u32> {
        let (q, shape) = (mat.qtype, mat.shape);
        let nb = shape[1] / q.block_len();
        vec![
            w(p.rows),
            w(shape[1]),
            w(nb),
            0,
            w(p.row0),
            w(shape[0]),
            qtype_code(q),
            0,
            0,
            0,
            0,
        ]
    }

    /// `[rows, cols]` f32: every element of every part.
    pub(crate) fn quant_dequantize(
        &self,
        op: &'static str,
        mat: &QMatrix<'_, GpuBuffer>,
    ) -> Result<GpuBuffer> {
        let shape = mat.shape;
        let n = shape[0] * shape[1];
        check_u32(op, "the dequantized matrix", n)?;
        // Every element is written by the part holding its row.
        let out = self.alloc_uninit(op, n as u64 * 4)?;
        for p in &mat.parts {
            let params = Self::quant_params(mat, p);
            self.launch(
                op,
                Launch {
                    shader: Shader::Quant,
                    entry: "dequant",
                    bind: Bindings {
                        op_code: None,
                        inputs: &[&p.scales.buffer, &p.body.buffer, &p.scales.buffer],
                        output: &out.buffer,
                        meta: &params,
                    },
                    threads: (p.rows * shape[1]) as u64,
                },
            )?;
        }
        Ok(out)
    }

    /// `x @ W^T`: `x` is `m` packed rows of `cols` f32 from element `x.1` of `x.0`; the result
    /// is `[m, rows]` f32.
    pub(crate) fn quant_matmul_t(
        &self,
        op: &'static str,
        mat: &QMatrix<'_, GpuBuffer>,
        x: (&GpuBuffer, usize),
        m: usize,
    ) -> Result<GpuBuffer> {
        let shape = mat.shape;
        check_u32(op, "the activations", x.1 + m * shape[1])?;
        check_u32(op, "the output", m * shape[0])?;
        // Every output element is written by the part holding its weight row.
        let out = self.alloc_uninit(op, (m * shape[0]) as u64 * 4)?;
        let max = self.0.limits.max_compute_workgroups_per_dimension as usize;
        let groups = m.div_ceil(MT);
        if groups > max {
            return Err(Error::InvalidArgument {
                op,
                message: format!(
                    "{m} activation rows need {groups} workgroups in one dimension, more than \
                     this adapter's {max}; split x into chunks of {} rows",
                    max * MT
                ),
            });
        }
        // Software adapters run a workgroup's invocations one SIMD batch after another, switch
        // between them at each barrier and turn each storage load into a loop over the SIMD
        // lanes: there one invocation per 8 rows runs the same sums, sharing its loads of x.
        let kernel = FORCED.with(|f| f.get()).unwrap_or(
            if self.0.info.device_type == wgpu::DeviceType::Cpu {
                MatvecKernel::Rows
            } else {
                MatvecKernel::Workgroup
            },
        );
        let rows_per_group = kernel.rows_per_group();
        for p in &mat.parts {
            let mut params = Self::quant_params(mat, p);
            params[3] = w(m);
            params[7] = w(x.1);
            // The row groups spread over x and y.
            let wgs = p.rows.div_ceil(rows_per_group);
            let gx = wgs.min(max);
            let gy = wgs.div_ceil(gx.max(1));
            self.launch_workgroups(
                op,
                Launch {
                    shader: Shader::Quant,
                    entry: kernel.name(),
                    // One pipeline per block type (quant.wgsl's `OP`).
                    bind: Bindings {
                        op_code: Some(params[6]),
                        inputs: &[&p.scales.buffer, &p.body.buffer, &x.0.buffer],
                        output: &out.buffer,
                        meta: &params,
                    },
                    threads: (p.rows * m) as u64,
                },
                [gx as u32, gy as u32, groups as u32],
            )?;
        }
        Ok(out)
    }

    /// Rows `ids` of the matrix, dequantized: `[n, cols]` f32. Bad ids are found by the kernel.
    pub(crate) fn quant_gather_rows(
        &self,
        op: &'static str,
        mat: &QMatrix<'_, GpuBuffer>,
        (ids, ids_offset, n, signed): super::gather::Ids<'_>,
    ) -> Result<GpuBuffer> {
        let shape = mat.shape;
        check_u32(op, "the gathered rows", n * shape[1])?;
        // Every element is written: a row by the part holding it, a bad id's zeros by part 0.
        let out = self.alloc_uninit(op, (n * shape[1]) as u64 * 4)?;
        for p in &mat.parts {
            let mut params = Self::quant_params(mat, p);
            params[8] = w(n);
            params[9] = w(ids_offset);
            params[10] = ids::code(op, signed);
            self.launch(
                op,
                Launch {
                    shader: Shader::Quant,
                    entry: "gather",
                    bind: Bindings {
                        op_code: None,
                        inputs: &[&p.scales.buffer, &p.body.buffer, &ids.buffer],
                        output: &out.buffer,
                        meta: &params,
                    },
                    threads: (n * shape[1]) as u64,
                },
            )?;
        }
        Ok(out)
    }
}
