//! Optimizer state as named tensors (what `optimizer.state_dict()` holds in PyTorch), and
//! training checkpoints: model parameters plus optimizer state in one safetensors file.
//!
//! Names: `lr` (a 0-d f32), then per parameter `state.<param>.<slot>`: Adam's `exp_avg`,
//! `exp_avg_sq` and `step` (0-d i32), SGD's `momentum_buffer`.

use super::Optimizer;
use crate::nn::{self, Module};
use crate::{DType, Device, Error, Result, Tensor};
use std::collections::BTreeMap;
use std::path::Path;

/// The `lr` entry of every state dict.
pub(crate) fn lr_entry(lr: f32) -> Result<(String, Tensor)> {
    Ok((
        "lr".to_string(),
        Tensor::from_vec(vec![lr], &[], &Device::cpu())?,
    ))
}

/// A state dict split into `lr` and `param -> slot -> tensor`; unknown keys are errors.
pub(crate) struct Parsed {
    pub lr: Option<f32>,
    pub slots: BTreeMap<String, BTreeMap<String, Tensor>>,
}

/// Splits `state` for optimizer `op`, accepting only the slot names in `slots`.
pub(crate) fn parse(
    op: &'static str,
    state: Vec<(String, Tensor)>,
    slots: &[&str],
) -> Result<Parsed> {
    let bad = |message: String| Error::InvalidArgument { op, message };
    let mut out = Parsed {
        lr: None,
        slots: BTreeMap::new(),
    };
    for (key, t) in state {
        if key == "lr" {
            if t.numel() != 1 || t.dtype() != DType::F32 {
                return Err(bad(format!(
                    "\"lr\" must be one f32, got {} of shape {:?}",
                    t.dtype(),
                    t.shape()
                )));
            }
            out.lr = Some(cpu_f32_scalar(op, "lr", &t)?);
            continue;
        }
        let parsed = key
            .strip_prefix("state.")
            .and_then(|rest| rest.rsplit_once('.'))
            .filter(|(_, slot)| slots.contains(slot));
        let Some((param, slot)) = parsed else {
            return Err(bad(format!(
                "unexpected key {key:?}: expected \"lr\" or \"state.<param>.<slot>\" with slot \
                 one of {slots:?}"
            )));
        };
        out.slots
            .entry(param.to_string())
            .or_default()
            .insert(slot.to_string(), t);
    }
    Ok(out)
}

/// The value of a one-element CPU f32 tensor, read from its storage: host hyperparameters
/// (`lr`) come as CPU tensors from `state_dict`, so loading them moves nothing between devices.
/// A GPU tensor here is refused rather than read back.
pub(crate) fn cpu_f32_scalar(op: &'static str, key: &str, t: &Tensor) -> Result<f32> {
    use crate::storage::{CpuStorage, Storage};
    match t.storage()? {
        Storage::Cpu(CpuStorage::F32(v)) => Ok(v[t.layout().offset]),
        _ => Err(Error::InvalidArgument {
            op,
            message: format!(
                "{key:?} must be a CPU tensor, as state_dict returns it (got one on {}); \
                 move it with .cpu() first",
                t.device()
            ),
        }),
    }
}

/// The value of a one-element CPU i32 tensor, read from its storage; `None` for a GPU tensor.
pub(crate) fn cpu_i32_scalar(t: &Tensor) -> Result<Option<i32>> {
    use crate::storage::{CpuStorage, Storage};
    Ok(match t.storage()? {
        Storage::Cpu(CpuStorage::I32(v)) => Some(v[t.layout().offset]),
        _ => None,
    })
}

/// Whether `key` of an optimizer state dict holds a host scalar that stays on the CPU when a
/// checkpoint is loaded onto a device (`lr`, Adam's `step` counts).
pub(crate) fn stays_on_cpu(key: &str) -> bool {
    key == "lr" || key.ends_with(".step")
}

/// Takes slot `slot` of parameter `param`, or names what is missing.
pub(crate) fn take(
    op: &'static str,
    param: &str,
    slots: &mut BTreeMap<String, Tensor>,
    slot: &str,
) -> Result<Tensor> {
    slots.remove(slot).ok_or_else(|| Error::InvalidArgument {
        op,
        message: format!("missing key \"state.{param}.{slot}\" for parameter {param:?}"),
    })
}

/// Writes `model`'s parameters (as `model.<name>`) and `optimizer`'s state (as
/// `optimizer.<key>`) to one safetensors file, so training can resume with
/// [`load_checkpoint`]. Scheduler positions are plain counts: store them yourself (or rebuild
/// the scheduler and call `set_last_epoch`).
///
/// # Errors
/// The errors of [`Optimizer::state_dict`] and [`nn::save_safetensors`].
///
/// ```
/// use wgtensor::nn::{Linear, Module};
/// use wgtensor::optim::{load_checkpoint, save_checkpoint, Adam, Optimizer};
/// use wgtensor::{Device, Tensor};
/// let d = Device::best();
/// let mut model = Linear::new(3, 1, true, &d)?;
/// let mut opt = Adam::new(1e-2);
/// model.forward(&Tensor::randn(&[4, 3], &d)?)?.sum_all()?.backward()?;
/// opt.step(&mut model)?;
/// let path = std::env::temp_dir().join("wgtensor_doc_checkpoint.safetensors");
/// save_checkpoint(&path, &model, &opt)?;
/// let (mut model2, mut opt2) = (Linear::new(3, 1, true, &d)?, Adam::new(0.5));
/// load_checkpoint(&path, &mut model2, &mut opt2, &d)?;
/// assert_eq!(model2.weight().to_vec::<f32>()?, model.weight().to_vec::<f32>()?);
/// assert_eq!(opt2.lr(), 1e-2);
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub fn save_checkpoint(
    path: impl AsRef<Path>,
    model: &dyn Module,
    optimizer: &dyn Optimizer,
) -> Result<()> {
    let mut all: Vec<(String, Tensor)> = model
        .state_dict()
        .into_iter()
        .map(|(n, t)| (format!("model.{n}"), t))
        .collect();
    all.extend(
        optimizer
            .state_dict()?
            .into_iter()
            .map(|(n, t)| (format!("optimizer.{n}"), t)),
    );
    nn::save_safetensors(path, &all)
}

/// Restores what [`save_checkpoint`] wrote: the parameters of `model` (placed on `device`) and
/// the state of `optimizer` (moments on `device`; the learning rate and step counts, host
/// scalars, on the CPU). The optimizer state is all validated (and moved to `device`) before
/// anything is replaced, so a bad file leaves both as they were: every moment and momentum
/// buffer must name a parameter of `model` and have its shape and dtype.
///
/// # Errors
/// The errors of [`nn::load_safetensors`], [`Module::load_state_dict`] and
/// [`Optimizer::load_state_dict`]; [`Error::InvalidArgument`] for a key under neither
/// `model.` nor `optimizer.`.
pub fn load_checkpoint(
    path: impl AsRef<Path>,
    model: &mut dyn Module,
    optimizer: &mut dyn Optimizer,
    device: &Device,
) -> Result<()> {
    let path = path.as_ref();
    let op = "load_checkpoint";
    let (mut model_part, mut opt_part) = (Vec::new(), Vec::new());
    for (name, t) in nn::load_safetensors(path, &Device::cpu(), None)? {
        if let Some(n) = name.strip_prefix("model.") {
            model_part.push((n.to_string(), t));
        } else if let Some(n) = name.strip_prefix("optimizer.") {
            // Moments and buffers go to the device; host scalars stay where they are read.
            let t = if stays_on_cpu(n) { t } else { t.to(device)? };
            opt_part.push((n.to_string(), t));
        } else {
            return Err(Error::InvalidArgument {
                op,
                message: format!(
                    "unexpected key {name:?} in {}: checkpoint keys start with \"model.\" or \
                     \"optimizer.\"",
                    path.display()
                ),
            });
        }
    }
    let source = path.display().to_string();
    let ready = nn::prepare_assign(&*model, model_part, device, &source)?;
    check_against_model(op, &source, &*model, &opt_part)?;
    optimizer.load_state_dict(opt_part)?;
    nn::commit_assign(model, ready);
    Ok(())
}

/// Every per-parameter state tensor of a checkpoint (moments, momentum buffers; not the step
/// counts) must name a parameter of `model` and have its shape and dtype.
fn check_against_model(
    op: &'static str,
    source: &str,
    model: &dyn Module,
    state: &[(String, Tensor)],
) -> Result<()> {
    let params: BTreeMap<String, Tensor> = model.named_parameters().into_iter().collect();
    for (key, t) in state {
        let Some((param, slot)) = key.strip_prefix("state.").and_then(|k| k.rsplit_once('.'))
        else {
            continue;
        };
        if slot == "step" {
            continue;
        }
        let bad = |what: String| Error::InvalidArgument {
            op,
            message: format!("\"optimizer.{key}\" in {source}: {what}"),
        };
        let Some(p) = params.get(param) else {
            return Err(bad(format!("the model has no parameter {param:?}")));
        };
        if t.shape() != p.shape() || t.dtype() != p.dtype() {
            return Err(bad(format!(
                "is {} {:?}, but parameter {param:?} is {} {:?}",
                t.dtype(),
                t.shape(),
                p.dtype(),
                p.shape()
            )));
        }
    }
    Ok(())
}
