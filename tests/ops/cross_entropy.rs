//! The fused cross-entropy on every device against a host reference written from PyTorch's
//! formulas: ignore_index, label_smoothing, the three reductions, i32 and u32 targets, rows
//! longer than a workgroup, NaN rows; the gradient against the composed log_softmax
//! formulation and finite differences; bad targets surfacing at the next sync.

use crate::common;

use common::devices;
use wgtensor::nn::{cross_entropy, cross_entropy_with, CrossEntropyOptions, Reduction};
use wgtensor::{DType, Device, Error, Tensor};

fn logits(n: usize, c: usize) -> Vec<f32> {
    (0..n * c)
        .map(|i| ((i as u32).wrapping_mul(2654435761) % 2000) as f32 / 200.0 - 5.0)
        .collect()
}

/// Per-sample losses and whether each counts, in f64, from the textbook definition.
fn reference(x: &[f32], c: usize, t: &[i64], ignore: i64, eps: f64) -> (Vec<f64>, Vec<bool>) {
    let mut out = vec![];
    let mut valid = vec![];
    for (i, &ti) in t.iter().enumerate() {
        let row: Vec<f64> = x[i * c..(i + 1) * c].iter().map(|&v| v as f64).collect();
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
        if ti == ignore {
            out.push(0.0);
            valid.push(false);
            continue;
        }
        let nll = lse - row[ti as usize];
        let smooth = lse - row.iter().sum::<f64>() / c as f64;
        out.push((1.0 - eps) * nll + eps * smooth);
        valid.push(true);
    }
    (out, valid)
}

fn close(a: f32, b: f64, what: &str) {
    assert!(
        (a as f64 - b).abs() <= 1e-4 * b.abs().max(1.0),
        "{what}: {a} vs {b}"
    );
}

#[test]
fn every_option_matches_the_reference_on_every_device() {
    // 300 classes: longer rows than one 256-thread workgroup.
    let (n, c) = (7usize, 300usize);
    let x = logits(n, c);
    let t: Vec<i64> = vec![0, 299, 5, -100, 17, 17, 150];
    for device in devices() {
        let lt = Tensor::from_vec(x.clone(), &[n, c], &device).unwrap();
        for signed in [true, false] {
            let ids = if signed {
                Tensor::from_vec(t.iter().map(|&v| v as i32).collect(), &[n], &device)
            } else {
                // u32 targets with ignore_index = 7 (the -100 row becomes class 7, ignored).
                Tensor::from_vec(
                    t.iter()
                        .map(|&v| if v < 0 { 7 } else { v as u32 })
                        .collect(),
                    &[n],
                    &device,
                )
            }
            .unwrap();
            let ignore = if signed { -100 } else { 7 };
            let host_t: Vec<i64> = t.iter().map(|&v| if v < 0 { ignore } else { v }).collect();
            for eps in [0.0f32, 0.1] {
                let (per, valid) = reference(&x, c, &host_t, ignore, eps as f64);
                let count = valid.iter().filter(|&&v| v).count() as f64;
                for reduction in [Reduction::Mean, Reduction::Sum, Reduction::None] {
                    let opts = CrossEntropyOptions {
                        ignore_index: Some(ignore),
                        label_smoothing: eps,
                        reduction,
                    };
                    let got = cross_entropy_with(&lt, &ids, &opts)
                        .unwrap()
                        .to_vec::<f32>()
                        .unwrap();
                    let what = format!("{device} signed={signed} eps={eps} {reduction:?}");
                    match reduction {
                        Reduction::None => {
                            assert_eq!(got.len(), n, "{what}");
                            for (g, e) in got.iter().zip(&per) {
                                close(*g, *e, &what);
                            }
                        }
                        Reduction::Sum => close(got[0], per.iter().sum(), &what),
                        Reduction::Mean => close(got[0], per.iter().sum::<f64>() / count, &what),
                    }
                }
            }
        }
    }
}

#[test]
fn the_gradient_matches_the_composed_formulation_and_finite_differences() {
    let (n, c) = (5usize, 6usize);
    let x = logits(n, c);
    let t = vec![1i32, -100, 5, 0, 5];
    for device in devices() {
        let lt = Tensor::from_vec(x.clone(), &[n, c], &device)
            .unwrap()
            .requires_grad_(true);
        let ids = Tensor::from_vec(t.clone(), &[n], &device).unwrap();
        let opts = CrossEntropyOptions {
            label_smoothing: 0.2,
            ..Default::default()
        };
        cross_entropy_with(&lt, &ids, &opts)
            .unwrap()
            .backward()
            .unwrap();
        let got = lt.grad().unwrap().to_vec::<f32>().unwrap();
        // d/dx of mean over counted rows of (1-ε)(lse - x_t) + ε(lse - mean x):
        // (softmax - (1-ε) onehot - ε/C) / count, zero for the ignored row.
        let count = 4.0f64;
        for i in 0..n {
            let row: Vec<f64> = x[i * c..(i + 1) * c].iter().map(|&v| v as f64).collect();
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
            for j in 0..c {
                let e = if t[i] == -100 {
                    0.0
                } else {
                    let onehot = if j as i32 == t[i] { 1.0 } else { 0.0 };
                    ((row[j] - m).exp() / s - 0.8 * onehot - 0.2 / c as f64) / count
                };
                close(got[i * c + j], e, &format!("{device} grad[{i},{j}]"));
            }
        }
        // Finite differences on one logit through the whole op.
        let loss_at = |v: f32| {
            let mut y = x.clone();
            y[2 * c + 3] = v;
            let lt = Tensor::from_vec(y, &[n, c], &device).unwrap();
            cross_entropy_with(&lt, &ids, &opts)
                .unwrap()
                .to_scalar::<f32>()
                .unwrap() as f64
        };
        let h = 1e-2;
        let x0 = x[2 * c + 3];
        let fd = (loss_at(x0 + h) - loss_at(x0 - h)) / (2.0 * h as f64);
        assert!(
            (got[2 * c + 3] as f64 - fd).abs() < 2e-3,
            "{device}: {} vs {fd}",
            got[2 * c + 3]
        );
    }
}

#[test]
fn f16_logits_give_an_f16_loss_and_gradient() {
    for device in devices() {
        let x = Tensor::from_vec(logits(3, 4), &[3, 4], &device).unwrap();
        let ids = Tensor::from_vec(vec![0u32, 3, 2], &[3], &device).unwrap();
        let full = cross_entropy(&x, &ids).unwrap().to_scalar::<f32>().unwrap();
        let h = x.to_dtype(DType::F16).unwrap().requires_grad_(true);
        let loss = cross_entropy(&h, &ids).unwrap();
        assert_eq!(loss.dtype(), DType::F16);
        let got = loss
            .to_dtype(DType::F32)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!((got - full).abs() < 1e-2, "{device}: {got} vs {full}");
        loss.backward().unwrap();
        assert_eq!(h.grad().unwrap().dtype(), DType::F16);
    }
}

#[test]
fn a_bad_target_surfaces_at_the_next_sync_and_nothing_else_breaks() {
    for device in devices() {
        let x = Tensor::from_vec(logits(3, 4), &[3, 4], &device).unwrap();
        let ids = Tensor::from_vec(vec![0i32, 4, 2], &[3], &device).unwrap();
        let r = cross_entropy(&x, &ids).and_then(|l| l.to_scalar::<f32>());
        match r {
            Err(Error::IndexOutOfRange { op, index, bound }) => {
                assert_eq!((op, index, bound), ("cross_entropy", 4, 4), "{device}")
            }
            other => panic!("{device}: expected IndexOutOfRange, got {other:?}"),
        }
        // The logits and the device are fine; a good batch works.
        assert_eq!(x.to_vec::<f32>().unwrap(), logits(3, 4), "{device}");
        let ok = Tensor::from_vec(vec![0i32, 3, 2], &[3], &device).unwrap();
        assert!(cross_entropy(&x, &ok)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
            .is_finite());
        // Every target ignored: the mean is NaN (0 / 0), as in PyTorch.
        let none = Tensor::from_vec(vec![-100i32; 3], &[3], &device).unwrap();
        assert!(cross_entropy(&x, &none)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
            .is_nan());
        let bad_eps = CrossEntropyOptions {
            label_smoothing: 1.5,
            ..Default::default()
        };
        assert!(matches!(
            cross_entropy_with(&x, &ok, &bad_eps),
            Err(Error::InvalidArgument { .. })
        ));
    }
    let _ = Device::cpu();
}

/// Both forward variants (a workgroup per row, an invocation per row), forced in turn: long and
/// short rows, ignore_index, label smoothing, a NaN row and an out-of-range target.
#[test]
fn every_forward_variant_matches_the_reference() {
    for device in devices().into_iter().filter(|d| d.is_gpu()) {
        for variant in ["workgroup_per_row", "invocation_per_row"] {
            assert!(wgtensor::testing::force_row_variant(Some(variant)));
            for (n, c) in [(7usize, 300usize), (600, 7), (1, 1)] {
                let mut x = logits(n, c);
                let t: Vec<i64> = (0..n as i64)
                    .map(|i| if i % 5 == 3 { -100 } else { (i * 7) % c as i64 })
                    .collect();
                let ids =
                    Tensor::from_vec(t.iter().map(|&v| v as i32).collect(), &[n], &device).unwrap();
                for eps in [0.0f32, 0.2] {
                    let (per, _) = reference(&x, c, &t, -100, eps as f64);
                    let lt = Tensor::from_vec(x.clone(), &[n, c], &device).unwrap();
                    let opts = CrossEntropyOptions {
                        ignore_index: Some(-100),
                        label_smoothing: eps,
                        reduction: Reduction::None,
                    };
                    let got = cross_entropy_with(&lt, &ids, &opts)
                        .unwrap()
                        .to_vec::<f32>()
                        .unwrap();
                    for (g, e) in got.iter().zip(&per) {
                        close(*g, *e, &format!("{variant} {n}x{c} eps {eps} on {device}"));
                    }
                }
                if n > 1 {
                    x[0] = f32::NAN;
                    let lt = Tensor::from_vec(x.clone(), &[n, c], &device).unwrap();
                    let ids0 = Tensor::from_vec(vec![0i32; n], &[n], &device).unwrap();
                    let opts = CrossEntropyOptions {
                        ignore_index: None,
                        label_smoothing: 0.0,
                        reduction: Reduction::None,
                    };
                    let got = cross_entropy_with(&lt, &ids0, &opts)
                        .unwrap()
                        .to_vec::<f32>()
                        .unwrap();
                    assert!(
                        got[0].is_nan() && got[1].is_finite(),
                        "{variant} NaN row on {device}"
                    );
                }
            }
            let lt = Tensor::from_vec(logits(2, 4), &[2, 4], &device).unwrap();
            let bad = Tensor::from_vec(vec![1u32, 9], &[2], &device).unwrap();
            let err = cross_entropy(&lt, &bad).and_then(|l| l.to_vec::<f32>());
            assert!(
                matches!(err, Err(Error::IndexOutOfRange { index: 9, .. })),
                "{variant} on {device}: {err:?}"
            );
        }
        assert!(wgtensor::testing::force_row_variant(None));
    }
}
