//! GPU elementwise ops of every dtype: a [`Program`] (one op, or a fused chain built by
//! `src/tensor/fuse.rs`; constant fills and `arange` too) run by one generated kernel
//! (`codegen.rs`). Inputs arrive validated (shapes broadcast, dtypes checked, same device) from
//! `src/tensor/`.

use super::buffer::GpuBuffer;
use super::codegen::{self, per_word, Expr, Program};
use super::device::GpuDevice;
use super::kernels::{Bindings, GeneratedRef, Launch, Shader};
use super::params::{check_u32, extend, w};
use crate::ops::backend::ProgramCall;
use crate::shape::Layout;
use crate::{DType, Result};

impl GpuDevice {
    /// A new buffer of `n` elements of `dtype`, all `value` (a generated kernel with no input:
    /// no host transfer, any dtype). Integer values arrive validated.
    pub(crate) fn fill_value(
        &self,
        op: &'static str,
        n: usize,
        value: f64,
        dtype: DType,
    ) -> Result<GpuBuffer> {
        let (sd, bits) = match dtype {
            DType::F32 | DType::F16 => (DType::F32, (value as f32).to_bits()),
            DType::I32 => (DType::I32, value as i32 as u32),
            DType::U32 | DType::U8 => (dtype, value as u32),
        };
        let mut p = Program::default();
        let s = p.scalar(sd);
        p.push(Expr::Cast(s), dtype);
        let scalars = [bits];
        let fill = |shape| ProgramCall {
            name: op,
            program: &p,
            views: &[],
            scalars: &scalars,
            shape,
        };
        let esize = dtype.size_in_bytes();
        let bytes = (n * esize) as u64;
        if bytes <= self.binding_limit() {
            return self.run_program(&fill(&[n]));
        }
        // Past one binding: one block is filled by the kernel, then copied over the whole
        // buffer (copies have no binding limit). Blocks are whole words (a multiple of 4
        // elements), so every copy is 4-byte aligned.
        let out = self.alloc_uninit(op, bytes)?;
        let per = {
            let per = (self.binding_limit() / esize as u64) as usize;
            per - per % 4
        };
        let block = self.run_program(&fill(&[per]))?;
        let block_bytes = (per * esize) as u64;
        self.record(op, |enc| {
            let mut at = 0u64;
            while at < bytes {
                let len = block_bytes.min(bytes - at);
                enc.copy_buffer_to_buffer(
                    &block.buffer,
                    0,
                    &out.buffer,
                    at,
                    len.next_multiple_of(4),
                );
                at += len;
            }
        })?;
        Ok(out)
    }

    /// Runs `call` as one generated kernel (its output within one binding), into a new packed
    /// buffer of the program's dtype.
    pub(crate) fn run_program(&self, call: &ProgramCall<GpuBuffer>) -> Result<GpuBuffer> {
        let ProgramCall {
            name,
            program,
            views,
            scalars,
            ..
        } = *call;
        let n = call.n();
        // The size first: an output past the adapter's limits is `BufferTooLarge` (as any
        // allocation), not an indexing error.
        let out_dtype = program.out_dtype();
        let word = |d: DType| matches!(d, DType::F32 | DType::I32 | DType::U32);
        // Whole vec4 loads and stores: packed 32-bit data aligned to 4 elements, in buffers of
        // whole vectors (pool buckets are), so no vector read reaches past a buffer's end.
        let wide = word(out_dtype)
            && program.inputs.iter().all(|&d| word(d))
            && views
                .iter()
                .all(|(b, l)| l.is_contiguous() && l.offset % 4 == 0 && b.buffer.size() % 16 == 0);
        let bytes = (n * out_dtype.size_in_bytes()) as u64;
        let out = self.alloc_uninit(name, bytes)?;
        // The last vector is stored whole: it must lie inside the (bucket-sized) buffer.
        let wide =
            wide && out.buffer.size() % 16 == 0 && out.buffer.size() >= bytes.next_multiple_of(16);
        check_u32(name, &Layout::contiguous(&[n]))?;
        for (_, l) in views {
            check_u32(name, l)?;
        }
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
        let kernel = codegen::kernel(program, packed, self.native_f16(), wide, name);
        let inputs: Vec<&wgpu::Buffer> = views.iter().map(|(b, _)| &b.buffer).collect();
        self.launch(
            name,
            Launch {
                shader: Shader::Generated(GeneratedRef(kernel)),
                entry: "main",
                bind: Bindings {
                    op_code: None,
                    inputs: &inputs,
                    output: &out.buffer,
                    meta: &params,
                },
                threads: if wide {
                    n.div_ceil(4) as u64
                } else {
                    n.div_ceil(per_word(out_dtype)) as u64
                },
            },
        )?;
        Ok(out)
    }
}
