//! Gradient checkpointing (PyTorch's `torch.utils.checkpoint`): trade compute for memory.

use super::Module;
use crate::autograd::{self, record};
use crate::{DType, Device, Result, Tensor};

/// Runs the wrapped module without keeping its intermediate activations: the forward runs under
/// [`crate::no_grad`] and records a single node; backward recomputes the module's forward with
/// grad enabled from a detached copy of the input and back-propagates through it, which gives
/// the input's gradient and adds the parameters' gradients. Activation memory drops from the
/// whole module's to its output's, at the cost of one more forward.
///
/// Wrap several segments of a deep model (each a [`super::Sequential`]) so that only one
/// segment's activations exist at a time. Parameter names are the inner module's, so weights
/// load the same with or without checkpointing.
///
/// The recomputation replays the random generator's state from before the forward (PyTorch's
/// `preserve_rng_state`), so a checkpointed Dropout draws the same mask twice and the gradients
/// equal those of the module run without checkpointing.
///
/// ```
/// use wgtensor::nn::{Checkpoint, Linear, Module, ReLU, Sequential};
/// use wgtensor::{Device, Tensor};
/// let d = Device::cpu();
/// let block = Sequential::new().add(Linear::new(4, 4, true, &d)?).add(ReLU);
/// let model = Sequential::new().add(Checkpoint::new(block)).add(Linear::new(4, 1, true, &d)?);
/// model.forward(&Tensor::randn(&[3, 4], &d)?)?.sum_all()?.backward()?;
/// assert!(model.parameters().iter().all(|p| p.grad().is_some()));
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Checkpoint<M> {
    inner: M,
}

impl<M: Module + Clone + 'static> Checkpoint<M> {
    /// Wraps `module`.
    pub fn new(module: M) -> Checkpoint<M> {
        Checkpoint { inner: module }
    }

    /// The wrapped module.
    pub fn inner(&self) -> &M {
        &self.inner
    }
}

impl<M: Module + Clone + 'static> Module for Checkpoint<M> {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let params = self.inner.parameters();
        let tracked = x.requires_grad() || params.iter().any(|p| p.requires_grad());
        if !autograd::is_grad_enabled() || !tracked {
            return self.inner.forward(x);
        }
        // The generator state before the forward: the recompute replays it, so random layers
        // (Dropout) draw the same masks (PyTorch's `preserve_rng_state`).
        let rng = crate::random::state();
        let out = autograd::no_grad_scope(|| self.inner.forward(x))?;
        // The module (cheap: its tensors are shared) recomputes in backward; the parameters
        // are inputs of the node only so that it is recorded when `x` needs no grad: their
        // gradients are accumulated by the inner backward directly.
        let module = self.inner.clone();
        let x_saved = x.clone();
        let mut inputs: Vec<&Tensor> = vec![x];
        inputs.extend(params.iter());
        Ok(record("checkpoint", out, &inputs, move |g, needs| {
            let _grad = autograd::enable_grad();
            let x = x_saved.detach().requires_grad_(needs[0]);
            let now = crate::random::state();
            crate::random::set_state(rng);
            let y = module.forward(&x);
            crate::random::set_state(now);
            let y = y?;
            let mut grads = vec![None; needs.len()];
            if y.requires_grad() {
                y.backward_with(g)?;
                if needs[0] {
                    grads[0] = x.grad();
                }
            }
            Ok(grads)
        }))
    }

    super::delegate_to_inner!(inner);

    fn dtype(&self) -> Option<DType> {
        self.inner.dtype()
    }
}
