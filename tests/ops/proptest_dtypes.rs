//! Property tests for f16 and i32 broadcasting binary ops over random shapes (rank 0-4, dims
//! 0-6): on every device the result equals a host reference written with `half` and Rust's
//! wrapping integer ops (bit-exact: f16 + - * / round once from f32, integers follow WGSL).

use crate::common;

use common::broadcast::{compatible_pair, numpy_broadcast, source_index};
use common::devices;
use half::f16;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use wgtensor::{Result, Tensor};

type Bin = fn(&Tensor, &Tensor) -> Result<Tensor>;

type Case<T> = (&'static str, Bin, fn(T, T) -> T);

const F16_OPS: [Case<f32>; 4] = [
    ("add", Tensor::add, |a, b| a + b),
    ("sub", Tensor::sub, |a, b| a - b),
    ("mul", Tensor::mul, |a, b| a * b),
    ("div", Tensor::div, |a, b| a / b),
];

const I32_OPS: [Case<i32>; 5] = [
    ("add", Tensor::add, i32::wrapping_add),
    ("mul", Tensor::mul, i32::wrapping_mul),
    ("div", Tensor::div, |a, b| {
        if b == 0 {
            a
        } else {
            a.wrapping_div(b)
        }
    }),
    ("rem", Tensor::rem, |a, b| {
        if b == 0 {
            0
        } else {
            a.wrapping_rem(b)
        }
    }),
    ("maximum", Tensor::maximum, i32::max),
];

/// 32 cases per property (the GPU here is a software one); failing seeds are kept in
/// `proptest-regressions/` (committed) and replayed first.
fn config() -> ProptestConfig {
    let file = "proptest-regressions/proptest_dtypes.txt";
    ProptestConfig {
        cases: 32,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(file))),
        ..ProptestConfig::default()
    }
}

fn ints(n: usize, seed: u64) -> Vec<i32> {
    common::data(n, seed, 1.0)
        .iter()
        .enumerate()
        .map(|(k, x)| match k % 11 {
            3 => 0,
            5 => i32::MIN,
            7 => -1,
            _ => (x * 2.0e9) as i32,
        })
        .collect()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn f16_broadcasting_ops_are_bit_exact((sa, sb, out) in compatible_pair(), seed in 0u64..1 << 32) {
        prop_assert_eq!(numpy_broadcast(&sa, &sb), Some(out.clone()));
        let n: usize = out.iter().product();
        let a: Vec<f16> = common::data(sa.iter().product(), seed, 100.0).iter().map(|&x| f16::from_f32(x)).collect();
        let b: Vec<f16> = common::data(sb.iter().product(), seed + 1, 100.0).iter().map(|&x| f16::from_f32(x)).collect();
        for (name, f, host) in F16_OPS {
            let want: Vec<u16> = (0..n)
                .map(|i| f16::from_f32(host(a[source_index(i, &out, &sa)].to_f32(), b[source_index(i, &out, &sb)].to_f32())))
                .map(|x| if x.is_nan() { 0x7e00 } else { x.to_bits() })
                .collect();
            for d in devices() {
                let ta = Tensor::from_slice(&a, &sa, &d).unwrap();
                let tb = Tensor::from_slice(&b, &sb, &d).unwrap();
                let t = f(&ta, &tb).unwrap_or_else(|e| panic!("{name} {sa:?} with {sb:?} on {d}: {e}"));
                prop_assert_eq!(t.shape(), &out[..]);
                let got: Vec<u16> = t.to_vec::<f16>().unwrap().iter().map(|x| if x.is_nan() { 0x7e00 } else { x.to_bits() }).collect();
                prop_assert_eq!(got, want.clone(), "{} {:?} with {:?} on {}", name, sa, sb, d);
            }
        }
    }

    #[test]
    fn i32_broadcasting_ops_follow_wgsl((sa, sb, out) in compatible_pair(), seed in 0u64..1 << 32) {
        let n: usize = out.iter().product();
        let a = ints(sa.iter().product(), seed);
        let b = ints(sb.iter().product(), seed + 1);
        for (name, f, host) in I32_OPS {
            let want: Vec<i32> = (0..n).map(|i| host(a[source_index(i, &out, &sa)], b[source_index(i, &out, &sb)])).collect();
            for d in devices() {
                let ta = Tensor::from_slice(&a, &sa, &d).unwrap();
                let tb = Tensor::from_slice(&b, &sb, &d).unwrap();
                let t = f(&ta, &tb).unwrap_or_else(|e| panic!("{name} {sa:?} with {sb:?} on {d}: {e}"));
                prop_assert_eq!(t.shape(), &out[..]);
                prop_assert_eq!(t.to_vec::<i32>().unwrap(), want.clone(), "{} {:?} with {:?} on {}", name, sa, sb, d);
            }
        }
    }
}
