//! cat and stack on every device: every dim (negative too), strided and empty inputs, every
//! dtype (f16 and u8 through the host on GPUs), and validation errors naming op and shapes.

use crate::common;
use common::{data, devices, values};
use proptest::prelude::*;
use wgtensor::{DType, Device, Error, Tensor};

/// Reference cat of row-major parts along `dim`.
fn cat_ref(parts: &[(Vec<f32>, Vec<usize>)], dim: usize) -> Vec<f32> {
    let shape = &parts[0].1;
    let outer: usize = shape[..dim].iter().product();
    let inner: usize = shape[dim + 1..].iter().product();
    let mut out = Vec::new();
    for o in 0..outer {
        for (v, s) in parts {
            let block = s[dim] * inner;
            out.extend_from_slice(&v[o * block..(o + 1) * block]);
        }
    }
    out
}

#[test]
fn cat_every_dim_with_strided_and_empty_parts() {
    for d in devices() {
        for dim in -3isize..3 {
            let u = dim.rem_euclid(3) as usize;
            let mut parts = Vec::new();
            for (k, size) in [2usize, 0, 3, 1].into_iter().enumerate() {
                let mut shape = vec![2usize, 3, 4];
                shape[u] = size;
                let v = data(shape.iter().product(), k as u64, 1.0);
                parts.push((v, shape));
            }
            let tensors: Vec<Tensor> = parts
                .iter()
                .enumerate()
                .map(|(k, (v, s))| {
                    let t = Tensor::from_vec(v.clone(), s, &d).unwrap();
                    if k == 2 {
                        // Same values, read through a transposed view.
                        let rev: Vec<usize> = s.iter().rev().copied().collect();
                        let packed = t.permute(&[2, 1, 0]).unwrap().contiguous().unwrap();
                        assert_eq!(packed.shape(), &rev[..]);
                        packed.permute(&[2, 1, 0]).unwrap()
                    } else {
                        t
                    }
                })
                .collect();
            assert!(!tensors[2].is_contiguous());
            let refs: Vec<&Tensor> = tensors.iter().collect();
            let c = Tensor::cat(&refs, dim).unwrap();
            let mut want_shape = [2usize, 3, 4];
            want_shape[u] = 6;
            assert_eq!(c.shape(), &want_shape[..]);
            assert_eq!(values(&c), cat_ref(&parts, u), "cat dim {dim} on {d}");
        }
    }
}

#[test]
fn stack_every_dim() {
    for d in devices() {
        let a = data(6, 1, 1.0);
        let b = data(6, 2, 1.0);
        let ta = Tensor::from_vec(a.clone(), &[2, 3], &d).unwrap();
        let tb = Tensor::from_vec(b.clone(), &[3, 2], &d)
            .unwrap()
            .t()
            .unwrap();
        let bv = values(&tb);
        for dim in -3isize..3 {
            let s = Tensor::stack(&[&ta, &tb], dim).unwrap();
            let u = dim.rem_euclid(3) as usize;
            let mut shape = vec![2usize, 3];
            shape.insert(u, 2);
            assert_eq!(s.shape(), &shape[..], "dim {dim}");
            let unsq = |v: &Vec<f32>| {
                let mut sh = vec![2usize, 3];
                sh.insert(u, 1);
                (v.clone(), sh)
            };
            assert_eq!(
                values(&s),
                cat_ref(&[unsq(&a), unsq(&bv)], u),
                "stack dim {dim} on {d}"
            );
        }
        assert!(matches!(
            Tensor::stack(&[&ta, &ta], 3),
            Err(Error::InvalidArgument { op: "stack", .. })
        ));
        // 0-d tensors stack into a vector.
        let x = Tensor::full(&[], 1.0, DType::F32, &d).unwrap();
        let y = Tensor::full(&[], 2.0, DType::F32, &d).unwrap();
        assert_eq!(
            values(&Tensor::stack(&[&x, &y], 0).unwrap()),
            vec![1.0, 2.0]
        );
    }
}

#[test]
fn every_dtype_joins() {
    for d in devices() {
        let i = Tensor::from_vec(vec![1i32, -2, 3], &[3], &d).unwrap();
        let j = Tensor::from_vec(vec![4i32], &[1], &d).unwrap();
        let c = Tensor::cat(&[&i, &j], 0).unwrap();
        assert_eq!(c.to_vec::<i32>().unwrap(), vec![1, -2, 3, 4]);
        let u = Tensor::from_vec(vec![7u32, 8], &[2, 1], &d).unwrap();
        assert_eq!(
            Tensor::cat(&[&u, &u], 1).unwrap().to_vec::<u32>().unwrap(),
            vec![7, 7, 8, 8]
        );
        let m = Tensor::from_vec(vec![1u8, 0, 1], &[3], &d).unwrap();
        let n = Tensor::from_vec(vec![0u8, 0], &[2], &d).unwrap();
        let c = Tensor::cat(&[&m, &n, &m], 0).unwrap();
        assert_eq!(c.device(), &d);
        assert_eq!(c.to_vec::<u8>().unwrap(), vec![1, 0, 1, 0, 0, 1, 0, 1]);
        let h = Tensor::from_vec(vec![wgtensor::f16::from_f32(1.5); 3], &[3], &d).unwrap();
        let s = Tensor::stack(&[&h, &h], 1).unwrap();
        assert_eq!(s.shape(), &[3, 2]);
        assert_eq!(s.to_vec::<wgtensor::f16>().unwrap().len(), 6);
    }
}

#[test]
fn validation_errors_name_op_and_shapes() {
    let d = Device::cpu();
    let a = Tensor::zeros(&[2, 3], DType::F32, &d).unwrap();
    let b = Tensor::zeros(&[2, 4], DType::F32, &d).unwrap();
    match Tensor::cat(&[&a, &b], 0) {
        Err(Error::InvalidArgument { op: "cat", message }) => {
            assert!(
                message.contains("[2, 4]") && message.contains("[2, 3]"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(Tensor::cat(&[&a, &b], -1).unwrap().shape(), &[2, 7]);
    match Tensor::stack(&[&a, &b], 0) {
        Err(Error::InvalidArgument {
            op: "stack",
            message,
        }) => {
            assert!(message.contains("[2, 4]"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        Tensor::cat(&[], 0),
        Err(Error::InvalidArgument { op: "cat", .. })
    ));
    assert!(matches!(
        Tensor::stack(&[], 0),
        Err(Error::InvalidArgument { op: "stack", .. })
    ));
    assert!(matches!(
        Tensor::cat(&[&a, &a], 2),
        Err(Error::InvalidArgument { op: "cat", .. })
    ));
    let s = Tensor::zeros(&[], DType::F32, &d).unwrap();
    assert!(matches!(
        Tensor::cat(&[&s, &s], 0),
        Err(Error::InvalidArgument { op: "cat", .. })
    ));
    let c = Tensor::zeros(&[2], DType::F32, &d).unwrap();
    assert!(matches!(
        Tensor::cat(&[&a, &c], 0),
        Err(Error::InvalidArgument { op: "cat", .. })
    ));
    let i = Tensor::zeros(&[2, 3], DType::I32, &d).unwrap();
    assert!(matches!(
        Tensor::cat(&[&a, &i], 0),
        Err(Error::DTypeMismatch { op: "cat", .. })
    ));
    for g in common::gpus() {
        let ga = a.to(&g).unwrap();
        assert!(matches!(
            Tensor::cat(&[&a, &ga], 0),
            Err(Error::DeviceMismatch { op: "cat", .. })
        ));
        assert!(matches!(
            Tensor::stack(&[&ga, &a], 0),
            Err(Error::DeviceMismatch { op: "cat", .. })
        ));
    }
}

/// The GL view of each adapter compiles the shaders separately: same joins.
#[test]
fn gl_views_join() {
    let a = data(2 * 3 * 4, 1, 1.0);
    let b = data(2 * 5 * 4, 2, 1.0);
    let want = cat_ref(&[(a.clone(), vec![2, 3, 4]), (b.clone(), vec![2, 5, 4])], 1);
    for d in common::gl_views() {
        let ta = Tensor::from_vec(a.clone(), &[2, 3, 4], &d).unwrap();
        let tb = Tensor::from_vec(b.clone(), &[2, 5, 4], &d).unwrap();
        assert_eq!(
            values(&Tensor::cat(&[&ta, &tb], -2).unwrap()),
            want,
            "cat on {d}"
        );
        // A strided second input with the same values.
        let tt = ta
            .transpose(0, 1)
            .unwrap()
            .contiguous()
            .unwrap()
            .transpose(0, 1)
            .unwrap();
        let s = Tensor::stack(&[&ta, &tt], 0).unwrap();
        assert_eq!(values(&s), [a.clone(), a.clone()].concat(), "stack on {d}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn cat_matches_reference(
        shape in prop::collection::vec(0usize..5, 1..4),
        sizes in prop::collection::vec(0usize..4, 1..4),
        dim_seed: usize,
        seed: u64,
    ) {
        let dim = dim_seed % shape.len();
        let parts: Vec<(Vec<f32>, Vec<usize>)> = sizes
            .iter()
            .enumerate()
            .map(|(k, &s)| {
                let mut sh = shape.clone();
                sh[dim] = s;
                (data(sh.iter().product(), seed + k as u64, 1.0), sh)
            })
            .collect();
        let want = cat_ref(&parts, dim);
        for d in devices() {
            let ts: Vec<Tensor> = parts
                .iter()
                .map(|(v, s)| Tensor::from_vec(v.clone(), s, &d).unwrap())
                .collect();
            let refs: Vec<&Tensor> = ts.iter().collect();
            prop_assert_eq!(values(&Tensor::cat(&refs, dim as isize).unwrap()), want.clone());
        }
    }
}
