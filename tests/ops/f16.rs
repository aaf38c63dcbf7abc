//! f16 compute on every device against the CPU: + - * / bit-exact (math in f32, one rounding,
//! and the CPU's result is checked against `half` itself), other ops within f16 rounding;
//! NaN/Inf; odd lengths and odd view offsets (two halves share a word); reductions, softmax and
//! matmul accumulate in f32. FAULTS row 12: the same results without SHADER_F16 (the unpacking
//! path, forced with WGTENSOR_DISABLE_SHADER_F16=1 in a child process, and on GL views).

use crate::common;

use common::{assert_close, data, devices, gl_views, is_child, run_child};
use half::f16;
use wgtensor::testing::{binary_ops, compare_ops, row_ops, unary_ops};
use wgtensor::{DType, Device, Result, Tensor};

fn h(v: &[f32]) -> Vec<f16> {
    v.iter().map(|&x| f16::from_f32(x)).collect()
}

fn ht(v: &[f16], shape: &[usize], d: &Device) -> Tensor {
    Tensor::from_slice(v, shape, d).unwrap()
}

fn bits(t: &Tensor) -> Vec<u16> {
    t.to_vec::<f16>()
        .unwrap()
        .iter()
        .map(|x| if x.is_nan() { 0x7e00 } else { x.to_bits() })
        .collect()
}

fn f32s(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap()
}

type Bin = fn(&Tensor, &Tensor) -> Result<Tensor>;

/// (name, op, the f32 reference rounded once to f16).
type Exact = (&'static str, Bin, fn(f32, f32) -> f32);

const EXACT: [Exact; 6] = [
    ("add", Tensor::add, |a, b| a + b),
    ("sub", Tensor::sub, |a, b| a - b),
    ("mul", Tensor::mul, |a, b| a * b),
    ("div", Tensor::div, |a, b| a / b),
    ("maximum", Tensor::maximum, |a, b| {
        if a.is_nan() || b.is_nan() {
            f32::NAN
        } else {
            a.max(b)
        }
    }),
    ("minimum", Tensor::minimum, |a, b| {
        if a.is_nan() || b.is_nan() {
            f32::NAN
        } else {
            a.min(b)
        }
    }),
];

/// Operands with specials mixed in: NaN, ±inf, ±0, subnormals, the largest finite values.
fn operands(n: usize, seed: u64) -> Vec<f16> {
    let mut v = h(&data(n, seed, 300.0));
    let specials = [
        f16::NAN,
        f16::INFINITY,
        f16::NEG_INFINITY,
        f16::ZERO,
        f16::NEG_ZERO,
        f16::from_bits(1),
        f16::MAX,
        f16::MIN,
        f16::from_f32(1e-3),
    ];
    for (k, s) in specials.iter().enumerate() {
        if k * 7 < n {
            v[k * 7] = *s;
        }
    }
    v
}

/// The checks FAULTS row 12 reruns without SHADER_F16.
fn f16_elementwise_checks() {
    for n in [0usize, 1, 2, 3, 257, 1001] {
        let (a, b) = (operands(n, 1), operands(n, 2));
        for d in devices() {
            let (ta, tb) = (ht(&a, &[n], &d), ht(&b, &[n], &d));
            for (name, op, f) in EXACT {
                let got = op(&ta, &tb).unwrap();
                assert_eq!(got.dtype(), DType::F16);
                let want: Vec<f16> = a
                    .iter()
                    .zip(&b)
                    .map(|(x, y)| f16::from_f32(f(x.to_f32(), y.to_f32())))
                    .collect();
                let want = ht(&want, &[n], &Device::cpu());
                assert_eq!(bits(&got), bits(&want), "{name} n={n} on {d}");
            }
            // Scalars: computed in f32 with the unrounded scalar, rounded once.
            let got = ta.mul_scalar(0.1).unwrap();
            let want: Vec<f16> = a.iter().map(|x| f16::from_f32(x.to_f32() * 0.1)).collect();
            assert_eq!(
                bits(&got),
                bits(&ht(&want, &[n], &Device::cpu())),
                "mul_scalar on {d}"
            );
            let got = (1.0f32 - &ta).unwrap();
            let want: Vec<f16> = a.iter().map(|x| f16::from_f32(1.0 - x.to_f32())).collect();
            assert_eq!(
                bits(&got),
                bits(&ht(&want, &[n], &Device::cpu())),
                "1 - x on {d}"
            );
        }
    }
    // Odd offsets and broadcasts: each output word mixes halves from different input words.
    let a = operands(7 * 9, 3);
    let b = operands(9, 4);
    let cpu = Device::cpu();
    let (ca, cb) = (ht(&a, &[7, 9], &cpu), ht(&b, &[9], &cpu));
    let cv = ca
        .narrow(0, 1, 5)
        .unwrap()
        .narrow(1, 1, 7)
        .unwrap()
        .t()
        .unwrap();
    for d in devices() {
        let (ta, tb) = (ht(&a, &[7, 9], &d), ht(&b, &[9], &d));
        let tv = ta
            .narrow(0, 1, 5)
            .unwrap()
            .narrow(1, 1, 7)
            .unwrap()
            .t()
            .unwrap();
        let bv = tb.narrow(0, 1, 7).unwrap().unsqueeze(1).unwrap();
        let cbv = cb.narrow(0, 1, 7).unwrap().unsqueeze(1).unwrap();
        for (name, op, _) in EXACT {
            assert_eq!(
                bits(&op(&tv, &bv).unwrap()),
                bits(&op(&cv, &cbv).unwrap()),
                "{name} on strided views on {d}"
            );
        }
        assert_eq!(
            bits(&tv.contiguous().unwrap()),
            bits(&cv.contiguous().unwrap()),
            "{d}"
        );
        // Unary ops: within one f16 rounding of the CPU (math in f32 on both).
        let pos = ht(&h(&data(333, 5, 4.0)), &[333], &d);
        let cpos = ht(&h(&data(333, 5, 4.0)), &[333], &cpu);
        // Every op of the table (a new one is swept without editing this file), on the raw
        // values and on positive ones (the domain of log, sqrt and pow).
        let shift = |t: &Tensor| t.abs().unwrap().add_scalar(0.5).unwrap();
        let (ppos, pcpos) = (shift(&pos), shift(&cpos));
        for op in unary_ops() {
            let name = op.name();
            for (x, cx) in [(&pos, &cpos), (&ppos, &pcpos)] {
                let got = op.call(x).unwrap();
                assert_eq!(got.dtype(), DType::F16, "{name}");
                assert_close(&f32s(&got), &f32s(&op.call(cx).unwrap()), 2e-3, 2e-3, name);
            }
        }
        for op in binary_ops() {
            let name = op.name();
            for (x, cx) in [(&pos, &cpos), (&ppos, &pcpos)] {
                let got = op.call(x, &ppos).unwrap();
                assert_eq!(got.dtype(), DType::F16, "{name}");
                let want = op.call(cx, &pcpos).unwrap();
                assert_close(&f32s(&got), &f32s(&want), 2e-3, 2e-3, name);
                let got = op.call_scalar(x, 1.5).unwrap();
                let want = op.call_scalar(cx, 1.5).unwrap();
                assert_close(&f32s(&got), &f32s(&want), 2e-3, 2e-3, op.scalar_name());
            }
        }
        let p = pos.abs().unwrap().pow_scalar(1.5).unwrap();
        assert_close(
            &f32s(&p),
            &f32s(&cpos.abs().unwrap().pow_scalar(1.5).unwrap()),
            2e-3,
            2e-3,
            "pow_scalar",
        );
        // Specials through unary ops.
        let s = ht(
            &[f16::NAN, f16::INFINITY, f16::NEG_INFINITY, f16::NEG_ZERO],
            &[4],
            &d,
        );
        let r = f32s(&s.neg().unwrap());
        assert!(r[0].is_nan() && r[1] == f32::NEG_INFINITY && r[2] == f32::INFINITY);
        assert_eq!(r[3].to_bits(), 0.0f32.to_bits(), "-(-0) on {d}");
        let r = f32s(&s.relu().unwrap());
        assert!(
            r[0].is_nan() && r[1] == f32::INFINITY && r[2] == 0.0,
            "relu on {d}"
        );
        let r = f32s(&s.exp().unwrap());
        assert!(
            r[0].is_nan() && r[1] == f32::INFINITY && r[2] == 0.0,
            "exp on {d}"
        );
    }
}

#[test]
fn f16_elementwise_matches_half_on_every_device() {
    f16_elementwise_checks();
}

#[test]
fn native_f16_is_used_where_the_adapter_offers_it() {
    for d in common::gpus() {
        let offered = wgtensor::adapters()
            .into_iter()
            .find(|a| a.names.contains(&d.to_string()))
            .map(|a| a.shader_f16)
            .unwrap_or(false);
        assert_eq!(wgtensor::testing::native_f16(&d), offered, "{d}");
    }
    assert!(!wgtensor::testing::native_f16(&Device::cpu()));
}

#[test]
fn fallback_child() {
    if !is_child("f16::fallback_child") {
        return;
    }
    for d in common::gpus() {
        assert!(
            !wgtensor::testing::native_f16(&d),
            "WGTENSOR_DISABLE_SHADER_F16=1 must select the unpacking kernels on {d}"
        );
    }
    f16_elementwise_checks();
    f16_compare_where_clamp_checks();
    common::child_done("f16::fallback_child");
}

/// FAULTS row 12: f16 on an adapter without SHADER_F16 works through the unpacking path with
/// the same results (no shader-compile panic).
#[test]
fn faults_row_12_f16_without_shader_f16_gives_the_same_results() {
    run_child(
        "f16::fallback_child",
        &[("WGTENSOR_DISABLE_SHADER_F16", "1")],
    );
    // GL views never offer SHADER_F16 here: the same ops, compared with the CPU.
    for g in gl_views() {
        assert!(!wgtensor::testing::native_f16(&g));
        let a = operands(101, 8);
        let b = operands(101, 9);
        let (ta, tb) = (ht(&a, &[101], &g), ht(&b, &[101], &g));
        let cpu = Device::cpu();
        let (ca, cb) = (ht(&a, &[101], &cpu), ht(&b, &[101], &cpu));
        for (name, op, _) in EXACT {
            assert_eq!(
                bits(&op(&ta, &tb).unwrap()),
                bits(&op(&ca, &cb).unwrap()),
                "{name} on {g}"
            );
        }
        assert_close(
            &f32s(&ta.exp().unwrap()),
            &f32s(&ca.exp().unwrap()),
            2e-3,
            2e-3,
            "gl exp",
        );
    }
}

fn f16_compare_where_clamp_checks() {
    let a = operands(203, 11);
    let b = operands(203, 12);
    let cpu = Device::cpu();
    let (ca, cb) = (ht(&a, &[203], &cpu), ht(&b, &[203], &cpu));
    for d in devices() {
        let (ta, tb) = (ht(&a, &[203], &d), ht(&b, &[203], &d));
        // Every comparison of the table; f16 compares exactly as its f32 value.
        for op in compare_ops() {
            let (name, m) = (op.name(), op.call(&ta, &tb).unwrap());
            assert_eq!(m.dtype(), DType::U8);
            let want: Vec<u8> = a
                .iter()
                .zip(&b)
                .map(|(x, y)| u8::from(op.reference(x.to_f32(), y.to_f32())))
                .collect();
            assert_eq!(m.to_vec::<u8>().unwrap(), want, "{name} on {d}");
        }
        let m = ta.gt_scalar(0.5).unwrap().to_vec::<u8>().unwrap();
        let want: Vec<u8> = a.iter().map(|x| u8::from(x.to_f32() > 0.5)).collect();
        assert_eq!(m, want, "gt_scalar on {d}");
        let mask = ta.lt(&tb).unwrap();
        let w = mask.where_cond(&ta, &tb).unwrap();
        assert_eq!(w.dtype(), DType::F16);
        assert_eq!(
            bits(&w),
            bits(&ca.lt(&cb).unwrap().where_cond(&ca, &cb).unwrap()),
            "{d}"
        );
        let c = ta.clamp(-10.0, 20.3).unwrap();
        let want: Vec<f16> = a
            .iter()
            .map(|x| {
                if x.is_nan() {
                    f16::NAN
                } else {
                    f16::from_f32(x.to_f32().clamp(-10.0, 20.3))
                }
            })
            .collect();
        assert_eq!(bits(&c), bits(&ht(&want, &[203], &cpu)), "clamp on {d}");
        // cat / stack keep the halves in place at odd boundaries.
        let j = Tensor::cat(&[&ta.narrow(0, 1, 3).unwrap(), &ta], 0).unwrap();
        let cj = Tensor::cat(&[&ca.narrow(0, 1, 3).unwrap(), &ca], 0).unwrap();
        assert_eq!(bits(&j), bits(&cj), "cat on {d}");
        let s = Tensor::stack(&[&ta, &tb], 1).unwrap();
        assert_eq!(
            bits(&s),
            bits(&Tensor::stack(&[&ca, &cb], 1).unwrap()),
            "stack on {d}"
        );
    }
}

#[test]
fn f16_compare_where_clamp_cat_match_the_cpu() {
    f16_compare_where_clamp_checks();
}

#[test]
fn f16_reductions_softmax_matmul_accumulate_in_f32() {
    let (m, k, n) = (7usize, 33usize, 5usize);
    let a = h(&data(m * k, 21, 2.0));
    let b = h(&data(k * n, 22, 2.0));
    let cpu = Device::cpu();
    let a32: Vec<f32> = a.iter().map(|x| x.to_f32()).collect();
    let b32: Vec<f32> = b.iter().map(|x| x.to_f32()).collect();
    let (ca, cb) = (
        Tensor::from_slice(&a32, &[m, k], &cpu).unwrap(),
        Tensor::from_slice(&b32, &[k, n], &cpu).unwrap(),
    );
    for d in devices() {
        let (ta, tb) = (ht(&a, &[m, k], &d), ht(&b, &[k, n], &d));
        let mm = ta.matmul(&tb).unwrap();
        assert_eq!((mm.dtype(), mm.shape()), (DType::F16, &[m, n][..]));
        // The f32 product rounded once to f16: within half an f16 ulp of the f32 result.
        assert_close(
            &f32s(&mm),
            &common::values(&ca.matmul(&cb).unwrap()),
            1e-3,
            1e-3,
            "matmul",
        );
        type Red = fn(&Tensor) -> Result<Tensor>;
        let reds: [(&str, Red, Red); 5] = [
            ("sum", |t| t.sum(1, false), |t| t.sum(1, false)),
            ("mean", |t| t.mean(0, true), |t| t.mean(0, true)),
            ("max", |t| t.max(1, false), |t| t.max(1, false)),
            ("min", |t| t.min_all(), |t| t.min_all()),
            (
                "prod",
                |t| t.narrow(1, 0, 4)?.prod(1, false),
                |t| t.narrow(1, 0, 4)?.prod(1, false),
            ),
        ];
        for (name, f16_op, f32_op) in reds {
            let got = f16_op(&ta).unwrap();
            assert_eq!(got.dtype(), DType::F16, "{name}");
            let want = f32_op(&ca).unwrap();
            assert_close(&f32s(&got), &common::values(&want), 1e-3, 1e-3, name);
        }
        // Every row op of the table: computed in f32 and rounded once to f16.
        for op in row_ops() {
            let got = op.call(&ta).unwrap();
            let name = op.name();
            assert_eq!(got.dtype(), DType::F16, "{name} on {d}");
            let want = op.call(&ca).unwrap();
            let ctx = format!("{name} on {d}");
            assert_close(&f32s(&got), &common::values(&want), 2e-3, 2e-3, &ctx);
        }
        let am = ta.argmax(1, false).unwrap();
        assert_eq!(am.dtype(), DType::U32);
        assert_eq!(
            am.to_vec::<u32>().unwrap(),
            ca.argmax(1, false).unwrap().to_vec::<u32>().unwrap(),
            "argmax on {d}"
        );
        let ls = ta.log_softmax(0).unwrap();
        assert_close(
            &f32s(&ls),
            &common::values(&ca.log_softmax(0).unwrap()),
            2e-3,
            2e-3,
            "lsm",
        );
        // A sum that overflows f16 term by term stays exact in the f32 accumulator.
        let big = ht(&[f16::from_f32(2048.0); 40], &[40], &d);
        let s = big
            .sum_all()
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(s.is_infinite(), "81920 rounds past f16's range: inf on {d}");
        let small = ht(&vec![f16::from_f32(1.0); 3000], &[3000], &d);
        let s = small
            .sum_all()
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        // Accumulated in f16, 1 + 1 + ... sticks at 2048; in f32 it is exact.
        assert_eq!(s, 3000.0, "f32 accumulation on {d}");
    }
}

/// `x · Wᵀ` with f16 operands and `W`'s rows contiguous (a layer's weight): one row, a few
/// rows, and prefill-sized row counts (widened panels of `W` on the CPU, a tail panel), with a
/// NaN in one row: the f32 product rounded once, on every device.
#[test]
fn f16_linear_layer_shapes_match_the_f32_product() {
    let (k, n) = (40usize, 130usize);
    let cpu = Device::cpu();
    let w = h(&data(n * k, 41, 1.0));
    let w32: Vec<f32> = w.iter().map(|x| x.to_f32()).collect();
    let cw = Tensor::from_slice(&w32, &[n, k], &cpu).unwrap();
    for m in [1usize, 3, 16, 70] {
        let mut x = h(&data(m * k, 42 + m as u64, 2.0));
        x[(k + 3) % (m * k)] = f16::NAN;
        let x32: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
        let want = common::values(
            &Tensor::from_slice(&x32, &[m, k], &cpu)
                .unwrap()
                .matmul(&cw.t().unwrap())
                .unwrap(),
        );
        for d in devices() {
            let y = ht(&x, &[m, k], &d)
                .matmul(&ht(&w, &[n, k], &d).t().unwrap())
                .unwrap();
            assert_eq!((y.dtype(), y.shape()), (DType::F16, &[m, n][..]));
            let got = f32s(&y);
            for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.is_nan(), e.is_nan(), "NaN at {i} m={m} on {d}");
            }
            let finite = |v: &[f32]| {
                v.iter()
                    .map(|x| if x.is_nan() { 0.0 } else { *x })
                    .collect::<Vec<_>>()
            };
            assert_close(
                &finite(&got),
                &finite(&want),
                1e-3,
                1e-3,
                &format!("m={m} on {d}"),
            );
        }
    }
}
