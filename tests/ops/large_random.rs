//! Random tensors and the ops built on them past one GPU binding (FAULTS: `Tensor::rand` of
//! 132 MiB failed on gpu:0 and GL though `from_vec` of that size worked): `rand`, `randn` and
//! dropout masks (`rand >= p`; `bernoulli` is `rand < p`), each just past the adapter's
//! `max_storage_buffer_binding_size`. The values are the CPU's Philox stream for the same seed,
//! checked in windows around every possible block boundary and at the ends (drawing or reading
//! 130 MiB on the host would cost more than the test is worth on a software adapter).

use crate::common;
use common::gpus;
use wgtensor::nn::{Dropout, Module};
use wgtensor::testing::philox_at;
use wgtensor::{manual_seed, DType, Device, Tensor};

const MIB: u64 = 1 << 20;
const SEED: u64 = 1234;

/// Elements just past one binding of `device` (4-byte elements) and the elements one binding
/// holds, or `None` when the binding is so large that a test past it would use too much memory.
fn past_one_binding(device: &Device) -> Option<(usize, usize)> {
    let limit = wgtensor::adapters()
        .into_iter()
        .find(|a| a.names[0] == device.to_string())
        .map(|a| a.max_storage_buffer_binding_size)?;
    if limit > 512 * MIB {
        eprintln!("large_random: {device} binds {limit} bytes; SKIPPED (too much memory)");
        return None;
    }
    let per = (limit / 4) as usize;
    Some((per + 4099, per))
}

/// Starts of 8-element windows: the ends, and around every multiple of a quarter binding (the
/// blocks' boundaries whatever their size).
fn windows(n: usize, per: usize) -> Vec<usize> {
    let mut at = vec![0, n - 8, per - 8, per - 3];
    let mut b = per / 4;
    while b + 4 < n {
        at.push(b - 4);
        b += per / 4;
    }
    at
}

/// The values of the 1-D `t` at `windows` (as f32).
fn sample(t: &Tensor, at: &[usize]) -> Vec<(usize, f32)> {
    at.iter()
        .flat_map(|&i| {
            let v = t.narrow(0, i, 8).unwrap().to_vec::<f32>().unwrap();
            (i..i + 8).zip(v)
        })
        .collect()
}

#[test]
fn random_tensors_past_one_binding_match_the_cpu_stream() {
    // Seeds the global generator and compares draws with its stream: other tests take turns.
    let _rng = common::rng_lock();
    // The CPU's stream starts where `philox_at` says (ties the oracle to `Tensor::rand`).
    manual_seed(SEED);
    let cpu = Tensor::rand(&[8], &Device::cpu()).unwrap();
    let want: Vec<f32> = (0..8).map(|e| philox_at(false, SEED, e)).collect();
    assert_eq!(cpu.to_vec::<f32>().unwrap(), want);
    manual_seed(SEED);
    let cpu = Tensor::randn(&[8], &Device::cpu()).unwrap();
    let want: Vec<f32> = (0..8).map(|e| philox_at(true, SEED, e)).collect();
    assert_eq!(cpu.to_vec::<f32>().unwrap(), want);

    for d in gpus() {
        let Some((n, per)) = past_one_binding(&d) else {
            continue;
        };
        // A software adapter on a loaded machine draws 33 M values slowly.
        d.set_timeout(std::time::Duration::from_secs(900));
        let at = windows(n, per);
        // rand: bit for bit.
        manual_seed(SEED);
        let t = Tensor::rand(&[n], &d).unwrap_or_else(|e| panic!("rand of {n} on {d}: {e}"));
        for (e, x) in sample(&t, &at) {
            let w = philox_at(false, SEED, e as u64);
            assert_eq!(x.to_bits(), w.to_bits(), "rand[{e}] on {d}: {x} vs {w}");
        }
        drop(t);
        // randn: the same words, ln and cos to the last bits.
        manual_seed(SEED);
        let t = Tensor::randn(&[n], &d).unwrap_or_else(|e| panic!("randn of {n} on {d}: {e}"));
        for (e, x) in sample(&t, &at) {
            let w = philox_at(true, SEED, e as u64);
            assert!(
                (x - w).abs() <= 1e-5 * w.abs().max(1.0),
                "randn[{e}] on {d}: {x} vs {w}"
            );
        }
        drop(t);
        // Dropout: `rand >= p` compared past the binding, then applied (exact).
        manual_seed(SEED);
        let ones = Tensor::ones(&[n], DType::F32, &d).unwrap();
        let t = Dropout::new(0.25).unwrap().forward(&ones).unwrap();
        drop(ones);
        for (e, x) in sample(&t, &at) {
            let keep = philox_at(false, SEED, e as u64) >= 0.25;
            let w = if keep { 4.0 / 3.0 } else { 0.0 };
            assert_eq!(x, w, "dropout[{e}] on {d}");
        }
    }
}
