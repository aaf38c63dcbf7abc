//! Matrix products with `torch.matmul` semantics: validate shapes once, then ask the operands'
//! backend once (`dispatch::matmul`); which kernel runs (gemm, a matrix-vector kernel for f16
//! weights, a WGSL kernel and its precision) is the backend's choice, behind
//! `crate::ops::backend::BackendStorage`.

use super::dispatch;
use super::Tensor;
use crate::ops::backend::MatmulSpec;
use crate::shape::{broadcast_shapes, numel_checked, Layout};
use crate::{DType, Error, Result};

/// What the operands' shapes mean for the product: both views brought to `[..batch, M, K]` and
/// `[..batch, K, N]` with identical batch dims, and the shape the result is reported with.
struct Plan {
    la: Layout,
    lb: Layout,
    out_shape: Vec<usize>,
}

/// Applies `torch.matmul`'s shape rules: a 1-D lhs is a row `[1, K]` and a 1-D rhs a column
/// `[K, 1]` (the added dim is removed from the result); dims before the last two are batch
/// dims and broadcast.
/// [`set_f16_accumulation`]'s setting: 0 not set (read `WGTENSOR_F16_ACCUMULATE`), 1 off, 2 on.
static F16_ACCUMULATION: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Lets f16 matrix products accumulate in f16 on GPUs that run f16 natively (`SHADER_F16`):
/// operands, running sums and output stay f16, which halves register and workgroup-memory
/// use and is the fast path on GPUs with double-rate f16. Off by default (f16 products then
/// accumulate in f32 and are rounded once), as PyTorch's
/// `torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction` is the opt-in there;
/// `WGTENSOR_F16_ACCUMULATE=1` turns it on for the process. Process-wide; the CPU and
/// adapters without `SHADER_F16` keep f32 accumulation.
///
/// The error grows with K: every partial sum is rounded to 11 bits, so once a sum reaches
/// 2,048 adding 1 no longer changes it, and a sum past 65,504 is inf. Use it where K and the
/// magnitudes are modest (or products are followed by a normalisation).
///
/// ```
/// use wgtensor::{set_f16_accumulation, DType, Device, Tensor};
/// let d = Device::best();
/// let a = Tensor::ones(&[1, 3000], DType::F16, &d)?;
/// let b = Tensor::ones(&[3000, 1], DType::F16, &d)?;
/// set_f16_accumulation(true);
/// let fast = a.matmul(&b)?.to_dtype(DType::F32)?.to_vec::<f32>()?[0];
/// set_f16_accumulation(false);
/// let exact = a.matmul(&b)?.to_dtype(DType::F32)?.to_vec::<f32>()?[0];
/// assert_eq!(exact, 3000.0);
/// // With SHADER_F16 the f16 running sum stops at 2048 (2048 + 1 rounds back to 2048).
/// assert!(fast == 2048.0 || fast == 3000.0);
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub fn set_f16_accumulation(allow: bool) {
    F16_ACCUMULATION.store(
        if allow { 2 } else { 1 },
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// Whether f16 matrix products may accumulate in f16 ([`set_f16_accumulation`]).
pub fn f16_accumulation() -> bool {
    match F16_ACCUMULATION.load(std::sync::atomic::Ordering::Relaxed) {
        0 => std::env::var("WGTENSOR_F16_ACCUMULATE").is_ok_and(|v| v == "1"),
        v => v == 2,
    }
}

impl Plan {
    /// What the backend is asked for: this plan's views of operands of `dtype`.
    fn spec(&self, dtype: DType, kernel: Option<&'static str>) -> MatmulSpec<'_> {
        MatmulSpec {
            la: &self.la,
            lb: &self.lb,
            dtype,
            kernel,
            f16_accumulate: dtype == DType::F16 && f16_accumulation(),
        }
    }
}

fn plan(lhs: &Tensor, rhs: &Tensor) -> Result<Plan> {
    let (sa, sb) = (lhs.shape(), rhs.shape());
    if sa.is_empty() || sb.is_empty() {
        return Err(Error::InvalidArgument {
            op: "matmul",
            message: format!(
                "both operands need at least 1 dim, got shapes {sa:?} and {sb:?}; \
                 use mul for a product with a scalar"
            ),
        });
    }
    let mismatch = || Error::ShapeMismatch {
        op: "matmul",
        lhs: sa.to_vec(),
        rhs: sb.to_vec(),
    };
    let mut la = lhs.layout().clone();
    if sa.len() == 1 {
        la.shape.insert(0, 1);
        la.strides.insert(0, 0);
    }
    let mut lb = rhs.layout().clone();
    if sb.len() == 1 {
        lb.shape.push(1);
        lb.strides.push(0);
    }
    let (na, nb) = (la.shape.len(), lb.shape.len());
    let (m, k) = (la.shape[na - 2], la.shape[na - 1]);
    let (k2, n) = (lb.shape[nb - 2], lb.shape[nb - 1]);
    if k != k2 {
        return Err(mismatch());
    }
    let batch = broadcast_shapes("matmul", &la.shape[..na - 2], &lb.shape[..nb - 2])
        .map_err(|_| mismatch())?;
    let full = |rows: usize, cols: usize| {
        let mut s = batch.clone();
        s.extend([rows, cols]);
        s
    };
    let out_full = full(m, n);
    numel_checked(&out_full)?;
    let mut out_shape = batch.clone();
    if sa.len() > 1 {
        out_shape.push(m);
    }
    if sb.len() > 1 {
        out_shape.push(n);
    }
    Ok(Plan {
        la: la.broadcast_to(&full(m, k)),
        lb: lb.broadcast_to(&full(k, n)),
        out_shape,
    })
}

impl Tensor {
    /// Matrix product with `torch.matmul` semantics:
    ///
    /// | lhs | rhs | result |
    /// |---|---|---|
    /// | `[K]` | `[K]` | `[]` (dot product, a 0-d tensor) |
    /// | `[M, K]` | `[K, N]` | `[M, N]` |
    /// | `[K]` | `[.., K, N]` | `[.., N]` (a row vector times each matrix) |
    /// | `[.., M, K]` | `[K]` | `[.., M]` (each matrix times a column vector) |
    /// | `[..b1, M, K]` | `[..b2, K, N]` | `[..broadcast(b1, b2), M, N]` |
    ///
    /// Batch dims broadcast like elementwise ops (size-1 dims repeat without copies). Views such
    /// as `a.t()` are read in place through their strides. Empty dims work: `K = 0` gives zeros.
    /// On the CPU the product runs on every core through the `gemm` crate; on a GPU it runs a
    /// tiled WGSL kernel chosen for the adapter.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let d = Device::best();
    /// let a = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], &d)?;
    /// let b = Tensor::from_vec(vec![1f32, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2], &d)?;
    /// let c = a.matmul(&b)?;
    /// assert_eq!(c.shape(), &[2, 2]);
    /// assert_eq!(c.to_vec::<f32>()?, vec![4.0, 5.0, 10.0, 11.0]);
    /// // Transposed views need no copy; 1-D operands give vectors and scalars.
    /// assert_eq!(a.matmul(&a.t()?)?.to_vec::<f32>()?, vec![14.0, 32.0, 32.0, 77.0]);
    /// let v = Tensor::from_vec(vec![1f32, 1.0, 1.0], &[3], &d)?;
    /// assert_eq!(a.matmul(&v)?.to_vec::<f32>()?, vec![6.0, 15.0]);
    /// assert_eq!(v.matmul(&v)?.to_scalar::<f32>()?, 3.0);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] (naming both shapes) when the inner dims differ or the batch
    /// dims do not broadcast; [`Error::InvalidArgument`] for 0-d operands;
    /// [`Error::DeviceMismatch`] / [`Error::DTypeMismatch`] when the operands differ;
    /// [`Error::UnsupportedDType`] for integer and u8 operands (as PyTorch on CUDA; convert
    /// with [`Tensor::to_dtype`]); GPU errors (out of memory, a lost device) as for every op.
    /// f16 operands are multiplied with f32 accumulation and the product rounded once to f16; a
    /// GPU reads them in place (no f32 copies), the CPU converts them.
    pub fn matmul(&self, rhs: &Tensor) -> Result<Tensor> {
        let out = self.matmul_impl(rhs, None)?;
        Ok(crate::autograd::linalg::matmul(self, rhs, out))
    }

    /// A linear layer's `self · weightᵀ + bias` (PyTorch's `F.linear`), `weight` shaped
    /// `[out_features, in_features]` and `bias` `[out_features]`. The values and gradients are
    /// those of `self.matmul(&weight.t()?)?.add(bias)`, bit for bit; on the CPU the bias is
    /// added inside the product's own pass over the output instead of a second pass.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let d = Device::best();
    /// let x = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[2, 2], &d)?;
    /// let w = Tensor::from_vec(vec![1f32, 0.0, 1.0, 1.0, 0.0, 2.0], &[3, 2], &d)?;
    /// let b = Tensor::from_vec(vec![0.5f32, 0.0, -1.0], &[3], &d)?;
    /// let y = x.linear(&w, Some(&b))?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![1.5, 3.0, 3.0, 3.5, 7.0, 7.0]);
    /// assert_eq!(x.linear(&w, None)?.shape(), &[2, 3]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::matmul`] and [`Tensor::add`]: [`Error::ShapeMismatch`] when `weight` is not
    /// 2-D with `in_features` columns or `bias` does not broadcast; device and dtype mismatches.
    pub fn linear(&self, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        if weight.ndim() != 2 {
            return Err(Error::ShapeMismatch {
                op: "linear",
                lhs: self.shape().to_vec(),
                rhs: weight.shape().to_vec(),
            });
        }
        let wt = weight.t()?;
        let Some(bias) = bias else {
            return self.matmul(&wt);
        };
        if let Some(out) = self.fused_matmul_bias(&wt, bias)? {
            return Ok(crate::autograd::linalg::matmul_bias(self, &wt, bias, out));
        }
        self.matmul(&wt)?.add(bias)
    }

    /// `self · wt + bias` in one pass where the backend has a fused kernel, when every operand
    /// is f32 of at least 2-D `self`, and `bias` a packed row of `wt`'s columns; `None`
    /// otherwise (the caller then runs the product and the add).
    fn fused_matmul_bias(&self, wt: &Tensor, bias: &Tensor) -> Result<Option<Tensor>> {
        let op = "linear";
        let n = wt.shape()[1];
        let f32 = |t: &Tensor| t.dtype() == DType::F32;
        if !(f32(self) && f32(wt) && f32(bias))
            || self.ndim() < 2
            || bias.shape() != [n]
            || !bias.is_contiguous()
            || self.device() != wt.device()
            || self.device() != bias.device()
        {
            return Ok(None);
        }
        self.check_pair(op, wt)?;
        let p = plan(self, wt)?;
        let spec = p.spec(DType::F32, None);
        Ok(dispatch::matmul_bias(op, self, wt, &spec, bias)?
            .map(|out| self.derived(out, &p.out_shape)))
    }

    /// [`Tensor::matmul`] with a named GPU kernel instead of the adapter's choice, for
    /// wgtensor's benchmarks and tests. The names ([`Tensor::matmul_kernels`]):
    ///
    /// - `naive`: one output per invocation;
    /// - `register`: an 8×8 register tile, any shape and strides;
    /// - `register_vec4`, `register_vec4_16x4`, `register_vec4_4x16`, `register_vec4_16x16`:
    ///   the register tile with vec4 loads in 8×8, 16×4, 4×16 and 16×16 workgroups, and
    ///   `register_vec4_r4x4`, `register_vec4_r8x4`: with 4×4 and 8×4 register tiles (these six
    ///   need aligned, unit-stride operands; others are an `InvalidArgument`);
    /// - `tiled`, `tiled_padded`, `tiled_double`: 64×64 workgroup-memory tiles, plain, padded
    ///   against bank conflicts, double-buffered;
    /// - `split_k`: K in up to 16 slices summed at the end (unbatched, K >= 2,048; elsewhere
    ///   `register`);
    /// - `gemv_m1`, `gemv_n1`: one output per invocation in 256×1 / 1×256 workgroups;
    /// - `gemv_t`: a few rows times a matrix read along K (`x · Wᵀ`, decode): 32 invocations
    ///   per output, their partial sums added in a fixed tree.
    ///
    /// The CPU has one kernel and ignores the name once it is validated.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let d = Device::best();
    /// let a = Tensor::ones(&[3, 5], wgtensor::DType::F32, &d)?;
    /// let c = a.matmul_with_kernel(&a.t()?, "naive")?;
    /// assert_eq!(c.to_vec::<f32>()?, vec![5.0; 9]);
    /// assert!(a.matmul_with_kernel(&a.t()?, "strassen").is_err());
    /// // The list above is every name there is.
    /// let listed = [
    ///     "naive", "register", "register_vec4", "register_vec4_16x4", "register_vec4_4x16",
    ///     "register_vec4_16x16", "register_vec4_r4x4", "register_vec4_r8x4", "tiled",
    ///     "tiled_padded", "tiled_double", "split_k", "gemv_m1", "gemv_n1", "gemv_t",
    ///     "gemv_rows",
    /// ];
    /// let why = "a new kernel's name belongs in the list above";
    /// assert_eq!(Tensor::matmul_kernels(), listed, "{why}");
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    #[doc(hidden)]
    pub fn matmul_with_kernel(&self, rhs: &Tensor, kernel: &str) -> Result<Tensor> {
        let names = Tensor::matmul_kernels();
        let k = names.iter().copied().find(|n| *n == kernel);
        let k = k.ok_or_else(|| Error::InvalidArgument {
            op: "matmul",
            message: format!(
                "unknown matmul kernel {kernel:?}; known: {:?}",
                Tensor::matmul_kernels()
            ),
        })?;
        let out = self.matmul_impl(rhs, Some(k))?;
        Ok(crate::autograd::linalg::matmul(self, rhs, out))
    }

    /// The GPU kernel names [`Tensor::matmul_with_kernel`] accepts.
    ///
    /// ```
    /// assert!(wgtensor::Tensor::matmul_kernels().contains(&"naive"));
    /// ```
    #[doc(hidden)]
    pub fn matmul_kernels() -> Vec<&'static str> {
        dispatch::matmul_kernel_names()
    }

    /// The kernel [`Tensor::matmul`] would run for these operands (`gemm` on the CPU).
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let a = Tensor::ones(&[4, 4], wgtensor::DType::F32, &Device::cpu())?;
    /// assert_eq!(a.matmul_kernel_choice(&a)?, "gemm");
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    #[doc(hidden)]
    pub fn matmul_kernel_choice(&self, rhs: &Tensor) -> Result<&'static str> {
        self.check_pair("matmul", rhs)?;
        let p = plan(self, rhs)?;
        dispatch::matmul_kernel_name(self, &p.spec(self.dtype(), None))
    }

    fn matmul_impl(&self, rhs: &Tensor, kernel: Option<&'static str>) -> Result<Tensor> {
        let op = "matmul";
        self.check_pair(op, rhs)?;
        let dtype = self.dtype();
        if dtype == DType::F16 {
            // An f16 operand past one GPU binding is multiplied through f32 in row blocks.
            if super::chunked::blocks_needed(&[self], 0).is_none() {
                if let Some(out) = self.backend_matmul(rhs, kernel)? {
                    return Ok(out);
                }
            }
            // A backend without an f16 kernel for these operands: both are converted to f32
            // and the product rounded once.
            let rhs = rhs.to_dtype(DType::F32)?;
            return self.via_f32(true, |a| a.matmul_impl(&rhs, kernel));
        }
        self.require_f32(op)?;
        // A tall matrix past one GPU binding: multiply blocks of its rows (rhs must fit).
        if let Some(g) = super::chunked::blocks_needed(&[self], 0) {
            if self.ndim() == 2 && rhs.ndim() == 2 && self.shape()[1] == rhs.shape()[0] {
                return super::chunked::map_dim0_blocks(op, g, self, &|b| {
                    b.matmul_impl(rhs, kernel)
                });
            }
        }
        // A wide right operand past one binding (`x @ W.t()` with a large weight `W`, a
        // language model's output matrix): `(Wᵀᵀ xᵀ)ᵀ`, whose left operand is split into
        // blocks of rows as above.
        if super::chunked::blocks_needed(&[rhs], 0).is_some()
            && self.ndim() == 2
            && rhs.ndim() == 2
            && self.shape()[1] == rhs.shape()[0]
        {
            return rhs.t()?.matmul_impl(&self.t()?, kernel)?.t()?.contiguous();
        }
        match self.backend_matmul(rhs, kernel)? {
            Some(out) => Ok(out),
            None => Err(self.unsupported(op)),
        }
    }

    /// The product as the operands' backend computes it, rounded once to the operands' dtype
    /// when the backend left it wider; `None` when the backend has no kernel for the dtype.
    fn backend_matmul(&self, rhs: &Tensor, kernel: Option<&'static str>) -> Result<Option<Tensor>> {
        let p = plan(self, rhs)?;
        let dtype = self.dtype();
        let Some((out, out_dtype)) = dispatch::matmul("matmul", self, rhs, &p.spec(dtype, kernel))?
        else {
            return Ok(None);
        };
        let t = Tensor::from_parts(out, &p.out_shape, out_dtype, self.device().clone());
        Ok(Some(if out_dtype == dtype {
            t
        } else {
            t.to_dtype(dtype)?
        }))
    }
}

impl Tensor {
    /// `self · wᵀ` for f32 rows `self` `[m, k]` and an f16 weight `w` `[n, k]` on the CPU, with
    /// the values of `self.to_dtype(F16).matmul(&w.t()).to_dtype(F32)` (the activations and
    /// the product each rounded to f16 once) but without the f16 tensors in between: a layer
    /// with f16 weights on f32 activations (`models::Weight`). `None` when the operands have
    /// another dtype, shape or device.
    #[cfg_attr(not(feature = "models"), allow(dead_code))]
    pub(crate) fn matmul_t_f16_weight(&self, w: &Tensor) -> Result<Option<Tensor>> {
        // No gradient is recorded here: operands that need one take the general path.
        if self.dtype() != DType::F32
            || w.dtype() != DType::F16
            || w.shape().len() != 2
            || self.requires_grad()
            || w.requires_grad()
        {
            return Ok(None);
        }
        let wt = w.t()?;
        if self.device() != wt.device() {
            return Ok(None);
        }
        let p = plan(self, &wt)?;
        let spec = p.spec(DType::F32, None);
        Ok(dispatch::matmul_t_f16_weight(self, &wt, &spec)?
            .map(|out| self.derived(out, &p.out_shape)))
    }
}
