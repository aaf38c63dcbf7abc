//! Convolutional layers: `Conv2d`, `MaxPool2d`, `AvgPool2d`, `AdaptiveAvgPool2d`,
//! `BatchNorm2d` and `Flatten`, PyTorch's `nn` layers of the same names.

use super::{param, Module};
use crate::{Conv2dOptions, DType, Device, Error, Result, Tensor};
use std::sync::Mutex;

/// `U(-k, k)` with `k = 1 / sqrt(fan_in)` (PyTorch's default for conv and linear layers),
/// drawn on the host generator then moved to `device`.
fn uniform(shape: &[usize], fan_in: usize, device: &Device) -> Result<Tensor> {
    let k = 1.0 / (fan_in.max(1) as f32).sqrt();
    Tensor::rand(shape, &Device::cpu())?
        .mul_scalar(2.0 * k)?
        .sub_scalar(k)?
        .to(device)
}

/// 2-d convolution layer, PyTorch's `nn.Conv2d(in, out, kernel_size, stride, padding,
/// dilation, groups, bias)`: weight `[out, in / groups, kH, kW]`, bias `[out]`.
///
/// ```
/// use wgtensor::nn::{Conv2d, Module};
/// use wgtensor::{Conv2dOptions, Device, Tensor};
/// let d = Device::best();
/// let conv = Conv2d::new(3, 8, [3, 3], Conv2dOptions::default().padding(1), true, &d)?;
/// let y = conv.forward(&Tensor::randn(&[2, 3, 16, 16], &d)?)?;
/// assert_eq!(y.shape(), &[2, 8, 16, 16]);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Conv2d {
    weight: Tensor,
    bias: Option<Tensor>,
    opts: Conv2dOptions,
}

impl Conv2d {
    /// A layer with PyTorch's default initialisation on `device`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `groups` does not divide both channel counts or a
    /// size is zero; device errors.
    ///
    /// ```
    /// use wgtensor::nn::{Conv2d, Module};
    /// let c = Conv2d::new(4, 4, [3, 3], Default::default(), false, &wgtensor::Device::cpu())?;
    /// assert_eq!(c.num_parameters(), 4 * 4 * 9);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn new(
        in_channels: usize,
        out_channels: usize,
        kernel: [usize; 2],
        opts: Conv2dOptions,
        bias: bool,
        device: &Device,
    ) -> Result<Conv2d> {
        let g = opts.groups;
        if g == 0
            || !in_channels.is_multiple_of(g)
            || !out_channels.is_multiple_of(g)
            || kernel.contains(&0)
        {
            return Err(Error::InvalidArgument {
                op: "Conv2d::new",
                message: format!(
                    "in {in_channels}, out {out_channels}, kernel {kernel:?}, groups {g}: \
                     groups must divide both channel counts and sizes must be at least 1"
                ),
            });
        }
        let fan_in = in_channels / g * kernel[0] * kernel[1];
        let weight = uniform(
            &[out_channels, in_channels / g, kernel[0], kernel[1]],
            fan_in,
            device,
        )?;
        let bias = if bias {
            Some(param(uniform(&[out_channels], fan_in, device)?))
        } else {
            None
        };
        Ok(Conv2d {
            weight: param(weight),
            bias,
            opts,
        })
    }

    /// The weight, `[out, in / groups, kH, kW]`.
    ///
    /// ```
    /// let c = wgtensor::nn::Conv2d::new(2, 6, [5, 5], Default::default(), true, &wgtensor::Device::cpu())?;
    /// assert_eq!(c.weight().shape(), &[6, 2, 5, 5]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }
}

impl Module for Conv2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.conv2d(&self.weight, self.bias.as_ref(), &self.opts)
    }
    super::weight_and_bias_parameters!();
}

/// A layer with no parameters around a pooling or reshaping function.
macro_rules! stateless {
    ($name:ident) => {
        impl Module for $name {
            fn forward(&self, x: &Tensor) -> Result<Tensor> {
                self.apply(x)
            }
            fn named_parameters(&self) -> Vec<(String, Tensor)> {
                Vec::new()
            }
            fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
                Vec::new()
            }
        }
    };
}

/// A pooling layer over 2-D windows: the struct (kernel, optional stride, padding), `new` and
/// the `Module` impl calling the tensor method. Max and average pooling differ only in the
/// method and in what the padding holds.
macro_rules! pool2d {
    ($(#[$meta:meta])* $name:ident, $method:ident, $padding:literal) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug)]
        pub struct $name {
            /// Window size.
            pub kernel: [usize; 2],
            /// Step between windows (`None`: the kernel size).
            pub stride: Option<[usize; 2]>,
            #[doc = $padding]
            pub padding: [usize; 2],
        }

        impl $name {
            /// Non-overlapping windows of `kernel`, no padding.
            ///
            #[doc = concat!(
                "```\nassert_eq!(wgtensor::nn::",
                stringify!($name),
                "::new([2, 3]).kernel, [2, 3]);\n```"
            )]
            pub fn new(kernel: [usize; 2]) -> $name {
                $name {
                    kernel,
                    stride: None,
                    padding: [0, 0],
                }
            }
            fn apply(&self, x: &Tensor) -> Result<Tensor> {
                x.$method(self.kernel, self.stride, self.padding)
            }
        }
        stateless!($name);
    };
}

pool2d!(
    /// Max pooling, PyTorch's `nn.MaxPool2d(kernel_size, stride=kernel_size, padding)`.
    ///
    /// ```
    /// use wgtensor::nn::{MaxPool2d, Module};
    /// use wgtensor::{Device, Tensor};
    /// let y = MaxPool2d::new([2, 2]).forward(&Tensor::randn(&[1, 3, 8, 8], &Device::best())?)?;
    /// assert_eq!(y.shape(), &[1, 3, 4, 4]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    MaxPool2d,
    max_pool2d,
    "-inf added on each side."
);

pool2d!(
    /// Average pooling, PyTorch's `nn.AvgPool2d(kernel_size, stride=kernel_size, padding)`
    /// (padding counts as zeros).
    ///
    /// ```
    /// use wgtensor::nn::{AvgPool2d, Module};
    /// use wgtensor::{Device, Tensor};
    /// let y = AvgPool2d::new([2, 2]).forward(&Tensor::ones(&[1, 1, 4, 4], wgtensor::DType::F32, &Device::best())?)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![1.0; 4]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    AvgPool2d,
    avg_pool2d,
    "Zeros added on each side."
);

/// Adaptive average pooling to a fixed output size, PyTorch's `nn.AdaptiveAvgPool2d`.
///
/// ```
/// use wgtensor::nn::{AdaptiveAvgPool2d, Module};
/// use wgtensor::{Device, Tensor};
/// let y = AdaptiveAvgPool2d([1, 1]).forward(&Tensor::randn(&[2, 5, 7, 7], &Device::best())?)?;
/// assert_eq!(y.shape(), &[2, 5, 1, 1]);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct AdaptiveAvgPool2d(pub [usize; 2]);

impl AdaptiveAvgPool2d {
    fn apply(&self, x: &Tensor) -> Result<Tensor> {
        x.adaptive_avg_pool2d(self.0)
    }
}
stateless!(AdaptiveAvgPool2d);

/// Flattens dims `start..=end` into one, PyTorch's `nn.Flatten()` (`start = 1, end = -1`:
/// everything but the batch dim).
///
/// ```
/// use wgtensor::nn::{Flatten, Module};
/// use wgtensor::{Device, Tensor};
/// let y = Flatten::default().forward(&Tensor::randn(&[2, 3, 4, 5], &Device::cpu())?)?;
/// assert_eq!(y.shape(), &[2, 60]);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Flatten {
    /// First dim flattened.
    pub start: isize,
    /// Last dim flattened (inclusive).
    pub end: isize,
}

impl Default for Flatten {
    fn default() -> Self {
        Flatten { start: 1, end: -1 }
    }
}

impl Flatten {
    fn apply(&self, x: &Tensor) -> Result<Tensor> {
        let n = x.ndim().max(1) as isize;
        let norm = |d: isize| if d < 0 { d + n } else { d };
        let (s, e) = (norm(self.start), norm(self.end));
        if s < 0 || e >= n || s > e {
            return Err(Error::InvalidArgument {
                op: "Flatten::forward",
                message: format!(
                    "dims {}..={} do not fit a tensor of shape {:?}",
                    self.start,
                    self.end,
                    x.shape()
                ),
            });
        }
        let (s, e) = (s as usize, e as usize);
        let shape = x.shape();
        let mut out: Vec<usize> = shape[..s].to_vec();
        out.push(shape[s..=e].iter().product());
        out.extend(&shape[e + 1..]);
        x.reshape(&out)
    }
}
stateless!(Flatten);

/// Batch normalisation over `[N, C, H, W]` per channel, PyTorch's `nn.BatchNorm2d(C, eps,
/// momentum, affine, track_running_stats=True)`.
///
/// Training mode normalises with the batch's mean and (biased) variance and updates the
/// running statistics on the device (`running = (1 - momentum) * running + momentum * batch`,
/// the unbiased variance); eval mode uses the running statistics. The running statistics are
/// buffers: in `state_dict` as `running_mean` / `running_var`, moved by `to`, never given
/// gradients.
///
/// ```
/// use wgtensor::nn::{BatchNorm2d, Module};
/// use wgtensor::{Device, Tensor};
/// let d = Device::best();
/// let mut bn = BatchNorm2d::new(3, &d)?;
/// let x = Tensor::randn(&[8, 3, 4, 4], &d)?.mul_scalar(5.0)?.add_scalar(2.0)?;
/// let y = bn.forward(&x)?;
/// let m = y.mean_dims(&[0, 2, 3], false)?.to_vec::<f32>()?;
/// assert!(m.iter().all(|v| v.abs() < 1e-4));
/// bn.eval(); // now uses the running statistics
/// assert_eq!(bn.forward(&x)?.shape(), &[8, 3, 4, 4]);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Debug)]
pub struct BatchNorm2d {
    channels: usize,
    eps: f32,
    momentum: f32,
    weight: Option<Tensor>,
    bias: Option<Tensor>,
    /// Updated by forward (which takes `&self`), hence the locks.
    running_mean: Mutex<Tensor>,
    running_var: Mutex<Tensor>,
    training: bool,
}

impl Clone for BatchNorm2d {
    fn clone(&self) -> Self {
        BatchNorm2d {
            channels: self.channels,
            eps: self.eps,
            momentum: self.momentum,
            weight: self.weight.clone(),
            bias: self.bias.clone(),
            running_mean: Mutex::new(lock(&self.running_mean).clone()),
            running_var: Mutex::new(lock(&self.running_var).clone()),
            training: self.training,
        }
    }
}

fn lock(m: &Mutex<Tensor>) -> std::sync::MutexGuard<'_, Tensor> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl BatchNorm2d {
    /// PyTorch's defaults: `eps = 1e-5`, `momentum = 0.1`, affine, in training mode.
    ///
    /// # Errors
    /// Device errors.
    ///
    /// ```
    /// use wgtensor::nn::{BatchNorm2d, Module};
    /// let bn = BatchNorm2d::new(4, &wgtensor::Device::cpu())?;
    /// let names: Vec<String> = bn.state_dict().into_iter().map(|(n, _)| n).collect();
    /// assert_eq!(names, ["weight", "bias", "running_mean", "running_var"]);
    /// assert_eq!(bn.parameters().iter().filter(|p| p.requires_grad()).count(), 2);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn new(channels: usize, device: &Device) -> Result<BatchNorm2d> {
        BatchNorm2d::with_options(channels, 1e-5, 0.1, true, device)
    }

    /// `BatchNorm2d(channels, eps, momentum, affine)`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a negative `eps` or a `momentum` outside `[0, 1]`;
    /// device errors.
    ///
    /// ```
    /// let bn = wgtensor::nn::BatchNorm2d::with_options(4, 1e-3, 0.01, false, &wgtensor::Device::cpu())?;
    /// assert_eq!(bn.channels(), 4);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn with_options(
        channels: usize,
        eps: f32,
        momentum: f32,
        affine: bool,
        device: &Device,
    ) -> Result<BatchNorm2d> {
        if !(eps >= 0.0 && eps.is_finite() && (0.0..=1.0).contains(&momentum)) {
            return Err(Error::InvalidArgument {
                op: "BatchNorm2d::with_options",
                message: format!("eps ({eps}) must be >= 0 and momentum ({momentum}) in [0, 1]"),
            });
        }
        let (weight, bias) = super::norm::affine_params(channels, affine, device)?;
        Ok(BatchNorm2d {
            channels,
            eps,
            momentum,
            weight,
            bias,
            running_mean: Mutex::new(Tensor::zeros(&[channels], DType::F32, device)?),
            running_var: Mutex::new(Tensor::ones(&[channels], DType::F32, device)?),
            training: true,
        })
    }

    /// The number of channels.
    ///
    /// ```
    /// assert_eq!(wgtensor::nn::BatchNorm2d::new(6, &wgtensor::Device::cpu())?.channels(), 6);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// Forward by the CPU kernel (one pass for the statistics, one for the output, one
    /// autograd node) when the input, parameters and statistics are f32 CPU tensors; the
    /// running statistics are updated by tensor ops with the composition's arithmetic. `None`
    /// when the kernel does not apply.
    fn forward_cpu(&self, x: &Tensor) -> Result<Option<Tensor>> {
        let (w, b) = (self.weight.as_ref(), self.bias.as_ref());
        let (mut rm, mut rv) = (lock(&self.running_mean), lock(&self.running_var));
        let operands = [w, b, Some(&*rm), Some(&*rv)];
        if !x.batch_norm_on_cpu(&operands, w.is_some()) {
            return Ok(None);
        }
        if !self.training {
            return Ok(Some(x.batch_norm_cpu(operands, self.eps)?.0));
        }
        let (y, mean, var) = x.batch_norm_cpu([w, b, None, None], self.eps)?;
        let n = x.numel() / self.channels.max(1);
        let unbiased = n as f32 / (n.max(2) - 1) as f32;
        let m = self.momentum;
        // `r (1 - m) + s k` as tensor ops, each rounding as the scalar formula would: the
        // statistics stay tensors, never read back.
        let update = |old: &Tensor, batch: Vec<f32>, k: f32| -> Result<Tensor> {
            let batch = Tensor::from_vec(batch, &[self.channels], old.device())?;
            old.mul_scalar(1.0 - m)?.add(&batch.mul_scalar(k)?)
        };
        *rm = update(&rm, mean, m)?;
        *rv = update(&rv, var, m * unbiased)?;
        Ok(Some(y))
    }

    /// The running mean (a buffer), `[channels]`.
    ///
    /// ```
    /// let bn = wgtensor::nn::BatchNorm2d::new(2, &wgtensor::Device::cpu())?;
    /// assert_eq!(bn.running_mean().to_vec::<f32>()?, vec![0.0, 0.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn running_mean(&self) -> Tensor {
        lock(&self.running_mean).clone()
    }

    /// The running (unbiased) variance (a buffer), `[channels]`.
    ///
    /// ```
    /// let bn = wgtensor::nn::BatchNorm2d::new(2, &wgtensor::Device::cpu())?;
    /// assert_eq!(bn.running_var().to_vec::<f32>()?, vec![1.0, 1.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn running_var(&self) -> Tensor {
        lock(&self.running_var).clone()
    }
}

impl Module for BatchNorm2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let c = self.channels;
        if x.ndim() != 4 || x.shape()[1] != c {
            return Err(Error::ShapeMismatch {
                op: "BatchNorm2d::forward",
                lhs: x.shape().to_vec(),
                rhs: vec![0, c, 0, 0],
            });
        }
        if let Some(y) = self.forward_cpu(x)? {
            return Ok(y);
        }
        let dims = [0isize, 2, 3];
        let (mean, var) = if self.training {
            let mean = x.mean_dims(&dims, true)?;
            let centered = x.sub(&mean)?;
            let var = centered.mul(&centered)?.mean_dims(&dims, true)?;
            let _g = crate::no_grad();
            let n = x.numel() / c.max(1);
            let unbiased = n as f32 / (n.max(2) - 1) as f32;
            let m = self.momentum;
            let mut rm = lock(&self.running_mean);
            *rm = rm
                .mul_scalar(1.0 - m)?
                .add(&mean.detach().reshape(&[c])?.mul_scalar(m)?)?;
            let mut rv = lock(&self.running_var);
            *rv = rv
                .mul_scalar(1.0 - m)?
                .add(&var.detach().reshape(&[c])?.mul_scalar(m * unbiased)?)?;
            (mean, var)
        } else {
            (
                lock(&self.running_mean).reshape(&[1, c, 1, 1])?,
                lock(&self.running_var).reshape(&[1, c, 1, 1])?,
            )
        };
        let y = x.sub(&mean)?.div(&var.add_scalar(self.eps)?.sqrt()?)?;
        match (&self.weight, &self.bias) {
            (Some(w), Some(b)) => y
                .mul(&w.reshape(&[1, c, 1, 1])?)?
                .add(&b.reshape(&[1, c, 1, 1])?),
            _ => Ok(y),
        }
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut v = super::own_parameters([
            ("weight", self.weight.as_ref()),
            ("bias", self.bias.as_ref()),
        ]);
        v.push(("running_mean".to_string(), self.running_mean()));
        v.push(("running_var".to_string(), self.running_var()));
        v
    }

    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        let mut v = super::own_parameters_mut([
            ("weight", self.weight.as_mut()),
            ("bias", self.bias.as_mut()),
        ]);
        let rm = self
            .running_mean
            .get_mut()
            .unwrap_or_else(|p| p.into_inner());
        v.push(("running_mean".to_string(), rm));
        let rv = self
            .running_var
            .get_mut()
            .unwrap_or_else(|p| p.into_inner());
        v.push(("running_var".to_string(), rv));
        v
    }

    fn set_training(&mut self, training: bool) {
        self.training = training;
    }
}
