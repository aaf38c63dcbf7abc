//! `DataParallel`: one replica of a module per device, the batch split along dim 0, shards run
//! concurrently, outputs gathered on one device (PyTorch's `nn.DataParallel`).

use super::Module;
use crate::{Device, Error, Result, Tensor};
use std::path::Path;
use std::sync::Mutex;

/// Runs a module on several devices at once: [`forward`](Module::forward) splits the batch
/// (dim 0) into nearly equal shards (sizes differ by at most one; fewer devices are used when
/// the batch is smaller than the device list), moves shard `i` to device `i`, runs the replicas
/// on one thread each, moves the outputs to the output device and concatenates them. The result
/// equals a single-device run up to float rounding.
///
/// Training works as PyTorch's `nn.DataParallel`: the *primary* module lives on `devices()[0]`
/// and every forward builds the other replicas from the primary's current parameters with the
/// differentiable [`Tensor::to`]. A `backward` through the gathered output therefore sends each
/// replica's gradient back to the primary's device, where autograd sums it into the primary's
/// parameters (in an order fixed by the graph, so runs are deterministic): after `backward` the
/// primary holds the gradient of the whole batch. An optimizer stepping the `DataParallel` (or
/// the primary) updates the primary, and the next forward replicates the updated parameters.
///
/// Any mix of devices works: several adapters, the CPU next to a GPU, or two logical devices on
/// one adapter ([`Device::gpu_logical`]). The same device may also appear twice.
///
/// Parameters (for [`Module::named_parameters`], optimizers, saving, counting) are the
/// primary's. Parameters replaced by hand through `named_parameters_mut` reach the replicas at
/// the next forward.
///
/// ```
/// use wgtensor::nn::{DataParallel, Linear, Module, ReLU, Sequential};
/// use wgtensor::{Device, Tensor};
/// let cpu = Device::cpu();
/// let model = Sequential::new().add(Linear::new(4, 8, true, &cpu)?).add(ReLU);
/// let expected = model.forward(&Tensor::ones(&[5, 4], wgtensor::DType::F32, &cpu)?)?;
/// let mut devices = vec![cpu.clone()];
/// if let Ok(g) = Device::gpu(0) { devices.push(g); }
/// let dp = DataParallel::new(model, &devices, &cpu)?;
/// let y = dp.forward(&Tensor::ones(&[5, 4], wgtensor::DType::F32, &cpu)?)?;
/// assert_eq!(y.shape(), &[5, 8]);
/// assert!(y.device().is_cpu());
/// let (a, b) = (y.to_vec::<f32>()?, expected.to_vec::<f32>()?);
/// assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() < 1e-4));
/// # Ok::<(), wgtensor::Error>(())
/// ```
///
/// Gradients of the whole batch reach the primary:
///
/// ```
/// use wgtensor::nn::{DataParallel, Linear, Module};
/// use wgtensor::{DType, Device, Tensor};
/// let cpu = Device::cpu();
/// let linear = Linear::new(2, 1, false, &cpu)?;
/// let dp = DataParallel::new(linear, &[cpu.clone(), cpu.clone()], &cpu)?;
/// let x = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[2, 2], &cpu)?;
/// dp.forward(&x)?.sum_all()?.backward()?; // d(sum of x w^T)/dw = column sums of x
/// let g = dp.module().weight().grad().unwrap();
/// assert_eq!(g.to_vec::<f32>()?, vec![4.0, 6.0]);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Debug)]
pub struct DataParallel<M> {
    /// On `devices[0]`; the parameters optimizers see.
    primary: M,
    /// The replicas of the last forward on `devices[1..]`, detached from its graph (for
    /// [`DataParallel::replica`]; forward rebuilds them from the primary every time).
    others: Mutex<Vec<M>>,
    devices: Vec<Device>,
    output_device: Device,
}

/// A copy of `primary` whose parameters are `primary`'s moved to `device` with the recorded
/// [`Tensor::to`]: under grad mode, gradients of the copy flow back to `primary`'s parameters.
fn replicate<M: Module + Clone>(primary: &M, device: &Device) -> Result<M> {
    let source = primary.named_parameters();
    let mut r = primary.clone();
    for ((_, p), (_, s)) in r.named_parameters_mut().into_iter().zip(&source) {
        *p = s.to(device)?;
    }
    Ok(r)
}

/// `r` with every parameter a fresh leaf (no graph kept alive), as a stored replica.
fn detached<M: Module + Clone>(r: &M) -> M {
    let mut r = r.clone();
    for (_, p) in r.named_parameters_mut() {
        *p = super::keep_kind(p, p.detach());
    }
    r
}

impl<M: Module + Clone> DataParallel<M> {
    /// Makes `module` the primary on `devices[0]` (moving its parameters there), replicates it
    /// on the other devices, and gathers outputs on `output_device`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty device list; the errors of moving parameters.
    ///
    /// ```
    /// use wgtensor::nn::{DataParallel, Linear};
    /// use wgtensor::Device;
    /// let devices = [Device::cpu(), Device::cpu()];
    /// let dp = DataParallel::new(Linear::new(4, 2, true, &Device::cpu())?, &devices, &Device::cpu())?;
    /// assert_eq!(dp.devices().len(), 2);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn new(module: M, devices: &[Device], output_device: &Device) -> Result<DataParallel<M>> {
        let Some(first) = devices.first() else {
            return Err(Error::InvalidArgument {
                op: "DataParallel::new",
                message: "the device list is empty; pass at least one device".into(),
            });
        };
        let mut primary = module;
        primary.to(first)?;
        let dp = DataParallel {
            primary,
            others: Mutex::new(Vec::new()),
            devices: devices.to_vec(),
            output_device: output_device.clone(),
        };
        dp.refresh_others()?;
        Ok(dp)
    }

    /// Rebuilds the stored replicas from the primary (untracked).
    fn refresh_others(&self) -> Result<()> {
        let _no_grad = crate::no_grad();
        let others = self.devices[1..]
            .iter()
            .map(|d| replicate(&self.primary, d).map(|r| detached(&r)))
            .collect::<Result<Vec<M>>>()?;
        *self.others.lock().unwrap_or_else(|p| p.into_inner()) = others;
        Ok(())
    }

    /// The devices holding a replica, in shard order.
    ///
    /// ```
    /// # use wgtensor::nn::{DataParallel, ReLU};
    /// let dp = DataParallel::new(ReLU, &[wgtensor::Device::cpu()], &wgtensor::Device::cpu())?;
    /// assert!(dp.devices()[0].is_cpu());
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// Where [`Module::forward`] gathers its output.
    ///
    /// ```
    /// # use wgtensor::nn::{DataParallel, ReLU};
    /// let dp = DataParallel::new(ReLU, &[wgtensor::Device::cpu()], &wgtensor::Device::cpu())?;
    /// assert!(dp.output_device().is_cpu());
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn output_device(&self) -> &Device {
        &self.output_device
    }

    /// The primary module (on `devices()[0]`): the parameters that receive the gradients.
    ///
    /// ```
    /// # use wgtensor::nn::{DataParallel, Linear, Module};
    /// let cpu = wgtensor::Device::cpu();
    /// let dp = DataParallel::new(Linear::new(2, 2, true, &cpu)?, &[cpu.clone()], &cpu)?;
    /// assert_eq!(dp.module().num_parameters(), 6);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn module(&self) -> &M {
        &self.primary
    }

    /// A copy of the replica on `devices()[i]`: the primary for `i = 0`, otherwise the replica
    /// the last forward used (or [`DataParallel::sync_replicas`] made), detached from any graph.
    ///
    /// ```
    /// # use wgtensor::nn::{DataParallel, Linear, Module};
    /// let cpu = wgtensor::Device::cpu();
    /// let dp = DataParallel::new(Linear::new(2, 2, true, &cpu)?, &[cpu.clone(), cpu.clone()], &cpu)?;
    /// assert_eq!(dp.replica(1).unwrap().device(), Some(cpu));
    /// assert!(dp.replica(2).is_none());
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn replica(&self, i: usize) -> Option<M> {
        if i == 0 {
            return Some(self.primary.clone());
        }
        self.others
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(i - 1)
            .cloned()
    }

    /// The primary module, giving up the replicas.
    ///
    /// ```
    /// # use wgtensor::nn::{DataParallel, Linear};
    /// let cpu = wgtensor::Device::cpu();
    /// let dp = DataParallel::new(Linear::new(2, 2, true, &cpu)?, &[cpu.clone()], &cpu)?;
    /// let linear: Linear = dp.into_inner();
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn into_inner(self) -> M {
        self.primary
    }

    /// Copies the primary's parameters to the stored replicas now. Forward always replicates
    /// the primary's current parameters, so this only matters for inspecting
    /// [`DataParallel::replica`] between an optimizer step and the next forward.
    ///
    /// # Errors
    /// The errors of moving tensors between devices.
    ///
    /// ```
    /// use wgtensor::nn::{DataParallel, Linear, Module};
    /// use wgtensor::{DType, Device, Tensor};
    /// let cpu = Device::cpu();
    /// let mut dp = DataParallel::new(Linear::new(2, 1, false, &cpu)?, &[cpu.clone(), cpu.clone()], &cpu)?;
    /// for (_, p) in dp.named_parameters_mut() {
    ///     *p = Tensor::zeros(&[1, 2], DType::F32, &cpu)?; // e.g. an optimizer step
    /// }
    /// dp.sync_replicas()?;
    /// assert_eq!(dp.replica(1).unwrap().weight().to_vec::<f32>()?, vec![0.0, 0.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn sync_replicas(&mut self) -> Result<()> {
        self.refresh_others()
    }

    /// `[start, len)` of each shard of a batch of `n`: sizes differ by at most one, the larger
    /// ones first; at most one shard per device and none empty (one empty shard for `n = 0`).
    fn shards(&self, n: usize) -> Vec<(usize, usize)> {
        let k = self.devices.len().min(n).max(1);
        let (base, extra) = (n / k, n % k);
        let mut start = 0;
        (0..k)
            .map(|i| {
                let len = base + usize::from(i < extra);
                let s = (start, len);
                start += len;
                s
            })
            .collect()
    }
}

impl<M: Module + Clone> Module for DataParallel<M> {
    /// Splits `x` along dim 0, runs the shards concurrently, gathers the outputs.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a 0-d `x`; the first error (in shard order) of any
    /// replica or transfer, as it was returned.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if x.ndim() == 0 {
            return Err(Error::InvalidArgument {
                op: "DataParallel::forward",
                message: "the input is 0-d; DataParallel splits dim 0 (the batch)".into(),
            });
        }
        let shards = self.shards(x.shape()[0]);
        // Grad mode is per thread: the shard threads record exactly when the caller does.
        let grad = crate::is_grad_enabled();
        let run = |i: usize, (start, len): (usize, usize)| -> Result<(Tensor, Option<M>)> {
            let _mode = (!grad).then(crate::no_grad);
            let shard = x.narrow(0, start, len)?.to(&self.devices[i])?;
            if i == 0 {
                let y = self.primary.forward(&shard)?;
                return Ok((y.to(&self.output_device)?, None));
            }
            // Rebuilt from the primary every time, inside the graph, so gradients come back.
            let replica = replicate(&self.primary, &self.devices[i])?;
            let y = replica.forward(&shard)?;
            Ok((y.to(&self.output_device)?, Some(detached(&replica))))
        };
        let outputs: Vec<Result<(Tensor, Option<M>)>> = if shards.len() == 1 {
            vec![run(0, shards[0])]
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = shards
                    .iter()
                    .enumerate()
                    .map(|(i, &sh)| s.spawn(move || run(i, sh)))
                    .collect();
                handles
                    .into_iter()
                    .zip(&self.devices)
                    .map(|(h, d)| {
                        h.join().unwrap_or_else(|_| {
                            Err(Error::InvalidArgument {
                                op: "DataParallel::forward",
                                message: format!("the replica on {d} panicked"),
                            })
                        })
                    })
                    .collect()
            })
        };
        let outputs = outputs
            .into_iter()
            .collect::<Result<Vec<(Tensor, Option<M>)>>>()?;
        let (outputs, used): (Vec<Tensor>, Vec<Option<M>>) = outputs.into_iter().unzip();
        {
            let mut others = self.others.lock().unwrap_or_else(|p| p.into_inner());
            for (slot, r) in others.iter_mut().zip(used.into_iter().skip(1)) {
                if let Some(r) = r {
                    *slot = r;
                }
            }
        }
        if outputs.len() == 1 {
            return Ok(outputs.into_iter().next().expect("one output"));
        }
        let refs: Vec<&Tensor> = outputs.iter().collect();
        Tensor::cat(&refs, 0)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.primary.named_parameters()
    }

    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        self.primary.named_parameters_mut()
    }

    /// Refused: a `DataParallel`'s placement is its device list. Build a new one (from
    /// [`DataParallel::into_inner`]) to place it elsewhere.
    fn to(&mut self, device: &Device) -> Result<()> {
        Err(Error::InvalidArgument {
            op: "DataParallel::to",
            message: format!(
                "a DataParallel's replicas stay on their devices ({}); to move to {device}, \
                 call into_inner() and build a new DataParallel",
                self.devices
                    .iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
    }

    fn set_training(&mut self, training: bool) {
        self.primary.set_training(training);
        for r in self.others.get_mut().unwrap_or_else(|p| p.into_inner()) {
            r.set_training(training);
        }
    }

    /// Loads into the first replica (all or nothing), then copies to the others.
    fn load_weights(&mut self, path: &Path, device: &Device) -> Result<()> {
        let first = self.devices[0].clone();
        if device != &first {
            return Err(Error::InvalidArgument {
                op: "DataParallel::load_weights",
                message: format!(
                    "weights load onto the replicas' devices; pass {first} (the first), not {device}"
                ),
            });
        }
        self.primary.load_weights(path, &first)?;
        self.sync_replicas()
    }
}
