//! I32 and U32 compute with WGSL integer semantics, equal on every device: wrapping + - * neg,
//! `x / 0 == x`, `i32::MIN / -1 == i32::MIN`, `x % 0 == 0`, `MIN % -1 == 0`, truncated `%`
//! (FAULTS row 11); comparisons, where_cond, clamp, cat/stack, reductions (sums and products
//! wrap); float-only ops and integer matmul are typed errors; scalars must be integers.

use crate::common;

use common::devices;
use wgtensor::testing::{binary_ops, unary_ops};
use wgtensor::{DType, Device, Error, Result, Tensor};

const EDGE_I: [i32; 12] = [
    0,
    1,
    -1,
    2,
    -2,
    7,
    -7,
    3,
    i32::MAX,
    i32::MIN,
    1 << 16,
    -123_456,
];
const EDGE_U: [u32; 9] = [0, 1, 2, 7, 3, u32::MAX, 1 << 31, 1 << 16, 123_456];

/// Every (a, b) pair of the edge values, as two flat tensors.
fn pairs<T: Copy>(v: &[T]) -> (Vec<T>, Vec<T>) {
    let mut a = Vec::new();
    let mut b = Vec::new();
    for &x in v {
        for &y in v {
            a.push(x);
            b.push(y);
        }
    }
    (a, b)
}

/// WGSL's integer division and remainder, written out independently of the library.
fn wgsl_div_i(a: i32, b: i32) -> i32 {
    if b == 0 {
        a
    } else if a == i32::MIN && b == -1 {
        i32::MIN
    } else {
        a / b
    }
}

fn wgsl_rem_i(a: i32, b: i32) -> i32 {
    if b == 0 || (a == i32::MIN && b == -1) {
        0
    } else {
        a % b
    }
}

type Bin = fn(&Tensor, &Tensor) -> Result<Tensor>;

/// (name, op, the host reference).
type Case<T> = (&'static str, Bin, fn(T, T) -> T);

#[test]
fn faults_row_11_i32_arithmetic_matches_wgsl_on_every_device() {
    let (a, b) = pairs(&EDGE_I);
    let n = a.len();
    let ops: [Case<i32>; 7] = [
        ("add", Tensor::add, i32::wrapping_add),
        ("sub", Tensor::sub, i32::wrapping_sub),
        ("mul", Tensor::mul, i32::wrapping_mul),
        ("div", Tensor::div, wgsl_div_i),
        ("rem", Tensor::rem, wgsl_rem_i),
        ("maximum", Tensor::maximum, i32::max),
        ("minimum", Tensor::minimum, i32::min),
    ];
    // GL views too: another shader compiler must give the same integer semantics.
    for d in devices().into_iter().chain(common::gl_views()) {
        let ta = Tensor::from_slice(&a, &[n], &d).unwrap();
        let tb = Tensor::from_slice(&b, &[n], &d).unwrap();
        for (name, op, f) in ops {
            let got = op(&ta, &tb).unwrap();
            assert_eq!(got.dtype(), DType::I32);
            let want: Vec<i32> = a.iter().zip(&b).map(|(&x, &y)| f(x, y)).collect();
            assert_eq!(got.to_vec::<i32>().unwrap(), want, "{name} on {d}");
        }
        // The cases FAULTS row 11 names, spelled out.
        let x = Tensor::from_vec(vec![7i32, i32::MIN, -7, 7, i32::MIN], &[5], &d).unwrap();
        let y = Tensor::from_vec(vec![0i32, -1, 3, -3, -1], &[5], &d).unwrap();
        assert_eq!(
            x.div(&y).unwrap().to_vec::<i32>().unwrap(),
            [7, i32::MIN, -2, -2, i32::MIN]
        );
        assert_eq!(
            (&x % &y).unwrap().to_vec::<i32>().unwrap(),
            [0, 0, -1, 1, 0]
        );
        let neg = x.neg().unwrap().to_vec::<i32>().unwrap();
        assert_eq!(neg, [-7, i32::MIN, 7, -7, i32::MIN], "wrapping neg on {d}");
        let abs = x.abs().unwrap().to_vec::<i32>().unwrap();
        assert_eq!(abs, [7, i32::MIN, 7, 7, i32::MIN], "wrapping abs on {d}");
        assert_eq!(x.relu().unwrap().to_vec::<i32>().unwrap(), [7, 0, 0, 7, 0]);
    }
}

/// Every integer op of the table (`wgtensor::testing`), unary and binary, i32 and u32, on every
/// device and GL view against the table's host reference: a new integer op is swept here
/// without editing this file (the references themselves are checked against the WGSL oracles
/// above on the CPU device).
#[test]
fn every_integer_op_of_the_table_matches_its_reference_on_every_device() {
    let (ai, bi) = pairs(&EDGE_I);
    let (au, bu) = pairs(&EDGE_U);
    let int_unary: Vec<_> = unary_ops()
        .into_iter()
        .filter(|o| !o.float_only())
        .collect();
    let int_binary: Vec<_> = binary_ops()
        .into_iter()
        .filter(|o| !o.float_only())
        .collect();
    assert!(int_unary.len() >= 3 && int_binary.len() >= 7);
    for d in devices().into_iter().chain(common::gl_views()) {
        let (ta, tb) = (
            Tensor::from_slice(&ai, &[ai.len()], &d).unwrap(),
            Tensor::from_slice(&bi, &[bi.len()], &d).unwrap(),
        );
        let (ua, ub) = (
            Tensor::from_slice(&au, &[au.len()], &d).unwrap(),
            Tensor::from_slice(&bu, &[bu.len()], &d).unwrap(),
        );
        for op in &int_unary {
            let name = op.name();
            let want: Vec<i32> = ai.iter().map(|&x| op.reference_i32(x).unwrap()).collect();
            let got = op.call(&ta).unwrap();
            assert_eq!(got.dtype(), DType::I32, "{name}");
            assert_eq!(got.to_vec::<i32>().unwrap(), want, "i32 {name} on {d}");
            let want: Vec<u32> = au.iter().map(|&x| op.reference_u32(x).unwrap()).collect();
            let got = op.call(&ua).unwrap().to_vec::<u32>().unwrap();
            assert_eq!(got, want, "u32 {name} on {d}");
        }
        for op in &int_binary {
            let name = op.name();
            let want: Vec<i32> = ai
                .iter()
                .zip(&bi)
                .map(|(&x, &y)| op.reference_i32(x, y).unwrap())
                .collect();
            let got = op.call(&ta, &tb).unwrap().to_vec::<i32>().unwrap();
            assert_eq!(got, want, "i32 {name} on {d}");
            let want: Vec<i32> = ai
                .iter()
                .map(|&x| op.reference_i32(x, 3).unwrap())
                .collect();
            let got = op.call_scalar(&ta, 3.0).unwrap().to_vec::<i32>().unwrap();
            assert_eq!(got, want, "i32 {} on {d}", op.scalar_name());
            let want: Vec<u32> = au
                .iter()
                .zip(&bu)
                .map(|(&x, &y)| op.reference_u32(x, y).unwrap())
                .collect();
            let got = op.call(&ua, &ub).unwrap().to_vec::<u32>().unwrap();
            assert_eq!(got, want, "u32 {name} on {d}");
        }
    }
}

#[test]
fn u32_arithmetic_wraps_and_divides_as_wgsl_on_every_device() {
    let (a, b) = pairs(&EDGE_U);
    let n = a.len();
    let ops: [Case<u32>; 7] = [
        ("add", Tensor::add, u32::wrapping_add),
        ("sub", Tensor::sub, u32::wrapping_sub),
        ("mul", Tensor::mul, u32::wrapping_mul),
        ("div", Tensor::div, |x, y| x.checked_div(y).unwrap_or(x)),
        ("rem", Tensor::rem, |x, y| if y == 0 { 0 } else { x % y }),
        ("maximum", Tensor::maximum, u32::max),
        ("minimum", Tensor::minimum, u32::min),
    ];
    for d in devices().into_iter().chain(common::gl_views()) {
        let ta = Tensor::from_slice(&a, &[n], &d).unwrap();
        let tb = Tensor::from_slice(&b, &[n], &d).unwrap();
        for (name, op, f) in ops {
            let want: Vec<u32> = a.iter().zip(&b).map(|(&x, &y)| f(x, y)).collect();
            assert_eq!(
                op(&ta, &tb).unwrap().to_vec::<u32>().unwrap(),
                want,
                "{name} on {d}"
            );
        }
        let neg = ta.narrow(0, 0, 3).unwrap().neg().unwrap();
        assert_eq!(neg.to_vec::<u32>().unwrap(), [0, 0, 0], "-0 on {d}");
        let t = Tensor::from_vec(vec![1u32, 5], &[2], &d).unwrap();
        assert_eq!(
            t.neg().unwrap().to_vec::<u32>().unwrap(),
            [u32::MAX, u32::MAX - 4]
        );
    }
}

#[test]
fn integer_scalars_broadcasts_and_views_match_the_cpu() {
    let cpu = Device::cpu();
    let vals: Vec<i32> = (0..7 * 9).map(|k| (k * 7919 % 201) - 100).collect();
    let rhs: Vec<i32> = (0..9).map(|k| k - 4).collect();
    let c = Tensor::from_slice(&vals, &[7, 9], &cpu).unwrap();
    let cr = Tensor::from_slice(&rhs, &[9], &cpu).unwrap();
    for d in devices() {
        let t = Tensor::from_slice(&vals, &[7, 9], &d).unwrap();
        let r = Tensor::from_slice(&rhs, &[9], &d).unwrap();
        let view = |x: &Tensor| x.narrow(0, 1, 5).unwrap().t().unwrap();
        for (name, op) in [
            ("add", Tensor::add as Bin),
            ("mul", Tensor::mul),
            ("div", Tensor::div),
            ("rem", Tensor::rem),
        ] {
            let got = op(&view(&t), &r.narrow(0, 0, 5).unwrap()).unwrap();
            let want = op(&view(&c), &cr.narrow(0, 0, 5).unwrap()).unwrap();
            assert_eq!(
                got.to_vec::<i32>().unwrap(),
                want.to_vec::<i32>().unwrap(),
                "{name}"
            );
        }
        let s = t.add_scalar(-3.0).unwrap().to_vec::<i32>().unwrap();
        assert_eq!(s, vals.iter().map(|v| v - 3).collect::<Vec<_>>(), "{d}");
        let s = (100.0f32 / &t).unwrap().to_vec::<i32>().unwrap();
        let want: Vec<i32> = vals.iter().map(|&v| wgsl_div_i(100, v)).collect();
        assert_eq!(s, want, "100 / t on {d}");
        let s = t.rem_scalar(-7.0).unwrap().to_vec::<i32>().unwrap();
        assert_eq!(s, vals.iter().map(|v| v % -7).collect::<Vec<_>>(), "{d}");
        // Scalars must be exact integers of the dtype.
        for bad in [0.5f32, f32::NAN, 3e9] {
            match t.mul_scalar(bad) {
                Err(Error::InvalidArgument { op, message }) => {
                    assert_eq!(op, "mul_scalar");
                    assert!(message.contains("to_dtype"), "{message}");
                }
                other => panic!("mul_scalar({bad}) on i32: {other:?}"),
            }
        }
        let u = t.abs().unwrap().to_dtype(DType::U32).unwrap();
        assert!(u.sub_scalar(-1.0).is_err(), "negative scalar on u32");
        // Comparisons, where_cond and clamp.
        let m = t.gt(&r).unwrap();
        assert_eq!(m.dtype(), DType::U8);
        let want: Vec<u8> = vals
            .iter()
            .enumerate()
            .map(|(k, &v)| u8::from(v > rhs[k % 9]))
            .collect();
        assert_eq!(m.to_vec::<u8>().unwrap(), want, "gt on {d}");
        let le = t.le_scalar(0.0).unwrap().to_vec::<u8>().unwrap();
        assert_eq!(
            le,
            vals.iter().map(|&v| u8::from(v <= 0)).collect::<Vec<_>>()
        );
        let w = m.where_cond(&t, &r).unwrap();
        assert_eq!(w.dtype(), DType::I32);
        let want: Vec<i32> = vals
            .iter()
            .enumerate()
            .map(|(k, &v)| v.max(rhs[k % 9]))
            .collect();
        assert_eq!(w.to_vec::<i32>().unwrap(), want, "where_cond on {d}");
        let cl = t
            .clamp(-10.0, f32::INFINITY)
            .unwrap()
            .to_vec::<i32>()
            .unwrap();
        assert_eq!(cl, vals.iter().map(|&v| v.max(-10)).collect::<Vec<_>>());
        assert!(t.clamp(0.5, 2.0).is_err());
        // cat / stack / contiguous.
        let j = Tensor::cat(&[&view(&t).contiguous().unwrap(), &view(&t)], 0).unwrap();
        let cj = Tensor::cat(&[&view(&c), &view(&c)], 0).unwrap();
        assert_eq!(
            j.to_vec::<i32>().unwrap(),
            cj.to_vec::<i32>().unwrap(),
            "cat on {d}"
        );
        // u8 masks compare and join too.
        let m2 = Tensor::stack(&[&m, &m], 0).unwrap();
        assert_eq!(
            m2.eq_scalar(1.0).unwrap().to_vec::<u8>().unwrap()[..63],
            want_u8(&m)
        );
    }
}

fn want_u8(m: &Tensor) -> Vec<u8> {
    m.to_vec::<u8>().unwrap()
}

#[test]
fn integer_reductions_wrap_and_match_the_cpu() {
    let vals: Vec<i32> = vec![3, -1, i32::MAX, 5, 5, -9, 2, i32::MIN, 0, 7, 7, -2];
    let cpu = Device::cpu();
    let c = Tensor::from_slice(&vals, &[3, 4], &cpu).unwrap();
    // Hand-computed: rows [3,-1,MAX,5], [5,-9,2,MIN], [0,7,7,-2].
    assert_eq!(
        c.sum(1, false).unwrap().to_vec::<i32>().unwrap(),
        [i32::MAX.wrapping_add(7), i32::MIN.wrapping_add(-2), 12]
    );
    assert_eq!(
        c.max(1, false).unwrap().to_vec::<i32>().unwrap(),
        [i32::MAX, 5, 7]
    );
    assert_eq!(
        c.argmin(1, false).unwrap().to_vec::<u32>().unwrap(),
        [1, 3, 3]
    );
    assert_eq!(
        c.argmax(1, false).unwrap().to_vec::<u32>().unwrap(),
        [2, 0, 1],
        "first max"
    );
    for d in devices() {
        let t = Tensor::from_slice(&vals, &[3, 4], &d).unwrap();
        type Red = fn(&Tensor) -> Result<Tensor>;
        let reds: [(&str, Red); 10] = [
            ("sum", |t| t.sum(1, false)),
            ("sum0", |t| t.sum(0, true)),
            ("sum_all", Tensor::sum_all),
            ("prod", |t| t.prod(1, false)),
            ("prod_all", Tensor::prod_all),
            ("max", |t| t.max(0, false)),
            ("min", |t| t.min(1, false)),
            ("min_all", Tensor::min_all),
            ("argmax", |t| t.argmax(0, false)),
            ("argmin_all", Tensor::argmin_all),
        ];
        for (name, f) in reds {
            let (got, want) = (f(&t).unwrap(), f(&c).unwrap());
            assert_eq!(got.dtype(), want.dtype(), "{name}");
            assert_eq!(got.device(), &d);
            if got.dtype() == DType::U32 {
                assert_eq!(
                    got.to_vec::<u32>().unwrap(),
                    want.to_vec::<u32>().unwrap(),
                    "{name}"
                );
            } else {
                assert_eq!(
                    got.to_vec::<i32>().unwrap(),
                    want.to_vec::<i32>().unwrap(),
                    "{name}"
                );
            }
        }
        let u = t.to_dtype(DType::U32).unwrap();
        assert_eq!(u.sum_all().unwrap().dtype(), DType::U32);
        let wrapped = vals.iter().fold(0u32, |a, &v| a.wrapping_add(v as u32));
        assert_eq!(
            u.sum_all().unwrap().to_scalar::<u32>().unwrap(),
            wrapped,
            "{d}"
        );
        // There is no integer mean (as PyTorch): the error names the fix.
        match t.mean(0, false) {
            Err(e @ Error::UnsupportedDType { .. }) => {
                assert!(e.to_string().contains("to_dtype"), "{e}")
            }
            other => panic!("mean of i32: {other:?}"),
        }
        assert_eq!(
            Tensor::zeros(&[0], DType::I32, &d)
                .unwrap()
                .sum_all()
                .unwrap()
                .to_scalar::<i32>()
                .unwrap(),
            0
        );
    }
}

#[test]
fn long_integer_reductions_run_in_several_passes_and_match_the_cpu() {
    // Longer than one workgroup chunk (16,384), so the GPU reduces in several passes.
    let n = 70_001usize;
    let vals: Vec<i32> = (0..n as u32)
        .map(|k| k.wrapping_mul(2_654_435_761) as i32)
        .collect();
    let uvals: Vec<u32> = vals.iter().map(|&v| v as u32).collect();
    let sum = vals.iter().fold(0i32, |a, &v| a.wrapping_add(v));
    let prod = vals[..33].iter().fold(1i32, |a, &v| a.wrapping_mul(v | 1));
    let max = *vals.iter().max().unwrap();
    let first_max = vals.iter().position(|&v| v == max).unwrap() as u32;
    let umin = *uvals.iter().min().unwrap();
    let first_umin = uvals.iter().position(|&v| v == umin).unwrap() as u32;
    for d in devices().into_iter().chain(common::gl_views()) {
        let t = Tensor::from_slice(&vals, &[n], &d).unwrap();
        let u = Tensor::from_slice(&uvals, &[n], &d).unwrap();
        assert_eq!(
            t.sum_all().unwrap().to_scalar::<i32>().unwrap(),
            sum,
            "sum on {d}"
        );
        assert_eq!(
            t.max_all().unwrap().to_scalar::<i32>().unwrap(),
            max,
            "max on {d}"
        );
        assert_eq!(
            t.argmax_all().unwrap().to_scalar::<u32>().unwrap(),
            first_max,
            "{d}"
        );
        assert_eq!(
            u.min_all().unwrap().to_scalar::<u32>().unwrap(),
            umin,
            "umin on {d}"
        );
        assert_eq!(
            u.argmin(0, false).unwrap().to_scalar::<u32>().unwrap(),
            first_umin
        );
        let odd: Vec<i32> = vals[..33].iter().map(|&v| v | 1).collect();
        let p = Tensor::from_slice(&odd, &[33], &d)
            .unwrap()
            .prod_all()
            .unwrap();
        assert_eq!(p.to_scalar::<i32>().unwrap(), prod, "wrapping prod on {d}");
        // Per-dim over a strided view.
        let m = t
            .narrow(0, 1, 70_000)
            .unwrap()
            .reshape(&[700, 100])
            .unwrap();
        let c = Tensor::from_slice(&vals[1..], &[700, 100], &Device::cpu()).unwrap();
        for dim in [0isize, 1] {
            assert_eq!(
                m.t()
                    .unwrap()
                    .sum(dim, false)
                    .unwrap()
                    .to_vec::<i32>()
                    .unwrap(),
                c.t()
                    .unwrap()
                    .sum(dim, false)
                    .unwrap()
                    .to_vec::<i32>()
                    .unwrap(),
                "sum({dim}) on {d}"
            );
            assert_eq!(
                m.min(dim, true).unwrap().to_vec::<i32>().unwrap(),
                c.min(dim, true).unwrap().to_vec::<i32>().unwrap(),
                "min({dim}) on {d}"
            );
        }
    }
}

#[test]
fn float_rem_truncates_like_wgsl_on_every_device() {
    let a = common::data(301, 31, 50.0);
    let b: Vec<f32> = common::data(301, 32, 9.0)
        .iter()
        .map(|x| x + 0.25)
        .collect();
    let want: Vec<f32> = a
        .iter()
        .zip(&b)
        .map(|(x, y)| x - y * (x / y).trunc())
        .collect();
    for d in devices() {
        let (ta, tb) = (
            Tensor::from_slice(&a, &[301], &d).unwrap(),
            Tensor::from_slice(&b, &[301], &d).unwrap(),
        );
        let got = common::values(&ta.rem(&tb).unwrap());
        common::assert_close(&got, &want, 1e-5, 1e-4, &format!("f32 rem on {d}"));
        let h = ta.to_dtype(DType::F16).unwrap().rem_scalar(2.0).unwrap();
        let hv = h.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
        assert!(hv
            .iter()
            .zip(&a)
            .all(|(r, x)| r.abs() < 2.0 && (*r == 0.0 || r.signum() == x.signum())));
        let s = Tensor::from_vec(vec![-7.5f32, 7.5, 1.0], &[3], &d).unwrap();
        let r = common::values(&s.rem_scalar(2.0).unwrap());
        assert_eq!(r, [-1.5, 1.5, 1.0], "the sign of the dividend on {d}");
        assert!(common::values(&s.rem_scalar(0.0).unwrap())
            .iter()
            .all(|x| x.is_nan()));
    }
}

#[test]
fn float_only_ops_and_integer_matmul_are_typed_errors() {
    for d in devices() {
        let t = Tensor::ones(&[2, 2], DType::I32, &d).unwrap();
        // Every float-only op of the table, and matmul.
        type Un = Box<dyn Fn(&Tensor) -> Result<Tensor>>;
        let mut ops: Vec<(&str, Un)> = vec![("matmul", Box::new(|t| t.matmul(t)))];
        for op in unary_ops().into_iter().filter(|o| o.float_only()) {
            ops.push((op.name(), Box::new(move |t| op.call(t))));
        }
        for op in binary_ops().into_iter().filter(|o| o.float_only()) {
            ops.push((op.name(), Box::new(move |t| op.call(t, t))));
        }
        assert!(ops.len() >= 11, "the table lost its float-only ops");
        for (name, f) in ops {
            match f(&t) {
                Err(e @ Error::UnsupportedDType { .. }) => {
                    assert!(e.to_string().contains(name) && e.to_string().contains("to_dtype"))
                }
                other => panic!("{name} on i32 on {d}: {other:?}"),
            }
        }
        assert!(matches!(t.softmax(0), Err(Error::UnsupportedDType { .. })));
        // u8 is storage and masks: arithmetic is refused.
        let m = Tensor::ones(&[2], DType::U8, &d).unwrap();
        assert!(matches!(m.add(&m), Err(Error::UnsupportedDType { .. })));
        // Mixed dtypes are refused, naming both and the fix.
        let f = Tensor::ones(&[2, 2], DType::F32, &d).unwrap();
        match t.add(&f) {
            Err(e @ Error::DTypeMismatch { .. }) => assert!(e.to_string().contains("to_dtype")),
            other => panic!("i32 + f32: {other:?}"),
        }
        assert_eq!(
            t.add(&f.to_dtype(DType::I32).unwrap())
                .unwrap()
                .to_vec::<i32>()
                .unwrap(),
            [2; 4]
        );
    }
}
