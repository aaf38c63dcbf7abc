//! Block-quantized weight matrices ([`QTensor`]): validation and dispatch. The block formats and
//! CPU kernels live in `cpu/quant*.rs`, the GPU ones in `gpu/quant.rs` and `shaders/quant.wgsl`.

use super::gather::host_ids;
use super::{backend, Backend, Tensor};
use super::{data_n, DataN};
use crate::cpu::quant::{body_bytes, scale_halfs};
use crate::storage::{CpuStorage, Storage};
use crate::{cpu, DType, Device, Error, QType, Result};
use half::f16;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

static QUANTIZED_ACTIVATIONS: AtomicBool = AtomicBool::new(true);

/// Chooses how the CPU multiplies by Q8_0 and Q4_0 weights (the default, `true`, is
/// llama.cpp's decode path): activations are rounded to 8-bit blocks and every block product is
/// an exact integer dot product, about 4x faster than dequantizing; `false` dequantizes each
/// weight row to f32 and multiplies in f32 (the reference, what GPUs always do). From 16
/// activation rows on (a prompt's prefill) both modes dequantize panels of weight rows and
/// multiply in f32, which is faster there. Process-wide.
///
/// ```
/// wgtensor::set_quantized_activations(false); // exact mode, e.g. to compare with PyTorch
/// assert!(!wgtensor::quantized_activations());
/// wgtensor::set_quantized_activations(true);
/// ```
pub fn set_quantized_activations(on: bool) {
    QUANTIZED_ACTIVATIONS.store(on, Ordering::Relaxed);
}

/// Whether the CPU quantizes activations for Q8_0/Q4_0 matmuls (see
/// [`set_quantized_activations`]).
pub fn quantized_activations() -> bool {
    QUANTIZED_ACTIVATIONS.load(Ordering::Relaxed)
}

/// A 2-D `[rows, cols]` matrix of ggml blocks (along `cols`) on a [`Device`]: weights that stay
/// quantized in memory and are dequantized inside the kernels that use them.
///
/// Memory holds the file's bytes, rearranged into two planes per matrix (f16 scales, and the
/// integer bodies of the blocks, which on a GPU are read as `u32` words); matrices whose body
/// plane passes the adapter's storage binding limit are split by rows into several buffers.
/// [`crate::memory_allocated`] counts exactly these bytes. Cloning is cheap (shared data).
///
/// ```
/// use wgtensor::{Device, QTensor, QType, Tensor};
/// let device = Device::cpu();
/// let w = Tensor::randn(&[4, 64], &device)?;
/// let q = QTensor::quantize(&w, QType::Q8_0)?;
/// assert_eq!(q.shape(), [4, 64]);
/// assert_eq!(q.size_in_bytes(), 4 * 2 * 34); // 2 blocks of 34 bytes per row
/// let x = Tensor::randn(&[3, 64], &device)?;
/// let y = q.matmul_t(&x)?; // x @ W^T, as nn.Linear
/// assert_eq!(y.shape(), &[3, 4]);
/// let dense = q.dequantize()?;
/// let reference = x.matmul(&dense.t()?)?;
/// let err = (&y - &reference)?.abs()?.max_all()?.to_scalar::<f32>()?;
/// assert!(err < 0.1, "{err}");
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Clone)]
pub struct QTensor(Arc<Inner>);

struct Inner {
    qtype: QType,
    shape: [usize; 2],
    device: Device,
    parts: Vec<Part>,
}

/// Rows `row0..row0 + rows` of the matrix: their scales plane (F16) and body plane (U8).
#[derive(Clone)]
pub(crate) struct Part {
    pub row0: usize,
    pub rows: usize,
    pub scales: Tensor,
    pub body: Tensor,
}

impl std::fmt::Debug for QTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "QTensor(shape={:?}, qtype={}, device={})",
            self.0.shape, self.0.qtype, self.0.device
        )
    }
}

/// Blocks per row, or the error naming the shape when `cols` is not whole blocks.
fn blocks_per_row(op: &'static str, qtype: QType, shape: [usize; 2]) -> Result<usize> {
    let bl = qtype.block_len();
    if shape[1] == 0 || !shape[1].is_multiple_of(bl) {
        return Err(Error::InvalidArgument {
            op,
            message: format!(
                "{qtype} stores rows in blocks of {bl} values, but shape {shape:?} has {} \
                 columns; use a column count that is a positive multiple of {bl}",
                shape[1]
            ),
        });
    }
    shape[0]
        .checked_mul(shape[1])
        .and_then(|n| n.checked_mul(qtype.block_bytes()))
        .ok_or_else(|| Error::ShapeOverflow {
            shape: shape.to_vec(),
        })?;
    Ok(shape[1] / bl)
}

/// Rows per part forced by `wgtensor::testing::set_quant_part_rows` (0: not forced).
pub(crate) static FORCED_PART_ROWS: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// Forces quantized matrices into parts of `rows` rows (0: only at the binding limit).
pub(crate) fn quant_part_rows(rows: usize) {
    FORCED_PART_ROWS.store(rows, std::sync::atomic::Ordering::Relaxed);
}

/// Rows per part: the most whose body plane fits one binding (everything on the CPU).
fn rows_per_part(qtype: QType, shape: [usize; 2], device: &Device) -> usize {
    let row_bytes = (shape[1] / qtype.block_len() * body_bytes(qtype)) as u64;
    let forced = FORCED_PART_ROWS.load(Ordering::Relaxed);
    if forced > 0 {
        return forced;
    }
    match backend(device) {
        Backend::Cpu => shape[0].max(1),
        Backend::Gpu(g) => {
            ((g.binding_limit() / row_bytes.max(1)) as usize).clamp(1, shape[0].max(1))
        }
    }
}

impl QTensor {
    /// A quantized matrix from bytes in ggml's block layout (what a GGUF tensor holds): `shape`
    /// is `[rows, cols]` (GGUF lists dims innermost first, so `[cols, rows]` there), `bytes`
    /// holds `rows * cols / block_len` blocks. Placed on `device` (uploaded to a GPU).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `cols` is not a multiple of the block length or the byte
    /// count is not the blocks'; GPU allocation errors.
    ///
    /// ```
    /// use wgtensor::{f16, Device, QTensor, QType};
    /// // One Q8_0 block: scale 0.5 (f16), then 32 signed bytes.
    /// let mut block = f16::from_f32(0.5).to_le_bytes().to_vec();
    /// block.extend((0..32).map(|i| i as u8));
    /// let q = QTensor::from_ggml(QType::Q8_0, [1, 32], &block, &Device::cpu())?;
    /// assert_eq!(q.dequantize()?.to_vec::<f32>()?[3], 1.5);
    /// assert!(QTensor::from_ggml(QType::Q8_0, [1, 32], &block[..33], &Device::cpu()).is_err());
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn from_ggml(
        qtype: QType,
        shape: [usize; 2],
        bytes: &[u8],
        device: &Device,
    ) -> Result<QTensor> {
        const OP: &str = "QTensor::from_ggml";
        let nb = blocks_per_row(OP, qtype, shape)?;
        let row_bytes = nb * qtype.block_bytes();
        if bytes.len() != shape[0] * row_bytes {
            return Err(Error::InvalidArgument {
                op: OP,
                message: format!(
                    "shape {shape:?} in {qtype} needs {} bytes ({} blocks of {}), got {}",
                    shape[0] * row_bytes,
                    shape[0] * nb,
                    qtype.block_bytes(),
                    bytes.len()
                ),
            });
        }
        let per = rows_per_part(qtype, shape, device);
        let mut parts = Vec::new();
        let mut row0 = 0;
        while row0 < shape[0] {
            let rows = per.min(shape[0] - row0);
            let src = &bytes[row0 * row_bytes..(row0 + rows) * row_bytes];
            let mut scales = cpu::alloc::try_vec(OP, rows * nb * scale_halfs(qtype))?;
            let mut body = cpu::alloc::try_vec(OP, rows * nb * body_bytes(qtype))?;
            cpu::quant::split_blocks(qtype, src, &mut scales, &mut body);
            parts.push(Part::new(scales, body, row0, rows, device)?);
            row0 += rows;
        }
        Ok(QTensor(Arc::new(Inner {
            qtype,
            shape,
            device: device.clone(),
            parts,
        })))
    }

    /// Quantizes a 2-D f32 (or f16) tensor along its rows with ggml's reference rounding
    /// (`quantize_row_q8_0_ref`, `quantize_row_q4_0_ref`), on the tensor's device. The
    /// rounding runs on the host (a GPU tensor is read back once): a load-time operation.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a tensor that is not 2-D, columns that are not whole
    /// blocks, or `Q4_K`/`Q6_K` (load those from GGUF files instead).
    ///
    /// ```
    /// use wgtensor::{Device, QTensor, QType, Tensor};
    /// let w = Tensor::from_vec(vec![1f32; 32], &[1, 32], &Device::cpu())?;
    /// let q = QTensor::quantize(&w, QType::Q4_0)?;
    /// assert_eq!(q.dequantize()?.to_vec::<f32>()?, vec![1f32; 32]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn quantize(t: &Tensor, qtype: QType) -> Result<QTensor> {
        const OP: &str = "QTensor::quantize";
        let [rows, cols] = match t.shape() {
            &[r, c] => [r, c],
            s => {
                return Err(Error::InvalidArgument {
                    op: OP,
                    message: format!("expects a 2-D [rows, cols] tensor, got shape {s:?}"),
                })
            }
        };
        if !matches!(qtype, QType::Q8_0 | QType::Q4_0) {
            return Err(Error::InvalidArgument {
                op: OP,
                message: format!(
                    "quantizing to {qtype} is not implemented (Q8_0 and Q4_0 are); load \
                     {qtype} weights from a GGUF file with QTensor::from_ggml"
                ),
            });
        }
        if !t.dtype().is_float() {
            return Err(t.unsupported(OP));
        }
        let nb = blocks_per_row(OP, qtype, [rows, cols])?;
        let x = match t.to_dtype(DType::F32)?.host_contiguous(OP)? {
            CpuStorage::F32(v) => v,
            _ => return Err(t.unsupported(OP)),
        };
        let device = t.device();
        let per = rows_per_part(qtype, [rows, cols], device);
        let mut parts = Vec::new();
        let mut row0 = 0;
        while row0 < rows {
            let n = per.min(rows - row0);
            let src = &x[row0 * cols..(row0 + n) * cols];
            let mut scales = cpu::alloc::try_vec(OP, n * nb)?;
            let mut body = cpu::alloc::try_vec(OP, n * nb * body_bytes(qtype))?;
            if qtype == QType::Q8_0 {
                cpu::quant::quantize_q8_0(src, &mut scales, &mut body);
            } else {
                cpu::quant::quantize_q4_0(src, &mut scales, &mut body);
            }
            parts.push(Part::new(scales, body, row0, n, device)?);
            row0 += n;
        }
        Ok(QTensor(Arc::new(Inner {
            qtype,
            shape: [rows, cols],
            device: device.clone(),
            parts,
        })))
    }

    /// The bytes in ggml's block layout (the inverse of [`QTensor::from_ggml`]; a GPU matrix
    /// is read back), e.g. to write a GGUF file.
    ///
    /// ```
    /// use wgtensor::{Device, QTensor, QType, Tensor};
    /// let w = Tensor::randn(&[2, 32], &Device::cpu())?;
    /// let q = QTensor::quantize(&w, QType::Q8_0)?;
    /// let bytes = q.to_ggml()?;
    /// assert_eq!(bytes.len(), 2 * 34);
    /// let back = QTensor::from_ggml(QType::Q8_0, [2, 32], &bytes, &Device::cpu())?;
    /// assert_eq!(back.dequantize()?.to_vec::<f32>()?, q.dequantize()?.to_vec::<f32>()?);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn to_ggml(&self) -> Result<Vec<u8>> {
        let q = self.0.qtype;
        let mut out = Vec::with_capacity(self.0.shape[0] * self.row_blocks() * q.block_bytes());
        for p in &self.0.parts {
            let scales = p.scales.to_vec::<f16>()?;
            let body = p.body.to_vec::<u8>()?;
            cpu::quant::join_blocks(q, &scales, &body, &mut out);
        }
        Ok(out)
    }

    /// The matrix in f32 on the same device (ggml's dequantization, bit for bit).
    ///
    /// ```
    /// use wgtensor::{Device, QTensor, QType, Tensor};
    /// let w = Tensor::from_vec((0..64).map(|i| i as f32 - 32.0).collect(), &[2, 32], &Device::cpu())?;
    /// let d = QTensor::quantize(&w, QType::Q8_0)?.dequantize()?;
    /// assert_eq!(d.shape(), &[2, 32]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn dequantize(&self) -> Result<Tensor> {
        const OP: &str = "QTensor::dequantize";
        let [rows, cols] = self.0.shape;
        let storage = match backend(&self.0.device) {
            Backend::Cpu => {
                let mut out = cpu::alloc::try_vec::<f32>(OP, rows * cols)?;
                out.resize(rows * cols, 0.0);
                for p in &self.0.parts {
                    let (s, b) = p.host_planes(OP)?;
                    let dst = &mut out[p.row0 * cols..(p.row0 + p.rows) * cols];
                    cpu::quant::dequantize(self.0.qtype, s, b, dst);
                }
                Storage::from(CpuStorage::F32(out))
            }
            Backend::Gpu(g) => Storage::from(g.quant_dequantize(OP, &self.gpu_matrix()?)?),
        };
        Ok(Tensor::from_parts(
            storage,
            &[rows, cols],
            DType::F32,
            self.0.device.clone(),
        ))
    }

    /// `x @ W^T` (as `nn.Linear` without bias): `x` is `[.., cols]` in f32 or f16, the result
    /// `[.., rows]` in f32, on the matrix's device. Dequantizes inside the kernel: one pass over
    /// the weights for any number of rows of `x`. On the CPU, Q8_0 and Q4_0 round the
    /// activations to 8-bit blocks first unless [`set_quantized_activations`] turned that off.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`], [`Error::ShapeMismatch`] when the last dim of `x` is not
    /// `cols`, [`Error::UnsupportedDType`] for integer `x`.
    ///
    /// ```
    /// use wgtensor::{Device, QTensor, QType, Tensor};
    /// let w = Tensor::ones(&[3, 32], wgtensor::DType::F32, &Device::cpu())?;
    /// let q = QTensor::quantize(&w, QType::Q4_0)?;
    /// let x = Tensor::ones(&[2, 1, 32], wgtensor::DType::F32, &Device::cpu())?;
    /// let y = q.matmul_t(&x)?;
    /// assert_eq!(y.shape(), &[2, 1, 3]);
    /// assert_eq!(y.to_vec::<f32>()?, vec![32f32; 6]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn matmul_t(&self, x: &Tensor) -> Result<Tensor> {
        const OP: &str = "QTensor::matmul_t";
        let [rows, cols] = self.0.shape;
        self.check_device(OP, x.device())?;
        if !x.dtype().is_float() {
            return Err(x.unsupported(OP));
        }
        if x.ndim() == 0 || x.shape()[x.ndim() - 1] != cols {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: x.shape().to_vec(),
                rhs: vec![rows, cols],
            });
        }
        let m = x.numel() / cols;
        let mut out_shape = x.shape().to_vec();
        *out_shape.last_mut().expect("ndim checked above") = rows;
        let x = x.to_dtype(DType::F32)?.contiguous()?;
        let storage = match backend(&self.0.device) {
            Backend::Cpu => {
                let xs = x.host_f32(OP)?;
                let xs = &xs[x.layout().offset..x.layout().offset + m * cols];
                let integer = quantized_activations();
                let mut out = Vec::new();
                for p in &self.0.parts {
                    let (s, b) = p.host_planes(OP)?;
                    let y =
                        cpu::quant_dot::matmul_t(self.0.qtype, p.rows, cols, s, b, xs, m, integer)?;
                    if self.0.parts.len() == 1 {
                        out = y;
                    } else {
                        out.resize(m * rows, 0.0);
                        for i in 0..m {
                            out[i * rows + p.row0..i * rows + p.row0 + p.rows]
                                .copy_from_slice(&y[i * p.rows..(i + 1) * p.rows]);
                        }
                    }
                }
                Storage::from(CpuStorage::F32(out))
            }
            Backend::Gpu(g) => {
                let xb = x.gpu_data()?.ok_or_else(|| x.unsupported(OP))?;
                Storage::from(g.quant_matmul_t(
                    OP,
                    &self.gpu_matrix()?,
                    (xb, x.layout().offset),
                    m,
                )?)
            }
        };
        Ok(Tensor::from_parts(
            storage,
            &out_shape,
            DType::F32,
            self.0.device.clone(),
        ))
    }

    /// `x @ W^T` for each matrix of `ws` (one result each, as [`QTensor::matmul_t`] gives):
    /// a layer's q, k and v projections, or its gate and up projections, which read the same
    /// activations. For one CPU activation row against Q8_0 or Q4_0 matrices of one type (the
    /// decode step), `x` is quantized once and one parallel pass covers the rows of all of them;
    /// the bits are those of the separate calls. Any other case runs them one by one.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when the last dimension of `x` is not the column count of
    /// every matrix; otherwise as [`QTensor::matmul_t`], for the first matrix that fails.
    ///
    /// ```
    /// use wgtensor::{Device, QTensor, QType, Tensor};
    /// let d = Device::cpu();
    /// let a = QTensor::quantize(&Tensor::ones(&[3, 32], wgtensor::DType::F32, &d)?, QType::Q4_0)?;
    /// let b = QTensor::quantize(&Tensor::full(&[2, 32], 2.0, wgtensor::DType::F32, &d)?, QType::Q4_0)?;
    /// let x = Tensor::ones(&[1, 32], wgtensor::DType::F32, &d)?;
    /// let y = QTensor::matmul_t_many(&[&a, &b], &x)?;
    /// assert_eq!(y[0].to_vec::<f32>()?, vec![32f32; 3]);
    /// assert_eq!(y[1].to_vec::<f32>()?, vec![64f32; 2]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn matmul_t_many(ws: &[&QTensor], x: &Tensor) -> Result<Vec<Tensor>> {
        const OP: &str = "QTensor::matmul_t";
        let Some(first) = ws.first() else {
            return Ok(Vec::new());
        };
        // The shape check of `matmul_t`, up front for every matrix: the fused pass below reads
        // `cols` activations, which only the last dimension of `x` may supply.
        if let Some(w) = ws
            .iter()
            .find(|w| x.ndim() == 0 || x.shape()[x.ndim() - 1] != w.0.shape[1])
        {
            return Err(Error::ShapeMismatch {
                op: "QTensor::matmul_t_many",
                lhs: x.shape().to_vec(),
                rhs: w.0.shape.to_vec(),
            });
        }
        let (q, cols) = (first.0.qtype, first.0.shape[1]);
        let fused = quantized_activations()
            && matches!(q, QType::Q8_0 | QType::Q4_0 | QType::Q4_K | QType::Q6_K)
            && matches!(backend(&first.0.device), Backend::Cpu)
            && x.device() == &first.0.device
            && x.dtype() == DType::F32
            && x.ndim() > 0
            && x.numel() == cols
            && x.shape()[x.ndim() - 1] == cols
            && ws.iter().all(|w| {
                w.0.qtype == q
                    && w.0.shape[1] == cols
                    && w.0.device == first.0.device
                    && w.0.parts.len() == 1
            });
        if !fused {
            return ws.iter().map(|w| w.matmul_t(x)).collect();
        }
        let x = x.contiguous()?;
        let xs = x.host_f32(OP)?;
        let xs = &xs[x.layout().offset..x.layout().offset + cols];
        let mut planes = Vec::with_capacity(ws.len());
        for w in ws {
            let (scales, body) = w.0.parts[0].host_planes(OP)?;
            planes.push(cpu::quant_dot::Planes {
                rows: w.0.shape[0],
                scales,
                body,
            });
        }
        let all = cpu::quant_dot::matvec_group(q, cols, &planes, xs)?;
        let mut out = Vec::with_capacity(ws.len());
        let mut at = 0;
        for w in ws {
            let rows = w.0.shape[0];
            let mut shape = x.shape().to_vec();
            *shape.last_mut().expect("ndim checked above") = rows;
            out.push(Tensor::from_parts(
                Storage::from(CpuStorage::F32(all[at..at + rows].to_vec())),
                &shape,
                DType::F32,
                first.0.device.clone(),
            ));
            at += rows;
        }
        Ok(out)
    }

    /// Embedding lookup: rows `ids` (`[n]`, U32 or I32) of the matrix, dequantized, `[n, cols]`
    /// f32. Out-of-range ids are [`Error::IndexOutOfRange`] (on a GPU reported at the next
    /// synchronizing call, like `index_select`).
    ///
    /// ```
    /// use wgtensor::{Device, QTensor, QType, Tensor};
    /// let w = Tensor::from_vec((0..96).map(|i| (i / 32) as f32).collect(), &[3, 32], &Device::cpu())?;
    /// let q = QTensor::quantize(&w, QType::Q8_0)?;
    /// let ids = Tensor::from_vec(vec![2u32, 0], &[2], &Device::cpu())?;
    /// let e = q.gather_rows(&ids)?;
    /// assert_eq!(e.shape(), &[2, 32]);
    /// assert!((e.to_vec::<f32>()?[0] - 2.0).abs() < 1e-3); // Q8_0 keeps 2.0 to 3 digits
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn gather_rows(&self, ids: &Tensor) -> Result<Tensor> {
        const OP: &str = "QTensor::gather_rows";
        let [rows, cols] = self.0.shape;
        self.check_device(OP, ids.device())?;
        if !matches!(ids.dtype(), DType::U32 | DType::I32) || ids.ndim() != 1 {
            return Err(Error::InvalidArgument {
                op: OP,
                message: format!(
                    "ids must be a 1-D U32 or I32 tensor of row numbers, got {} of shape {:?}; \
                     flatten with .reshape(&[n]) or convert with .to_dtype(DType::U32)",
                    ids.dtype(),
                    ids.shape()
                ),
            });
        }
        let n = ids.numel();
        let q = self.0.qtype;
        let storage = match backend(&self.0.device) {
            Backend::Cpu => {
                let host = host_ids(OP, ids, rows)?;
                let mut out = cpu::alloc::try_vec::<f32>(OP, n * cols)?;
                out.resize(n * cols, 0.0);
                let nb = cols / q.block_len();
                let (ns, bb) = (nb * scale_halfs(q), nb * body_bytes(q));
                for (dst, &id) in out.chunks_exact_mut(cols).zip(&host) {
                    let id = id as usize;
                    let p = self.part_of(id);
                    let (s, b) = p.host_planes(OP)?;
                    let r = id - p.row0;
                    cpu::quant::dequantize(
                        q,
                        &s[r * ns..(r + 1) * ns],
                        &b[r * bb..(r + 1) * bb],
                        dst,
                    );
                }
                Storage::from(CpuStorage::F32(out))
            }
            Backend::Gpu(g) => {
                let ids = super::dispatch::device_ids(ids)?;
                Storage::from(g.quant_gather_rows(OP, &self.gpu_matrix()?, ids.parts()?)?)
            }
        };
        Ok(Tensor::from_parts(
            storage,
            &[n, cols],
            DType::F32,
            self.0.device.clone(),
        ))
    }

    /// `[rows, cols]`.
    pub fn shape(&self) -> [usize; 2] {
        self.0.shape
    }

    /// The block format.
    pub fn qtype(&self) -> QType {
        self.0.qtype
    }

    /// The device holding the blocks.
    pub fn device(&self) -> Device {
        self.0.device.clone()
    }

    /// The matrix on `device` (shared, not copied, when it is already there). Blocks move as
    /// they are, never dequantized.
    ///
    /// ```
    /// use wgtensor::{Device, QTensor, QType, Tensor};
    /// let q = QTensor::quantize(&Tensor::randn(&[2, 32], &Device::cpu())?, QType::Q8_0)?;
    /// let moved = q.to(&Device::best())?;
    /// assert_eq!(moved.size_in_bytes(), q.size_in_bytes());
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn to(&self, device: &Device) -> Result<QTensor> {
        if *device == self.0.device {
            return Ok(self.clone());
        }
        let (q, shape) = (self.0.qtype, self.0.shape);
        // Row splits depend on the destination's binding limit: re-split through ggml bytes
        // only when they differ.
        if rows_per_part(q, shape, device) >= shape[0] && self.0.parts.len() == 1 {
            let p = &self.0.parts[0];
            let part = Part {
                row0: 0,
                rows: shape[0],
                scales: p.scales.to(device)?,
                body: p.body.to(device)?,
            };
            return Ok(QTensor(Arc::new(Inner {
                qtype: q,
                shape,
                device: device.clone(),
                parts: vec![part],
            })));
        }
        QTensor::from_ggml(q, shape, &self.to_ggml()?, device)
    }

    /// Bytes the blocks occupy on the device (the GGUF tensor's size).
    pub fn size_in_bytes(&self) -> usize {
        self.0.shape[0] * self.row_blocks() * self.0.qtype.block_bytes()
    }

    fn row_blocks(&self) -> usize {
        self.0.shape[1] / self.0.qtype.block_len()
    }

    fn part_of(&self, row: usize) -> &Part {
        let i = self.0.parts.partition_point(|p| p.row0 + p.rows <= row);
        &self.0.parts[i.min(self.0.parts.len() - 1)]
    }

    fn check_device(&self, op: &'static str, other: &Device) -> Result<()> {
        if *other != self.0.device {
            return Err(Error::DeviceMismatch {
                op,
                lhs: self.0.device.to_string(),
                rhs: other.to_string(),
            });
        }
        Ok(())
    }

    /// The matrix as the GPU kernels take it: its parts' buffers.
    fn gpu_matrix(&self) -> Result<crate::gpu::quant::QMatrix<'_>> {
        let parts = self
            .0
            .parts
            .iter()
            .map(|p| match data_n("QTensor", [&p.scales, &p.body])? {
                DataN::Gpu([s, b]) => Ok(crate::gpu::quant::QPart {
                    row0: p.row0,
                    rows: p.rows,
                    scales: s,
                    body: b,
                }),
                _ => Err(p.scales.unsupported("QTensor")),
            })
            .collect::<Result<_>>()?;
        Ok(crate::gpu::quant::QMatrix {
            qtype: self.0.qtype,
            shape: self.0.shape,
            parts,
        })
    }
}

impl Part {
    fn new(
        scales: Vec<f16>,
        body: Vec<u8>,
        row0: usize,
        rows: usize,
        device: &Device,
    ) -> Result<Part> {
        let (ns, nb) = (scales.len(), body.len());
        let (scales, body) = match backend(device) {
            Backend::Cpu => (
                Tensor::from_vec(scales, &[ns], device)?,
                Tensor::from_vec(body, &[nb], device)?,
            ),
            // Weights live as long as the model: buffers of exactly their size, so the device
            // holds the file's bytes and no allocator rounding (up to 2 MiB a buffer).
            Backend::Gpu(g) => {
                let op = "QTensor";
                let s = g.upload_exact(op, bytemuck::cast_slice(&scales))?;
                let b = g.upload_exact(op, &body)?;
                (
                    Tensor::from_parts(s, &[ns], DType::F16, device.clone()),
                    Tensor::from_parts(b, &[nb], DType::U8, device.clone()),
                )
            }
        };
        Ok(Part {
            row0,
            rows,
            scales,
            body,
        })
    }

    /// The host planes (CPU parts only).
    fn host_planes(&self, op: &'static str) -> Result<(&[f16], &[u8])> {
        match data_n(op, [&self.scales, &self.body])? {
            DataN::Cpu([CpuStorage::F16(s), CpuStorage::U8(b)]) => Ok((s, b)),
            _ => Err(self.scales.unsupported(op)),
        }
    }
}
