//! The global random generator (PyTorch's default generator), counter-based: Philox4x32-10, the
//! generator PyTorch uses on CUDA.
//!
//! The state is a seed and an offset. A random op of `n` elements takes the offsets
//! `offset..offset + n` and advances the state; element `e` is a pure function of
//! `(seed, offset + e)`. So the same values come out on the CPU (`src/cpu/normal.rs`) and on every GPU (the
//! same function in `shaders/common.wgsl`, evaluated inside generated kernels, with no upload),
//! and a computation can be replayed by restoring the state (`nn::Checkpoint` does, so a
//! checkpointed `Dropout` draws the same mask when it recomputes).

use crate::cpu::normal::words;
use std::sync::Mutex;

/// PyTorch's default CPU seed: programs are reproducible until they seed otherwise.
const DEFAULT_SEED: u64 = 67_280_421_310_721;

/// `(seed, offset)` of the global generator.
static STATE: Mutex<(u64, u64)> = Mutex::new((DEFAULT_SEED, 0));

fn state_lock() -> std::sync::MutexGuard<'static, (u64, u64)> {
    // The state is two integers replaced together: a poisoned lock still holds a valid state.
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Seeds the generator used by [`crate::Tensor::rand`], [`crate::Tensor::randn`],
/// [`crate::Tensor::randint`], [`crate::Tensor::bernoulli`] and `nn::Dropout`
/// (PyTorch's `torch.manual_seed`). One seed gives the same numbers on every device.
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
    *state_lock() = (seed, 0);
}

/// The generator state, to replay a computation later ([`set_state`]).
pub(crate) fn state() -> (u64, u64) {
    *state_lock()
}

/// Restores a state returned by [`state`].
pub(crate) fn set_state(s: (u64, u64)) {
    *state_lock() = s;
}

/// Takes `n` offsets: returns `(seed, first offset)` and advances the state past them.
pub(crate) fn take(n: usize) -> (u64, u64) {
    let mut s = state_lock();
    let out = *s;
    s.1 = s.1.wrapping_add(n as u64);
    out
}

/// A generator of its own (PyTorch's `torch.Generator`): a seed and an offset that only the
/// calls given it advance, so a computation seeded with one draws the same numbers whatever
/// other threads draw from the global generator or from theirs at the same time.
/// [`crate::Tensor::rand_with`] takes it; the numbers are those the global generator gives
/// after [`manual_seed`] with the same seed (the same Philox counters).
///
/// ```
/// use wgtensor::{Device, Generator, Tensor};
/// let dev = Device::cpu();
/// let mut g = Generator::new(42);
/// let a = Tensor::rand_with(&[3], &dev, &mut g)?.to_vec::<f32>()?;
/// wgtensor::manual_seed(42);
/// assert_eq!(a, Tensor::rand(&[3], &dev)?.to_vec::<f32>()?);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Generator {
    seed: u64,
    offset: u64,
}

impl Generator {
    /// A generator at the start of `seed`'s stream.
    pub fn new(seed: u64) -> Generator {
        Generator { seed, offset: 0 }
    }

    /// The seed it was made with.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Takes `n` offsets: returns `(seed, first offset)` and advances past them (as [`take`]).
    pub(crate) fn take(&mut self, n: usize) -> (u64, u64) {
        let out = (self.seed, self.offset);
        self.offset = self.offset.wrapping_add(n as u64);
        out
    }
}

/// `0..len` shuffled (Fisher-Yates) by Philox keyed with `seed`, counter starting at `epoch`'s
/// block: the same order on every machine, independent of the global generator (so data
/// loading and sharding never shift `rand` streams).
pub(crate) fn permutation(len: usize, seed: u64, epoch: u64) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..len).collect();
    let base = epoch << 40;
    for i in (1..len).rev() {
        let w = words(seed, base, i as u64);
        let r = (u64::from(w[1]) << 32) | u64::from(w[0]);
        // Multiply-shift maps 64 random bits onto 0..=i without modulo bias to speak of.
        let j = ((u128::from(r) * (i as u128 + 1)) >> 64) as usize;
        idx.swap(i, j);
    }
    idx
}
