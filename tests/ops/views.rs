//! View ops (reshape, transpose, permute, t, narrow, squeeze, unsqueeze, expand) on every device:
//! results read back equal a CPU reference computed by index arithmetic, and elementwise ops
//! accept the strided views directly.

use crate::common;
use common::{assert_close, data, devices, values};
use wgtensor::{Error, Tensor};

/// Reference permutation of a row-major array: out[i] = src[index of i under perm].
fn permute_ref(src: &[f32], shape: &[usize], perm: &[usize]) -> Vec<f32> {
    let nd = shape.len();
    let mut strides = vec![1usize; nd];
    for d in (0..nd.saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let n: usize = shape.iter().product();
    (0..n)
        .map(|mut i| {
            let mut at = 0;
            for d in (0..nd).rev() {
                let idx = i % out_shape[d];
                i /= out_shape[d];
                at += idx * strides[perm[d]];
            }
            src[at]
        })
        .collect()
}

#[test]
fn permute_and_transpose_read_back_correctly() {
    let shape = [3usize, 4, 5];
    let src = data(60, 1, 1.0);
    for d in devices() {
        let t = Tensor::from_vec(src.clone(), &shape, &d).unwrap();
        for perm in [
            [0usize, 1, 2],
            [2, 1, 0],
            [1, 0, 2],
            [1, 2, 0],
            [2, 0, 1],
            [0, 2, 1],
        ] {
            let p: Vec<isize> = perm.iter().map(|&x| x as isize).collect();
            let v = t.permute(&p).unwrap();
            assert_eq!(v.shape(), &[shape[perm[0]], shape[perm[1]], shape[perm[2]]]);
            let want = permute_ref(&src, &shape, &perm);
            assert_eq!(values(&v), want, "permute {perm:?} on {d}");
            // Through a GPU/CPU kernel: a strided input to an elementwise op.
            assert_close(
                &values(&v.mul_scalar(2.0).unwrap()),
                &want.iter().map(|x| x * 2.0).collect::<Vec<_>>(),
                0.0,
                0.0,
                &format!("strided mul_scalar {perm:?} on {d}"),
            );
            assert_eq!(
                values(&v.contiguous().unwrap()),
                want,
                "contiguous {perm:?} on {d}"
            );
        }
        let tt = t.transpose(0, -1).unwrap();
        assert_eq!(values(&tt), permute_ref(&src, &shape, &[2, 1, 0]));
    }
}

#[test]
fn narrow_squeeze_unsqueeze_expand() {
    for d in devices() {
        let t = Tensor::arange(0.0, 24.0, 1.0, &d)
            .unwrap()
            .reshape(&[2, 3, 4])
            .unwrap();
        let n = t.narrow(2, 1, 2).unwrap();
        assert_eq!(n.shape(), &[2, 3, 2]);
        let want: Vec<f32> = (0..24)
            .filter(|i| (1..3).contains(&(i % 4)))
            .map(|i| i as f32)
            .collect();
        assert_eq!(values(&n), want, "narrow on {d}");
        // A narrowed view as both operands of a broadcasting binary op.
        let row = t.narrow(0, 1, 1).unwrap(); // [1,3,4], offset 12
        let sum = t.add(&row).unwrap();
        let want: Vec<f32> = (0..24).map(|i| i as f32 + (12 + i % 12) as f32).collect();
        assert_eq!(values(&sum), want, "narrowed broadcast add on {d}");
        assert_eq!(t.unsqueeze(1).unwrap().shape(), &[2, 1, 3, 4]);
        assert_eq!(
            t.unsqueeze(1).unwrap().squeeze(1).unwrap().shape(),
            &[2, 3, 4]
        );
        let e = Tensor::arange(0.0, 3.0, 1.0, &d)
            .unwrap()
            .reshape(&[3, 1])
            .unwrap()
            .expand(&[3, 2])
            .unwrap();
        assert_eq!(
            values(&e),
            vec![0.0, 0.0, 1.0, 1.0, 2.0, 2.0],
            "expand on {d}"
        );
        assert_eq!(values(&e.exp().unwrap().log().unwrap()).len(), 6);
        // Reshape of a non-contiguous view copies first.
        let r = t.transpose(0, 2).unwrap().reshape(&[24]).unwrap();
        assert_eq!(
            values(&r),
            permute_ref(&values(&t), &[2, 3, 4], &[2, 1, 0]),
            "reshape of a transposed view on {d}"
        );
        assert!(t.t().is_err());
        let m = t.narrow(0, 0, 1).unwrap().squeeze(0).unwrap();
        assert_eq!(
            values(&m.t().unwrap()),
            permute_ref(
                &(0..12).map(|x| x as f32).collect::<Vec<_>>(),
                &[3, 4],
                &[1, 0]
            )
        );
    }
}

#[test]
fn bad_view_arguments_are_errors() {
    let t = Tensor::zeros(&[2, 3], wgtensor::DType::F32, &wgtensor::Device::cpu()).unwrap();
    assert!(matches!(
        t.reshape(&[7]),
        Err(Error::InvalidArgument { op: "reshape", .. })
    ));
    assert!(matches!(
        t.transpose(0, 2),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        t.permute(&[0]),
        Err(Error::InvalidArgument { op: "permute", .. })
    ));
    assert!(matches!(
        t.permute(&[1, 1]),
        Err(Error::InvalidArgument { op: "permute", .. })
    ));
    assert!(matches!(
        t.narrow(1, 2, 2),
        Err(Error::InvalidArgument { op: "narrow", .. })
    ));
    assert!(matches!(
        t.narrow(1, usize::MAX, 2),
        Err(Error::InvalidArgument { op: "narrow", .. })
    ));
    assert!(matches!(t.squeeze(-3), Err(Error::InvalidArgument { .. })));
    assert!(matches!(t.unsqueeze(4), Err(Error::InvalidArgument { .. })));
    assert!(matches!(
        t.expand(&[3, 3]),
        Err(Error::ShapeMismatch { op: "expand", .. })
    ));
    assert!(matches!(t.expand(&[3]), Err(Error::ShapeMismatch { .. })));
    // Empty views.
    let e = t.narrow(1, 3, 0).unwrap();
    assert_eq!(e.shape(), &[2, 0]);
    assert_eq!(e.to_vec::<f32>().unwrap(), Vec::<f32>::new());
}
