//! Neural-network building blocks in the shape of PyTorch's `torch.nn`: a [`Module`] trait whose
//! `to(&device)` moves every parameter, the way `model.to(device)` does.
//!
//! Layers are written with the public tensor ops only, so they run on every device the ops run
//! on, and gradients (when autograd records the ops) come for free.
//!
//! - Layers: [`Linear`], [`Embedding`], [`LayerNorm`], [`RMSNorm`], [`ReLU`], [`GELU`], [`SiLU`],
//!   [`Sigmoid`], [`Tanh`], [`Softmax`], [`Dropout`], [`Identity`], and the container
//!   [`Sequential`].
//! - Convolution: [`Conv2d`], [`MaxPool2d`], [`AvgPool2d`], [`AdaptiveAvgPool2d`],
//!   [`BatchNorm2d`] (running statistics as buffers), [`Flatten`].
//! - Attention: [`MultiheadAttention`], [`TransformerBlock`] (pre-norm, optionally causal).
//! - Weights: [`save_safetensors`] / [`load_safetensors`], and [`Module::save_weights`] /
//!   [`Module::load_weights`] (by name, shapes checked, onto a chosen device, f32 or f16).
//! - [`DataParallel`]: one replica per device, the batch split along dim 0.
//!
//! ```
//! use wgtensor::nn::{Linear, Module, ReLU, Sequential};
//! use wgtensor::{Device, Tensor};
//! let device = Device::best();
//! let mut model = Sequential::new()
//!     .add(Linear::new(10, 32, true, &Device::cpu())?)
//!     .add(ReLU)
//!     .add(Linear::new(32, 1, true, &Device::cpu())?);
//! model.to(&device)?; // PyTorch's model.to(device)
//! let out = model.forward(&Tensor::randn(&[4, 10], &device)?)?;
//! assert_eq!(out.device(), &device);
//! # Ok::<(), wgtensor::Error>(())
//! ```

mod activation;
mod attention;
mod checkpoint;
mod conv;
#[cfg(feature = "mpi")]
mod ddp;
mod dropout;
mod embedding;
pub(crate) mod io;
mod linear;
pub(crate) mod load;
mod loss;
mod norm;
mod parallel;
mod sequential;

pub use activation::{Identity, ReLU, SiLU, Sigmoid, Softmax, Tanh, GELU};
pub use attention::{MultiheadAttention, TransformerBlock};
pub use checkpoint::Checkpoint;
pub use conv::{AdaptiveAvgPool2d, AvgPool2d, BatchNorm2d, Conv2d, Flatten, MaxPool2d};
#[cfg(feature = "mpi")]
pub use ddp::{DistributedDataParallel, DEFAULT_BUCKET_BYTES};
pub use dropout::Dropout;
pub use embedding::Embedding;
pub use io::save_safetensors;
pub use linear::Linear;
pub use load::{load_safetensors, load_sharded, load_tensor};
pub use loss::{cross_entropy, cross_entropy_with, mse_loss, CrossEntropyOptions, Reduction};
pub use norm::{LayerNorm, RMSNorm};
pub use parallel::DataParallel;
pub use sequential::Sequential;

use crate::error::{check_rank, invalid};
use crate::{DType, Device, Result, Tensor};
use std::path::Path;

/// A layer or model: a forward function plus named parameters that can be moved between devices.
///
/// Names are dotted paths (`"0.weight"`, `"encoder.bias"`), the same ones safetensors files use.
///
/// ```
/// use wgtensor::nn::Module;
/// use wgtensor::{Device, Result, Tensor};
///
/// struct Scale(Tensor);
/// impl Module for Scale {
///     fn forward(&self, x: &Tensor) -> Result<Tensor> { x.mul(&self.0) }
///     fn named_parameters(&self) -> Vec<(String, Tensor)> { vec![("scale".into(), self.0.clone())] }
///     fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> { vec![("scale".into(), &mut self.0)] }
/// }
///
/// let mut m = Scale(Tensor::from_vec(vec![2f32], &[1], &Device::cpu())?);
/// m.to(&Device::cpu())?;
/// assert_eq!(m.device(), Some(Device::cpu()));
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub trait Module: Send + Sync {
    /// Runs the layer on `x`.
    fn forward(&self, x: &Tensor) -> Result<Tensor>;

    /// Every parameter and buffer with its dotted name, in a stable order.
    fn named_parameters(&self) -> Vec<(String, Tensor)>;

    /// Mutable access to the same tensors, in the same order: used by [`Module::to`], weight
    /// loading and optimizers, which replace parameters with new tensors.
    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)>;

    /// The parameters without names (PyTorch's `model.parameters()`).
    fn parameters(&self) -> Vec<Tensor> {
        self.named_parameters()
            .into_iter()
            .map(|(_, t)| t)
            .collect()
    }

    /// Moves every parameter to `device` (PyTorch's `model.to(device)`); parameters stay
    /// parameters and buffers (tensors that do not require grad) stay buffers. On error the parameters already moved stay moved and the rest stay put.
    fn to(&mut self, device: &Device) -> Result<()> {
        for (_, p) in self.named_parameters_mut() {
            if p.device() != device {
                *p = keep_kind(p, p.to(device)?);
            }
        }
        Ok(())
    }

    /// The device of the first parameter (PyTorch's `next(model.parameters()).device`), or `None`
    /// for a module without parameters.
    fn device(&self) -> Option<Device> {
        self.named_parameters()
            .first()
            .map(|(_, t)| t.device().clone())
    }

    /// Switches training mode (Dropout is active only while training). Default: nothing to do.
    fn set_training(&mut self, _training: bool) {}

    /// `set_training(true)`, PyTorch's `model.train()`.
    fn train(&mut self) {
        self.set_training(true)
    }

    /// `set_training(false)`, PyTorch's `model.eval()`.
    fn eval(&mut self) {
        self.set_training(false)
    }

    /// Total number of parameter elements.
    fn num_parameters(&self) -> usize {
        self.named_parameters().iter().map(|(_, t)| t.numel()).sum()
    }

    /// The dtype of the first parameter, or `None` without parameters.
    fn dtype(&self) -> Option<DType> {
        self.named_parameters().first().map(|(_, t)| t.dtype())
    }

    /// Replaces every parameter with the tensor of the same name in the safetensors file at
    /// `path`, placed on `device` (PyTorch's `load_state_dict(load_file(path))` + `to(device)`).
    ///
    /// Strict: every parameter needs a tensor of the same shape and no tensor may be left over.
    /// A float tensor whose dtype differs from its parameter's is converted on the host (f32 <->
    /// f16). Nothing is replaced unless everything matches.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming the missing or unexpected key, or the key with its
    /// expected and found shape (or dtype), and the file; the errors of
    /// [`load_safetensors`].
    ///
    /// ```
    /// use wgtensor::nn::{Linear, Module};
    /// use wgtensor::Device;
    /// let path = std::env::temp_dir().join("wgtensor_doc_weights.safetensors");
    /// let a = Linear::new(3, 2, true, &Device::cpu())?;
    /// a.save_weights(&path)?;
    /// let mut b = Linear::new(3, 2, true, &Device::cpu())?;
    /// b.load_weights(&path, &Device::best())?;
    /// assert_eq!(b.weight().to_vec::<f32>()?, a.weight().to_vec::<f32>()?);
    /// assert_eq!(b.device(), Some(Device::best()));
    /// # std::fs::remove_file(&path).ok();
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    fn load_weights(&mut self, path: &Path, device: &Device) -> Result<()> {
        let loaded = load::load_any_host(path)?;
        assign(self, loaded, device, &path.display().to_string())
    }

    /// Writes every parameter, by name, to a safetensors file at `path` (see
    /// [`save_safetensors`]).
    ///
    /// # Errors
    /// As [`save_safetensors`].
    ///
    /// ```
    /// use wgtensor::nn::{load_safetensors, Linear, Module};
    /// use wgtensor::Device;
    /// let path = std::env::temp_dir().join("wgtensor_doc_save_weights.safetensors");
    /// Linear::new(3, 2, false, &Device::cpu())?.save_weights(&path)?;
    /// assert_eq!(load_safetensors(&path, &Device::cpu(), None)?[0].0, "weight");
    /// # std::fs::remove_file(&path).ok();
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    fn save_weights(&self, path: &Path) -> Result<()> {
        save_safetensors(path, &self.named_parameters())
    }

    /// Every parameter and buffer by name (PyTorch's `model.state_dict()`): the tensors
    /// themselves, sharing their storage, in [`Module::named_parameters`] order.
    ///
    /// ```
    /// use wgtensor::nn::{Linear, Module};
    /// let m = Linear::new(3, 2, true, &wgtensor::Device::cpu())?;
    /// let names: Vec<String> = m.state_dict().into_iter().map(|(n, _)| n).collect();
    /// assert_eq!(names, ["weight", "bias"]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    fn state_dict(&self) -> Vec<(String, Tensor)> {
        self.named_parameters()
    }

    /// Replaces every parameter with the tensor of the same name in `state`, placed on `device`
    /// (PyTorch's strict `load_state_dict`): the same checks and conversions as
    /// [`Module::load_weights`], and nothing is replaced unless everything matches.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming the missing or unexpected key, or the key with its
    /// expected and found shape (or dtype); device errors.
    ///
    /// ```
    /// use wgtensor::nn::{Linear, Module};
    /// use wgtensor::Device;
    /// let a = Linear::new(3, 2, true, &Device::cpu())?;
    /// let mut b = Linear::new(3, 2, true, &Device::cpu())?;
    /// b.load_state_dict(a.state_dict(), &Device::best())?;
    /// assert_eq!(b.bias().unwrap().to_vec::<f32>()?, a.bias().unwrap().to_vec::<f32>()?);
    /// assert!(b.load_state_dict(Vec::new(), &Device::cpu()).is_err()); // missing keys
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    fn load_state_dict(&mut self, state: Vec<(String, Tensor)>, device: &Device) -> Result<()> {
        assign(self, state, device, "the state dict")
    }
}

/// `named_parameters` and `named_parameters_mut` of a layer with fields `weight: Tensor` and
/// `bias: Option<Tensor>` (PyTorch's names `weight` and `bias`).
macro_rules! weight_and_bias_parameters {
    () => {
        fn named_parameters(&self) -> Vec<(String, Tensor)> {
            crate::nn::own_parameters([
                ("weight", Some(&self.weight)),
                ("bias", self.bias.as_ref()),
            ])
        }

        fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
            crate::nn::own_parameters_mut([
                ("weight", Some(&mut self.weight)),
                ("bias", self.bias.as_mut()),
            ])
        }
    };
}
use weight_and_bias_parameters;

/// The `Module` methods of a wrapper that hands its parameters, device moves and training mode
/// to the module in `$field` (gradient checkpointing, data parallelism): wrapping changes how
/// `forward` or the gradients run, never what the model holds.
macro_rules! delegate_to_inner {
    ($field:ident) => {
        fn named_parameters(&self) -> Vec<(String, Tensor)> {
            self.$field.named_parameters()
        }

        fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
            self.$field.named_parameters_mut()
        }

        fn to(&mut self, device: &Device) -> Result<()> {
            self.$field.to(device)
        }

        fn set_training(&mut self, training: bool) {
            self.$field.set_training(training)
        }
    };
}
use delegate_to_inner;

/// A layer's weight must be a matrix; `layout` names its dims in the error (`"[out, in]"`).
pub(crate) fn check_weight_2d(op: &'static str, weight: &Tensor, layout: &str) -> Result<()> {
    check_rank(op, "weight", weight.shape(), 2, &format!("2-D {layout}"))
}

/// The named parameters of a layer's own tensors, skipping the absent ones (no bias, not
/// affine): how every layer with a weight and a bias lists them.
pub(crate) fn own_parameters<const N: usize>(
    named: [(&str, Option<&Tensor>); N],
) -> Vec<(String, Tensor)> {
    named
        .into_iter()
        .filter_map(|(n, t)| Some((n.to_string(), t?.clone())))
        .collect()
}

/// [`own_parameters`] for writing.
pub(crate) fn own_parameters_mut<'a, const N: usize>(
    named: [(&str, Option<&'a mut Tensor>); N],
) -> Vec<(String, &'a mut Tensor)> {
    named
        .into_iter()
        .filter_map(|(n, t)| Some((n.to_string(), t?)))
        .collect()
}

/// Matches `loaded` host tensors to `module`'s parameters by name and shape, converts float
/// dtypes to the parameter's, moves them to `device`, then replaces the parameters (all or none).
pub(crate) fn assign<M: Module + ?Sized>(
    module: &mut M,
    loaded: Vec<(String, Tensor)>,
    device: &Device,
    source: &str,
) -> Result<()> {
    let ready = prepare_assign(&*module, loaded, device, source)?;
    commit_assign(module, ready);
    Ok(())
}

/// The validation half of [`assign`]: the tensors, converted and on `device`, in parameter
/// order; nothing in `module` changes.
pub(crate) fn prepare_assign<M: Module + ?Sized>(
    module: &M,
    loaded: Vec<(String, Tensor)>,
    device: &Device,
    source: &str,
) -> Result<Vec<Tensor>> {
    let op = "load_weights";
    let mut by_name: std::collections::HashMap<String, Tensor> = loaded.into_iter().collect();
    // Every key of the file, for the missing-key message (matched keys leave `by_name`).
    let all_keys: Vec<String> = by_name.keys().cloned().collect();
    let mut ready = Vec::new();
    for (name, p) in module.named_parameters() {
        let t = by_name.remove(&name).ok_or_else(|| {
            invalid(
                op,
                format!(
                    "missing key {name:?} (a parameter of shape {:?}) in {source}; the file holds \
                 {} tensor(s): {}",
                    p.shape(),
                    all_keys.len(),
                    list_keys(all_keys.iter())
                ),
            )
        })?;
        if t.shape() != p.shape() {
            return Err(invalid(
                op,
                format!(
                    "shape mismatch for {name:?} in {source}: the module expects {:?}, the file \
                     holds {:?}",
                    p.shape(),
                    t.shape()
                ),
            ));
        }
        let t = io::convert_float(t, p.dtype())?;
        if t.dtype() != p.dtype() {
            return Err(invalid(
                op,
                format!(
                    "dtype mismatch for {name:?} in {source}: the module expects {}, the file \
                     holds {}",
                    p.dtype(),
                    t.dtype()
                ),
            ));
        }
        ready.push(t);
    }
    if !by_name.is_empty() {
        return Err(invalid(
            op,
            format!(
                "unexpected key(s) in {source}: {}; the module has no such parameter",
                list_keys(by_name.keys())
            ),
        ));
    }
    ready.into_iter().map(|t| t.to(device)).collect()
}

/// The replacement half of [`assign`]: `ready` comes from [`prepare_assign`] on this module.
pub(crate) fn commit_assign<M: Module + ?Sized>(module: &mut M, ready: Vec<Tensor>) {
    for ((_, p), t) in module.named_parameters_mut().into_iter().zip(ready) {
        *p = keep_kind(p, t);
    }
}

/// `new` as a parameter when `old` is one, else as a buffer (BatchNorm's running statistics):
/// a buffer must not start requiring grad when it moves or loads.
pub(crate) fn keep_kind(old: &Tensor, new: Tensor) -> Tensor {
    if old.requires_grad() {
        param(new)
    } else {
        new.detach()
    }
}

/// Sorted, quoted keys, at most 10 of them.
fn list_keys<'a>(keys: impl Iterator<Item = &'a String>) -> String {
    let mut v: Vec<&String> = keys.collect();
    if v.is_empty() {
        return "none".into();
    }
    v.sort();
    let more = v.len().saturating_sub(10);
    let mut s = v
        .iter()
        .take(10)
        .map(|k| format!("{k:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    if more > 0 {
        s += &format!(" and {more} more");
    }
    s
}

/// Marks a tensor as a trainable parameter. Every layer constructor and [`Module::to`] route
/// their parameters through here, so parameter-ness (gradient tracking) is decided in one place:
/// the result is a fresh leaf (sharing `t`'s data) that requires grad.
///
/// ```
/// let w = wgtensor::nn::param(wgtensor::Tensor::ones(&[2], wgtensor::DType::F32, &wgtensor::Device::cpu())?);
/// assert!(w.requires_grad() && w.is_leaf());
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub fn param(t: Tensor) -> Tensor {
    t.requires_grad_(true)
}
