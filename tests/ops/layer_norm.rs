//! `Tensor::layer_norm` and `nn::LayerNorm` on every device against an f64 reference (PyTorch's
//! formula), one dispatch per call on a GPU; the backward against finite differences.

use crate::common;
use common::{assert_close, data, devices, values};
use wgtensor::nn::{LayerNorm, Module};
use wgtensor::{DType, Device, Error, Tensor};

/// `(x - mean) / sqrt(var + eps) * w + b` over the last dim of row-major `v`, in f64.
fn reference(v: &[f32], len: usize, w: Option<&[f32]>, b: Option<&[f32]>, eps: f32) -> Vec<f32> {
    let mut out = Vec::with_capacity(v.len());
    for row in v.chunks(len) {
        let n = len as f64;
        let mean = row.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = row.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
        for (k, &x) in row.iter().enumerate() {
            let y = (x as f64 - mean) / (var + eps as f64).sqrt();
            let y = y * w.map_or(1.0, |w| w[k] as f64) + b.map_or(0.0, |b| b[k] as f64);
            out.push(y as f32);
        }
    }
    out
}

#[test]
fn row_lengths_affine_or_not_one_dispatch() {
    for len in [1usize, 255, 256, 257, 768, 4096, 5000] {
        let v = data(3 * len, len as u64, 4.0);
        // An offset mean: Welford's merge must not cancel it away.
        let v: Vec<f32> = v.iter().map(|x| x + 100.0).collect();
        let wv = data(len, 7, 2.0);
        let bv = data(len, 8, 1.0);
        for d in devices() {
            let x = Tensor::from_vec(v.clone(), &[3, len], &d).unwrap();
            let w = Tensor::from_vec(wv.clone(), &[len], &d).unwrap();
            let b = Tensor::from_vec(bv.clone(), &[len], &d).unwrap();
            for (wo, bo) in [(None, None), (Some(&w), None), (Some(&w), Some(&b))] {
                let before = wgtensor::testing::row_dispatches();
                let y = x.layer_norm(wo, bo, 1e-5).unwrap();
                let launched = wgtensor::testing::row_dispatches() - before;
                assert_eq!(launched, u64::from(d.is_gpu()), "len {len} on {d}");
                let want = reference(&v, len, wo.map(|_| &wv[..]), bo.map(|_| &bv[..]), 1e-5);
                let ctx = format!("len {len} w {} b {} on {d}", wo.is_some(), bo.is_some());
                assert_close(&values(&y), &want, 1e-4, 1e-4, &ctx);
            }
        }
    }
}

/// 3-D and non-contiguous inputs, NaN rows, f16 in and out.
#[test]
fn views_nan_and_f16() {
    let mut v = data(2 * 5 * 6, 3, 3.0);
    v[7] = f32::NAN; // row 1 of [10, 6]
    for d in devices() {
        let t = Tensor::from_vec(v.clone(), &[2, 5, 6], &d).unwrap();
        let got = values(&t.layer_norm(None, None, 1e-5).unwrap());
        let want = reference(&v, 6, None, None, 1e-5);
        assert!(got[6..12].iter().all(|x| x.is_nan()), "NaN row on {d}");
        let ok: Vec<usize> = (0..60).filter(|i| !(6..12).contains(i)).collect();
        let pick = |a: &[f32]| ok.iter().map(|&i| a[i]).collect::<Vec<_>>();
        assert_close(
            &pick(&got),
            &pick(&want),
            1e-4,
            1e-5,
            &format!("3-D on {d}"),
        );
        // A transposed view: rows of 5 read through strides.
        let clean = Tensor::from_vec(data(60, 4, 3.0), &[2, 5, 6], &d).unwrap();
        let tv = clean.transpose(1, 2).unwrap();
        let packed = values(&tv);
        assert_close(
            &values(&tv.layer_norm(None, None, 1e-5).unwrap()),
            &reference(&packed, 5, None, None, 1e-5),
            1e-4,
            1e-5,
            &format!("transposed on {d}"),
        );
        // f16: computed in f32, rounded once.
        let h = clean.to_dtype(DType::F16).unwrap();
        let hv = values(&h.to_dtype(DType::F32).unwrap());
        let y = h.layer_norm(None, None, 1e-5).unwrap();
        assert_eq!(y.dtype(), DType::F16);
        assert_close(
            &values(&y.to_dtype(DType::F32).unwrap()),
            &reference(&hv, 6, None, None, 1e-5),
            2e-3,
            2e-3,
            &format!("f16 on {d}"),
        );
    }
}

/// Gradients of `sum(layer_norm(x, w, b) * r)` (r fixed random weights) against central
/// differences, for x, weight and bias.
#[test]
fn backward_matches_finite_differences() {
    let (rows, len, eps) = (3usize, 7usize, 1e-5f32);
    let xv = data(rows * len, 11, 2.0);
    let wv = data(len, 12, 1.5);
    let bv = data(len, 13, 1.0);
    let rv = data(rows * len, 14, 1.0);
    let loss = |x: &[f32], w: &[f32], b: &[f32]| -> f64 {
        reference(x, len, Some(w), Some(b), eps)
            .iter()
            .zip(&rv)
            .map(|(&y, &r)| y as f64 * r as f64)
            .sum()
    };
    let numeric = |which: usize, i: usize| -> f32 {
        let h = 1e-3f32;
        let mut p = [xv.clone(), wv.clone(), bv.clone()];
        p[which][i] += h;
        let up = loss(&p[0], &p[1], &p[2]);
        p[which][i] -= 2.0 * h;
        let down = loss(&p[0], &p[1], &p[2]);
        ((up - down) / (2.0 * h as f64)) as f32
    };
    for d in devices() {
        let x = Tensor::from_vec(xv.clone(), &[rows, len], &d)
            .unwrap()
            .requires_grad_(true);
        let w = Tensor::from_vec(wv.clone(), &[len], &d)
            .unwrap()
            .requires_grad_(true);
        let b = Tensor::from_vec(bv.clone(), &[len], &d)
            .unwrap()
            .requires_grad_(true);
        let r = Tensor::from_vec(rv.clone(), &[rows, len], &d).unwrap();
        let y = x.layer_norm(Some(&w), Some(&b), eps).unwrap();
        y.mul(&r).unwrap().sum_all().unwrap().backward().unwrap();
        for (which, t, n) in [(0, &x, rows * len), (1, &w, len), (2, &b, len)] {
            let got = values(&t.grad().unwrap());
            let want: Vec<f32> = (0..n).map(|i| numeric(which, i)).collect();
            assert_close(&got, &want, 2e-2, 2e-3, &format!("grad {which} on {d}"));
        }
    }
}

#[test]
fn module_and_errors() {
    for d in devices() {
        let ln = LayerNorm::new(6, &d).unwrap();
        let v = data(12, 21, 5.0);
        let x = Tensor::from_vec(v.clone(), &[2, 6], &d).unwrap();
        assert_close(
            &values(&ln.forward(&x).unwrap()),
            &reference(&v, 6, None, None, 1e-5),
            1e-4,
            1e-5,
            &format!("nn::LayerNorm on {d}"),
        );
        let w = Tensor::ones(&[5], DType::F32, &d).unwrap();
        assert!(matches!(
            x.layer_norm(Some(&w), None, 1e-5),
            Err(Error::ShapeMismatch {
                op: "layer_norm",
                ..
            })
        ));
        assert!(matches!(
            x.layer_norm(None, None, -1.0),
            Err(Error::InvalidArgument {
                op: "layer_norm",
                ..
            })
        ));
        let s = Tensor::full(&[], 1.0, DType::F32, &d).unwrap();
        assert!(matches!(
            s.layer_norm(None, None, 1e-5),
            Err(Error::InvalidArgument { .. })
        ));
    }
    let i = Tensor::zeros(&[2, 3], DType::I32, &Device::cpu()).unwrap();
    assert!(matches!(
        i.layer_norm(None, None, 1e-5),
        Err(Error::UnsupportedDType {
            op: "layer_norm",
            ..
        })
    ));
}

/// Both layer_norm variants, forced in turn: row lengths around the workgroup size, an offset
/// mean, NaN rows, and more rows than one grid dimension's worth of 256-row workgroups.
#[test]
fn every_layer_norm_variant_matches_the_reference() {
    for d in devices().into_iter().filter(|d| d.is_gpu()) {
        for variant in ["workgroup_per_row", "invocation_per_row"] {
            assert!(wgtensor::testing::force_row_variant(Some(variant)));
            for (rows, len) in [(3usize, 1usize), (5, 255), (4, 257), (2, 4096), (66_000, 3)] {
                let mut v: Vec<f32> = data(rows * len, len as u64 + 1, 4.0)
                    .iter()
                    .map(|x| x + 100.0)
                    .collect();
                v[0] = f32::NAN;
                let wv = data(len, 9, 2.0);
                let bv = data(len, 10, 1.0);
                let x = Tensor::from_vec(v.clone(), &[rows, len], &d).unwrap();
                let w = Tensor::from_vec(wv.clone(), &[len], &d).unwrap();
                let b = Tensor::from_vec(bv.clone(), &[len], &d).unwrap();
                let y = x.layer_norm(Some(&w), Some(&b), 1e-5).unwrap();
                let want = reference(&v, len, Some(&wv), Some(&bv), 1e-5);
                // Rows of 3 around a mean of 100 can have a tiny variance: f32 Welford is then
                // good to ~1e-3 of the normalised value (either variant).
                let ctx = format!("{variant} {rows}x{len} on {d}");
                assert_close(&values(&y), &want, 1e-3, 1e-3, &ctx);
            }
        }
        assert!(wgtensor::testing::force_row_variant(None));
    }
}

/// Gradients of `sum(layer_norm(x, w, b) * g)` in f64: `(dx, dw, db)`.
fn grad_reference(x: &[f32], g: &[f32], len: usize, w: Option<&[f32]>, eps: f32) -> [Vec<f32>; 3] {
    let n = len as f64;
    let (mut dx, mut dw, mut db) = (Vec::new(), vec![0f64; len], vec![0f64; len]);
    for (row, gr) in x.chunks(len).zip(g.chunks(len)) {
        let mean = row.iter().map(|&v| v as f64).sum::<f64>() / n;
        let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
        let rstd = 1.0 / (var + eps as f64).sqrt();
        let xh: Vec<f64> = row.iter().map(|&v| (v as f64 - mean) * rstd).collect();
        let gh: Vec<f64> = (0..len)
            .map(|k| gr[k] as f64 * w.map_or(1.0, |w| w[k] as f64))
            .collect();
        let a = gh.iter().sum::<f64>() / n;
        let b = gh.iter().zip(&xh).map(|(g, x)| g * x).sum::<f64>() / n;
        for k in 0..len {
            dx.push((rstd * (gh[k] - a - xh[k] * b)) as f32);
            dw[k] += gr[k] as f64 * xh[k];
            db[k] += gr[k] as f64;
        }
    }
    let f = |v: Vec<f64>| v.into_iter().map(|v| v as f32).collect();
    [dx, f(dw), f(db)]
}

/// Every device's gradients against the f64 formulas, with and without weight and bias, rows
/// past one parallel block and past the CPU's parallel threshold, lengths off the vector width.
#[test]
fn backward_matches_the_formulas_on_every_device() {
    for (rows, len) in [(3usize, 7usize), (130, 300), (70, 1025)] {
        let xv = data(rows * len, 31, 3.0);
        let gv = data(rows * len, 32, 1.0);
        let wv = data(len, 33, 1.5);
        let bv = data(len, 34, 1.0);
        for (use_w, use_b) in [(true, true), (false, false), (true, false), (false, true)] {
            let wref = use_w.then_some(&wv[..]);
            let [dx, dw, db] = grad_reference(&xv, &gv, len, wref, 1e-5);
            for d in devices() {
                let ctx = format!("[{rows}, {len}] weight {use_w} bias {use_b} on {d}");
                let x = Tensor::from_vec(xv.clone(), &[rows, len], &d)
                    .unwrap()
                    .requires_grad_(true);
                let leaf = |v: &Vec<f32>| {
                    Tensor::from_vec(v.clone(), &[len], &d)
                        .unwrap()
                        .requires_grad_(true)
                };
                let (w, b) = (leaf(&wv), leaf(&bv));
                let g = Tensor::from_vec(gv.clone(), &[rows, len], &d).unwrap();
                x.layer_norm(use_w.then_some(&w), use_b.then_some(&b), 1e-5)
                    .unwrap()
                    .backward_with(&g)
                    .unwrap();
                assert_close(
                    &values(&x.grad().unwrap()),
                    &dx,
                    1e-3,
                    1e-4,
                    &format!("dx {ctx}"),
                );
                if use_w {
                    assert_close(
                        &values(&w.grad().unwrap()),
                        &dw,
                        1e-3,
                        1e-3,
                        &format!("dw {ctx}"),
                    );
                }
                if use_b {
                    assert_close(
                        &values(&b.grad().unwrap()),
                        &db,
                        1e-3,
                        1e-3,
                        &format!("db {ctx}"),
                    );
                }
            }
        }
    }
}

/// The CPU's rows split across tasks (more rows than one task holds, an odd row length, a last
/// task part full, NaN and +inf rows): every row equals the f64 reference, and its bits equal
/// those of the same row computed alone (a row's result does not depend on the split), on every
/// device; no rows gives no values.
#[test]
fn rows_split_across_tasks_match_rows_alone() {
    let (rows, len) = (301usize, 129usize);
    let mut v = data(rows * len, 92, 5.0);
    v[3 * len + 5] = f32::NAN;
    v[7 * len + 128] = f32::INFINITY;
    let wv = data(len, 93, 2.0);
    let bv = data(len, 94, 1.0);
    for d in devices() {
        let x = Tensor::from_vec(v.clone(), &[rows, len], &d).unwrap();
        let w = Tensor::from_vec(wv.clone(), &[len], &d).unwrap();
        let b = Tensor::from_vec(bv.clone(), &[len], &d).unwrap();
        let all = values(&x.layer_norm(Some(&w), Some(&b), 1e-5).unwrap());
        let want = reference(&v, len, Some(&wv), Some(&bv), 1e-5);
        let ctx = format!("{rows}x{len} on {d}");
        for r in [3, 7] {
            assert!(
                all[r * len..(r + 1) * len].iter().all(|x| x.is_nan()),
                "row {r}: {ctx}"
            );
        }
        let ok: Vec<usize> = (0..rows * len)
            .filter(|i| ![3, 7].contains(&(i / len)))
            .collect();
        let pick = |s: &[f32]| ok.iter().map(|&i| s[i]).collect::<Vec<_>>();
        assert_close(&pick(&all), &pick(&want), 1e-4, 1e-4, &ctx);
        if d.is_cpu() {
            for r in [0, 64, 200, 300] {
                let xr = x.narrow(0, r, 1).unwrap();
                let one = values(&xr.layer_norm(Some(&w), Some(&b), 1e-5).unwrap());
                let same = one
                    .iter()
                    .zip(&all[r * len..(r + 1) * len])
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "row {r} alone differs: {ctx}");
            }
        }
        let empty = Tensor::from_vec(Vec::<f32>::new(), &[0, len], &d).unwrap();
        let y = empty.layer_norm(Some(&w), Some(&b), 1e-5).unwrap();
        assert_eq!(y.shape(), &[0, len]);
    }
}
