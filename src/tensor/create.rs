//! Creating tensors on the host or directly on a device.

use super::dispatch::create as make;
use super::Tensor;
use crate::ops::program::Dist;
use crate::shape::{numel_checked, numel_for};
use crate::storage::Storage;
use crate::{random, DType, Device, Error, Result, WithDType};

impl Tensor {
    /// A tensor holding `data` with `shape`, placed on `device` (uploaded if it is a GPU).
    ///
    /// # Errors
    /// [`Error::DataLength`] when `data.len()` is not the product of `shape`;
    /// [`Error::ShapeOverflow`] when that product overflows; GPU allocation errors.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], &Device::cpu())?;
    /// assert_eq!(t.shape(), &[2, 3]);
    /// assert!(Tensor::from_vec(vec![1f32, 2.0], &[3], &Device::cpu()).is_err());
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn from_vec<T: WithDType>(
        data: Vec<T>,
        shape: &[usize],
        device: &Device,
    ) -> Result<Tensor> {
        let len = data.len();
        from_host("from_vec", shape, len, T::DTYPE, device, || {
            make::from_vec("from_vec", data, device)
        })
    }

    /// Like [`Tensor::from_vec`], copying from a slice.
    ///
    /// ```
    /// let t = wgtensor::Tensor::from_slice(&[1i32, 2, 3], &[3], &wgtensor::Device::cpu())?;
    /// assert_eq!(t.to_vec::<i32>()?, vec![1, 2, 3]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn from_slice<T: WithDType>(
        data: &[T],
        shape: &[usize],
        device: &Device,
    ) -> Result<Tensor> {
        from_host("from_slice", shape, data.len(), T::DTYPE, device, || {
            make::from_slice("from_slice", data, device)
        })
    }

    /// A tensor of zeros (`torch.zeros(shape, dtype=dtype, device=device)`).
    ///
    /// ```
    /// use wgtensor::{DType, Device, Tensor};
    /// let t = Tensor::zeros(&[2, 2], DType::F32, &Device::cpu())?;
    /// assert_eq!(t.to_vec::<f32>()?, vec![0.0; 4]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn zeros(shape: &[usize], dtype: DType, device: &Device) -> Result<Tensor> {
        let n = numel_for(shape, dtype)?;
        let storage = make::zeros("zeros", n, dtype, device)?;
        Ok(Tensor::from_parts(storage, shape, dtype, device.clone()))
    }

    /// A tensor of ones.
    ///
    /// ```
    /// use wgtensor::{DType, Device, Tensor};
    /// let t = Tensor::ones(&[3], DType::F32, &Device::cpu())?;
    /// assert_eq!(t.to_vec::<f32>()?, vec![1.0; 3]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn ones(shape: &[usize], dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::filled("ones", shape, 1.0, dtype, device)
    }

    /// A tensor filled with `value` (converted to `dtype`). GPU tensors of every dtype are filled
    /// by a kernel on the device, without a host transfer. For integer dtypes `value` truncates
    /// toward zero and must then fit the dtype, as in `torch.full`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an integer dtype and a value out of its range (e.g. `1e20`
    /// for I32, `-1` for U8, NaN); out of memory.
    ///
    /// ```
    /// use wgtensor::{DType, Device, Tensor};
    /// let t = Tensor::full(&[2], 7.5, DType::F32, &Device::cpu())?;
    /// assert_eq!(t.to_vec::<f32>()?, vec![7.5, 7.5]);
    /// assert!(Tensor::full(&[2], -1.0, DType::U8, &Device::cpu()).is_err());
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn full(shape: &[usize], value: f64, dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::filled("full", shape, value, dtype, device)
    }

    /// `full` under the name of the public op that called it (for errors).
    fn filled(
        op: &'static str,
        shape: &[usize],
        value: f64,
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        let n = numel_for(shape, dtype)?;
        let (lo, hi) = match dtype {
            DType::F32 | DType::F16 => (f64::NEG_INFINITY, f64::INFINITY),
            DType::I32 => (i32::MIN as f64, i32::MAX as f64),
            DType::U32 => (0.0, u32::MAX as f64),
            DType::U8 => (0.0, 255.0),
        };
        // As `torch.full`: integer dtypes truncate toward zero, then the value must fit.
        let int = !matches!(dtype, DType::F32 | DType::F16);
        let value = if int { value.trunc() } else { value };
        if int && !(value >= lo && value <= hi) {
            return Err(Error::InvalidArgument {
                op,
                message: format!(
                    "{value} cannot be converted to {dtype} without overflow (the range is \
                     [{lo}, {hi}]); use a value in range or a float dtype"
                ),
            });
        }
        let storage = make::filled(op, n, value, dtype, device)?;
        Ok(Tensor::from_parts(storage, shape, dtype, device.clone()))
    }

    /// `[start, start + step, ...]` up to but excluding `end`, as f32 (`torch.arange`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `step` is zero or not finite, or points away from `end`.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let t = Tensor::arange(0.0, 5.0, 1.0, &Device::cpu())?;
    /// assert_eq!(t.to_vec::<f32>()?, vec![0.0, 1.0, 2.0, 3.0, 4.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn arange(start: f32, end: f32, step: f32, device: &Device) -> Result<Tensor> {
        let bad = |message: String| Error::InvalidArgument {
            op: "arange",
            message,
        };
        if step == 0.0 || !step.is_finite() || !start.is_finite() || !end.is_finite() {
            return Err(bad(format!(
                "start {start}, end {end} and step {step} must be finite and step non-zero"
            )));
        }
        if (end - start) * step < 0.0 {
            return Err(bad(format!(
                "step {step} points away from end {end} (start {start})"
            )));
        }
        let count = (((end as f64) - (start as f64)) / step as f64)
            .ceil()
            .max(0.0);
        // The allocation decides whether the count is too many (out of memory on the CPU, the
        // adapter's buffer limit on a GPU), as for every other way to make a tensor.
        let n = numel_for(&[count as usize], DType::F32)?;
        // The backend's kernel, or (a GPU) a generated program that fuses into its consumer.
        let Some(storage) = make::arange(n, start, step, device)? else {
            return super::fuse::arange_program(n, start, step, device);
        };
        Ok(Tensor::from_parts(
            storage,
            &[n],
            DType::F32,
            device.clone(),
        ))
    }

    /// Uniform samples in `[0, 1)` as f32 (`torch.rand`), from the global Philox generator (see
    /// [`crate::manual_seed`]): element `e` is a function of the seed and the generator's offset
    /// plus `e`, computed where the tensor lives (on a GPU by a kernel, with no upload), so a
    /// seed gives the same bits on every device.
    ///
    /// ```
    /// let t = wgtensor::Tensor::rand(&[100], &wgtensor::Device::cpu())?;
    /// assert!(t.to_vec::<f32>()?.iter().all(|&x| (0.0..1.0).contains(&x)));
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn rand(shape: &[usize], device: &Device) -> Result<Tensor> {
        Tensor::random("rand", Dist::Uniform, shape, device)
    }

    /// [`Tensor::rand`] drawn from `generator` instead of the global generator
    /// (`torch.rand(3, 4, generator=g)`): only `generator` advances, so the values depend on
    /// it alone, whatever else runs at the same time.
    ///
    /// ```
    /// use wgtensor::{Device, Generator, Tensor};
    /// let (mut a, mut b) = (Generator::new(7), Generator::new(7));
    /// let x = Tensor::rand_with(&[4], &Device::best(), &mut a)?;
    /// let y = Tensor::rand_with(&[4], &Device::best(), &mut b)?;
    /// assert_eq!(x.to_vec::<f32>()?, y.to_vec::<f32>()?);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn rand_with(
        shape: &[usize],
        device: &Device,
        generator: &mut random::Generator,
    ) -> Result<Tensor> {
        Tensor::random_from("rand", Dist::Uniform, shape, device, Some(generator))
    }

    /// Standard-normal samples as f32 (`torch.randn(3, 4, device=device)`); see [`Tensor::rand`].
    /// Box-Muller over two Philox words: the CPU and a GPU agree to the last bits of `ln`/`cos`.
    ///
    /// ```
    /// let t = wgtensor::Tensor::randn(&[3, 4], &wgtensor::Device::best())?;
    /// assert_eq!(t.shape(), &[3, 4]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn randn(shape: &[usize], device: &Device) -> Result<Tensor> {
        Tensor::random("randn", Dist::Normal, shape, device)
    }

    /// Integers uniform in `[low, high)` as I32 (`torch.randint`, which gives int64): drawn from
    /// the global generator like [`Tensor::rand`] (`low + floor(u * (high - low))` over the same
    /// 24-bit uniforms), so ranges up to 2^24 are exactly uniform up to 2^-24.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless `low < high` and the range is at most 2^24.
    ///
    /// ```
    /// let t = wgtensor::Tensor::randint(3, 7, &[100], &wgtensor::Device::best())?;
    /// assert!(t.to_vec::<i32>()?.iter().all(|&v| (3..7).contains(&v)));
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn randint(low: i32, high: i32, shape: &[usize], device: &Device) -> Result<Tensor> {
        let range = high as i64 - low as i64;
        if range <= 0 || range > 1 << 24 {
            return Err(Error::InvalidArgument {
                op: "randint",
                message: format!(
                    "low {low} must be below high {high}, at most 2^24 apart; draw floats with \
                     Tensor::rand for wider ranges"
                ),
            });
        }
        // u * range can round up to range itself: clamped to the last value.
        Tensor::rand(shape, device)?
            .mul_scalar(range as f32)?
            .minimum_scalar((range - 1) as f32)?
            .to_dtype(DType::I32)?
            .add_scalar(low as f32)
    }

    /// Samples 1 with probability `self` (elementwise), else 0, in `self`'s float dtype
    /// (`torch.bernoulli`): `rand < p`, from the global generator.
    ///
    /// ```
    /// use wgtensor::{DType, Device, Tensor};
    /// let p = Tensor::full(&[1000], 0.25, DType::F32, &Device::best())?;
    /// let ones = p.bernoulli()?.sum_all()?.to_scalar::<f32>()?;
    /// assert!(ones > 150.0 && ones < 350.0);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn bernoulli(&self) -> Result<Tensor> {
        let u = Tensor::rand(self.shape(), self.device())?;
        let p = self.to_dtype(DType::F32)?;
        u.lt(&p)?.to_dtype(self.dtype())
    }

    /// `n` random f32 of `dist` at the generator's next offsets: computed on the host for the
    /// CPU, by a generated kernel (no upload, fused into consumers) on a GPU.
    fn random(op: &'static str, dist: Dist, shape: &[usize], device: &Device) -> Result<Tensor> {
        Tensor::random_from(op, dist, shape, device, None)
    }

    /// [`Tensor::random`] drawing from `generator` (`None`: the global one).
    fn random_from(
        op: &'static str,
        dist: Dist,
        shape: &[usize],
        device: &Device,
        generator: Option<&mut random::Generator>,
    ) -> Result<Tensor> {
        let n = numel_for(shape, DType::F32)?;
        let (seed, offset) = match generator {
            Some(g) => g.take(n),
            None => random::take(n),
        };
        let Some(storage) = make::random(dist, seed, offset, n, device)? else {
            let words = [
                seed as u32,
                (seed >> 32) as u32,
                offset as u32,
                (offset >> 32) as u32,
            ];
            return super::fuse::random_program(op, dist, words, shape, device);
        };
        Ok(Tensor::from_parts(
            storage,
            shape,
            DType::F32,
            device.clone(),
        ))
    }
}

/// A tensor of `shape` from `len` host values that `make` stores on `device`, after checking
/// that `shape` holds exactly `len` elements (nothing is stored when it does not).
fn from_host(
    op: &'static str,
    shape: &[usize],
    len: usize,
    dtype: DType,
    device: &Device,
    make: impl FnOnce() -> Result<Storage>,
) -> Result<Tensor> {
    check_len(op, shape, len)?;
    Ok(Tensor::from_parts(make()?, shape, dtype, device.clone()))
}

/// `shape`'s element count is `len`, or the error of `op` naming both.
fn check_len(op: &'static str, shape: &[usize], len: usize) -> Result<()> {
    let expected = numel_checked(shape)?;
    if len != expected {
        return Err(Error::DataLength {
            op,
            shape: shape.to_vec(),
            expected,
            actual: len,
        });
    }
    Ok(())
}
