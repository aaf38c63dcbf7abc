//! softmax and log_softmax on every device against an f64 reference: every dim of a 4-D tensor,
//! strided views, large and infinite inputs, NaN rows, long rows (multi-pass row statistics on
//! the GPU) and bad dims.

use crate::common;
use common::{assert_close, data, devices, values};
use proptest::prelude::*;
use wgtensor::{DType, Device, Error, Tensor};

/// softmax / log_softmax over `dim` of row-major `v` in f64 (max subtracted, as PyTorch).
fn reference(v: &[f32], shape: &[usize], dim: usize, log: bool) -> Vec<f32> {
    let len = shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    let outer: usize = shape[..dim].iter().product();
    let mut out = vec![0f32; v.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |r: usize| (o * len + r) * inner + i;
            let row: Vec<f64> = (0..len).map(|r| v[at(r)] as f64).collect();
            let m = if row.iter().any(|x| x.is_nan()) {
                f64::NAN
            } else {
                row.iter().copied().fold(f64::NEG_INFINITY, f64::max)
            };
            let s: f64 = row.iter().map(|x| (x - m).exp()).sum();
            for (r, x) in row.iter().enumerate() {
                out[at(r)] = if log {
                    ((x - m) - s.ln()) as f32
                } else {
                    ((x - m).exp() / s) as f32
                };
            }
        }
    }
    out
}

fn run(t: &Tensor, dim: isize, log: bool) -> Tensor {
    if log {
        t.log_softmax(dim).unwrap()
    } else {
        t.softmax(dim).unwrap()
    }
}

#[test]
fn every_dim_of_4d() {
    let shape = [2usize, 3, 5, 7];
    let v = data(shape.iter().product(), 4, 6.0);
    for d in devices() {
        let t = Tensor::from_vec(v.clone(), &shape, &d).unwrap();
        for dim in -4isize..4 {
            let u = dim.rem_euclid(4) as usize;
            for log in [false, true] {
                let got = run(&t, dim, log);
                assert_eq!(got.shape(), &shape);
                assert_close(
                    &values(&got),
                    &reference(&v, &shape, u, log),
                    1e-5,
                    1e-6,
                    &format!("log {log} dim {dim} on {d}"),
                );
            }
        }
    }
}

#[test]
fn strided_views() {
    let v = data(4 * 6 * 5, 8, 3.0);
    for d in devices() {
        let t = Tensor::from_vec(v.clone(), &[4, 6, 5], &d).unwrap();
        for view in [
            t.transpose(0, 2).unwrap(),
            t.permute(&[1, 0, 2]).unwrap(),
            t.narrow(1, 1, 4).unwrap(),
            t.narrow(0, 1, 1).unwrap().expand(&[3, 6, 5]).unwrap(),
        ] {
            let shape = view.shape().to_vec();
            let packed = values(&view);
            for dim in 0..3 {
                for log in [false, true] {
                    assert_close(
                        &values(&run(&view, dim as isize, log)),
                        &reference(&packed, &shape, dim, log),
                        1e-5,
                        1e-6,
                        &format!("view {shape:?} dim {dim} log {log} on {d}"),
                    );
                }
            }
        }
    }
}

#[test]
fn large_infinite_and_nan_inputs() {
    let (nan, inf) = (f32::NAN, f32::INFINITY);
    #[rustfmt::skip]
    let v = vec![
        1000.0, 1001.0, 999.0, -1000.0, // exp(1000) overflows without the max
        -inf, 0.0, 1.0, -inf,           // -inf gets probability 0
        1.0, nan, 2.0, 3.0,             // NaN makes the row NaN
        -inf, -inf, -inf, -inf,         // all -inf: NaN (0/0), as PyTorch
        inf, 1.0, 2.0, 3.0,             // +inf: inf - inf is NaN
    ];
    let shape = [5usize, 4];
    for d in devices() {
        let t = Tensor::from_vec(v.clone(), &shape, &d).unwrap();
        for log in [false, true] {
            let got = values(&run(&t, -1, log));
            assert_close(
                &got,
                &reference(&v, &shape, 1, log),
                1e-5,
                1e-6,
                &format!("log {log} on {d}"),
            );
            assert!(got[..8].iter().all(|x| !x.is_nan()), "{got:?} on {d}");
            assert!(got[8..].iter().all(|x| x.is_nan()), "{got:?} on {d}");
        }
        let p = values(&t.softmax(1).unwrap());
        assert_eq!(p[4], 0.0, "exp(-inf) on {d}");
    }
}

/// Rows of 300,000 elements: the row max and sum take two reduction passes on the GPU.
#[test]
fn long_rows() {
    let shape = [2usize, 300_000];
    let v = data(shape[0] * shape[1], 21, 10.0);
    for d in devices() {
        let t = Tensor::from_vec(v.clone(), &shape, &d).unwrap();
        for log in [false, true] {
            assert_close(
                &values(&run(&t, 1, log)),
                &reference(&v, &shape, 1, log),
                1e-4,
                1e-9,
                &format!("log {log} on {d}"),
            );
        }
        let total = t.softmax(1).unwrap().sum(1, false).unwrap();
        assert_close(&values(&total), &[1.0, 1.0], 1e-4, 0.0, "rows sum to 1");
        // The same data as [300000, 2] over dim 0: two long interleaved rows (stride 2).
        let cols = t.reshape(&[300_000, 2]).unwrap();
        for log in [false, true] {
            assert_close(
                &values(&run(&cols, 0, log)),
                &reference(&v, &[300_000, 2], 0, log),
                1e-4,
                1e-9,
                &format!("dim 0, log {log} on {d}"),
            );
        }
    }
}

/// The GL view of each adapter compiles the shaders separately: same results expected.
#[test]
fn gl_views_match_reference() {
    let shape = [3usize, 4, 70];
    let v = data(shape.iter().product(), 9, 8.0);
    for d in common::gl_views() {
        let t = Tensor::from_vec(v.clone(), &shape, &d).unwrap();
        for dim in 0..3 {
            for log in [false, true] {
                assert_close(
                    &values(&run(&t, dim as isize, log)),
                    &reference(&v, &shape, dim, log),
                    1e-5,
                    1e-6,
                    &format!("dim {dim} log {log} on {d}"),
                );
            }
        }
    }
}

#[test]
fn edge_shapes_and_errors() {
    for d in devices() {
        let s = Tensor::full(&[], 3.0, DType::F32, &d).unwrap();
        assert_eq!(s.softmax(0).unwrap().to_scalar::<f32>().unwrap(), 1.0);
        assert_eq!(s.log_softmax(-1).unwrap().to_scalar::<f32>().unwrap(), 0.0);
        let e = Tensor::zeros(&[3, 0], DType::F32, &d).unwrap();
        assert_eq!(e.softmax(1).unwrap().shape(), &[3, 0]);
        assert_eq!(e.log_softmax(0).unwrap().shape(), &[3, 0]);
        let t = Tensor::zeros(&[2, 3], DType::F32, &d).unwrap();
        for dim in [2isize, -3] {
            assert!(matches!(
                t.softmax(dim),
                Err(Error::InvalidArgument { op: "softmax", .. })
            ));
            assert!(matches!(
                t.log_softmax(dim),
                Err(Error::InvalidArgument {
                    op: "log_softmax",
                    ..
                })
            ));
        }
        assert!(matches!(s.softmax(1), Err(Error::InvalidArgument { .. })));
    }
    let i = Tensor::zeros(&[3], DType::U32, &Device::cpu()).unwrap();
    assert!(matches!(
        i.softmax(0),
        Err(Error::UnsupportedDType { op: "softmax", .. })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn every_device_matches_reference(
        shape in prop::collection::vec(1usize..6, 1..5),
        dim_seed: usize,
        log: bool,
        seed: u64,
    ) {
        let dim = dim_seed % shape.len();
        let v = data(shape.iter().product(), seed, 20.0);
        let want = reference(&v, &shape, dim, log);
        for d in devices() {
            let t = Tensor::from_vec(v.clone(), &shape, &d).unwrap();
            // Negative form of the same dim.
            let neg = dim as isize - shape.len() as isize;
            assert_close(&values(&run(&t, neg, log)), &want, 1e-5, 1e-6, &format!("{d}"));
        }
    }
}

/// Row lengths around the workgroup size (256) and long rows (each of 256 threads walks several
/// elements): one dispatch per op on a GPU, results as the f64 reference on every device.
#[test]
fn row_lengths_one_dispatch() {
    for len in [1usize, 255, 256, 257, 4096, 5000] {
        let shape = [3usize, len];
        let v = data(3 * len, len as u64, 12.0);
        for d in devices() {
            let t = Tensor::from_vec(v.clone(), &shape, &d).unwrap();
            for log in [false, true] {
                let before = wgtensor::testing::row_dispatches();
                let got = run(&t, -1, log);
                let launched = wgtensor::testing::row_dispatches() - before;
                assert_eq!(
                    launched,
                    u64::from(d.is_gpu()),
                    "len {len} log {log} on {d}"
                );
                assert_close(
                    &values(&got),
                    &reference(&v, &shape, 1, log),
                    1e-5,
                    1e-6,
                    &format!("len {len} log {log} on {d}"),
                );
            }
        }
    }
}

/// Every dim of a 3-D tensor (rows of 300 > 256 along each), contiguous and transposed, with
/// NaN, -inf and all -inf rows planted along the last dim.
#[test]
fn every_dim_of_3d_with_special_rows() {
    let shape = [300usize, 3, 4];
    let mut v = data(shape.iter().product(), 33, 9.0);
    v[4..8].fill(f32::NEG_INFINITY); // [0, 1, :] all -inf
    v[9] = f32::NAN; // [0, 2, 1]
    v[13] = f32::NEG_INFINITY; // [1, 0, 1]
    for d in devices() {
        let t = Tensor::from_vec(v.clone(), &shape, &d).unwrap();
        let tt = t.transpose(0, 2).unwrap();
        let packed = values(&tt);
        for (view, want_of) in [(&t, &v), (&tt, &packed)] {
            let shp = view.shape().to_vec();
            for dim in 0..3 {
                for log in [false, true] {
                    assert_close(
                        &values(&run(view, dim as isize, log)),
                        &reference(want_of, &shp, dim, log),
                        1e-5,
                        1e-6,
                        &format!("view {shp:?} dim {dim} log {log} on {d}"),
                    );
                }
            }
        }
    }
}

/// f16 in, f16 out, computed in f32: as the reference on the f16 values, rounded to f16.
#[test]
fn f16_rows() {
    let shape = [4usize, 300];
    let v: Vec<f32> = data(1200, 5, 6.0)
        .iter()
        .map(|&x| wgtensor::f16::from_f32(x).to_f32())
        .collect();
    for d in devices() {
        let t = Tensor::from_vec(v.clone(), &shape, &d)
            .unwrap()
            .to_dtype(DType::F16)
            .unwrap();
        for log in [false, true] {
            let got = run(&t, -1, log);
            assert_eq!(got.dtype(), DType::F16);
            let got = values(&got.to_dtype(DType::F32).unwrap());
            assert_close(
                &got,
                &reference(&v, &shape, 1, log),
                1e-3,
                1e-5,
                &format!("{d}"),
            );
        }
    }
}

/// The CPU's contiguous-row path (vector loops, polynomial exp) against its strided path (the
/// same rows read through a transposed view) within 1e-6 relative, on 1024 x 1024.
#[test]
fn cpu_fast_rows_match_strided_path() {
    let v = data(1 << 20, 77, 15.0);
    let cpu = Device::cpu();
    let t = Tensor::from_vec(v, &[1024, 1024], &cpu).unwrap();
    // The transpose's rows along dim 0 are t's rows, read with stride 1024.
    let tt = t.transpose(0, 1).unwrap();
    for log in [false, true] {
        let fast = values(&run(&t, 1, log));
        let slow = values(&run(&tt, 0, log).transpose(0, 1).unwrap());
        assert_close(&fast, &slow, 1e-6, 1e-12, &format!("log {log}"));
    }
}

/// Each autotuned softmax variant, forced in turn, on strided views, special rows, every dim,
/// a single row and more rows than one dispatch dimension's worth of 256-row workgroups.
#[test]
fn every_softmax_variant_matches_the_reference() {
    let shape = [70usize, 3, 5];
    let mut v = data(shape.iter().product(), 34, 9.0);
    v[5..10].fill(f32::NEG_INFINITY);
    v[12] = f32::NAN;
    v[20] = f32::INFINITY;
    let many = data(66_000 * 2, 35, 4.0);
    for d in devices().into_iter().filter(|d| d.is_gpu()) {
        for variant in ["workgroup_per_row", "invocation_per_row"] {
            assert!(wgtensor::testing::force_row_variant(Some(variant)));
            let t = Tensor::from_vec(v.clone(), &shape, &d).unwrap();
            let tt = t.transpose(0, 2).unwrap();
            let packed = values(&tt);
            for (view, want_of) in [(&t, &v), (&tt, &packed)] {
                let shp = view.shape().to_vec();
                for dim in 0..3 {
                    for log in [false, true] {
                        assert_close(
                            &values(&run(view, dim as isize, log)),
                            &reference(want_of, &shp, dim, log),
                            1e-5,
                            1e-6,
                            &format!("{variant}: view {shp:?} dim {dim} log {log} on {d}"),
                        );
                    }
                }
            }
            let one = Tensor::from_vec(v[..5].to_vec(), &[5], &d).unwrap();
            assert_close(
                &values(&one.softmax(0).unwrap()),
                &reference(&v[..5], &[5], 0, false),
                1e-5,
                1e-6,
                &format!("{variant}: one row on {d}"),
            );
            let big = Tensor::from_vec(many.clone(), &[66_000, 2], &d).unwrap();
            assert_close(
                &values(&big.softmax(-1).unwrap()),
                &reference(&many, &[66_000, 2], 1, false),
                1e-5,
                1e-6,
                &format!("{variant}: 66,000 rows on {d}"),
            );
        }
        assert!(wgtensor::testing::force_row_variant(None));
        assert!(!wgtensor::testing::force_row_variant(Some("nope")));
    }
}

/// The CPU's contiguous rows split across tasks (more rows than one task holds, an odd row
/// length, a last task part full, NaN / +inf / all -inf rows): every row equals the f64
/// reference, and its bits equal those of the same row computed alone (a row's result does not
/// depend on the split), on every device; no rows gives no values.
#[test]
fn rows_split_across_tasks_match_rows_alone() {
    let (rows, len) = (301usize, 129usize);
    let mut v = data(rows * len, 91, 12.0);
    v[3 * len + 5] = f32::NAN;
    v[7 * len + 128] = f32::INFINITY;
    v[300 * len..].fill(f32::NEG_INFINITY);
    for d in devices() {
        let t = Tensor::from_vec(v.clone(), &[rows, len], &d).unwrap();
        for log in [false, true] {
            let all = values(&run(&t, 1, log));
            let ctx = format!("{rows}x{len} log {log} on {d}");
            assert_close(&all, &reference(&v, &[rows, len], 1, log), 1e-5, 1e-6, &ctx);
            if d.is_cpu() {
                for r in [0, 3, 64, 200, 300] {
                    let one = values(&run(&t.narrow(0, r, 1).unwrap(), 1, log));
                    let same = one
                        .iter()
                        .zip(&all[r * len..(r + 1) * len])
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "row {r} alone differs: {ctx}");
                }
            }
        }
        let empty = Tensor::from_vec(Vec::<f32>::new(), &[0, len], &d).unwrap();
        assert_eq!(run(&empty, 1, false).shape(), &[0, len]);
    }
}
