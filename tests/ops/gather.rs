//! index_select (the gather behind nn::Embedding) on every device: dims 0, middle and last,
//! strided tables, U32 and I32 ids (repeated, unordered, strided), empty ids, and every bad input
//! as a typed error. The CPU is checked against an index computation written here; every GPU
//! against the CPU (a gather copies values, so they must agree exactly).

use crate::common;

use common::{data, devices, values};
use wgtensor::{DType, Device, Error, Tensor};

/// `index_select` computed from row-major host data: `shape[dim]` replaced by `ids.len()`.
fn reference(src: &[f32], shape: &[usize], dim: usize, ids: &[usize]) -> Vec<f32> {
    let outer: usize = shape[..dim].iter().product();
    let inner: usize = shape[dim + 1..].iter().product();
    let mut out = Vec::new();
    for o in 0..outer {
        for &id in ids {
            let base = (o * shape[dim] + id) * inner;
            out.extend_from_slice(&src[base..base + inner]);
        }
    }
    out
}

#[test]
fn index_select_matches_reference_on_every_device() {
    let shape = [3usize, 5, 4];
    let src = data(60, 1, 2.0);
    for device in devices() {
        let t = Tensor::from_vec(src.clone(), &shape, &device).unwrap();
        for (dim, ids) in [
            (0isize, vec![2usize, 0, 2, 1]),
            (1, vec![4, 4, 0]),
            (-1, vec![3, 1]),
            (2, vec![0]),
        ] {
            let d = dim.rem_euclid(3) as usize;
            let want = reference(&src, &shape, d, &ids);
            let u: Vec<u32> = ids.iter().map(|&i| i as u32).collect();
            let i: Vec<i32> = ids.iter().map(|&i| i as i32).collect();
            let uids = Tensor::from_vec(u, &[ids.len()], &device).unwrap();
            let iids = Tensor::from_vec(i, &[ids.len()], &device).unwrap();
            for ids_t in [uids, iids] {
                let out = t.index_select(dim, &ids_t).unwrap();
                let mut want_shape = shape.to_vec();
                want_shape[d] = ids.len();
                assert_eq!(out.shape(), &want_shape[..], "{device} dim {dim}");
                assert_eq!(out.device(), &device);
                assert_eq!(values(&out), want, "{device} dim {dim} {:?}", ids_t.dtype());
            }
        }
    }
}

#[test]
fn index_select_reads_strided_views_and_strided_ids() {
    let src = data(24, 2, 1.0);
    let cpu = Device::cpu();
    let host = Tensor::from_vec(src.clone(), &[4, 6], &cpu).unwrap();
    // A transposed (non-contiguous) table and a narrowed one with an offset.
    let expected_t = host.t().unwrap().contiguous().unwrap();
    let ids_host: Vec<u32> = vec![5, 0, 3, 0, 1, 2];
    for device in devices() {
        let t = host.to(&device).unwrap().t().unwrap();
        assert!(!t.is_contiguous());
        let all_ids = Tensor::from_vec(ids_host.clone(), &[6], &device).unwrap();
        // Every other id: a strided (non-contiguous) ids view [5, 3, 1].
        let ids = all_ids.reshape(&[3, 2]).unwrap().narrow(1, 0, 1).unwrap();
        let ids = ids
            .reshape(&[3])
            .or_else(|_| ids.contiguous()?.reshape(&[3]))
            .unwrap();
        let out = t.index_select(0, &ids).unwrap();
        let want = reference(&values(&expected_t), &[6, 4], 0, &[5, 3, 1]);
        assert_eq!(values(&out), want, "{device} transposed table");
        let narrowed = host.to(&device).unwrap().narrow(0, 1, 2).unwrap();
        let sel = Tensor::from_vec(vec![1u32, 1, 0], &[3], &device).unwrap();
        let out = narrowed.index_select(0, &sel).unwrap();
        let want = reference(&src[6..18], &[2, 6], 0, &[1, 1, 0]);
        assert_eq!(values(&out), want, "{device} narrowed table");
        let out = narrowed.index_select(1, &sel).unwrap();
        let want = reference(&src[6..18], &[2, 6], 1, &[1, 1, 0]);
        assert_eq!(values(&out), want, "{device} narrowed table, dim 1");
    }
}

#[test]
fn index_select_with_no_ids_gives_an_empty_dim() {
    for device in devices() {
        let t = Tensor::ones(&[3, 2], DType::F32, &device).unwrap();
        let ids = Tensor::from_vec(Vec::<u32>::new(), &[0], &device).unwrap();
        let out = t.index_select(0, &ids).unwrap();
        assert_eq!(out.shape(), &[0, 2]);
        assert!(values(&out).is_empty());
    }
}

/// The op's result read back: on a GPU a bad id surfaces here, at the readback.
fn read(r: wgtensor::Result<Tensor>) -> wgtensor::Result<Vec<f32>> {
    r.and_then(|t| t.to_vec::<f32>())
}

#[test]
fn bad_ids_are_typed_errors_on_every_device() {
    for device in devices() {
        let t = Tensor::from_vec(data(6, 3, 1.0), &[3, 2], &device).unwrap();
        let too_big = Tensor::from_vec(vec![0u32, 3], &[2], &device).unwrap();
        match read(t.index_select(0, &too_big)) {
            Err(e @ Error::IndexOutOfRange { .. }) => {
                let Error::IndexOutOfRange { op, index, bound } = &e else {
                    unreachable!()
                };
                assert_eq!((*op, *index, *bound), ("index_select", 3, 3), "{device}");
                let message = e.to_string();
                assert!(message.contains("0..3"), "{message}");
            }
            other => panic!("{device}: expected IndexOutOfRange, got {other:?}"),
        }
        // The error is reported once; the device and earlier tensors are fine afterwards.
        assert_eq!(t.to_vec::<f32>().unwrap(), data(6, 3, 1.0), "{device}");
        let huge = Tensor::from_vec(vec![u32::MAX], &[1], &device).unwrap();
        assert!(matches!(
            read(t.index_select(1, &huge)),
            Err(Error::IndexOutOfRange {
                index: 4294967295,
                bound: 2,
                ..
            })
        ));
        let negative = Tensor::from_vec(vec![1i32, -1], &[2], &device).unwrap();
        match read(t.index_select(0, &negative)) {
            Err(Error::IndexOutOfRange { index, .. }) => assert_eq!(index, -1, "{device}"),
            other => panic!("{device}: expected IndexOutOfRange, got {other:?}"),
        }
        let two_d = Tensor::from_vec(vec![0u32, 1], &[1, 2], &device).unwrap();
        assert!(matches!(
            t.index_select(0, &two_d),
            Err(Error::InvalidArgument { .. })
        ));
        let float_ids = Tensor::from_vec(vec![0f32], &[1], &device).unwrap();
        match t.index_select(0, &float_ids) {
            Err(Error::InvalidArgument { message, .. }) => {
                assert!(message.contains("U32"), "{message}")
            }
            other => panic!("{device}: expected InvalidArgument, got {other:?}"),
        }
        let ok = Tensor::from_vec(vec![0u32], &[1], &device).unwrap();
        assert!(matches!(
            t.index_select(2, &ok),
            Err(Error::InvalidArgument { .. })
        ));
        let scalar = Tensor::from_vec(vec![1f32], &[], &device).unwrap();
        assert!(matches!(
            scalar.index_select(0, &ok),
            Err(Error::InvalidArgument { .. })
        ));
        let half = Tensor::from_vec(vec![wgtensor::f16::ONE; 2], &[2], &device).unwrap();
        assert!(matches!(
            half.index_select(0, &ok),
            Err(Error::UnsupportedDType {
                dtype: DType::F16,
                ..
            })
        ));
    }
}

#[test]
fn ids_on_another_device_are_a_device_mismatch() {
    for device in common::gpus() {
        let t = Tensor::ones(&[3, 2], DType::F32, &device).unwrap();
        let ids = Tensor::from_vec(vec![0u32], &[1], &Device::cpu()).unwrap();
        assert!(matches!(
            t.index_select(0, &ids),
            Err(Error::DeviceMismatch { .. })
        ));
        let t = t.cpu().unwrap();
        let ids = ids.to(&device).unwrap();
        assert!(matches!(
            t.index_select(0, &ids),
            Err(Error::DeviceMismatch { .. })
        ));
    }
}
