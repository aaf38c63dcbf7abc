//! Reverse-mode automatic differentiation, PyTorch style.
//!
//! Every public op whose inputs require grad wraps its result in a tensor that carries a
//! [`Node`]: the op's name, its input tensors and a closure that maps the output's gradient to
//! the inputs' gradients. [`Tensor::backward`] walks those nodes in reverse topological order and
//! adds each leaf's gradient into its grad slot. Gradients are computed with the ordinary tensor
//! ops (under [`no_grad`]), so they run on the device the forward ran on.
//!
//! The backward formulas live next to each other by op family: `elementwise.rs`, `linalg.rs`
//! (matmul), `reduce.rs` (reductions, softmax), `shape.rs` (views, joins, selections, transfers).

mod api;
pub(crate) mod conv;
pub(crate) mod elementwise;
pub(crate) mod gather;
pub(crate) mod linalg;
pub(crate) mod norm;
pub(crate) mod reduce;
pub(crate) mod shape;

use crate::tensor::{Meta, Node};
use crate::{DType, Error, Result, Tensor};
use std::cell::Cell;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;

thread_local! {
    /// Grad mode is per thread, as in PyTorch: a `no_grad` scope on one thread does not stop
    /// recording on another.
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
}

/// Whether ops on this thread record gradients (PyTorch's `torch.is_grad_enabled()`).
///
/// ```
/// assert!(wgtensor::is_grad_enabled());
/// let guard = wgtensor::no_grad();
/// assert!(!wgtensor::is_grad_enabled());
/// drop(guard);
/// assert!(wgtensor::is_grad_enabled());
/// ```
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(|g| g.get())
}

/// Restores the previous grad mode when dropped; see [`no_grad`]. Not `Send`: grad mode is
/// per thread.
#[must_use = "grad recording resumes as soon as the guard is dropped"]
pub struct NoGradGuard {
    prev: bool,
    _not_send: PhantomData<*const ()>,
}

impl Drop for NoGradGuard {
    fn drop(&mut self) {
        GRAD_ENABLED.with(|g| g.set(self.prev));
    }
}

fn set_grad_enabled(on: bool) -> NoGradGuard {
    let prev = GRAD_ENABLED.with(|g| g.replace(on));
    NoGradGuard {
        prev,
        _not_send: PhantomData,
    }
}

/// Stops recording gradients on this thread until the guard is dropped (PyTorch's
/// `with torch.no_grad():`). Use it for evaluation and parameter updates.
///
/// ```
/// use wgtensor::{Device, Tensor};
/// let w = Tensor::ones(&[2], wgtensor::DType::F32, &Device::cpu())?.requires_grad_(true);
/// let y = {
///     let _g = wgtensor::no_grad();
///     w.mul_scalar(2.0)?
/// };
/// assert!(!y.requires_grad());
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub fn no_grad() -> NoGradGuard {
    set_grad_enabled(false)
}

/// Runs `f` with gradient recording off, then restores the previous mode (even on panic).
///
/// ```
/// use wgtensor::{Device, Tensor};
/// let w = Tensor::ones(&[2], wgtensor::DType::F32, &Device::cpu())?.requires_grad_(true);
/// let y = wgtensor::no_grad_scope(|| w.exp())?;
/// assert!(!y.requires_grad());
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub fn no_grad_scope<T>(f: impl FnOnce() -> T) -> T {
    let _guard = no_grad();
    f()
}

/// Turns recording back on inside a `no_grad` region (checkpointing recomputes with it).
pub(crate) fn enable_grad() -> NoGradGuard {
    set_grad_enabled(true)
}

/// Whether `t` takes part in a graph (a leaf that requires grad or a recorded result).
pub(crate) fn tracked(t: &Tensor) -> bool {
    let m = t.autograd_meta();
    m.requires_grad || m.node.is_some()
}

/// Attaches a node to `out` when grad mode is on and an input requires grad; otherwise returns
/// `out` untouched, so untracked code pays one flag check per op.
pub(crate) fn record<F>(op: &'static str, out: Tensor, inputs: &[&Tensor], backward: F) -> Tensor
where
    F: Fn(&Tensor, &[bool]) -> Result<Vec<Option<Tensor>>> + Send + Sync + 'static,
{
    if !is_grad_enabled() || !matches!(out.dtype(), DType::F32 | DType::F16) {
        return out;
    }
    if !inputs.iter().any(|t| tracked(t)) {
        return out;
    }
    let node = Node {
        op,
        inputs: inputs.iter().map(|t| (*t).clone()).collect(),
        backward: Some(Box::new(backward)),
    };
    out.with_autograd(Meta {
        node: Some(Arc::new(node)),
        ..Meta::default()
    })
}

/// `a + b`, or `b` alone when nothing was there yet.
fn accumulate(slot: Option<Tensor>, g: Tensor) -> Result<Tensor> {
    match slot {
        Some(old) => old.add(&g),
        None => Ok(g),
    }
}

/// Adds `g` to a leaf's grad slot.
fn accumulate_leaf(leaf: &Tensor, g: Tensor) -> Result<()> {
    let mut slot = leaf
        .autograd_meta()
        .grad
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let old = slot.take();
    match accumulate(old.clone(), g) {
        Ok(sum) => {
            *slot = Some(sum);
            Ok(())
        }
        Err(e) => {
            *slot = old;
            Err(e)
        }
    }
}

fn node_key(n: &Arc<Node>) -> *const Node {
    Arc::as_ptr(n)
}

/// A gradient must match its tensor's shape and device: checked at every edge, so a wrong
/// backward formula is reported by name instead of corrupting a parameter's grad.
fn check_grad(op: &'static str, input: &Tensor, g: &Tensor) -> Result<()> {
    if g.shape() != input.shape() || g.device() != input.device() || g.dtype() != input.dtype() {
        return Err(Error::InvalidArgument {
            op: "backward",
            message: format!(
                "the gradient {op} produced is {:?} {} on {}, but its input is {:?} {} on {}",
                g.shape(),
                g.dtype(),
                g.device(),
                input.shape(),
                input.dtype(),
                input.device()
            ),
        });
    }
    Ok(())
}

/// Back-propagates `seed` (the gradient of `root`) to every leaf that requires grad.
pub(crate) fn run_backward(root: &Tensor, seed: Tensor) -> Result<()> {
    let _no_grad = no_grad();
    let Some(root_node) = root.autograd_meta().node.clone() else {
        return accumulate_leaf(root, seed);
    };
    // Count how many edges reach each node, so a node runs only once all its consumers have
    // contributed to its gradient (reverse topological order, Kahn's algorithm).
    let mut pending: HashMap<*const Node, usize> = HashMap::new();
    let mut stack = vec![root_node.clone()];
    let mut seen = std::collections::HashSet::new();
    seen.insert(node_key(&root_node));
    while let Some(n) = stack.pop() {
        for input in &n.inputs {
            if let Some(c) = &input.autograd_meta().node {
                *pending.entry(node_key(c)).or_default() += 1;
                if seen.insert(node_key(c)) {
                    stack.push(c.clone());
                }
            }
        }
    }
    let mut grads: HashMap<*const Node, Tensor> = HashMap::new();
    grads.insert(node_key(&root_node), seed);
    let mut ready = vec![root_node];
    while let Some(n) = ready.pop() {
        let needs: Vec<bool> = n.inputs.iter().map(tracked).collect();
        let in_grads = match (grads.remove(&node_key(&n)), &n.backward) {
            (Some(g), Some(backward)) => backward(&g, &needs)?,
            _ => vec![None; n.inputs.len()],
        };
        for (input, g) in n.inputs.iter().zip(in_grads) {
            let meta = input.autograd_meta();
            if let Some(g) = &g {
                check_grad(n.op, input, g)?;
            }
            if let Some(c) = &meta.node {
                let key = node_key(c);
                if let Some(g) = g {
                    let sum = accumulate(grads.remove(&key), g)?;
                    grads.insert(key, sum);
                }
                let left = pending.get_mut(&key).map(|p| {
                    *p -= 1;
                    *p
                });
                if left == Some(0) {
                    ready.push(c.clone());
                }
            } else if meta.requires_grad {
                if let Some(g) = g {
                    accumulate_leaf(input, g)?;
                }
            }
        }
    }
    Ok(())
}
