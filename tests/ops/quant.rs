//! QTensor (ggml block-quantized matrices) against the CPU reference: dequantize then an f32
//! matmul, on the CPU and every adapter, over edge shapes (1 row, rows not a multiple of the
//! workgroup, one block per row, many blocks) and every block type.

use crate::common;

use common::{assert_close, data, values};
use std::sync::{Mutex, MutexGuard};
use wgtensor::{f16, DType, Device, Error, QTensor, QType, Tensor};

/// `set_quantized_activations` is process-wide: tests that depend on it take this lock.
fn mode(integer: bool) -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    let g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    wgtensor::set_quantized_activations(integer);
    g
}

/// Random ggml blocks of `q` for `rows x cols` with finite f16 scales in ±`scale`.
fn random_blocks(q: QType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let n = rows * cols / q.block_len();
    let noise = data(n * q.block_bytes(), seed, 1.0);
    let mut bytes: Vec<u8> = noise.iter().map(|v| ((v + 1.0) * 127.9) as u8).collect();
    let scales = data(2 * n, seed + 1, 0.05);
    for b in 0..n {
        let block = &mut bytes[b * q.block_bytes()..(b + 1) * q.block_bytes()];
        let at: &[usize] = match q {
            QType::Q8_0 | QType::Q4_0 => &[0],
            QType::Q4_K => &[0, 2],
            QType::Q6_K => &[208],
        };
        for (k, &o) in at.iter().enumerate() {
            block[o..o + 2].copy_from_slice(&f16::from_f32(scales[2 * b + k]).to_le_bytes());
        }
    }
    bytes
}

/// The shapes every kernel runs: one row, one block per row, rows past a workgroup, many blocks.
fn shapes(q: QType) -> Vec<[usize; 2]> {
    let b = q.block_len();
    vec![
        [1, b],
        [3, b],
        [1, 8 * b],
        [7, 2 * b],
        [65, b],
        [257, 3 * b],
        [33, 16 * b],
    ]
}

fn reference(w: &Tensor, x: &Tensor) -> Vec<f32> {
    let out = x
        .cpu()
        .unwrap()
        .matmul(&w.cpu().unwrap().t().unwrap())
        .unwrap();
    values(&out)
}

/// `got ≈ want` for `x @ w^T` within f32 summation error: `3e-5 * sum_k |w_rk x_ik|` (the two
/// sides add the products in different orders).
fn close_to_dot(got: &[f32], want: &[f32], w: &Tensor, x: &Tensor, ctx: &str) {
    let (wv, xv) = (values(&w.cpu().unwrap()), values(&x.cpu().unwrap()));
    let (rows, cols) = (w.shape()[0], w.shape()[1]);
    assert_eq!(got.len(), want.len(), "{ctx}");
    for (j, (&g, &e)) in got.iter().zip(want).enumerate() {
        let (i, r) = (j / rows, j % rows);
        let mag: f32 = (0..cols)
            .map(|k| (wv[r * cols + k] * xv[i * cols + k]).abs())
            .sum();
        let tol = 3e-5 * mag + 1e-6;
        assert!(
            (g - e).abs() <= tol || (g.is_nan() && e.is_nan()),
            "{ctx}: [{i},{r}] got {g}, expected {e} (tol {tol})"
        );
    }
}

#[test]
fn ggml_bytes_round_trip_and_size_is_the_files() {
    for q in QType::ALL {
        for shape in shapes(q) {
            let bytes = random_blocks(q, shape[0], shape[1], 3);
            let t = QTensor::from_ggml(q, shape, &bytes, &Device::cpu()).unwrap();
            assert_eq!(t.size_in_bytes(), bytes.len(), "{q} {shape:?}");
            assert_eq!(t.to_ggml().unwrap(), bytes, "{q} {shape:?}");
            assert_eq!((t.shape(), t.qtype()), (shape, q));
        }
    }
}

#[test]
fn exact_matmul_matches_dequantize_then_matmul() {
    let _mode = mode(false);
    for device in common::devices() {
        for q in QType::ALL {
            for shape in shapes(q) {
                let bytes = random_blocks(q, shape[0], shape[1], 5);
                let t = QTensor::from_ggml(q, shape, &bytes, &device).unwrap();
                let w = QTensor::from_ggml(q, shape, &bytes, &Device::cpu())
                    .unwrap()
                    .dequantize()
                    .unwrap();
                // 17 and 40 rows take the CPU's dequantized-panel path (prefill).
                for m in [1, 3, 5, 9, 17, 40] {
                    let x = Tensor::from_vec(data(m * shape[1], 9, 1.0), &[m, shape[1]], &device)
                        .unwrap();
                    let want = reference(&w, &x);
                    let y = t.matmul_t(&x).unwrap();
                    assert_eq!((y.shape(), y.device()), (&[m, shape[0]][..], &device));
                    close_to_dot(
                        &values(&y),
                        &want,
                        &w,
                        &x,
                        &format!("{q} {shape:?} m={m} on {device}"),
                    );
                }
            }
        }
    }
}

/// Every device decodes blocks as the CPU does (within the rounding of a fused multiply-add,
/// which a GPU compiler may use).
#[test]
fn dequantize_matches_the_cpu_on_every_device() {
    for device in common::gpus() {
        for q in QType::ALL {
            for shape in shapes(q) {
                let bytes = random_blocks(q, shape[0], shape[1], 7);
                let cpu = values(
                    &QTensor::from_ggml(q, shape, &bytes, &Device::cpu())
                        .unwrap()
                        .dequantize()
                        .unwrap(),
                );
                let t = QTensor::from_ggml(q, shape, &bytes, &device).unwrap();
                let d = t.dequantize().unwrap();
                assert_eq!((d.shape(), d.device()), (&shape[..], &device));
                let amax = cpu.iter().fold(0f32, |a, v| a.max(v.abs()));
                assert_close(
                    &values(&d),
                    &cpu,
                    1e-6,
                    1e-6 * amax,
                    &format!("{q} {shape:?} on {device}"),
                );
                assert_eq!(t.to_ggml().unwrap(), bytes, "{q} {shape:?} on {device}");
            }
        }
    }
}

/// Matrices split into row parts (as those past one storage binding are) give the results of
/// one part.
#[test]
fn matrices_split_into_parts_give_the_same_results() {
    let _mode = mode(false);
    for device in common::devices() {
        for q in [QType::Q8_0, QType::Q6_K] {
            let shape = [23, 2 * q.block_len()];
            let bytes = random_blocks(q, shape[0], shape[1], 17);
            let whole = QTensor::from_ggml(q, shape, &bytes, &device).unwrap();
            wgtensor::testing::set_quant_part_rows(Some(7));
            let split = QTensor::from_ggml(q, shape, &bytes, &device).unwrap();
            let moved = whole.to(&Device::cpu()).unwrap().to(&device).unwrap();
            wgtensor::testing::set_quant_part_rows(None);
            let x = Tensor::from_vec(data(6 * shape[1], 3, 1.0), &[6, shape[1]], &device).unwrap();
            let ids = Tensor::from_vec(vec![22u32, 0, 7, 13, 6], &[5], &device).unwrap();
            let ctx = format!("{q} on {device}");
            assert_eq!(split.size_in_bytes(), whole.size_in_bytes());
            assert_eq!(split.to_ggml().unwrap(), bytes, "{ctx}");
            assert_eq!(moved.to_ggml().unwrap(), bytes, "{ctx}");
            assert_eq!(
                values(&split.dequantize().unwrap()),
                values(&whole.dequantize().unwrap()),
                "{ctx}"
            );
            assert_eq!(
                values(&split.matmul_t(&x).unwrap()),
                values(&whole.matmul_t(&x).unwrap()),
                "{ctx}"
            );
            assert_eq!(
                values(&split.gather_rows(&ids).unwrap()),
                values(&whole.gather_rows(&ids).unwrap()),
                "{ctx}"
            );
        }
    }
}

/// Both matrix-vector entries of the adapters (a workgroup per weight row, and an invocation
/// per weight row: the default on software adapters) give the same bits, for every block type,
/// edge shapes and 1 to 9 activation rows (activation row groups of 4 and a partial one).
#[test]
fn both_matvec_entries_give_the_same_bits() {
    let _mode = mode(false);
    for device in common::devices().into_iter().filter(|d| d.is_gpu()) {
        for q in QType::ALL {
            for shape in shapes(q) {
                let bytes = random_blocks(q, shape[0], shape[1], 29);
                let t = QTensor::from_ggml(q, shape, &bytes, &device).unwrap();
                for m in [1, 4, 9] {
                    let x = Tensor::from_vec(data(m * shape[1], 5, 1.0), &[m, shape[1]], &device)
                        .unwrap();
                    let run = |name| {
                        assert!(wgtensor::testing::force_quant_matvec(Some(name)));
                        let y = values(&t.matmul_t(&x).unwrap());
                        wgtensor::testing::force_quant_matvec(None);
                        y
                    };
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    let a = bits(&run("matvec"));
                    for other in ["matvec_serial", "matvec_rows"] {
                        let b = bits(&run(other));
                        assert_eq!(a, b, "{q} {shape:?} x {m} rows on {device}: {other}");
                    }
                }
            }
        }
    }
    assert!(!wgtensor::testing::force_quant_matvec(Some("other")));
}

/// GPU memory holds exactly the file's bytes (two planes, no padding beyond a word each), both
/// allocated and reserved (weights get buffers of their size, not allocator buckets). In a
/// child process: other tests allocating on the device at the same time would skew the counts.
#[test]
fn device_memory_is_the_files_bytes() {
    if !common::gpus().is_empty() {
        common::run_child("quant::child_device_memory", &[]);
    }
}

#[test]
fn child_device_memory() {
    if !common::is_child("quant::child_device_memory") {
        return;
    }
    for device in common::gpus() {
        for (q, shape) in [
            (QType::Q8_0, [96, 256]),
            (QType::Q4_0, [33, 2048]),
            (QType::Q6_K, [5, 512]),
        ] {
            let bytes = random_blocks(q, shape[0], shape[1], 1);
            wgtensor::empty_cache(&device);
            let before = wgtensor::memory_allocated(&device);
            let reserved = wgtensor::memory_reserved(&device);
            let t = QTensor::from_ggml(q, shape, &bytes, &device).unwrap();
            let used = wgtensor::memory_allocated(&device) - before;
            let held = wgtensor::memory_reserved(&device) - reserved;
            let n = bytes.len() as u64;
            assert!(used >= n && used <= n + 8, "{q}: {used} allocated for {n}");
            assert!(held >= n && held <= n + 8, "{q}: {held} reserved for {n}");
            drop(t);
        }
    }
    common::child_done("quant::child_device_memory");
}

/// The integer path rounds each 32-value block of x to 8 bits: the error of output `r` is at
/// most `sum_k |w_rk| * step_k / 2`, with `step` the block's rounding step.
#[test]
fn integer_matmul_is_within_the_activation_rounding_bound() {
    let _mode = mode(true);
    for q in [QType::Q8_0, QType::Q4_0] {
        for shape in shapes(q) {
            let [rows, cols] = shape;
            let bytes = random_blocks(q, rows, cols, 11);
            let t = QTensor::from_ggml(q, shape, &bytes, &Device::cpu()).unwrap();
            let w = values(&t.dequantize().unwrap());
            for m in [1, 4, 6, 17] {
                let xs = data(m * cols, 13, 2.0);
                let x = Tensor::from_vec(xs.clone(), &[m, cols], &Device::cpu()).unwrap();
                let got = values(&t.matmul_t(&x).unwrap());
                let want = reference(&t.dequantize().unwrap(), &x);
                for i in 0..m {
                    let xi = &xs[i * cols..(i + 1) * cols];
                    let steps: Vec<f32> = xi
                        .chunks(32)
                        .map(|b| b.iter().fold(0f32, |a, v| a.max(v.abs())) / 127.0)
                        .collect();
                    for r in 0..rows {
                        let bound: f32 = (0..cols)
                            .map(|k| w[r * cols + k].abs() * steps[k / 32] * 0.5)
                            .sum::<f32>()
                            * 1.01
                            + 1e-4;
                        let (g, e) = (got[i * rows + r], want[i * rows + r]);
                        assert!(
                            (g - e).abs() <= bound,
                            "{q} {shape:?} m={m} [{i},{r}]: {g} vs {e}, bound {bound}"
                        );
                    }
                }
            }
        }
    }
}

/// The K-quants' integer decode path (m < 16: the 4-row kernel and the 1-row tail, odd row
/// counts) is within the same activation rounding bound of the dequantized f32 product.
#[test]
fn k_quant_integer_matmul_is_within_the_activation_rounding_bound() {
    let _mode = mode(true);
    for q in [QType::Q4_K, QType::Q6_K] {
        for cols in [256, 512, 4096] {
            for rows in [7, 13] {
                let bytes = random_blocks(q, rows, cols, 31 + cols as u64);
                let t = QTensor::from_ggml(q, [rows, cols], &bytes, &Device::cpu()).unwrap();
                let wt = t.dequantize().unwrap();
                let w = values(&wt);
                for m in [1, 3, 5, 8] {
                    let xs = data(m * cols, 37 + m as u64, 2.0);
                    let x = Tensor::from_vec(xs.clone(), &[m, cols], &Device::cpu()).unwrap();
                    let got = values(&t.matmul_t(&x).unwrap());
                    let want = reference(&wt, &x);
                    for i in 0..m {
                        let xi = &xs[i * cols..(i + 1) * cols];
                        let steps: Vec<f32> = xi
                            .chunks(32)
                            .map(|b| b.iter().fold(0f32, |a, v| a.max(v.abs())) / 127.0)
                            .collect();
                        for r in 0..rows {
                            let mag: f32 = (0..cols).map(|k| (w[r * cols + k] * xi[k]).abs()).sum();
                            let bound: f32 = (0..cols)
                                .map(|k| w[r * cols + k].abs() * steps[k / 32] * 0.5)
                                .sum::<f32>()
                                * 1.01
                                + 3e-5 * mag
                                + 1e-4;
                            let (g, e) = (got[i * rows + r], want[i * rows + r]);
                            assert!(
                                (g - e).abs() <= bound,
                                "{q} [{rows}, {cols}] m={m} [{i},{r}]: {g} vs {e}, bound {bound}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn nan_activations_give_nan_rows() {
    for device in common::devices() {
        for exact in [false, true] {
            let _mode = mode(!exact);
            for q in QType::ALL {
                let shape = [5, 2 * q.block_len()];
                let t = QTensor::from_ggml(q, shape, &random_blocks(q, 5, shape[1], 2), &device)
                    .unwrap();
                let mut xs = data(2 * shape[1], 1, 1.0);
                xs[shape[1] + 6] = f32::NAN;
                let x = Tensor::from_vec(xs, &[2, shape[1]], &device).unwrap();
                let y = values(&t.matmul_t(&x).unwrap());
                let ctx = format!("{q} exact={exact} on {device}: {y:?}");
                assert!(y[..5].iter().all(|v| v.is_finite()), "{ctx}");
                assert!(y[5..].iter().all(|v| v.is_nan()), "{ctx}");
            }
        }
    }
}

#[test]
fn quantize_is_ggml_reference_rounding() {
    // One Q8_0 block: max |x| = 2.54 gives d = 0.02, q = round(x / d).
    let mut xs = vec![0f32; 32];
    xs[0] = 2.54;
    xs[1] = -0.03; // -1.5 steps rounds half away from zero to -2
    xs[2] = 0.01; // 0.5 steps rounds to 1
    let t = Tensor::from_vec(xs.clone(), &[1, 32], &Device::cpu()).unwrap();
    let bytes = QTensor::quantize(&t, QType::Q8_0)
        .unwrap()
        .to_ggml()
        .unwrap();
    assert_eq!(
        f16::from_le_bytes([bytes[0], bytes[1]]),
        f16::from_f32(2.54 / 127.0)
    );
    assert_eq!(&bytes[2..5], &[127u8, (-2i8) as u8, 1]);
    // Q4_0: the largest-magnitude value (with its sign) maps to -8: d = max / -8.
    xs[0] = -4.0;
    xs[1] = 2.0; // 2 / 0.5 = 4 steps: q = trunc(4 + 8.5) = 12
    let t = Tensor::from_vec(xs, &[1, 32], &Device::cpu()).unwrap();
    let bytes = QTensor::quantize(&t, QType::Q4_0)
        .unwrap()
        .to_ggml()
        .unwrap();
    assert_eq!(f16::from_le_bytes([bytes[0], bytes[1]]).to_f32(), 0.5);
    assert_eq!(bytes[2] & 0xF, 0); // -4 / 0.5 + 8.5 = 0.5 -> 0
    assert_eq!(bytes[3] & 0xF, 12);
}

#[test]
fn gather_rows_is_dequantized_rows() {
    for device in common::devices() {
        for q in QType::ALL {
            let shape = [9, 2 * q.block_len()];
            let bytes = random_blocks(q, 9, shape[1], 21);
            let dense = values(
                &QTensor::from_ggml(q, shape, &bytes, &Device::cpu())
                    .unwrap()
                    .dequantize()
                    .unwrap(),
            );
            let t = QTensor::from_ggml(q, shape, &bytes, &device).unwrap();
            let ids = Tensor::from_vec(vec![8i32, 0, 3, 8], &[4], &device).unwrap();
            let got = t.gather_rows(&ids).unwrap();
            assert_eq!(got.shape(), &[4, shape[1]]);
            let c = shape[1];
            let want: Vec<f32> = [8, 0, 3, 8]
                .iter()
                .flat_map(|&r| dense[r * c..(r + 1) * c].to_vec())
                .collect();
            let amax = want.iter().fold(0f32, |a, v| a.max(v.abs()));
            assert_close(
                &values(&got),
                &want,
                1e-6,
                1e-6 * amax,
                &format!("{q} on {device}"),
            );
            // A bad id: found before running on the CPU, by the kernel (at the readback) on a GPU.
            let bad = Tensor::from_vec(vec![1u32, 9], &[2], &device).unwrap();
            let err = t.gather_rows(&bad).and_then(|g| g.to_vec::<f32>());
            assert!(
                matches!(
                    err,
                    Err(Error::IndexOutOfRange {
                        index: 9,
                        bound: 9,
                        ..
                    })
                ),
                "{q} on {device}: {err:?}"
            );
            let neg = Tensor::from_vec(vec![-1i32], &[1], &device).unwrap();
            assert!(t.gather_rows(&neg).and_then(|g| g.to_vec::<f32>()).is_err());
            // The device stays usable.
            assert_eq!(t.gather_rows(&ids).unwrap().shape(), &[4, c]);
        }
    }
}

#[test]
fn bad_arguments_are_errors() {
    let cpu = Device::cpu();
    let bytes = random_blocks(QType::Q8_0, 2, 64, 1);
    assert!(matches!(
        QTensor::from_ggml(QType::Q8_0, [2, 48], &bytes, &cpu),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(QTensor::from_ggml(QType::Q8_0, [2, 64], &bytes[1..], &cpu).is_err());
    assert!(QTensor::from_ggml(QType::Q8_0, [usize::MAX / 2, 64], &bytes, &cpu).is_err());
    let t = QTensor::from_ggml(QType::Q8_0, [2, 64], &bytes, &cpu).unwrap();
    let x = Tensor::zeros(&[3, 32], DType::F32, &cpu).unwrap();
    assert!(matches!(t.matmul_t(&x), Err(Error::ShapeMismatch { .. })));
    let xi = Tensor::zeros(&[3, 64], DType::I32, &cpu).unwrap();
    assert!(matches!(
        t.matmul_t(&xi),
        Err(Error::UnsupportedDType { .. })
    ));
    let x3 = Tensor::zeros(&[2, 32, 32], DType::F32, &cpu).unwrap();
    assert!(QTensor::quantize(&x3, QType::Q8_0).is_err());
    assert!(QTensor::quantize(
        &Tensor::zeros(&[2, 256], DType::F32, &cpu).unwrap(),
        QType::Q4_K
    )
    .is_err());
    let ids = Tensor::zeros(&[2, 2], DType::U32, &cpu).unwrap();
    assert!(matches!(
        t.gather_rows(&ids),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn f16_activations_and_batched_shapes() {
    // Draws from the global generator: other tests of the binary compare seeded draws.
    let _rng = common::rng_lock();
    let cpu = Device::cpu();
    let t = QTensor::quantize(&Tensor::randn(&[6, 64], &cpu).unwrap(), QType::Q4_0).unwrap();
    let x = Tensor::from_vec(data(2 * 3 * 64, 4, 1.0), &[2, 3, 64], &cpu).unwrap();
    let y32 = t.matmul_t(&x).unwrap();
    let y16 = t.matmul_t(&x.to_dtype(DType::F16).unwrap()).unwrap();
    assert_eq!(y32.shape(), &[2, 3, 6]);
    assert_eq!(y16.dtype(), DType::F32);
    assert_close(&values(&y16), &values(&y32), 2e-2, 2e-2, "f16 activations");
}

/// `matmul_t_many` gives each matrix's `matmul_t`, bit for bit, on the CPU (the grouped decode
/// kernel for one activation row, one by one otherwise) and on every adapter, for every type,
/// with matrices of different row counts and a NaN activation.
#[test]
fn grouped_matmul_is_the_separate_products_bit_for_bit() {
    let _mode = mode(true);
    for integer in [true, false] {
        wgtensor::set_quantized_activations(integer);
        for dev in common::devices() {
            for q in [QType::Q8_0, QType::Q4_0, QType::Q4_K, QType::Q6_K] {
                let cols = 2 * q.block_len();
                let ts: Vec<QTensor> = [7usize, 1, 66]
                    .iter()
                    .map(|&r| {
                        let b = random_blocks(q, r, cols, 31 + r as u64);
                        QTensor::from_ggml(q, [r, cols], &b, &dev).unwrap()
                    })
                    .collect();
                let refs: Vec<&QTensor> = ts.iter().collect();
                for m in [1, 3] {
                    let mut xv = data(m * cols, 33, 2.0);
                    for nan in [false, true] {
                        if nan {
                            xv[5] = f32::NAN;
                        }
                        let x = Tensor::from_vec(xv.clone(), &[m, cols], &dev).unwrap();
                        let ys = QTensor::matmul_t_many(&refs, &x).unwrap();
                        assert_eq!(ys.len(), 3);
                        for (t, y) in ts.iter().zip(&ys) {
                            let want = t.matmul_t(&x).unwrap();
                            assert_eq!(y.shape(), want.shape());
                            let bits = |v: Vec<f32>| -> Vec<u32> {
                                v.iter().map(|f| f.to_bits()).collect()
                            };
                            assert_eq!(
                                bits(values(y)),
                                bits(values(&want)),
                                "{q} on {dev} m={m} integer={integer} nan={nan}"
                            );
                            if nan && m == 1 {
                                assert!(values(y).iter().all(|v| v.is_nan()), "{q} NaN row");
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(QTensor::matmul_t_many(
        &[],
        &Tensor::ones(&[1, 32], DType::F32, &Device::cpu()).unwrap()
    )
    .unwrap()
    .is_empty());
}

/// `matmul_t_many` checks shapes as `matmul_t` does: activations whose last dimension is not
/// every matrix's column count (even when their element count is) are a `ShapeMismatch` naming
/// both shapes, in both activation modes, on the CPU and every adapter; never `Ok` with a
/// result shorter than its shape.
#[test]
fn grouped_matmul_checks_shapes_like_matmul_t() {
    let _mode = mode(true);
    for integer in [true, false] {
        wgtensor::set_quantized_activations(integer);
        for dev in common::devices() {
            let mk = |r: usize, c: usize| {
                let b = random_blocks(QType::Q8_0, r, c, 7);
                QTensor::from_ggml(QType::Q8_0, [r, c], &b, &dev).unwrap()
            };
            let (a, b) = (mk(3, 32), mk(2, 32));
            for shape in [vec![32, 1], vec![2, 16], vec![1, 64], vec![32]] {
                let x = Tensor::zeros(&shape, DType::F32, &dev).unwrap();
                let want_ok = shape == [32];
                for ws in [vec![&a], vec![&a, &b]] {
                    let r = QTensor::matmul_t_many(&ws, &x);
                    if want_ok {
                        let ys = r.unwrap();
                        assert_eq!(values(&ys[0]), vec![0.0; 3], "{dev} {shape:?}");
                        continue;
                    }
                    match r {
                        Err(Error::ShapeMismatch { op, lhs, rhs }) => {
                            assert_eq!(op, "QTensor::matmul_t_many");
                            assert_eq!((lhs, rhs), (shape.clone(), vec![3, 32]));
                        }
                        other => panic!(
                            "{dev} integer={integer} x {shape:?}: expected ShapeMismatch, got {:?}",
                            other.map(|v| v.iter().map(|t| t.shape().to_vec()).collect::<Vec<_>>())
                        ),
                    }
                }
            }
            // A group whose matrices disagree: the one that does not fit is named.
            let c = mk(2, 64);
            let x = Tensor::zeros(&[1, 32], DType::F32, &dev).unwrap();
            match QTensor::matmul_t_many(&[&a, &c], &x) {
                Err(Error::ShapeMismatch { rhs, .. }) => assert_eq!(rhs, vec![2, 64]),
                other => panic!("{dev}: expected ShapeMismatch, got {:?}", other.is_ok()),
            }
        }
    }
}

/// Child body of `cpu_paths_give_the_same_bits_at_any_thread_count_and_isa`: one line per
/// product, `BITS` and a hash of every output's bits, in both modes.
#[test]
fn cpu_quant_bits_child() {
    if !common::is_child("quant::cpu_quant_bits_child") {
        return;
    }
    let _mode = mode(true);
    for integer in [true, false] {
        wgtensor::set_quantized_activations(integer);
        for q in [QType::Q8_0, QType::Q4_0, QType::Q4_K, QType::Q6_K] {
            // 70 rows: four-row blocks plus a tail; 2 panels of weight rows at m >= 16.
            let shape = [70, 8 * q.block_len()];
            let bytes = random_blocks(q, shape[0], shape[1], 21);
            let t = QTensor::from_ggml(q, shape, &bytes, &Device::cpu()).unwrap();
            for m in [1, 2, 5, 16, 33] {
                let x =
                    Tensor::from_vec(data(m * shape[1], 23, 3.0), &[m, shape[1]], &Device::cpu())
                        .unwrap();
                let y = values(&t.matmul_t(&x).unwrap());
                let h = y.iter().fold(0xcbf29ce484222325u64, |h, v| {
                    (h ^ v.to_bits() as u64).wrapping_mul(0x100000001b3)
                });
                println!("BITS {q} m={m} integer={integer} {h:016x}");
            }
            // A grouped decode product: this matrix with two others, rows 4k+1 and 4k+3, so
            // four-row groups straddle the matrices.
            let others: Vec<QTensor> = [5usize, 39]
                .iter()
                .map(|&r| {
                    let b = random_blocks(q, r, shape[1], 24 + r as u64);
                    QTensor::from_ggml(q, [r, shape[1]], &b, &Device::cpu()).unwrap()
                })
                .collect();
            let x =
                Tensor::from_vec(data(shape[1], 25, 3.0), &[1, shape[1]], &Device::cpu()).unwrap();
            let ys = QTensor::matmul_t_many(&[&t, &others[0], &others[1]], &x).unwrap();
            let h = ys
                .iter()
                .flat_map(values)
                .fold(0xcbf29ce484222325u64, |h, v| {
                    (h ^ v.to_bits() as u64).wrapping_mul(0x100000001b3)
                });
            println!("BITS {q} grouped integer={integer} {h:016x}");
        }
    }
    common::child_done("quant::cpu_quant_bits_child");
}

/// The CPU's quantized products give the same bits on 1 and 3 threads and with the portable
/// loop instead of the AVX2 kernels (`WGTENSOR_QUANT_SCALAR=1`): every output is computed in
/// one fixed order, whichever path and thread runs it.
#[test]
fn cpu_paths_give_the_same_bits_at_any_thread_count_and_isa() {
    let lines = |envs: &[(&str, &str)]| -> Vec<String> {
        let out = common::run_child("quant::cpu_quant_bits_child", envs);
        let v: Vec<String> = out
            .lines()
            .filter_map(|l| l.find("BITS ").map(|i| l[i..].to_string()))
            .collect();
        assert_eq!(v.len(), 48, "{out}");
        v
    };
    let one = lines(&[("RAYON_NUM_THREADS", "1")]);
    assert_eq!(one, lines(&[("RAYON_NUM_THREADS", "3")]), "1 vs 3 threads");
    assert_eq!(
        one,
        lines(&[("RAYON_NUM_THREADS", "2"), ("WGTENSOR_QUANT_SCALAR", "1")]),
        "AVX2 vs the portable loop"
    );
}

/// Timing of the two matrix-vector entries on each adapter (4096 x 4096, one activation row),
/// alternated in one run: `cargo test --test quant -- --ignored --nocapture matvec_entry_timing`.
#[test]
#[ignore = "a timing, not a check: run it by name"]
fn matvec_entry_timing() {
    for device in common::devices().into_iter().filter(|d| d.is_gpu()) {
        for q in QType::ALL {
            let shape = [4096, 4096];
            let t =
                QTensor::from_ggml(q, shape, &random_blocks(q, 4096, 4096, 3), &device).unwrap();
            let x = Tensor::from_vec(data(4096, 5, 1.0), &[1, 4096], &device).unwrap();
            let mut best = [f64::MAX; 2];
            for _ in 0..3 {
                for (i, name) in ["matvec", "matvec_serial"].into_iter().enumerate() {
                    wgtensor::testing::force_quant_matvec(Some(name));
                    let start = std::time::Instant::now();
                    values(&t.matmul_t(&x).unwrap());
                    best[i] = best[i].min(start.elapsed().as_secs_f64() * 1e3);
                }
            }
            wgtensor::testing::force_quant_matvec(None);
            eprintln!(
                "{device} {q}: matvec {:.1} ms, matvec_serial {:.1} ms",
                best[0], best[1]
            );
        }
    }
}
