//! The row-op table's sweep (`wgtensor::testing::row_ops()`): every row op, on every device,
//! against its composition of elementwise ops and reductions, at row lengths around a
//! workgroup (1, 255, 256, 257) and past 4096, with a NaN row and non-contiguous input, one
//! dispatch per call on a GPU, and every tracked op's input gradient against its composition's.
//! A new row op is swept here without editing this file. Then rms_norm: its gradients (input
//! and weight) against the composed op's.

use crate::common;
use common::{assert_close, data, devices, values};
use wgtensor::testing::{row_dispatches, row_ops};
use wgtensor::Tensor;

#[test]
fn every_row_op_matches_its_composition() {
    let rows = 3;
    for len in [1usize, 255, 256, 257, 4097] {
        let mut v = data(rows * len, len as u64, 3.0);
        // Row 1 holds a NaN: its whole row is NaN in every op and its composition.
        v[len + len / 2] = f32::NAN;
        for d in devices() {
            let packed = Tensor::from_vec(v.clone(), &[rows, len], &d).unwrap();
            // The same values as a transposed view (strides [1, rows]).
            let vt: Vec<f32> = (0..rows * len)
                .map(|i| v[(i % rows) * len + i / rows])
                .collect();
            let view = Tensor::from_vec(vt, &[len, rows], &d)
                .unwrap()
                .transpose(0, 1)
                .unwrap();
            assert!(len == 1 || !view.is_contiguous());
            for op in row_ops() {
                let ctx = format!("{} len {len} on {d}", op.name());
                let before = row_dispatches();
                let got = values(&op.call(&packed).unwrap());
                let launched = row_dispatches() - before;
                assert_eq!(launched, u64::from(d.is_gpu()), "dispatches of {ctx}");
                let want = values(&op.composed(&packed).unwrap());
                let tol = op.tolerance();
                assert_close(&got, &want, tol, tol, &ctx);
                assert!(got.iter().any(|x| x.is_nan()), "NaN row of {ctx}");
                let got_view = values(&op.call(&view).unwrap());
                assert_close(&got_view, &got, tol, tol, &format!("view {ctx}"));
            }
        }
    }
}

/// Every row op's input gradient (the backward its table entry routes it to) against the
/// gradient of its composition, on every device, at row lengths 1, 7 and 257.
#[test]
fn every_row_op_gradient_matches_its_composition() {
    for (rows, len) in [(3usize, 1usize), (4, 7), (3, 257)] {
        let xv = data(rows * len, 51, 3.0);
        let gv = data(rows * len, 52, 1.0);
        for d in devices() {
            let g = Tensor::from_vec(gv.clone(), &[rows, len], &d).unwrap();
            let leaf = || {
                Tensor::from_vec(xv.clone(), &[rows, len], &d)
                    .unwrap()
                    .requires_grad_(true)
            };
            for op in row_ops() {
                let ctx = format!("{} [{rows}, {len}] on {d}", op.name());
                let x = leaf();
                let y = op.call(&x).unwrap();
                assert_eq!(y.requires_grad(), op.tracked(), "tracked {ctx}");
                if !op.tracked() {
                    continue;
                }
                y.backward_with(&g).unwrap();
                let xc = leaf();
                op.composed(&xc).unwrap().backward_with(&g).unwrap();
                let grad = |t: &Tensor| values(&t.grad().unwrap());
                assert_close(&grad(&x), &grad(&xc), 1e-3, 1e-4, &format!("dx {ctx}"));
            }
        }
    }
}

/// rms_norm's gradients (input and weight) by the row op's backward against the composed
/// op's, on every device; and its forward equals the composed one.
#[test]
fn rms_norm_gradients_match_the_composed_op() {
    let eps = 1e-5;
    for (rows, len) in [(3usize, 7usize), (5, 257), (2, 4100)] {
        let xv = data(rows * len, 41, 3.0);
        let gv = data(rows * len, 42, 1.0);
        let wv = data(len, 43, 1.5);
        for d in devices() {
            let ctx = format!("[{rows}, {len}] on {d}");
            let leaf = |v: &[f32], shape: &[usize]| {
                Tensor::from_vec(v.to_vec(), shape, &d)
                    .unwrap()
                    .requires_grad_(true)
            };
            let g = Tensor::from_vec(gv.clone(), &[rows, len], &d).unwrap();
            let (x, w) = (leaf(&xv, &[rows, len]), leaf(&wv, &[len]));
            let y = x.rms_norm(Some(&w), eps).unwrap();
            y.backward_with(&g).unwrap();
            let (xc, wc) = (leaf(&xv, &[rows, len]), leaf(&wv, &[len]));
            let ms = xc
                .mul(&xc)
                .unwrap()
                .mean(-1, true)
                .unwrap()
                .add_scalar(eps)
                .unwrap();
            let yc = xc.div(&ms.sqrt().unwrap()).unwrap().mul(&wc).unwrap();
            yc.backward_with(&g).unwrap();
            let (y, yc) = (values(&y), values(&yc));
            assert_close(&y, &yc, 1e-4, 1e-5, &format!("y {ctx}"));
            let grad = |t: &Tensor| values(&t.grad().unwrap());
            assert_close(&grad(&x), &grad(&xc), 1e-3, 1e-4, &format!("dx {ctx}"));
            assert_close(&grad(&w), &grad(&wc), 1e-3, 1e-3, &format!("dw {ctx}"));
        }
    }
}

/// rms_norm without a weight, of a 0-d tensor, and its errors.
#[test]
fn rms_norm_edges_and_errors() {
    for d in devices() {
        let s = Tensor::from_vec(vec![-2f32], &[], &d).unwrap();
        let y = s.rms_norm(None, 0.0).unwrap();
        assert_eq!((y.shape(), values(&y)), (&[][..], vec![-1.0]), "0-d on {d}");
        let x = Tensor::from_vec(vec![3f32, 4.0], &[1, 2], &d).unwrap();
        let bad = Tensor::from_vec(vec![1f32; 3], &[3], &d).unwrap();
        let e = x.rms_norm(Some(&bad), 1e-5).unwrap_err();
        assert!(matches!(e, wgtensor::Error::ShapeMismatch { .. }), "{e}");
        let e = x.rms_norm(None, f32::NAN).unwrap_err();
        assert!(matches!(e, wgtensor::Error::InvalidArgument { .. }), "{e}");
        let empty = Tensor::from_vec(Vec::<f32>::new(), &[0, 4], &d).unwrap();
        assert_eq!(empty.rms_norm(None, 1e-5).unwrap().shape(), &[0, 4]);
    }
}

/// The norms write outputs of 8 MiB and more with streaming stores on the CPU
/// (`src/cpu/stream.rs`): every row op over a 9 MiB tensor has, row for row, the bits of the
/// same op over that row alone (a small output, written directly). Rows of 1001 elements start at every alignment,
/// so the stores' unaligned heads and tails are covered.
#[test]
fn large_row_op_outputs_have_the_bits_of_small_ones_on_the_cpu() {
    let (rows, len) = (2304usize, 1001usize);
    let mut v = data(rows * len, 77, 3.0);
    v[5 * len + 3] = f32::NAN;
    let d = wgtensor::Device::cpu();
    let big = Tensor::from_vec(v, &[rows, len], &d).unwrap();
    let mut swept = 0;
    for op in row_ops() {
        let all = values(&op.call(&big).unwrap());
        if all.len() != rows * len {
            continue; // a loss: one value, not rows
        }
        swept += 1;
        for r in [0usize, 1, 5, 7, 1000, rows - 1] {
            let one = values(&op.call(&big.narrow(0, r, 1).unwrap()).unwrap());
            let want: Vec<u32> = one.iter().map(|x| x.to_bits()).collect();
            let got: Vec<u32> = all[r * len..][..len].iter().map(|x| x.to_bits()).collect();
            assert!(got == want, "{} row {r}: large output differs", op.name());
        }
    }
    assert!(
        swept >= 4,
        "softmax, log_softmax, layer_norm and rms_norm at least"
    );
}
