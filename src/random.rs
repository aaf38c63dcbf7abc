//! The global random generator (PyTorch's default generator), counter-based: Philox4x32-10, the
//! generator PyTorch uses on CUDA.
//!
//! The state is a seed and an offset. A random op of `n` elements takes the offsets
//! `offset..offset + n` and advances the state; element `e` is a pure function of
//! `(seed, offset + e)`. So the same values come out on the CPU (this file) and on every GPU (the
//! same function in `shaders/common.wgsl`, evaluated inside generated kernels, with no upload),
//! and a computation can be replayed by restoring the state (`nn::Checkpoint` does, so a
//! checkpointed `Dropout` draws the same mask when it recomputes).

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

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// Philox4x32-10 (Salmon et al., Random123): 10 rounds of multiply-xor over a 128-bit counter.
/// `shaders/common.wgsl::philox` is the same function.
pub(crate) fn philox(mut c: [u32; 4], mut k: [u32; 2]) -> [u32; 4] {
    for round in 0..10 {
        if round > 0 {
            k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
        }
        let p0 = M0 as u64 * c[0] as u64;
        let p1 = M1 as u64 * c[2] as u64;
        let (hi0, lo0) = ((p0 >> 32) as u32, p0 as u32);
        let (hi1, lo1) = ((p1 >> 32) as u32, p1 as u32);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
    }
    c
}

/// The four words of element `e` of an op that took offsets from `offset` with `seed`.
#[inline]
pub(crate) fn words(seed: u64, offset: u64, e: u64) -> [u32; 4] {
    let c = offset.wrapping_add(e);
    philox(
        [c as u32, (c >> 32) as u32, 0, 0],
        [seed as u32, (seed >> 32) as u32],
    )
}

/// A word as a uniform f32 in `[0, 1)`: its low 24 bits times 2^-24 (exact; PyTorch's recipe).
#[inline]
pub(crate) fn uniform(w: u32) -> f32 {
    (w & 0xFF_FFFF) as f32 * (1.0 / 16_777_216.0)
}

/// Two words as a standard normal f32: Box-Muller in integer fixed point
/// (`cpu/normal.rs`, the twin of `shaders/normal.wgsl`), the same bits on every device.
#[inline]
pub(crate) fn normal(w0: u32, w1: u32) -> f32 {
    crate::cpu::normal::normal(w0, w1)
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

/// Which distribution a random node draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Dist {
    Uniform,
    Normal,
}

/// `n` samples of `dist` on the host, element `e` from offset `offset + e`.
pub(crate) fn sample_host(dist: Dist, seed: u64, offset: u64, n: usize) -> crate::Result<Vec<f32>> {
    use rayon::prelude::*;
    let mut v = crate::cpu::strided::try_vec::<f32>("rand", n)?;
    v.resize(n, 0.0);
    let draw = |e: usize| {
        let w = words(seed, offset, e as u64);
        match dist {
            Dist::Uniform => uniform(w[0]),
            Dist::Normal => normal(w[0], w[1]),
        }
    };
    if n >= crate::cpu::strided::PAR_THRESHOLD {
        v.par_iter_mut().enumerate().for_each(|(e, o)| *o = draw(e));
    } else {
        v.iter_mut().enumerate().for_each(|(e, o)| *o = draw(e));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn philox_matches_the_random123_known_answers() {
        // Known-answer vectors of Random123's kat_vectors for philox4x32_10.
        assert_eq!(
            philox([0, 0, 0, 0], [0, 0]),
            [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
        );
        assert_eq!(
            philox([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
        );
        assert_eq!(
            philox(
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0]
            ),
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
        );
    }

    #[test]
    fn uniform_is_in_the_unit_interval() {
        assert_eq!(uniform(0), 0.0);
        assert!(uniform(u32::MAX) < 1.0);
        assert!(normal(u32::MAX, 0).is_finite());
    }
}
