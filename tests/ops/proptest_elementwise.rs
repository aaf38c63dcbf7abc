//! Property tests for broadcasting binary ops over random shapes (rank 0-4, dims 0-6).
//!
//! Compatible pairs are derived from one shape by replacing random dims with 1 and dropping
//! leading dims (either side may be the derived one). On every device add/mul/maximum/div must
//! give numpy's output shape and the CPU's values (and the CPU the host reference's); random
//! incompatible pairs must give `Error::ShapeMismatch` naming the op and both shapes. Case counts
//! are modest because the GPU here is a software one.

use crate::common;

use common::broadcast::{compatible_pair, numpy_broadcast, shape, source_index};
use common::{assert_close, data, devices, values};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use wgtensor::{Error, Result, Tensor};

type Op = (
    &'static str,
    fn(&Tensor, &Tensor) -> Result<Tensor>,
    fn(f32, f32) -> f32,
);

const OPS: [Op; 4] = [
    ("add", Tensor::add, |a, b| a + b),
    ("mul", Tensor::mul, |a, b| a * b),
    ("maximum", Tensor::maximum, |a, b| {
        if a.is_nan() || b.is_nan() {
            f32::NAN
        } else {
            a.max(b)
        }
    }),
    ("div", Tensor::div, |a, b| a / b),
];

fn incompatible_pair() -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    (shape(), shape()).prop_filter("shapes must not broadcast", |(a, b)| {
        numpy_broadcast(a, b).is_none()
    })
}

/// 64 cases per property; failing seeds are kept in `proptest-regressions/` (committed) and
/// replayed first on every run.
fn config() -> ProptestConfig {
    let file = "proptest-regressions/proptest_elementwise.txt";
    ProptestConfig {
        cases: 64,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(file))),
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn broadcasting_ops_match_cpu_and_numpy((sa, sb, out) in compatible_pair(), seed in 0u64..1 << 32) {
        prop_assert_eq!(numpy_broadcast(&sa, &sb), Some(out.clone()), "the generator broke numpy's rules");
        let n: usize = out.iter().product();
        let a = data(sa.iter().product(), seed, 10.0);
        let b = data(sb.iter().product(), seed + 1, 10.0);
        for (name, f, host) in OPS {
            let want: Vec<f32> = (0..n).map(|i| host(a[source_index(i, &out, &sa)], b[source_index(i, &out, &sb)])).collect();
            let mut cpu: Option<Vec<f32>> = None;
            for d in devices() {
                let ta = Tensor::from_slice(&a, &sa, &d).unwrap();
                let tb = Tensor::from_slice(&b, &sb, &d).unwrap();
                let t = f(&ta, &tb).unwrap_or_else(|e| panic!("{name} {sa:?} with {sb:?} on {d}: {e}"));
                prop_assert_eq!(t.shape(), &out[..], "{} {:?} with {:?} on {}: shape", name, sa, sb, d);
                prop_assert_eq!(t.device(), &d);
                let got = values(&t);
                let ctx = format!("{name} {sa:?} with {sb:?} on {d}");
                // div by GPUs may round by up to 2.5 ULP; everything else is exact.
                assert_close(&got, cpu.as_ref().unwrap_or(&want), 1e-6, 0.0, &ctx);
                cpu.get_or_insert(got);
            }
        }
    }

    #[test]
    fn incompatible_shapes_are_shape_mismatch_errors((sa, sb) in incompatible_pair()) {
        for d in devices() {
            let ta = Tensor::zeros(&sa, wgtensor::DType::F32, &d).unwrap();
            let tb = Tensor::ones(&sb, wgtensor::DType::F32, &d).unwrap();
            for (name, f, _) in OPS {
                match f(&ta, &tb) {
                    Err(e @ Error::ShapeMismatch { .. }) => {
                        let Error::ShapeMismatch { op, lhs, rhs } = &e else { unreachable!() };
                        prop_assert_eq!(*op, name);
                        prop_assert_eq!((lhs, rhs), (&sa, &sb));
                        let msg = e.to_string();
                        prop_assert!(msg.contains(name) && msg.contains(&format!("{sa:?}")) && msg.contains(&format!("{sb:?}")), "{}", msg);
                    }
                    other => prop_assert!(false, "{} {:?} with {:?} on {}: expected ShapeMismatch, got {:?}", name, sa, sb, d, other.map(|t| t.shape().to_vec())),
                }
            }
        }
    }
}

#[test]
fn the_reference_broadcast_agrees_with_known_cases() {
    assert_eq!(numpy_broadcast(&[3, 1], &[1, 4]), Some(vec![3, 4]));
    assert_eq!(numpy_broadcast(&[5, 1, 3], &[4, 1]), Some(vec![5, 4, 3]));
    assert_eq!(numpy_broadcast(&[], &[2, 0]), Some(vec![2, 0]));
    assert_eq!(numpy_broadcast(&[0], &[1]), Some(vec![0]));
    assert_eq!(numpy_broadcast(&[3, 1], &[2, 2]), None);
    assert_eq!(numpy_broadcast(&[0], &[2]), None);
    assert_eq!(source_index(5, &[2, 3], &[1, 3]), 2);
    assert_eq!(source_index(5, &[2, 3], &[2, 1]), 1);
}
