//! The tensor type: shape, dtype, device and shared storage. This file and its submodules only
//! validate arguments and dispatch to `cpu/` or `gpu/`; no kernel lives here.

mod attention;
mod attention_decode;
pub(crate) mod attention_fused;
mod cell;
mod chunked;
mod compare;
mod conv;
mod conv_cpu;
pub(crate) mod conv_gpu;
mod convert;
mod create;
mod cross_entropy;
mod dispatch;
mod display;
mod elementwise;
mod fuse;
mod gather;
mod join;
mod matmul;
mod norm;
mod optim_step;
mod pad;
mod quant;
mod reduce;
mod rows;
mod scatter;
mod similarity;
mod softmax;
mod transfer;
mod view;

pub(crate) use cell::materialize_pending;
pub use conv::Conv2dOptions;
pub(crate) use dispatch::run_pending;
pub(crate) use fuse::fused_on_cpu;
pub use matmul::{f16_accumulation, set_f16_accumulation};
pub use pad::PadMode;
pub use quant::{quantized_activations, set_quantized_activations, QTensor};

pub use dispatch::transfer::WgpuBufferView;
pub(crate) use quant::quant_part_rows;
pub use transfer::read_all;

use crate::shape::Layout;
use crate::storage::Storage;
use crate::{DType, Device, Error, Result};
use std::sync::{Arc, Mutex};

/// An n-dimensional array on a [`Device`].
///
/// Cloning is cheap: clones share storage. Tensors are immutable; every op returns a new tensor,
/// and ops never move data between devices by themselves (use [`Tensor::to`]).
///
/// ```
/// use wgtensor::{Device, Tensor};
/// let device = Device::best();
/// let x = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[2, 2], &device)?;
/// let y = (&x * &x)?.add_scalar(1.0)?;
/// assert_eq!(y.to_vec::<f32>()?, vec![2.0, 5.0, 10.0, 17.0]);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Clone)]
pub struct Tensor(Arc<TensorInner>);

struct TensorInner {
    /// Materialised data, or a pending fused elementwise program (`fuse.rs`).
    storage: Arc<cell::StorageCell>,
    layout: Layout,
    dtype: DType,
    device: Device,
    /// Autograd state: the recording node of an op result, or a leaf's flag and grad slot.
    autograd: Meta,
}

impl Tensor {
    pub(crate) fn from_parts(
        storage: impl Into<Storage>,
        shape: &[usize],
        dtype: DType,
        device: Device,
    ) -> Tensor {
        let storage = storage.into();
        storage.count_as_tensor();
        Tensor(Arc::new(TensorInner {
            storage: Arc::new(cell::StorageCell::ready(storage)),
            layout: Layout::contiguous(shape),
            dtype,
            device,
            autograd: Default::default(),
        }))
    }

    /// Bytes of the GPU buffer behind this tensor (for a pending fused result: the buffer it
    /// will get), without materialising it; `None` on the CPU.
    pub(crate) fn gpu_bytes(&self) -> Option<u64> {
        self.0.storage.gpu_bytes(self.dtype())
    }

    pub(crate) fn layout(&self) -> &Layout {
        &self.0.layout
    }

    /// Autograd state (see `src/autograd/`).
    pub(crate) fn autograd_meta(&self) -> &Meta {
        &self.0.autograd
    }

    /// This tensor's recording node when this handle is the last one to it (used to free long
    /// graphs without recursion); `None` otherwise.
    pub(crate) fn into_unique_node(self) -> Option<Arc<Node>> {
        Arc::try_unwrap(self.0).ok()?.autograd.take_node()
    }

    /// A tensor sharing this one's storage and view with new autograd state: how recorded op
    /// results, `detach` and `requires_grad_` are made without copying data.
    pub(crate) fn with_autograd(&self, autograd: Meta) -> Tensor {
        Tensor(Arc::new(TensorInner {
            storage: self.0.storage.clone(),
            layout: self.0.layout.clone(),
            dtype: self.0.dtype,
            device: self.0.device.clone(),
            autograd,
        }))
    }

    /// The shape (PyTorch's `t.shape`).
    ///
    /// ```
    /// let t = wgtensor::Tensor::zeros(&[2, 3], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.shape(), &[2, 3]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn shape(&self) -> &[usize] {
        &self.0.layout.shape
    }

    /// Same as [`Tensor::shape`] (candle's name).
    pub fn dims(&self) -> &[usize] {
        self.shape()
    }

    /// Number of dimensions (PyTorch's `t.dim()`).
    ///
    /// ```
    /// let t = wgtensor::Tensor::zeros(&[2, 3], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.ndim(), 2);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn ndim(&self) -> usize {
        self.shape().len()
    }

    /// Number of elements.
    ///
    /// ```
    /// let t = wgtensor::Tensor::zeros(&[2, 3], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.numel(), 6);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn numel(&self) -> usize {
        self.0.layout.numel()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.0.dtype
    }

    /// The device holding the data (PyTorch's `t.device`).
    ///
    /// ```
    /// let t = wgtensor::Tensor::zeros(&[1], wgtensor::DType::F32, &wgtensor::Device::cpu())?;
    /// assert_eq!(t.device().to_string(), "cpu");
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn device(&self) -> &Device {
        &self.0.device
    }

    /// Whether the data is on a GPU (PyTorch's `t.is_cuda`).
    pub fn is_gpu(&self) -> bool {
        dispatch::on_gpu(&self.0.device)
    }

    /// Whether the data is on the CPU.
    pub fn is_cpu(&self) -> bool {
        dispatch::on_cpu(&self.0.device)
    }

    /// Whether elements are packed row-major (views such as broadcasts are not).
    pub fn is_contiguous(&self) -> bool {
        self.0.layout.is_contiguous()
    }

    /// Rejects dtypes without kernels yet.
    fn require_f32(&self, op: &'static str) -> Result<()> {
        if self.dtype() == DType::F32 {
            Ok(())
        } else {
            Err(self.unsupported(op))
        }
    }

    /// The error for an op without a kernel for this tensor's dtype (on its device).
    pub(crate) fn unsupported(&self, op: &'static str) -> Error {
        Error::UnsupportedDType {
            op,
            dtype: self.dtype(),
            device: self.device().to_string(),
        }
    }

    /// The error for `other` living on another device than `self` (named in that order).
    pub(crate) fn device_mismatch(&self, op: &'static str, other: &Tensor) -> Error {
        Error::DeviceMismatch {
            op,
            lhs: self.device().to_string(),
            rhs: other.device().to_string(),
        }
    }

    /// Same device as `other`, or the error naming both (`self` first).
    pub(crate) fn check_device(&self, op: &'static str, other: &Tensor) -> Result<()> {
        if self.device() != other.device() {
            return Err(self.device_mismatch(op, other));
        }
        Ok(())
    }

    /// Same dtype as `other`, or the error naming both (`self` first).
    pub(crate) fn check_dtype(&self, op: &'static str, other: &Tensor) -> Result<()> {
        if self.dtype() != other.dtype() {
            return Err(Error::DTypeMismatch {
                op,
                lhs: self.dtype(),
                rhs: other.dtype(),
            });
        }
        Ok(())
    }

    /// Same device and dtype, or the error naming both.
    pub(crate) fn check_pair(&self, op: &'static str, rhs: &Tensor) -> Result<()> {
        self.check_device(op, rhs)?;
        self.check_dtype(op, rhs)
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tensor(shape={:?}, dtype={}, device={})",
            self.shape(),
            self.dtype(),
            self.device()
        )
    }
}

// ---- The autograd half of a tensor ----
//
// `Node` and `Meta` are defined beside `Tensor` because the three types contain each other (a
// tensor holds its node, a node holds its input tensors); the graph walk and the formulas that
// build nodes are `src/autograd/`.

/// Maps the output's gradient to one optional gradient per input. The flags say which inputs
/// require grad, so work for the others can be skipped.
pub(crate) type BackwardFn =
    Box<dyn Fn(&Tensor, &[bool]) -> Result<Vec<Option<Tensor>>> + Send + Sync>;

/// One recorded op: what backward needs to send the gradient on to the op's inputs.
pub(crate) struct Node {
    pub(crate) op: &'static str,
    pub(crate) inputs: Vec<Tensor>,
    /// Always `Some` until the node is dropped (taken first so the inputs it captured are
    /// released before the inputs are walked).
    pub(crate) backward: Option<BackwardFn>,
}

impl Drop for Node {
    /// Frees a chain of nodes with a loop instead of recursion: a graph of 100,000 recorded ops
    /// (an unrolled recurrence) would otherwise overflow the stack when its last tensor drops.
    fn drop(&mut self) {
        drop(self.backward.take());
        let mut stack = std::mem::take(&mut self.inputs);
        while let Some(t) = stack.pop() {
            let Some(node) = t.into_unique_node() else {
                continue;
            };
            if let Ok(mut n) = Arc::try_unwrap(node) {
                drop(n.backward.take());
                stack.append(&mut n.inputs);
            }
        }
    }
}

/// Autograd state of one tensor. Clones share it (they share the `Arc`), so a leaf's grad slot
/// is seen through every clone, as a PyTorch parameter's `.grad` is.
#[derive(Default)]
pub(crate) struct Meta {
    /// A leaf created by `requires_grad_(true)` / `nn::param`.
    pub(crate) requires_grad: bool,
    /// Set on results of recorded ops (never on leaves).
    pub(crate) node: Option<Arc<Node>>,
    /// A leaf's accumulated gradient.
    pub(crate) grad: Mutex<Option<Tensor>>,
}

impl Meta {
    pub(crate) fn take_node(&mut self) -> Option<Arc<Node>> {
        self.node.take()
    }

    pub(crate) fn leaf(requires_grad: bool) -> Meta {
        Meta {
            requires_grad,
            ..Meta::default()
        }
    }
}
