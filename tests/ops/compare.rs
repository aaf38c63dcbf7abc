//! Comparisons (U8 masks), where_cond and clamp on every device: IEEE NaN rules, broadcasting,
//! strided views, mask lengths that do not fill a GPU word, and typed errors.

use crate::common;
use common::{data, devices, values};
use proptest::prelude::*;
use wgtensor::testing::{compare_ops, CompareOpInfo};
use wgtensor::{DType, Device, Error, Tensor};

/// Rust's operators: the IEEE oracle each table entry's reference is checked against.
fn ieee(name: &str) -> fn(f32, f32) -> bool {
    match name {
        "eq" => |a, b| a == b,
        "ne" => |a, b| a != b,
        "lt" => |a, b| a < b,
        "le" => |a, b| a <= b,
        "gt" => |a, b| a > b,
        "ge" => |a, b| a >= b,
        _ => panic!("{name}: a new comparison needs its IEEE oracle here"),
    }
}

/// The sweep: every comparison of the table (`wgtensor::testing::compare_ops()`).
fn ops() -> Vec<CompareOpInfo> {
    compare_ops()
}

#[test]
fn table_references_are_ieee() {
    let pool = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ];
    for op in ops() {
        let f = ieee(op.name());
        for a in pool {
            for b in pool {
                assert_eq!(op.reference(a, b), f(a, b), "{} ({a}, {b})", op.name());
            }
        }
        assert_eq!(op.scalar_name(), format!("{}_scalar", op.name()));
    }
}

/// Values with many exact ties, zeros of both signs, infinities and NaN.
fn special(n: usize, seed: u64) -> Vec<f32> {
    let pool = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        2.5,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ];
    data(n, seed, 1.0)
        .iter()
        .map(|x| pool[((x.abs() * 1000.0) as usize) % pool.len()])
        .collect()
}

#[test]
fn tensor_and_scalar_comparisons_follow_ieee() {
    for n in [1usize, 3, 4, 5, 255, 1023, 1025] {
        let a = special(n, n as u64);
        let b = special(n, 7 + n as u64);
        for d in devices() {
            let ta = Tensor::from_vec(a.clone(), &[n], &d).unwrap();
            let tb = Tensor::from_vec(b.clone(), &[n], &d).unwrap();
            for op in ops() {
                let (name, f) = (op.name(), |x, y| op.reference(x, y));
                let m = op.call(&ta, &tb).unwrap();
                assert_eq!(m.dtype(), DType::U8);
                let want: Vec<u8> = a.iter().zip(&b).map(|(&x, &y)| f(x, y) as u8).collect();
                assert_eq!(m.to_vec::<u8>().unwrap(), want, "{name} n {n} on {d}");
                for s in [1.0, 0.0, f32::NAN, f32::NEG_INFINITY] {
                    let want: Vec<u8> = a.iter().map(|&x| f(x, s) as u8).collect();
                    let got = op.call_scalar(&ta, s).unwrap().to_vec::<u8>().unwrap();
                    assert_eq!(got, want, "{name}_scalar({s}) n {n} on {d}");
                }
            }
        }
    }
}

#[test]
fn broadcasting_and_strided_views() {
    let a = data(3 * 5, 1, 2.0);
    let b = data(5, 2, 2.0);
    for d in devices() {
        let ta = Tensor::from_vec(a.clone(), &[3, 5], &d).unwrap();
        let tb = Tensor::from_vec(b.clone(), &[5], &d).unwrap();
        let at = ta.t().unwrap(); // [5, 3], strided
        let bt = tb.reshape(&[5, 1]).unwrap(); // broadcast along the last dim
        for op in ops() {
            let (name, f) = (op.name(), |x, y| op.reference(x, y));
            let got = op.call(&ta, &tb).unwrap();
            assert_eq!(got.shape(), &[3, 5]);
            let want: Vec<u8> = (0..15).map(|i| f(a[i], b[i % 5]) as u8).collect();
            assert_eq!(got.to_vec::<u8>().unwrap(), want, "{name} on {d}");
            let got = op.call(&at, &bt).unwrap();
            let want: Vec<u8> = (0..15)
                .map(|i| f(a[(i % 3) * 5 + i / 3], b[i / 3]) as u8)
                .collect();
            assert_eq!(got.to_vec::<u8>().unwrap(), want, "strided {name} on {d}");
        }
        assert!(matches!(
            ta.lt(&Tensor::zeros(&[3], DType::F32, &d).unwrap()),
            Err(Error::ShapeMismatch { op: "lt", .. })
        ));
        // An empty comparison produces an empty mask and dispatches nothing.
        let e = Tensor::zeros(&[0, 5], DType::F32, &d).unwrap();
        assert_eq!(e.ge(&tb).unwrap().shape(), &[0, 5]);
    }
}

#[test]
fn where_cond_selects_with_broadcasting() {
    let x = data(4 * 6, 3, 1.0);
    for d in devices() {
        let t = Tensor::from_vec(x.clone(), &[4, 6], &d).unwrap();
        let mask = t.gt_scalar(0.0).unwrap();
        let zero = Tensor::zeros(&[1], DType::F32, &d).unwrap();
        let relu = mask.where_cond(&t, &zero).unwrap();
        let want: Vec<f32> = x.iter().map(|&v| if v > 0.0 { v } else { 0.0 }).collect();
        assert_eq!(values(&relu), want, "relu via where on {d}");
        // A column mask [4, 1] (strided: a transposed row), rows from a [6] tensor, and a
        // transposed on_false.
        let col = Tensor::from_vec(vec![1u8, 0, 0, 1], &[1, 4], &d)
            .unwrap()
            .t()
            .unwrap();
        let row = Tensor::arange(0.0, 6.0, 1.0, &d).unwrap();
        let tt = t.t().unwrap().contiguous().unwrap().t().unwrap(); // equal values, strided
        let got = values(&col.where_cond(&row, &tt).unwrap());
        let want: Vec<f32> = (0..24)
            .map(|i| {
                let (r, c) = (i / 6, i % 6);
                if r == 0 || r == 3 {
                    c as f32
                } else {
                    x[i]
                }
            })
            .collect();
        assert_eq!(got, want, "broadcast where on {d}");
        // NaN payloads pass through untouched.
        let nan = Tensor::full(&[3], f64::NAN, DType::F32, &d).unwrap();
        let m = Tensor::from_vec(vec![1u8, 0, 1], &[3], &d).unwrap();
        let picked = values(&m.where_cond(&nan, &zero).unwrap());
        assert!(picked[0].is_nan() && picked[1] == 0.0 && picked[2].is_nan());
        // Empty selections dispatch nothing.
        let none = Tensor::zeros(&[0, 6], DType::U8, &d).unwrap();
        assert_eq!(none.where_cond(&row, &zero).unwrap().shape(), &[0, 6]);
        // Errors: a float mask, mismatched value dtypes, shapes that do not broadcast.
        assert!(matches!(
            t.where_cond(&t, &t),
            Err(Error::UnsupportedDType {
                op: "where_cond",
                ..
            })
        ));
        let ints = Tensor::zeros(&[1], DType::I32, &d).unwrap();
        assert!(matches!(
            mask.where_cond(&t, &ints),
            Err(Error::DTypeMismatch { .. })
        ));
        assert!(matches!(
            mask.where_cond(&row.narrow(0, 0, 5).unwrap(), &t),
            Err(Error::ShapeMismatch { .. })
        ));
    }
}

#[test]
fn clamp_keeps_nan_and_follows_pytorch_bounds() {
    let x = vec![
        -3.0f32,
        -0.5,
        0.0,
        0.5,
        3.0,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ];
    for d in devices() {
        let t = Tensor::from_vec(x.clone(), &[2, 4], &d).unwrap();
        for (lo, hi) in [
            (-1.0f32, 1.0),
            (0.0, 0.0),
            (2.0, -2.0),
            (f32::NEG_INFINITY, 0.25),
        ] {
            let got = values(&t.clamp(lo, hi).unwrap());
            for (i, (&g, &v)) in got.iter().zip(&x).enumerate() {
                if v.is_nan() {
                    assert!(g.is_nan(), "clamp NaN on {d}");
                } else {
                    // min(max(x, lo), hi): lo > hi gives hi everywhere.
                    assert_eq!(g, v.max(lo).min(hi), "clamp({lo}, {hi}) [{i}] on {d}");
                }
            }
        }
        let empty = Tensor::zeros(&[0, 3], DType::F32, &d).unwrap();
        assert_eq!(empty.clamp(0.0, 1.0).unwrap().shape(), &[0, 3]);
        let got = values(&t.clamp(f32::NAN, 1.0).unwrap());
        assert!(got.iter().all(|x| x.is_nan()), "NaN bound on {d}");
        // Strided input.
        let got = values(&t.t().unwrap().clamp(-1.0, 1.0).unwrap());
        assert_eq!(got[0], -1.0);
        assert_eq!(got[1], 1.0); // x[4] = 3
    }
}

#[test]
fn operands_on_different_devices_or_dtypes_are_errors() {
    let cpu = Tensor::zeros(&[2], DType::F32, &Device::cpu()).unwrap();
    let ints = Tensor::zeros(&[2], DType::I32, &Device::cpu()).unwrap();
    assert!(matches!(
        cpu.eq(&ints),
        Err(Error::DTypeMismatch { op: "eq", .. })
    ));
    // Integer tensors compare with integer scalars only (no silent rounding of 0.5).
    assert_eq!(ints.gt_scalar(0.0).unwrap().to_vec::<u8>().unwrap(), [0, 0]);
    assert!(matches!(
        ints.gt_scalar(0.5),
        Err(Error::InvalidArgument {
            op: "gt_scalar",
            ..
        })
    ));
    for g in common::gpus() {
        let gpu = cpu.to(&g).unwrap();
        assert!(matches!(
            cpu.le(&gpu),
            Err(Error::DeviceMismatch { op: "le", .. })
        ));
        let mask = cpu.gt_scalar(0.0).unwrap();
        assert!(matches!(
            mask.where_cond(&gpu, &cpu),
            Err(Error::DeviceMismatch {
                op: "where_cond",
                ..
            })
        ));
    }
}

/// The GL view of each adapter compiles the shaders separately: same masks and selections.
#[test]
fn gl_views_match_cpu() {
    let (a, b) = (special(257, 1), special(257, 2));
    let cpu = Device::cpu();
    let (ca, cb) = (
        Tensor::from_vec(a, &[257], &cpu).unwrap(),
        Tensor::from_vec(b, &[257], &cpu).unwrap(),
    );
    for d in common::gl_views() {
        let (ga, gb) = (ca.to(&d).unwrap(), cb.to(&d).unwrap());
        for op in ops() {
            let name = op.name();
            let want = op.call(&ca, &cb).unwrap().to_vec::<u8>().unwrap();
            assert_eq!(
                op.call(&ga, &gb).unwrap().to_vec::<u8>().unwrap(),
                want,
                "{name} on {d}"
            );
            let want = op.call_scalar(&ca, 1.0).unwrap().to_vec::<u8>().unwrap();
            let got = op.call_scalar(&ga, 1.0).unwrap().to_vec::<u8>().unwrap();
            assert_eq!(got, want, "{name}_scalar on {d}");
        }
        let mask = ca.lt(&cb).unwrap();
        let want = values(&mask.where_cond(&ca, &cb).unwrap());
        let got = values(&mask.to(&d).unwrap().where_cond(&ga, &gb).unwrap());
        assert_eq!(
            got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            "where_cond on {d}"
        );
        let want = values(&ca.clamp(-1.0, 1.0).unwrap());
        let got = values(&ga.clamp(-1.0, 1.0).unwrap());
        common::assert_close(&got, &want, 0.0, 0.0, &format!("clamp on {d}"));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Random broadcast pairs: every device gives the CPU's mask.
    #[test]
    fn gpu_masks_match_cpu(
        shape in prop::collection::vec(1usize..6, 1..4),
        ones in prop::collection::vec(any::<bool>(), 3),
        seed: u64,
    ) {
        let other: Vec<usize> = shape
            .iter()
            .zip(&ones)
            .map(|(&s, &one)| if one { 1 } else { s })
            .collect();
        let a = special(shape.iter().product(), seed);
        let b = special(other.iter().product(), seed ^ 5);
        let ca = Tensor::from_vec(a, &shape, &Device::cpu()).unwrap();
        let cb = Tensor::from_vec(b, &other, &Device::cpu()).unwrap();
        for g in common::gpus() {
            let (ga, gb) = (ca.to(&g).unwrap(), cb.to(&g).unwrap());
            for op in ops() {
                let want = op.call(&ca, &cb).unwrap().to_vec::<u8>().unwrap();
                prop_assert_eq!(op.call(&ga, &gb).unwrap().to_vec::<u8>().unwrap(), want, "{}", op.name());
            }
        }
    }
}
