//! GPU elementwise ops of every dtype: a [`Program`] (one op, or a fused chain built by
//! `src/tensor/fuse.rs`) run by one generated kernel (`codegen.rs`), plus `fill` / `arange`
//! (`shaders/fill.wgsl`). Inputs arrive validated (shapes broadcast, dtypes checked, same
//! device) from `src/tensor/`.

use super::buffer::GpuBuffer;
use super::codegen::{self, per_word, Program};
use super::device::GpuDevice;
use super::kernels::{GeneratedRef, Launch, Shader};
use super::params::{check_u32, extend, w};
use crate::shape::Layout;
use crate::Result;

impl GpuDevice {
    /// `fill` (`value`) or `arange` (`start + i * step`) into a new buffer of `n` f32.
    pub(crate) fn fill(
        &self,
        op: &'static str,
        n: usize,
        a: f32,
        step: Option<f32>,
    ) -> Result<GpuBuffer> {
        check_u32(op, &Layout::contiguous(&[n]))?;
        let out = self.alloc_uninit(op, n as u64 * 4)?;
        let mut meta = vec![n as u32, a.to_bits()];
        let entry = match step {
            Some(s) => {
                meta.push(s.to_bits());
                "arange"
            }
            None => "fill",
        };
        self.launch(
            op,
            Launch {
                shader: Shader::Fill,
                entry,
                op_code: None,
                inputs: &[],
                output: &out.buffer,
                meta: &meta,
                threads: n as u64,
            },
        )?;
        Ok(out)
    }

    /// Runs `program` over `views` (each already broadcast to the output shape) with the scalar
    /// params `scalars` (canonical bits), into a new packed buffer of the program's dtype.
    pub(crate) fn run_program(
        &self,
        name: &'static str,
        program: &Program,
        views: &[(&GpuBuffer, &Layout)],
        scalars: &[u32],
        n: usize,
    ) -> Result<GpuBuffer> {
        for (_, l) in views {
            check_u32(name, l)?;
        }
        let out_dtype = program.out_dtype();
        let out = self.alloc_uninit(name, (n * out_dtype.size_in_bytes()) as u64)?;
        let mut packed = 0u64;
        for (k, (_, l)) in views.iter().enumerate() {
            if l.is_contiguous() {
                packed |= 1 << k;
            }
        }
        let mut params = vec![w(n), 0];
        params.extend(views.iter().map(|(_, l)| w(l.offset)));
        params.extend_from_slice(scalars);
        if let Some((_, first)) = views.iter().find(|(_, l)| !l.is_contiguous()) {
            params[1] = w(first.shape.len());
            extend(&mut params, &first.shape);
            for (_, l) in views {
                extend(&mut params, &l.strides);
            }
        }
        let kernel = codegen::kernel(program, packed, self.native_f16(), name);
        let inputs: Vec<&wgpu::Buffer> = views.iter().map(|(b, _)| &b.buffer).collect();
        self.launch(
            name,
            Launch {
                shader: Shader::Generated(GeneratedRef(kernel)),
                entry: "main",
                op_code: None,
                inputs: &inputs,
                output: &out.buffer,
                meta: &params,
                threads: n.div_ceil(per_word(out_dtype)) as u64,
            },
        )?;
        Ok(out)
    }
}
