//! `DataParallel`: one replica of a module per device, the batch split along dim 0, shards run
//! concurrently, outputs gathered on one device (PyTorch's `nn.DataParallel`).

use super::Module;
use crate::{Device, Error, Result, Tensor};
use std::path::Path;

/// Runs a module on several devices at once: [`forward`](Module::forward) splits the batch
/// (dim 0) into nearly equal shards (sizes differ by at most one; fewer devices are used when
/// the batch is smaller than the device list), moves shard `i` to device `i`, runs the replicas
/// on one thread each, moves the outputs to the output device and concatenates them. The result
/// equals a single-device run up to float rounding.
///
/// Any mix of devices works: several adapters, the CPU next to a GPU, or two logical devices on
/// one adapter ([`Device::gpu_logical`]). The same device may also appear twice.
///
/// Parameters (for [`Module::named_parameters`], saving, counting) are the first replica's.
/// Weights loaded with [`Module::load_weights`] reach every replica; parameters replaced by hand
/// through `named_parameters_mut` reach only the first until [`DataParallel::sync_replicas`].
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
#[derive(Debug)]
pub struct DataParallel<M> {
    replicas: Vec<M>,
    devices: Vec<Device>,
    output_device: Device,
}

impl<M: Module + Clone> DataParallel<M> {
    /// Replicates `module` on every device of `devices` (moving its parameters there) and
    /// gathers outputs on `output_device`.
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
        if devices.is_empty() {
            return Err(Error::InvalidArgument {
                op: "DataParallel::new",
                message: "the device list is empty; pass at least one device".into(),
            });
        }
        let mut replicas = Vec::with_capacity(devices.len());
        for d in devices {
            let mut r = module.clone();
            r.to(d)?;
            replicas.push(r);
        }
        Ok(DataParallel {
            replicas,
            devices: devices.to_vec(),
            output_device: output_device.clone(),
        })
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

    /// The first replica (on `devices()[0]`).
    ///
    /// ```
    /// # use wgtensor::nn::{DataParallel, Linear, Module};
    /// let cpu = wgtensor::Device::cpu();
    /// let dp = DataParallel::new(Linear::new(2, 2, true, &cpu)?, &[cpu.clone()], &cpu)?;
    /// assert_eq!(dp.module().num_parameters(), 6);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn module(&self) -> &M {
        &self.replicas[0]
    }

    /// The replica on `devices()[i]`.
    ///
    /// ```
    /// # use wgtensor::nn::{DataParallel, Linear, Module};
    /// let cpu = wgtensor::Device::cpu();
    /// let dp = DataParallel::new(Linear::new(2, 2, true, &cpu)?, &[cpu.clone(), cpu.clone()], &cpu)?;
    /// assert_eq!(dp.replica(1).unwrap().device(), Some(cpu));
    /// assert!(dp.replica(2).is_none());
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn replica(&self, i: usize) -> Option<&M> {
        self.replicas.get(i)
    }

    /// The first replica, giving up the others.
    ///
    /// ```
    /// # use wgtensor::nn::{DataParallel, Linear};
    /// let cpu = wgtensor::Device::cpu();
    /// let dp = DataParallel::new(Linear::new(2, 2, true, &cpu)?, &[cpu.clone()], &cpu)?;
    /// let linear: Linear = dp.into_inner();
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn into_inner(mut self) -> M {
        self.replicas.swap_remove(0)
    }

    /// Copies the first replica's parameters to every other replica (each on its own device):
    /// needed after changing them through `named_parameters_mut` (an optimizer step).
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
        let (first, rest) = self.replicas.split_at_mut(1);
        let source = first[0].named_parameters();
        for (r, d) in rest.iter_mut().zip(&self.devices[1..]) {
            for ((_, p), (_, s)) in r.named_parameters_mut().into_iter().zip(&source) {
                *p = super::param(s.to(d)?);
            }
        }
        Ok(())
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
        let run = |i: usize, (start, len): (usize, usize)| -> Result<Tensor> {
            let shard = x.narrow(0, start, len)?.to(&self.devices[i])?;
            let y = self.replicas[i].forward(&shard)?;
            y.to(&self.output_device)
        };
        let outputs: Vec<Result<Tensor>> = if shards.len() == 1 {
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
        let outputs = outputs.into_iter().collect::<Result<Vec<Tensor>>>()?;
        if outputs.len() == 1 {
            return Ok(outputs.into_iter().next().expect("one output"));
        }
        let refs: Vec<&Tensor> = outputs.iter().collect();
        Tensor::cat(&refs, 0)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.replicas[0].named_parameters()
    }

    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        self.replicas[0].named_parameters_mut()
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
        for r in &mut self.replicas {
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
        self.replicas[0].load_weights(path, &first)?;
        self.sync_replicas()
    }
}
