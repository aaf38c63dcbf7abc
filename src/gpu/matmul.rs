//! GPU matmul: dispatches of `shaders/matmul.wgsl` and `shaders/matmul_vec4.wgsl`.
//!
//! Inputs arrive validated from `tensor/matmul.rs` as two views `[..batch, M, K]` and
//! `[..batch, K, N]` with identical (broadcast) batch dims; the output is a new packed
//! `[..batch, M, N]` buffer. Operands are always read through their strides: a transposed,
//! permuted, narrowed or broadcast view is never copied first.
//!
//! Three bounds shape every launch:
//! - K is cut into chunks of at most [`K_CHUNK`], dispatched in order (the first stores, the
//!   rest add), because lavapipe silently stops any shader loop after 65,535 iterations.
//! - Each grid dimension stays within `max_compute_workgroups_per_dimension`: rows, columns and
//!   batches beyond it go to further dispatches with their origin in the params.
//! - Every index is a `u32`; larger operands are refused with a clear error.

use super::buffer::GpuBuffer;
use super::contract::matmul::{
    GEMV_T_COLS, OP_A_K_CONTIGUOUS, OP_B_COLUMN_CONTIGUOUS, OP_TILED_PADDED, TILE,
};
use super::device::GpuDevice;
use super::kernels::{Bindings, Launch, Shader};
use crate::shape::Layout;
use crate::{Error, Result};

/// The widest slice of K one dispatch covers: the longest per-invocation loop is then 16,384
/// iterations (the naive and scalar register kernels step one k at a time), far below
/// lavapipe's 65,535, and a multiple of every kernel's K step (4 and 16).
pub(crate) const K_CHUNK: usize = 16_384;

/// The largest problem (multiply-adds) the autotuner times; larger classes keep the heuristic.
const TUNE_BUDGET: u64 = 1 << 31;

/// The matmul kernels, in the order the benchmarks report them.
/// What a matmul's operands hold and what it accumulates in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Precision {
    /// f32 operands, f32 accumulation and output.
    F32,
    /// f16 operands (packed pairs, read in place), f32 accumulation and output.
    F16,
    /// f16 operands accumulated in f16 into a packed f16 output (`SHADER_F16` devices; the
    /// caller checks).
    F16Acc,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MatmulKernel {
    /// One output per invocation: the baseline.
    Naive,
    /// 8×8 register tile, scalar strided loads, no barriers: any shape, any strides.
    Register,
    /// 8×8 register tile with vec4 loads, no barriers: aligned operands on software adapters.
    /// 8×8 invocations per workgroup.
    RegisterVec4,
    /// [`MatmulKernel::RegisterVec4`] in 16×4 workgroups (128 columns × 32 rows).
    RegisterVec4Wide,
    /// [`MatmulKernel::RegisterVec4`] in 4×16 workgroups (32 columns × 128 rows).
    RegisterVec4Tall,
    /// [`MatmulKernel::RegisterVec4`] in 16×16 workgroups (128 × 128 outputs).
    RegisterVec4Large,
    /// The vec4 kernel with a 4×4 register tile, 16×16 invocations (64 × 64 outputs).
    RegisterVec4R4x4,
    /// The vec4 kernel with an 8×4 (rows × columns) register tile, 16×8 invocations (64 × 64).
    RegisterVec4R8x4,
    /// 64×64 workgroup-memory tiles with 4×4 register tiles: hardware GPUs.
    Tiled,
    /// [`MatmulKernel::Tiled`] with the A tile padded against workgroup-memory bank conflicts.
    TiledPadded,
    /// [`MatmulKernel::Tiled`] double-buffered: the next K slice is prefetched into registers
    /// during the current one's FMAs, one barrier per slice.
    TiledDouble,
    /// Split-K: K cut into up to 16 slices multiplied side by side (the register kernel, each
    /// slice into its own [M, N] partial), then summed over the slices: for few outputs and a
    /// long K, where the other kernels leave most of a GPU idle. Unbatched problems with
    /// K >= 2,048 only; elsewhere it runs as `register`.
    SplitK,
    /// One output per invocation in 256×1 workgroups: a row vector times a matrix (M = 1).
    GemvM1,
    /// One output per invocation in 1×256 workgroups: a matrix times a vector (N = 1).
    GemvN1,
    /// A few rows times a matrix read along K (a weight used transposed, `x · Wᵀ`: decode's
    /// matrix-vector products): 32 invocations share each output, reading its column as
    /// consecutive K, and add their partial sums in a fixed tree. Hardware GPUs' choice for
    /// M <= 4 with B contiguous along K.
    GemvT,
    /// [`MatmulKernel::GemvT`]'s shape with the register kernels' arithmetic (one fma per k in
    /// k order): 8 outputs per invocation, K read two elements (one packed f16 word) at a time,
    /// each element of A loaded once for the 8. Software adapters' choice for that shape, where
    /// every storage load is a loop over SIMD lanes. Needs [`Problem::pairs`]; elsewhere it
    /// runs as `register` (the same bits).
    GemvRows,
}

/// One matmul kernel as the launch code sees it: a row of [`KERNELS`].
struct Spec {
    kernel: MatmulKernel,
    /// As benchmarks, the autotuner's cache and `Tensor::matmul_with` name it.
    name: &'static str,
    /// Its entry point in matmul.wgsl or (vec4 kernels) matmul_vec4.wgsl.
    entry: &'static str,
    /// Output rows and columns one workgroup covers (the shader headers' dispatch geometry).
    tile: (usize, usize),
    /// Invocations per workgroup (the entry's `@workgroup_size`).
    invocations: u32,
    /// The order of the arithmetic behind each output, as far as it decides the bits: kernels
    /// of one order give identical results (`tests/runtime/determinism.rs` checks it on every
    /// adapter). 0: one `acc + a * b` per k, in k order (naive, gemv); 1: one `fma` per k, in
    /// k order (the register and tiled kernels); 2: split-K (slices summed at the end); 3: K
    /// spread over 32 invocations summed in a fixed tree (gemv_t).
    order: u8,
    /// Reads vec4s (and so needs [`Problem::vec4_layout`]).
    vec4: bool,
}

/// A row of [`KERNELS`], its fields in [`Spec`]'s order.
macro_rules! spec {
    ($kernel:expr, $name:literal, $entry:literal, $tile:expr, $inv:literal, $order:literal, $vec4:literal) => {
        Spec {
            kernel: $kernel,
            name: $name,
            entry: $entry,
            tile: $tile,
            invocations: $inv,
            order: $order,
            vec4: $vec4,
        }
    };
}

use MatmulKernel as K;

/// Every matmul kernel, one row each, in [`MatmulKernel::ALL`]'s order: name, entry point,
/// output tile per workgroup, invocations per workgroup, arithmetic order, vec4 reads.
#[rustfmt::skip]
const KERNELS: [Spec; 16] = [
    spec!(K::Naive, "naive", "naive", (16, 16), 256, 0, false),
    spec!(K::Register, "register", "register_tile", (64, 64), 64, 1, false),
    spec!(K::RegisterVec4, "register_vec4", "register_tile", (64, 64), 64, 1, true),
    spec!(K::RegisterVec4Wide, "register_vec4_16x4", "register_tile_16x4", (32, 128), 64, 1, true),
    spec!(K::RegisterVec4Tall, "register_vec4_4x16", "register_tile_4x16", (128, 32), 64, 1, true),
    spec!(K::RegisterVec4Large, "register_vec4_16x16", "register_tile_16x16", (128, 128), 256, 1, true),
    spec!(K::RegisterVec4R4x4, "register_vec4_r4x4", "register_tile_r4x4", (64, 64), 256, 1, true),
    spec!(K::RegisterVec4R8x4, "register_vec4_r8x4", "register_tile_r8x4", (64, 64), 128, 1, true),
    spec!(K::Tiled, "tiled", "tiled", (TILE, TILE), 256, 1, false),
    spec!(K::TiledPadded, "tiled_padded", "tiled", (TILE, TILE), 256, 1, false),
    spec!(K::TiledDouble, "tiled_double", "tiled_double", (TILE, TILE), 256, 1, false),
    spec!(K::SplitK, "split_k", "register_tile", (64, 64), 64, 2, false),
    spec!(K::GemvM1, "gemv_m1", "gemv_m1", (1, 256), 256, 0, false),
    spec!(K::GemvN1, "gemv_n1", "gemv_n1", (256, 1), 256, 0, false),
    spec!(K::GemvT, "gemv_t", "gemv_t", (1, GEMV_T_COLS), 256, 3, false),
    spec!(K::GemvRows, "gemv_rows", "gemv_rows", (1, 64), 8, 1, false),
];

impl MatmulKernel {
    pub(crate) const ALL: [MatmulKernel; 16] = {
        let mut all = [MatmulKernel::Naive; 16];
        let mut i = 0;
        while i < KERNELS.len() {
            all[i] = KERNELS[i].kernel;
            i += 1;
        }
        all
    };

    /// This kernel's row of [`KERNELS`].
    fn spec(self) -> &'static Spec {
        &KERNELS[self as usize]
    }

    pub(crate) fn name(self) -> &'static str {
        self.spec().name
    }

    /// The order of the arithmetic behind each output ([`Spec::order`]).
    pub(crate) fn order(self) -> u8 {
        self.spec().order
    }

    /// Invocations per workgroup (the shader's `@workgroup_size`).
    fn invocations(self) -> u32 {
        self.spec().invocations
    }

    /// Whether the kernel reads vec4s (and so needs [`Problem::vec4_layout`]).
    pub(crate) fn is_vec4(self) -> bool {
        self.spec().vec4
    }

    pub(crate) fn from_name(name: &str) -> Option<MatmulKernel> {
        MatmulKernel::ALL.into_iter().find(|k| k.name() == name)
    }

    fn shader(self, half: bool, acc16: bool) -> Shader {
        if self.is_vec4() {
            Shader::MatmulVec4
        } else if acc16 {
            Shader::MatmulF16Acc
        } else if half {
            Shader::MatmulF16
        } else {
            Shader::Matmul
        }
    }

    fn entry(self) -> &'static str {
        self.spec().entry
    }

    /// Output rows and columns one workgroup covers (the shader headers' dispatch geometry).
    fn tile(self) -> (usize, usize) {
        self.spec().tile
    }
}

/// The product's sizes and each operand's strides, read off the two layouts. Strides of size-1
/// dims are set to 0 (they never move the index), and size-1 batch dims are dropped, so
/// alignment checks see only the strides that matter.
#[derive(Debug)]
struct Problem {
    m: usize,
    k: usize,
    n: usize,
    batch_shape: Vec<usize>,
    a_batch: Vec<usize>,
    b_batch: Vec<usize>,
    a_off: usize,
    a_rs: usize,
    a_ks: usize,
    b_off: usize,
    b_ks: usize,
    b_cs: usize,
    /// Both operands are f16 (read in place as packed pairs; no vec4 kernels).
    half: bool,
}

impl Problem {
    fn new(la: &Layout, lb: &Layout, half: bool) -> Problem {
        let nd = la.shape.len();
        let (m, k, n) = (la.shape[nd - 2], la.shape[nd - 1], lb.shape[nd - 1]);
        let stride = |l: &Layout, d: usize| if l.shape[d] == 1 { 0 } else { l.strides[d] };
        let mut p = Problem {
            m,
            k,
            n,
            batch_shape: Vec::new(),
            a_batch: Vec::new(),
            b_batch: Vec::new(),
            a_off: la.offset,
            a_rs: stride(la, nd - 2),
            a_ks: stride(la, nd - 1),
            b_off: lb.offset,
            b_ks: stride(lb, nd - 2),
            b_cs: stride(lb, nd - 1),
            half,
        };
        for d in 0..nd - 2 {
            if la.shape[d] != 1 {
                p.batch_shape.push(la.shape[d]);
                p.a_batch.push(la.strides[d]);
                p.b_batch.push(lb.strides[d]);
            }
        }
        p
    }

    /// The autotuning class: each size bucketed to a power of two (1 kept apart, the GEMV
    /// shapes), batched or not, and whether the vec4 kernel's layout holds.
    fn class(&self) -> String {
        let b = |x: usize| if x <= 1 { x } else { x.next_power_of_two() };
        format!(
            "m{} n{} k{}{}{}{}",
            b(self.m),
            b(self.n),
            b(self.k),
            if self.batches() > 1 { " batched" } else { "" },
            if self.rows_times_transposed() {
                " bt"
            } else {
                ""
            },
            if self.vec4_layout().is_some() {
                " vec4"
            } else if self.half {
                " f16"
            } else {
                ""
            }
        )
    }

    /// A few rows times B read along K (`x · Wᵀ` in decode): [`MatmulKernel::GemvT`]'s shape,
    /// which GPUs run far from their bandwidth with a 64×64 output tile (one useful row).
    fn rows_times_transposed(&self) -> bool {
        self.m <= 4 && self.b_ks == 1 && self.k >= 256 && self.n >= 64
    }

    /// Whether [`MatmulKernel::GemvRows`] can read both operands two elements at a time: A
    /// and B contiguous along K, K even, and with f16 (one word per pair) every offset and
    /// stride that moves a pair even.
    fn pairs(&self) -> bool {
        let even = |x: usize| x.is_multiple_of(2);
        self.rows_times_transposed()
            && self.a_ks == 1
            && even(self.k)
            && (!self.half
                || [self.a_off, self.b_off, self.a_rs, self.b_cs]
                    .into_iter()
                    .chain(self.a_batch.iter().copied())
                    .chain(self.b_batch.iter().copied())
                    .all(even))
    }

    fn batches(&self) -> usize {
        self.batch_shape.iter().product()
    }

    /// The `OP` constant of `matmul_vec4.wgsl` (bit 0: A k-contiguous, bit 1: B
    /// column-contiguous), or `None` when some vec4 would be partial or misaligned.
    fn vec4_layout(&self) -> Option<u32> {
        if self.half {
            return None;
        }
        let aligned = |x: usize| x.is_multiple_of(4);
        let batch_ok = self
            .a_batch
            .iter()
            .chain(&self.b_batch)
            .all(|&s| aligned(s));
        if !aligned(self.k) || !aligned(self.a_off) || !aligned(self.b_off) || !batch_ok {
            return None;
        }
        let a_bit = if self.a_ks == 1 && aligned(self.a_rs) {
            OP_A_K_CONTIGUOUS
        } else if self.a_rs == 1 && aligned(self.m) && aligned(self.a_ks) {
            0
        } else {
            return None;
        };
        let b_bit = if self.b_cs == 1 && aligned(self.n) && aligned(self.b_ks) {
            OP_B_COLUMN_CONTIGUOUS
        } else if self.b_ks == 1 && aligned(self.b_cs) {
            0
        } else {
            return None;
        };
        Some(a_bit | b_bit)
    }
}

/// Shaders index with `u32`: every index a kernel forms is below one of these bounds.
fn check_u32(la: &Layout, lb: &Layout, out_elems: usize) -> Result<()> {
    let worst = la.span().max(lb.span()).max(out_elems);
    if u32::try_from(worst).is_err() {
        return Err(Error::InvalidArgument {
            op: "matmul",
            message: format!(
                "{worst} elements exceed the 2^32 - 1 elements a GPU kernel can index; \
                 split the product or run it on the CPU"
            ),
        });
    }
    Ok(())
}

impl GpuDevice {
    /// The kernel [`GpuDevice::matmul`] uses for these operands on this adapter.
    ///
    /// Software adapters (lavapipe, SwiftShader: `DeviceType::Cpu`) run each invocation as a
    /// SIMD lane of a CPU thread: arithmetic is vectorised across lanes, but each storage or
    /// workgroup-memory load is a loop over the lanes, and each barrier a coroutine switch. So
    /// the barrier-free 8×8 register tile wins there (most FMAs per load), with vec4 loads
    /// (about the cost of one scalar load) when the operands allow them; measured on lavapipe at
    /// 256³ and 512³: ~10× the naive kernel, 2–3× the workgroup-tiled one (`benches/matmul.rs`).
    /// Hardware GPUs need workgroup-memory tiles to reuse each loaded element across a tile,
    /// except for a few rows times a matrix read along K (decode's `x · Wᵀ`), where a tile
    /// would compute one useful row of 64 and leave most of the GPU idle: `gemv_t` spreads each
    /// output's K over 32 invocations instead (measured on an H200 in docs/reports/).
    pub(crate) fn matmul_kernel(&self, la: &Layout, lb: &Layout, half: bool) -> MatmulKernel {
        let p = Problem::new(la, lb, half);
        match self.0.info.device_type {
            wgpu::DeviceType::Cpu if p.pairs() => MatmulKernel::GemvRows,
            wgpu::DeviceType::Cpu => match p.vec4_layout() {
                Some(_) => MatmulKernel::RegisterVec4,
                None => MatmulKernel::Register,
            },
            wgpu::DeviceType::DiscreteGpu
            | wgpu::DeviceType::IntegratedGpu
            | wgpu::DeviceType::VirtualGpu
            | wgpu::DeviceType::Other
                if p.rows_times_transposed() =>
            {
                MatmulKernel::GemvT
            }
            wgpu::DeviceType::DiscreteGpu
            | wgpu::DeviceType::IntegratedGpu
            | wgpu::DeviceType::VirtualGpu
            | wgpu::DeviceType::Other => MatmulKernel::Tiled,
        }
    }

    /// How many K slices split-K uses for `p`: 1 (no split) for batched problems, K < 2,048, or
    /// partials past one storage binding; else up to 16 slices of at least 1,024 (and at most
    /// [`K_CHUNK`], the loop cap).
    fn split_k_slices(&self, p: &Problem) -> usize {
        if !p.batch_shape.is_empty() || p.k < 2048 {
            return 1;
        }
        let slices = (p.k / 1024).clamp(2, 16).max(p.k.div_ceil(K_CHUNK));
        let bytes = (slices * p.m * p.n) as u64 * 4;
        if bytes > self.0.limits.max_storage_buffer_binding_size {
            return 1;
        }
        slices
    }

    /// The autotuned kernel for this problem's shape class: a tuned or cached choice, or the
    /// heuristic ([`GpuDevice::matmul_kernel`]) on a class's first call; the second call of a
    /// class times every candidate (`autotune.rs`).
    fn tuned_matmul_kernel(
        &self,
        (a, la): (&GpuBuffer, &Layout),
        (b, lb): (&GpuBuffer, &Layout),
        p: &Problem,
    ) -> Result<MatmulKernel> {
        let heuristic = self.matmul_kernel(la, lb, p.half);
        let key = super::autotune::class_key("matmul", &p.class());
        let (chosen, tune_now) = self.0.tuner.lookup(&key);
        // Deterministic mode (the default): only kernels that give the heuristic's bits.
        let det = super::autotune::deterministic();
        let limit = self.0.limits.max_compute_invocations_per_workgroup;
        let fits = |k: MatmulKernel| {
            (!k.is_vec4() || p.vec4_layout().is_some())
                && k.invocations() <= limit
                && (k != MatmulKernel::SplitK || self.split_k_slices(p) > 1)
                && (k != MatmulKernel::GemvRows || p.pairs())
                && (!det || k.order() == heuristic.order())
        };
        if let Some(k) = chosen
            .and_then(|n| MatmulKernel::from_name(&n))
            .filter(|&k| fits(k))
        {
            return Ok(k);
        }
        // Searching costs a few runs of every candidate: classes past ~2^31 multiply-adds
        // keep the heuristic.
        let work = p.batches() as u64 * p.m as u64 * p.n as u64 * p.k as u64;
        if !tune_now || work > TUNE_BUDGET {
            self.0.tuner.note_heuristic(&key, heuristic.name());
            return Ok(heuristic);
        }
        let op = "matmul autotune";
        let mut candidates: Vec<MatmulKernel> = vec![heuristic];
        candidates.extend(
            MatmulKernel::ALL
                .into_iter()
                .filter(|&k| k != heuristic && fits(k)),
        );
        let found = self.time_candidates(op, &candidates, MatmulKernel::name, |k| {
            let precision = if p.half {
                Precision::F16
            } else {
                Precision::F32
            };
            self.matmul(a, la, b, lb, Some(k), precision).map(drop)
        })?;
        let (winner, timings) = found.unwrap_or((heuristic, Vec::new()));
        log::debug!(
            "wgtensor: autotuned {key} on {}: {} ({timings:?})",
            self.label(),
            winner.name()
        );
        self.0.tuner.record(&key, winner.name(), timings);
        Ok(winner)
    }

    /// `A · B` for the views `la` of `a` (`[..batch, M, K]`) and `lb` of `b`
    /// (`[..batch, K, N]`, same batch dims) into a new packed `[..batch, M, N]` buffer, with
    /// `kernel` or the adapter's choice ([`GpuDevice::matmul_kernel`]), in `precision`.
    pub(crate) fn matmul(
        &self,
        a: &GpuBuffer,
        la: &Layout,
        b: &GpuBuffer,
        lb: &Layout,
        kernel: Option<MatmulKernel>,
        precision: Precision,
    ) -> Result<GpuBuffer> {
        let half = precision != Precision::F32;
        let acc16 = precision == Precision::F16Acc;
        // Split-K's partials are summed in f32: with f16 accumulation it gives way to the
        // adapter's choice.
        let kernel = kernel.filter(|&k| !acc16 || k != MatmulKernel::SplitK);
        let op = "matmul";
        let p = Problem::new(la, lb, half);
        let out_elems = p.batches() * p.m * p.n;
        // A result larger than one buffer is the condition `zeros` of its size reports, with
        // the same error; only a result that fits but that u32 indices cannot cover is the
        // kernel's own limit below.
        let esize: u64 = if half { 2 } else { 4 };
        let bytes = (out_elems as u64).saturating_mul(esize);
        if bytes > self.0.limits.max_buffer_size {
            return Err(Error::BufferTooLarge {
                op,
                device: self.label().to_string(),
                adapter: self.adapter_name(),
                bytes,
                limit: self.0.limits.max_buffer_size,
                limit_name: "max_buffer_size",
            });
        }
        check_u32(la, lb, out_elems)?;
        let out_bytes = out_elems as u64 * if acc16 { 2 } else { 4 };
        // Zero-filled when K = 0 (that is the whole answer); otherwise the first K chunk stores
        // every element, so no clear is needed.
        let out = if p.k == 0 {
            self.alloc(op, out_bytes)?
        } else {
            self.alloc_uninit(op, out_bytes)?
        };
        if out_elems == 0 || p.k == 0 {
            return Ok(out);
        }
        let kernel = match kernel {
            Some(k) => k,
            None => self.tuned_matmul_kernel((a, la), (b, lb), &p)?,
        };
        let kernel = if acc16 && kernel == MatmulKernel::SplitK {
            self.matmul_kernel(la, lb, true)
        } else if kernel == MatmulKernel::GemvRows && !p.pairs() {
            // Its arithmetic without its layout needs: the register kernel, same bits.
            MatmulKernel::Register
        } else {
            kernel
        };
        let limit = self.0.limits.max_compute_invocations_per_workgroup;
        if kernel.invocations() > limit {
            return Err(Error::InvalidArgument {
                op,
                message: format!(
                    "the {} kernel runs {} invocations per workgroup; {} allows {limit}",
                    kernel.name(),
                    kernel.invocations(),
                    self.label()
                ),
            });
        }
        let op_code = match kernel {
            k if k.is_vec4() => Some(p.vec4_layout().ok_or_else(|| Error::InvalidArgument {
                op,
                message: format!(
                    "the {} kernel needs aligned, unit-stride operands; got \
                         M={}, K={}, N={}, A strides (rows {}, k {}) at offset {}, B strides \
                         (k {}, columns {}) at offset {}",
                    kernel.name(),
                    p.m,
                    p.k,
                    p.n,
                    p.a_rs,
                    p.a_ks,
                    p.a_off,
                    p.b_ks,
                    p.b_cs,
                    p.b_off
                ),
            })?),
            MatmulKernel::TiledPadded => Some(OP_TILED_PADDED),
            _ => None,
        };
        let slices = if kernel == MatmulKernel::SplitK {
            self.split_k_slices(&p)
        } else {
            1
        };
        let max = self.0.limits.max_compute_workgroups_per_dimension.max(1) as usize;
        let (tile_rows, tile_cols) = kernel.tile();
        // Whole workgroups per dispatch; a multiple of 4 rows keeps vec4 rows aligned.
        let (row_span, col_span) = (max * tile_rows, max * tile_cols);
        let u = |x: usize| x as u32; // every value below fits: checked by `check_u32`
        let nd = p.batch_shape.len();
        let mut params = vec![0u32; 15 + 3 * nd];
        params[0] = u(p.m);
        params[1] = u(p.n);
        params[7] = u(p.a_off);
        params[8] = u(p.a_rs);
        params[9] = u(p.a_ks);
        params[10] = u(p.b_off);
        params[11] = u(p.b_ks);
        params[12] = u(p.b_cs);
        params[14] = u(nd);
        for d in 0..nd {
            params[15 + d] = u(p.batch_shape[d]);
            params[15 + nd + d] = u(p.a_batch[d]);
            params[15 + 2 * nd + d] = u(p.b_batch[d]);
        }
        // One dispatch over a block of output tiles: `at` sets the params' first row (2), first
        // column (3), k range (4, 5), accumulate flag (6) and first batch or split-K slice (13).
        let mut dispatch =
            |at: [usize; 6], grid: [usize; 3], output: &GpuBuffer, threads: usize| {
                for (i, v) in [2, 3, 4, 5, 6, 13].into_iter().zip(at) {
                    params[i] = u(v);
                }
                let launch = Launch {
                    shader: kernel.shader(p.half, acc16),
                    entry: kernel.entry(),
                    bind: Bindings {
                        op_code,
                        inputs: &[&a.buffer, &b.buffer],
                        output: &output.buffer,
                        meta: &params,
                    },
                    threads: threads as u64,
                };
                self.launch_workgroups(op, launch, grid.map(u))
            };
        if slices > 1 {
            // Slice s writes its [M, N] partial at s * M * N: with no batch dims the kernel
            // reads A and B at their base and stores at (first batch) * M * N, so slice s is
            // launched as "batch" s.
            drop(out);
            let mn = p.m * p.n;
            let len = p.k.div_ceil(slices);
            let partials = self.alloc_uninit(op, (slices * mn) as u64 * 4)?;
            for s in 0..slices {
                let (k0, k1) = (s * len, ((s + 1) * len).min(p.k));
                for row0 in (0..p.m).step_by(row_span) {
                    let rows = (p.m - row0).min(row_span);
                    for col0 in (0..p.n).step_by(col_span) {
                        let cols = (p.n - col0).min(col_span);
                        let grid = [cols.div_ceil(tile_cols), rows.div_ceil(tile_rows), 1];
                        let at = [row0, col0, k0, k1, 0, s];
                        dispatch(at, grid, &partials, rows * cols)?;
                    }
                }
            }
            let layout = Layout::contiguous(&[slices, mn]);
            let rows = crate::cpu::reduce::Rows::along(&layout, 0);
            return self.reduce_typed(
                op,
                crate::cpu::reduce::ReduceOp::Sum,
                crate::DType::F32,
                &partials,
                &layout,
                &rows,
            );
        }
        let batches = p.batches();
        for batch0 in (0..batches).step_by(max) {
            let nb = (batches - batch0).min(max);
            for row0 in (0..p.m).step_by(row_span) {
                let rows = (p.m - row0).min(row_span);
                for col0 in (0..p.n).step_by(col_span) {
                    let cols = (p.n - col0).min(col_span);
                    for k0 in (0..p.k).step_by(K_CHUNK) {
                        let k1 = (k0 + K_CHUNK).min(p.k);
                        let grid = [cols.div_ceil(tile_cols), rows.div_ceil(tile_rows), nb];
                        let at = [row0, col0, k0, k1, usize::from(k0 > 0), batch0];
                        dispatch(at, grid, &out, nb * rows * cols)?;
                    }
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layouts(a: &[usize], b: &[usize]) -> (Layout, Layout) {
        (Layout::contiguous(a), Layout::contiguous(b))
    }

    #[test]
    fn vec4_eligibility() {
        let (la, lb) = layouts(&[8, 16], &[16, 12]);
        assert_eq!(Problem::new(&la, &lb, false).vec4_layout(), Some(3));
        // K not a multiple of 4.
        let (la, lb) = layouts(&[8, 6], &[6, 12]);
        assert_eq!(Problem::new(&la, &lb, false).vec4_layout(), None);
        // Column-contiguous B with N % 4 != 0.
        let (la, lb) = layouts(&[8, 16], &[16, 6]);
        assert_eq!(Problem::new(&la, &lb, false).vec4_layout(), None);
        // a.t() of a row-major [16, 8] matrix: row-contiguous A; b.t(): k-contiguous B.
        let mut la = Layout::contiguous(&[16, 8]);
        la.shape.swap(0, 1);
        la.strides.swap(0, 1);
        let mut lb = Layout::contiguous(&[6, 16]);
        lb.shape.swap(0, 1);
        lb.strides.swap(0, 1);
        assert_eq!(Problem::new(&la, &lb, false).vec4_layout(), Some(0));
        // A 1-D lhs seen as [1, K]: its row stride no longer matters.
        let la = Layout {
            shape: vec![1, 8],
            strides: vec![8 * 3 + 1, 1],
            offset: 0,
        };
        let lb = Layout::contiguous(&[8, 4]);
        assert_eq!(Problem::new(&la, &lb, false).vec4_layout(), Some(3));
        // An odd offset (a narrowed view) rules vec4 out.
        let mut la = Layout::contiguous(&[4, 8]);
        la.offset = 1;
        assert_eq!(Problem::new(&la, &lb, false).vec4_layout(), None);
    }

    #[test]
    fn kernel_rows_follow_the_enum() {
        for (i, row) in KERNELS.iter().enumerate() {
            assert_eq!(row.kernel as usize, i, "{}", row.name);
            assert_eq!(MatmulKernel::from_name(row.name), Some(row.kernel));
        }
    }

    #[test]
    fn size_one_batch_dims_are_dropped() {
        let la = Layout::contiguous(&[2, 1, 3, 4]).broadcast_to(&[2, 5, 3, 4]);
        let lb = Layout::contiguous(&[5, 4, 2]).broadcast_to(&[2, 5, 4, 2]);
        let p = Problem::new(&la, &lb, false);
        assert_eq!(p.batch_shape, vec![2, 5]);
        assert_eq!(p.a_batch, vec![12, 0]);
        assert_eq!(p.b_batch, vec![0, 8]);
        let la = Layout::contiguous(&[1, 3, 4]);
        let lb = Layout::contiguous(&[1, 4, 2]);
        assert!(Problem::new(&la, &lb, false).batch_shape.is_empty());
    }
}
