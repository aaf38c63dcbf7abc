//! Optimizer state as named tensors (what `optimizer.state_dict()` holds in PyTorch); the
//! checkpoint files that hold it beside the model are `checkpoint.rs`.
//!
//! Names: `lr` (a 0-d f32), then per parameter `state.<param>.<slot>`: Adam's `exp_avg`,
//! `exp_avg_sq` and `step` (0-d i32), SGD's `momentum_buffer`.

use crate::{DType, Device, Error, Result, Tensor};
use std::collections::BTreeMap;

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

/// A state dict: the `lr` entry, then `state.<param>.<slot>` for the `(slot, tensor)` pairs
/// `slots` gives each parameter's state, parameters sorted by name so a state dict lists them
/// in the same order every time.
pub(crate) fn dict<T>(
    lr: f32,
    state: &std::collections::HashMap<String, T>,
    slots: impl Fn(&T) -> Result<Vec<(&'static str, Tensor)>>,
) -> Result<Vec<(String, Tensor)>> {
    let mut names: Vec<&String> = state.keys().collect();
    names.sort();
    let mut out = vec![lr_entry(lr)?];
    for name in names {
        for (slot, t) in slots(&state[name])? {
            out.push((format!("state.{name}.{slot}"), t));
        }
    }
    Ok(out)
}

/// The value of a one-element CPU f32 tensor, read from its storage: host hyperparameters
/// (`lr`) come as CPU tensors from `state_dict`, so loading them moves nothing between devices.
/// A GPU tensor here is refused rather than read back.
pub(crate) fn cpu_f32_scalar(op: &'static str, key: &str, t: &Tensor) -> Result<f32> {
    match t.host_first::<f32>()? {
        Some(v) => Ok(v),
        None => Err(Error::InvalidArgument {
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
    t.host_first::<i32>()
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
