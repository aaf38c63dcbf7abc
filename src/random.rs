//! The global random generator behind `rand`/`randn` (PyTorch's default generator).
//!
//! Numbers are drawn on the host and then placed on the target device, so one seed gives the same
//! tensor on every device: a CPU run and a GPU run of the same program start from the same values.

use rand::{rngs::StdRng, SeedableRng};
use std::sync::{Mutex, OnceLock};

/// PyTorch's default CPU seed: programs are reproducible until they seed otherwise.
const DEFAULT_SEED: u64 = 67_280_421_310_721;

fn generator() -> &'static Mutex<StdRng> {
    static RNG: OnceLock<Mutex<StdRng>> = OnceLock::new();
    RNG.get_or_init(|| Mutex::new(StdRng::seed_from_u64(DEFAULT_SEED)))
}

/// Seeds the generator used by [`crate::Tensor::rand`] and [`crate::Tensor::randn`]
/// (PyTorch's `torch.manual_seed`).
///
/// ```
/// use wgtensor::{Device, Tensor};
/// wgtensor::manual_seed(42);
/// let a = Tensor::randn(&[3], &Device::cpu())?.to_vec::<f32>()?;
/// wgtensor::manual_seed(42);
/// let b = Tensor::randn(&[3], &Device::cpu())?.to_vec::<f32>()?;
/// assert_eq!(a, b);
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub fn manual_seed(seed: u64) {
    let mut g = generator().lock().unwrap_or_else(|p| p.into_inner());
    *g = StdRng::seed_from_u64(seed);
}

/// Draws `n` values from `dist` with the global generator.
pub(crate) fn sample<D: rand::distr::Distribution<f32>>(n: usize, dist: D) -> Vec<f32> {
    let mut g = generator().lock().unwrap_or_else(|p| p.into_inner());
    (0..n).map(|_| dist.sample(&mut *g)).collect()
}
