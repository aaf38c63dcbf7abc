//! Block-quantized weight matrices ([`QTensor`]): validation, row splits and the results'
//! tensors. The ops run on the matrix's device through `dispatch/quant.rs`: the block formats
//! and CPU kernels live in `cpu/quant*.rs`, the GPU ones in `gpu/quant.rs` and
//! `shaders/quant.wgsl`.

use super::dispatch::blocks::bind_limits;
use super::dispatch::quant::{self as qd, Planes};
use super::Tensor;
use crate::ops::backend::{QMatrix, QPart};
use crate::{DType, Device, Error, QType, Result};
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

/// Rows per part: the most whose body plane fits one binding (everything where no binding limit
/// applies: the CPU).
fn rows_per_part(qtype: QType, shape: [usize; 2], device: &Device) -> usize {
    let row_bytes = (shape[1] / qtype.block_len() * qtype.body_bytes()) as u64;
    let forced = FORCED_PART_ROWS.load(Ordering::Relaxed);
    if forced > 0 {
        return forced;
    }
    match bind_limits(device) {
        None => shape[0].max(1),
        Some(l) => ((l.binding / row_bytes.max(1)) as usize).clamp(1, shape[0].max(1)),
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
            let planes = qd::split_ggml(OP, qtype, src)?;
            parts.push(Part::new(planes, row0, rows, device)?);
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
        blocks_per_row(OP, qtype, [rows, cols])?;
        // Rounded on the host (ggml's reference code) whatever the device.
        let x = t.to_dtype(DType::F32)?.to_vec::<f32>()?;
        let device = t.device();
        let per = rows_per_part(qtype, [rows, cols], device);
        let mut parts = Vec::new();
        let mut row0 = 0;
        while row0 < rows {
            let n = per.min(rows - row0);
            let src = &x[row0 * cols..(row0 + n) * cols];
            parts.push(Part::new(qd::quantize(OP, qtype, src)?, row0, n, device)?);
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
            qd::join_ggml(q, &scales, &body, &mut out);
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
        let storage = qd::dequantize(OP, &self.matrix(), &self.0.device)?;
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
        let storage = qd::matmul_t(OP, &self.matrix(), &x, m, quantized_activations())?;
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
            && qd::grouped_matvec(&first.0.device)
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
        let mats: Vec<_> = ws.iter().map(|w| w.matrix()).collect();
        let Some(all) = qd::matvec_group(OP, &mats, &x)? else {
            return ws.iter().map(|w| w.matmul_t(&x)).collect();
        };
        let out = ws.iter().zip(all).map(|(w, storage)| {
            let mut shape = x.shape().to_vec();
            *shape.last_mut().expect("ndim checked above") = w.0.shape[0];
            Tensor::from_parts(storage, &shape, DType::F32, first.0.device.clone())
        });
        Ok(out.collect())
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
        let cols = self.0.shape[1];
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
        let storage = qd::gather_rows(OP, &self.matrix(), ids)?;
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

    /// The matrix as the device's ops take it: its parts' planes.
    fn matrix(&self) -> QMatrix<'_, Tensor> {
        let parts = self.0.parts.iter().map(|p| QPart {
            row0: p.row0,
            rows: p.rows,
            scales: &p.scales,
            body: &p.body,
        });
        QMatrix {
            qtype: self.0.qtype,
            shape: self.0.shape,
            parts: parts.collect(),
        }
    }
}

impl Part {
    /// Rows `row0..row0 + rows` from their `planes`, placed on `device` as it keeps weights.
    fn new(planes: Planes, row0: usize, rows: usize, device: &Device) -> Result<Part> {
        let (ns, nb) = (planes.0.len(), planes.1.len());
        let [scales, body] = qd::upload("QTensor", planes, device)?;
        Ok(Part {
            row0,
            rows,
            scales: Tensor::from_parts(scales, &[ns], DType::F16, device.clone()),
            body: Tensor::from_parts(body, &[nb], DType::U8, device.clone()),
        })
    }
}
