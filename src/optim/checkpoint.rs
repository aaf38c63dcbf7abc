//! Training checkpoints: model parameters plus optimizer state in one safetensors file.

use super::state::stays_on_cpu;
use super::Optimizer;
use crate::nn::{self, Module};
use crate::{Device, Error, Result, Tensor};
use std::collections::BTreeMap;
use std::path::Path;

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
/// # std::fs::remove_file(&path).ok();
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
