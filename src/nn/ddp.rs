//! `DistributedDataParallel`: one replica per process (PyTorch's `nn.parallel.DistributedDataParallel`).

use super::Module;
use crate::distributed::{ProcessGroup, ReduceOp};
use crate::{DType, Device, Result, Tensor};
use std::path::Path;
use std::sync::Arc;

/// The default gradient bucket: 25 MiB, as PyTorch's `bucket_cap_mb`.
pub const DEFAULT_BUCKET_BYTES: usize = 25 << 20;

/// Trains one model replica per process of a [`ProcessGroup`], each on its own shard of the
/// data (see [`crate::distributed::DistributedSampler`]).
///
/// Construction broadcasts rank 0's parameters, so every rank starts equal.
/// [`DistributedDataParallel::backward`] runs the local backward, then averages every gradient
/// over the ranks: the gradients are packed, per device and dtype, into buckets of at most
/// [`DistributedDataParallel::bucket_bytes`] (25 MiB by default), and each bucket is averaged with
/// one non-blocking all-reduce; with overlap on (the default) all buckets are in flight while the
/// next ones are packed and read back. Every rank then holds the same averaged gradient, so the
/// same optimizer step keeps the parameters bit-identical across ranks.
/// [`DistributedDataParallel::no_sync`] skips the averaging for gradient accumulation.
///
/// A parameter without a gradient on this rank takes part with zeros (the ranks' buckets must
/// match).
///
/// ```no_run
/// use std::sync::Arc;
/// use wgtensor::distributed::ProcessGroup;
/// use wgtensor::nn::{DistributedDataParallel, Linear, Module};
/// use wgtensor::optim::{Optimizer, Sgd};
/// use wgtensor::{Device, Tensor};
/// let group = Arc::new(ProcessGroup::init()?);
/// let device = Device::cpu();
/// let mut ddp = DistributedDataParallel::new(Linear::new(4, 1, true, &device)?, group)?;
/// let mut opt = Sgd::new(0.1);
/// let x = Tensor::randn(&[8, 4], &device)?; // this rank's shard of the batch
/// opt.zero_grad(&ddp);
/// let loss = ddp.forward(&x)?.pow_scalar(2.0)?.mean_all()?;
/// ddp.backward(&loss)?; // local backward + gradients averaged over the ranks
/// opt.step(&mut ddp)?;
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Debug)]
pub struct DistributedDataParallel<M> {
    module: M,
    group: Arc<ProcessGroup>,
    bucket_bytes: usize,
    overlap: bool,
    sync: bool,
}

impl<M: Module> DistributedDataParallel<M> {
    /// Wraps `module` (already on this rank's device) and replaces its parameters with rank
    /// 0's. Every rank must call it with the same architecture.
    ///
    /// # Errors
    /// [`crate::Error::Distributed`] when the ranks' parameters differ in dtype or shape, or a rank
    /// does not take part within the timeout.
    pub fn new(mut module: M, group: Arc<ProcessGroup>) -> Result<DistributedDataParallel<M>> {
        for (_, p) in module.named_parameters_mut() {
            let from_rank0 = {
                let _g = crate::no_grad();
                group.broadcast(&p.detach(), 0)?
            };
            *p = if p.requires_grad() {
                super::param(from_rank0)
            } else {
                from_rank0
            };
        }
        Ok(DistributedDataParallel {
            module,
            group,
            bucket_bytes: DEFAULT_BUCKET_BYTES,
            overlap: true,
            sync: true,
        })
    }

    /// Sets the bucket size in bytes (at least one gradient always goes in a bucket).
    #[must_use]
    pub fn with_bucket_bytes(mut self, bytes: usize) -> DistributedDataParallel<M> {
        self.bucket_bytes = bytes.max(1);
        self
    }

    /// Turns the overlap of buckets on (default) or off (one blocking all-reduce per bucket).
    #[must_use]
    pub fn with_overlap(mut self, overlap: bool) -> DistributedDataParallel<M> {
        self.overlap = overlap;
        self
    }

    /// The bucket size in bytes.
    pub fn bucket_bytes(&self) -> usize {
        self.bucket_bytes
    }

    /// The wrapped module.
    pub fn module(&self) -> &M {
        &self.module
    }

    /// The wrapped module, mutably.
    pub fn module_mut(&mut self) -> &mut M {
        &mut self.module
    }

    /// The wrapped module, giving up the wrapper.
    pub fn into_inner(self) -> M {
        self.module
    }

    /// The process group.
    pub fn group(&self) -> &Arc<ProcessGroup> {
        &self.group
    }

    /// Runs `f` without averaging gradients in [`DistributedDataParallel::backward`]
    /// (PyTorch's `with ddp.no_sync():`): accumulate local gradients over several
    /// micro-batches, then run one synchronized backward outside.
    pub fn no_sync<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        let prev = std::mem::replace(&mut self.sync, false);
        let out = f(self);
        self.sync = prev;
        out
    }

    /// `loss.backward()`, then (outside [`DistributedDataParallel::no_sync`])
    /// [`DistributedDataParallel::sync_gradients`].
    ///
    /// # Errors
    /// The errors of backward and of the all-reduces.
    pub fn backward(&self, loss: &Tensor) -> Result<()> {
        loss.backward()?;
        if self.sync {
            self.sync_gradients()?;
        }
        Ok(())
    }

    /// Replaces every parameter's gradient with its average over the ranks, bucket by bucket.
    ///
    /// # Errors
    /// [`crate::Error::Distributed`] when the ranks' buckets differ or a rank does not take part in
    /// time; the errors of the tensor ops.
    pub fn sync_gradients(&self) -> Result<()> {
        let _g = crate::no_grad();
        let params = self.module.parameters();
        let grads = params
            .iter()
            .map(|p| match p.grad() {
                Some(g) => Ok(g),
                None => Tensor::zeros(p.shape(), p.dtype(), p.device()),
            })
            .collect::<Result<Vec<Tensor>>>()?;
        let buckets = buckets(&grads, self.bucket_bytes);
        let group = &*self.group;
        let mut results: Vec<Tensor> = Vec::with_capacity(buckets.len());
        if self.overlap {
            let mut works = Vec::with_capacity(buckets.len());
            for b in &buckets {
                let flat = flatten(&grads, b)?;
                works.push(group.all_reduce_async(&flat, ReduceOp::Mean)?);
                // Drive the earlier buckets while this one is packed and read back.
                for w in &mut works {
                    w.is_completed()?;
                }
            }
            for w in works {
                results.push(w.wait()?);
            }
        } else {
            for b in &buckets {
                results.push(group.all_reduce(&flatten(&grads, b)?, ReduceOp::Mean)?);
            }
        }
        for (b, flat) in buckets.iter().zip(results) {
            let mut at = 0;
            for &i in b {
                let n = grads[i].numel();
                let g = flat.narrow(0, at, n)?.reshape(grads[i].shape())?;
                params[i].set_grad(Some(g))?;
                at += n;
            }
        }
        Ok(())
    }
}

/// Groups gradient indices into buckets of one device and dtype, at most `cap` bytes each
/// (a larger gradient gets a bucket of its own), in parameter order.
fn buckets(grads: &[Tensor], cap: usize) -> Vec<Vec<usize>> {
    let mut out: Vec<(Device, DType, usize, Vec<usize>)> = Vec::new();
    let mut open: Vec<usize> = Vec::new(); // indices into `out` of buckets still filling
    for (i, g) in grads.iter().enumerate() {
        let bytes = g.numel() * g.dtype().size_in_bytes();
        let slot = open.iter().position(|&k| {
            let (d, t, used, _) = &out[k];
            d == g.device() && *t == g.dtype() && used + bytes <= cap
        });
        match slot {
            Some(s) => {
                let b = &mut out[open[s]];
                b.2 += bytes;
                b.3.push(i);
            }
            None => {
                // A full bucket of this kind closes; a new one opens.
                open.retain(|&k| !(out[k].0 == *g.device() && out[k].1 == g.dtype()));
                open.push(out.len());
                out.push((g.device().clone(), g.dtype(), bytes, vec![i]));
            }
        }
    }
    out.into_iter().map(|(_, _, _, b)| b).collect()
}

/// The bucket's gradients as one 1-d tensor on their device.
fn flatten(grads: &[Tensor], bucket: &[usize]) -> Result<Tensor> {
    let flat = bucket
        .iter()
        .map(|&i| grads[i].reshape(&[grads[i].numel()]))
        .collect::<Result<Vec<Tensor>>>()?;
    if flat.len() == 1 {
        return Ok(flat.into_iter().next().expect("one gradient"));
    }
    let refs: Vec<&Tensor> = flat.iter().collect();
    Tensor::cat(&refs, 0)
}

impl<M: Module> Module for DistributedDataParallel<M> {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.module.forward(x)
    }

    super::delegate_to_inner!(module);

    fn load_weights(&mut self, path: &Path, device: &Device) -> Result<()> {
        self.module.load_weights(path, device)
    }
}
