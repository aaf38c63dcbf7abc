//! Reductions (sum, mean, prod, max, min, argmax, argmin) on every device: against an f64
//! reference on the CPU, GPU against the CPU, over every dim of 4-D tensors, strided views,
//! NaN/Inf rows, 10 M elements (multi-pass on the GPU, past the 65,535-iteration loop cap of
//! software drivers), edge lengths around the workgroup and chunk sizes, determinism over 100
//! runs, empty inputs and bad dims.

use crate::common;
use common::{assert_close, data, devices, gpus, values};
use proptest::prelude::*;
use wgtensor::testing::reduce_ops;
use wgtensor::{DType, Device, Error, Tensor};

/// Every reduction of the table (`wgtensor::testing::reduce_ops()`), by name: a new reduction
/// is swept by every test here (its f64 oracle goes in `value_ref`).
fn ops() -> Vec<&'static str> {
    reduce_ops().into_iter().map(|o| o.name()).collect()
}

#[test]
fn the_sweep_covers_the_reductions_pytorch_users_expect() {
    let names = ops();
    for op in ["sum", "mean", "prod", "max", "min", "argmax", "argmin"] {
        assert!(names.contains(&op), "{op} left the reduction table");
    }
}

/// The rows a reduction over `dim` sees: one per output element (row-major over the other
/// dims), each listing its elements in order along `dim`.
fn rows_of(v: &[f32], shape: &[usize], dim: usize) -> Vec<Vec<f32>> {
    let len = shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    let outer: usize = shape[..dim].iter().product();
    let mut rows = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            rows.push((0..len).map(|r| v[(o * len + r) * inner + i]).collect());
        }
    }
    rows
}

/// PyTorch's argmax/argmin rules: NaN is the extreme (first NaN wins), ties go to the first.
fn arg_ref(row: &[f32], up: bool) -> u32 {
    if let Some(i) = row.iter().position(|x| x.is_nan()) {
        return i as u32;
    }
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if (up && x > row[best]) || (!up && x < row[best]) {
            best = i;
        }
    }
    best as u32
}

/// Reference value of `op` over one row, in f64 where that matters (sum, mean, prod).
fn value_ref(op: &str, row: &[f32]) -> f32 {
    let nan = row.iter().any(|x| x.is_nan());
    match op {
        "sum" => row.iter().map(|&x| x as f64).sum::<f64>() as f32,
        "nansum" => row
            .iter()
            .filter(|x| !x.is_nan())
            .map(|&x| x as f64)
            .sum::<f64>() as f32,
        "count_nonzero" => row.iter().filter(|&&x| x != 0.0).count() as f32,
        "mean" => (row.iter().map(|&x| x as f64).sum::<f64>() / row.len() as f64) as f32,
        "prod" => row.iter().map(|&x| x as f64).product::<f64>() as f32,
        "max" if nan => f32::NAN,
        "min" if nan => f32::NAN,
        "max" => row.iter().copied().fold(f32::NEG_INFINITY, f32::max),
        "min" => row.iter().copied().fold(f32::INFINITY, f32::min),
        _ => unreachable!("{op}"),
    }
}

/// Whether `op` has a value over no elements (sum 0, prod 1, mean NaN) rather than an error.
fn defined_when_empty(op: &str) -> bool {
    reduce_ops()
        .into_iter()
        .any(|o| o.name() == op && o.defined_when_empty())
}

fn run(t: &Tensor, op: &str, dim: Option<isize>, keepdim: bool) -> wgtensor::Result<Tensor> {
    let r = reduce_ops().into_iter().find(|o| o.name() == op);
    let r = r.unwrap_or_else(|| panic!("{op} is not in the reduction table"));
    match dim {
        None => r.call_all(t),
        Some(d) => r.call(t, d, keepdim),
    }
}

/// Checks `op` over `dim` of a tensor holding `v` (row-major, `shape`) against the reference.
/// Sums are compared with a tolerance scaled by `Σ|x|` of the row (the bound a careful f32 sum
/// meets); max/min/arg ops exactly.
fn check(t: &Tensor, v: &[f32], shape: &[usize], op: &str, dim: Option<isize>, keepdim: bool) {
    let ctx = format!(
        "{op} dim {dim:?} keepdim {keepdim} of {shape:?} on {}",
        t.device()
    );
    let out = run(t, op, dim, keepdim).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let (rows, want_shape) = match dim {
        // A 0-d tensor accepts dim 0 / -1 and reduces its one element.
        None => (vec![v.to_vec()], vec![]),
        Some(_) if shape.is_empty() => (vec![v.to_vec()], vec![]),
        Some(d) => {
            let d = d.rem_euclid(shape.len() as isize) as usize;
            let mut s = shape.to_vec();
            if keepdim {
                s[d] = 1;
            } else {
                s.remove(d);
            }
            (rows_of(v, shape, d), s)
        }
    };
    assert_eq!(out.shape(), &want_shape[..], "{ctx}: shape");
    if op.starts_with("arg") {
        assert_eq!(out.dtype(), DType::U32, "{ctx}");
        let want: Vec<u32> = rows.iter().map(|r| arg_ref(r, op == "argmax")).collect();
        assert_eq!(out.to_vec::<u32>().unwrap(), want, "{ctx}");
        return;
    }
    let got = values(&out);
    for (i, (row, &g)) in rows.iter().zip(&got).enumerate() {
        let e = value_ref(op, row);
        // NaN counts as 0 in a nansum's bound too.
        let abs: f64 = row
            .iter()
            .filter(|x| op != "nansum" || !x.is_nan())
            .map(|&x| (x as f64).abs())
            .sum();
        // Pairwise f32 sums err by ~sqrt(256) eps Σ|x| (256-element runs, then a tree); 4e-6
        // leaves room, yet a sequential sum of the 10 M test (~n eps) would fail it. Each product
        // step adds one rounding: n eps relative.
        let tol = match op {
            "sum" | "nansum" => 4e-6 * abs as f32,
            "mean" => 4e-6 * (abs / row.len() as f64) as f32,
            "prod" => 2.0 * row.len() as f32 * f32::EPSILON * e.abs(),
            _ => 0.0,
        };
        assert_close(&[g], &[e], 0.0, tol, &format!("{ctx}, output {i}"));
    }
}

#[test]
fn every_dim_of_4d_tensors() {
    let shape = [3usize, 5, 7, 11];
    let v = data(shape.iter().product(), 7, 2.0);
    for d in devices() {
        let t = Tensor::from_vec(v.clone(), &shape, &d).unwrap();
        for op in ops() {
            check(&t, &v, &shape, op, None, false);
            for dim in -4..4 {
                for keepdim in [false, true] {
                    check(&t, &v, &shape, op, Some(dim), keepdim);
                }
            }
        }
    }
}

#[test]
fn strided_views_reduce_like_their_copies() {
    let base = data(4 * 6 * 10, 3, 1.0);
    for d in devices() {
        let t = Tensor::from_vec(base.clone(), &[4, 6, 10], &d).unwrap();
        let views = [
            ("transpose", t.transpose(0, 2).unwrap()),
            ("permute", t.permute(&[1, 2, 0]).unwrap()),
            (
                "narrow",
                t.narrow(2, 3, 5).unwrap().narrow(0, 1, 2).unwrap(),
            ),
            (
                "expand",
                t.narrow(1, 2, 1).unwrap().expand(&[4, 3, 10]).unwrap(),
            ),
            ("t of 2-d", t.reshape(&[24, 10]).unwrap().t().unwrap()),
        ];
        for (name, view) in views {
            assert!(!view.is_contiguous() || name == "narrow", "{name}");
            let v = values(&view);
            let shape = view.shape().to_vec();
            for op in ops() {
                check(&view, &v, &shape, op, None, false);
                for dim in 0..shape.len() as isize {
                    check(&view, &v, &shape, op, Some(dim), dim % 2 == 0);
                }
            }
        }
    }
}

/// 10 M elements: two passes on the GPU (611 workgroups of 16,384, then one of 611), each
/// invocation looping at most 64 times. The sum of positive values exposes naive summation
/// (a sequential f32 sum is off by 9.4e-6 here); pairwise stays within 1e-6 of f64.
#[test]
fn ten_million_elements() {
    let n = 10_000_000;
    let mut v: Vec<f32> = data(n, 11, 1.0).iter().map(|x| x + 1.5).collect();
    // A maximum twice, late in the array, and a minimum: the first occurrence must win.
    v[7_000_001] = 9.0;
    v[9_999_999] = 9.0;
    v[8_123_456] = -4.0;
    let exact: f64 = v.iter().map(|&x| x as f64).sum();
    for d in devices() {
        let t = Tensor::from_vec(v.clone(), &[n], &d).unwrap();
        let s = t.sum_all().unwrap().to_scalar::<f32>().unwrap() as f64;
        assert!(
            ((s - exact) / exact).abs() < 1e-6,
            "sum on {d}: {s} vs f64 {exact}"
        );
        let m = t.mean_all().unwrap().to_scalar::<f32>().unwrap() as f64;
        assert!(((m - exact / n as f64) / (exact / n as f64)).abs() < 1e-6);
        assert_eq!(t.max_all().unwrap().to_scalar::<f32>().unwrap(), 9.0);
        assert_eq!(t.min_all().unwrap().to_scalar::<f32>().unwrap(), -4.0);
        assert_eq!(
            t.argmax_all().unwrap().to_scalar::<u32>().unwrap(),
            7_000_001
        );
        assert_eq!(
            t.argmin_all().unwrap().to_scalar::<u32>().unwrap(),
            8_123_456
        );
        // Per-dim over long rows: few rows (workgroup passes) and a strided row dim.
        let m2 = t.reshape(&[2, n / 2]).unwrap();
        let rows = values(&m2.sum(1, false).unwrap());
        let want: Vec<f32> = [&v[..n / 2], &v[n / 2..]]
            .iter()
            .map(|r| r.iter().map(|&x| x as f64).sum::<f64>() as f32)
            .collect();
        assert_close(&rows, &want, 1e-6, 0.0, &format!("sum rows on {d}"));
        // Four rows of 2.5 M with stride 4.
        let cols = t.reshape(&[n / 4, 4]).unwrap();
        let want: Vec<u32> = rows_of(&v, &[n / 4, 4], 0)
            .iter()
            .map(|r| arg_ref(r, true))
            .collect();
        assert_eq!(want[1], 1_750_000);
        let got = cols.argmax(0, false).unwrap().to_vec::<u32>().unwrap();
        assert_eq!(got, want, "argmax over a strided dim on {d}");
    }
}

/// Lengths around every boundary of the GPU plan: one thread per row (≤ 256), a workgroup per
/// 16,384-element chunk, and the partial passes after them.
#[test]
fn edge_lengths() {
    for d in devices() {
        for n in [
            1usize,
            2,
            255,
            256,
            257,
            16_383,
            16_384,
            16_385,
            65_537,
            1 << 20,
        ] {
            let v = data(n, n as u64, 3.0);
            let t = Tensor::from_vec(v.clone(), &[n], &d).unwrap();
            for op in ops() {
                if op == "prod" && n > 256 {
                    continue; // overflows to inf: says nothing about the tree
                }
                check(&t, &v, &[n], op, None, false);
            }
        }
        // Many short rows, rows just above the thread chunk, and square: thread-per-row plans
        // with 1 and several passes.
        for shape in [[5000usize, 300], [1000, 1000], [300, 5000], [70_000, 3]] {
            let v = data(shape[0] * shape[1], 5, 1.0);
            let t = Tensor::from_vec(v.clone(), &shape, &d).unwrap();
            for op in ["sum", "max", "argmin"] {
                check(&t, &v, &shape, op, Some(0), false);
                check(&t, &v, &shape, op, Some(1), false);
            }
        }
    }
}

#[test]
fn nan_and_inf_follow_pytorch() {
    let (nan, inf) = (f32::NAN, f32::INFINITY);
    #[rustfmt::skip]
    let v = vec![
        1.0, 5.0, 5.0, -2.0, -0.0,     // finite, tie for max, a zero that is negative
        1.0, nan, 3.0, nan, 9.0,       // two NaNs: first wins in argmax and argmin
        inf, 1.0, inf, -inf, 2.0,      // inf - inf: the sum is NaN
        -inf, -inf, -inf, -inf, -inf,  // all -inf: max -inf at index 0
        inf, 2.0, 3.0, 4.0, inf,       // sum +inf
        1e30, 1e30, 2.0, 0.5, 1.0,     // prod overflows to inf
    ];
    let shape = [6usize, 5];
    for d in devices() {
        let t = Tensor::from_vec(v.clone(), &shape, &d).unwrap();
        for op in ops() {
            check(&t, &v, &shape, op, Some(1), false);
            check(&t, &v, &shape, op, Some(0), true);
            check(&t, &v, &shape, op, None, false);
        }
        let s = values(&t.sum(1, false).unwrap());
        assert!(
            s[1].is_nan() && s[2].is_nan() && s[4] == inf,
            "{s:?} on {d}"
        );
        assert_eq!(
            t.argmax(1, false).unwrap().to_vec::<u32>().unwrap()[..4],
            [1, 1, 0, 0]
        );
        assert_eq!(
            t.argmin(1, false).unwrap().to_vec::<u32>().unwrap()[..4],
            [3, 1, 3, 0]
        );
        assert!(t.max_all().unwrap().to_scalar::<f32>().unwrap().is_nan());
        assert_eq!(t.argmax_all().unwrap().to_scalar::<u32>().unwrap(), 6);
    }
}

/// FAULTS row 24: the same reduction 100 times gives the same bits on each device. 2^18 + 13
/// elements still take the multi-pass tree (more than 256 x 256 per row) and a ragged tail.
#[test]
fn deterministic_over_100_runs() {
    let n = (1 << 18) + 13;
    let v = data(n, 99, 1.0);
    for d in devices() {
        let t = Tensor::from_vec(v.clone(), &[n], &d).unwrap();
        let m = t
            .narrow(0, 0, 1 << 18)
            .unwrap()
            .reshape(&[512, 512])
            .unwrap();
        let first = (
            t.sum_all().unwrap().to_scalar::<f32>().unwrap().to_bits(),
            values(&m.sum(0, false).unwrap()),
            t.mean_all().unwrap().to_scalar::<f32>().unwrap().to_bits(),
            t.argmax_all().unwrap().to_scalar::<u32>().unwrap(),
        );
        for run in 0..100 {
            let s = t.sum_all().unwrap().to_scalar::<f32>().unwrap().to_bits();
            assert_eq!(s, first.0, "sum_all run {run} on {d}");
            let cols: Vec<u32> = values(&m.sum(0, false).unwrap())
                .iter()
                .map(|x| x.to_bits())
                .collect();
            let want: Vec<u32> = first.1.iter().map(|x| x.to_bits()).collect();
            assert_eq!(cols, want, "sum(0) run {run} on {d}");
            let mean = t.mean_all().unwrap().to_scalar::<f32>().unwrap().to_bits();
            assert_eq!(mean, first.2, "mean run {run} on {d}");
            let a = t.argmax_all().unwrap().to_scalar::<u32>().unwrap();
            assert_eq!(a, first.3, "argmax run {run} on {d}");
        }
    }
}

#[test]
fn empty_reductions() {
    for d in devices() {
        let e = Tensor::zeros(&[0], DType::F32, &d).unwrap();
        assert_eq!(e.sum_all().unwrap().to_scalar::<f32>().unwrap(), 0.0);
        assert_eq!(e.prod_all().unwrap().to_scalar::<f32>().unwrap(), 1.0);
        assert!(e.mean_all().unwrap().to_scalar::<f32>().unwrap().is_nan());
        for op in ["max", "min", "argmax", "argmin"] {
            match run(&e, op, None, false) {
                Err(Error::InvalidArgument { op: o, .. }) => assert_eq!(o, op),
                other => panic!("{op} of empty on {d}: {other:?}"),
            }
        }
        let m = Tensor::zeros(&[2, 0], DType::F32, &d).unwrap();
        assert_eq!(values(&m.sum(1, false).unwrap()), vec![0.0, 0.0]);
        assert_eq!(m.sum(1, true).unwrap().shape(), &[2, 1]);
        assert_eq!(values(&m.prod(-1, false).unwrap()), vec![1.0, 1.0]);
        assert!(values(&m.mean(1, false).unwrap())
            .iter()
            .all(|x| x.is_nan()));
        assert!(matches!(
            m.max(1, false),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            m.argmin(-1, true),
            Err(Error::InvalidArgument { .. })
        ));
        // Reducing a non-empty dim of an empty tensor is fine: no rows.
        assert_eq!(m.max(0, false).unwrap().shape(), &[0]);
        assert_eq!(m.argmax(0, true).unwrap().shape(), &[1, 0]);
        assert_eq!(
            m.sum(0, false).unwrap().to_vec::<f32>().unwrap(),
            Vec::<f32>::new()
        );
    }
}

#[test]
fn zero_d_tensors() {
    for d in devices() {
        let s = Tensor::full(&[], 4.0, DType::F32, &d).unwrap();
        for dim in [None, Some(0), Some(-1)] {
            for keepdim in [false, true] {
                check(&s, &[4.0], &[], "sum", dim, keepdim);
                check(&s, &[4.0], &[], "argmax", dim, keepdim);
            }
        }
        assert!(matches!(
            s.sum(1, false),
            Err(Error::InvalidArgument { .. })
        ));
    }
}

/// FAULTS row 9: out-of-range dims and unsupported dtypes are typed errors naming the op.
#[test]
fn bad_arguments_are_typed_errors() {
    let t = Tensor::zeros(&[2, 3, 4, 5], DType::F32, &Device::cpu()).unwrap();
    for op in ops() {
        for dim in [4isize, -5, 100, isize::MIN] {
            match run(&t, op, Some(dim), false) {
                Err(Error::InvalidArgument { op: o, message }) => {
                    assert_eq!(o, op);
                    assert!(message.contains(&dim.to_string()), "{message}");
                }
                other => panic!("{op}({dim}): {other:?}"),
            }
        }
    }
    let i = Tensor::zeros(&[3], DType::I32, &Device::cpu()).unwrap();
    // Integers reduce (tests/ops/integer.rs), but have no mean, as in PyTorch; u8 is masks only.
    assert!(matches!(
        i.mean_all(),
        Err(Error::UnsupportedDType { op: "mean", .. })
    ));
    let m = Tensor::zeros(&[3], DType::U8, &Device::cpu()).unwrap();
    assert!(matches!(
        m.argmax(0, false),
        Err(Error::UnsupportedDType { op: "argmax", .. })
    ));
}

/// Random shape with 1-4 dims of size 0-6 and a dim index in range.
fn shape_and_dim() -> impl Strategy<Value = (Vec<usize>, isize)> {
    prop::collection::vec(0usize..7, 1..5).prop_flat_map(|shape| {
        let nd = shape.len() as isize;
        (Just(shape), -nd..nd)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn cpu_matches_reference((shape, dim) in shape_and_dim(), keepdim: bool, seed: u64) {
        let v = data(shape.iter().product(), seed, 4.0);
        let t = Tensor::from_vec(v.clone(), &shape, &Device::cpu()).unwrap();
        let len = shape[dim.rem_euclid(shape.len() as isize) as usize];
        for op in ops() {
            if len == 0 && !defined_when_empty(op) {
                prop_assert!(run(&t, op, Some(dim), keepdim).is_err());
            } else {
                check(&t, &v, &shape, op, Some(dim), keepdim);
            }
        }
    }

    /// FAULTS row 9: any dim is either valid or a typed error, never a panic.
    #[test]
    fn dims_in_or_out_of_range(shape in prop::collection::vec(0usize..4, 0..4), dim in -6isize..6) {
        let t = Tensor::zeros(&shape, DType::F32, &Device::cpu()).unwrap();
        let nd = shape.len().max(1) as isize;
        let valid = (-nd..nd).contains(&dim);
        let results = [
            t.sum(dim, false).map(|_| ()),
            t.mean(dim, true).map(|_| ()),
            t.softmax(dim).map(|_| ()),
            Tensor::stack(&[&t, &t], dim).map(|_| ()),
        ];
        for r in &results[..3] {
            match r {
                Ok(()) => prop_assert!(valid),
                Err(Error::InvalidArgument { .. }) => prop_assert!(!valid),
                Err(e) => prop_assert!(false, "unexpected error {e}"),
            }
        }
        // stack takes one more position (a new dim).
        let stack_valid = (-(shape.len() as isize + 1)..=shape.len() as isize).contains(&dim);
        prop_assert_eq!(results[3].is_ok(), stack_valid);
        let size = shape.get(dim.rem_euclid(nd) as usize).copied().unwrap_or(1);
        if valid && size > 0 {
            prop_assert!(t.argmax(dim, false).is_ok());
        }
    }

    #[test]
    fn gpu_matches_cpu((shape, dim) in shape_and_dim(), keepdim: bool, seed: u64) {
        let v = data(shape.iter().product(), seed, 4.0);
        let cpu = Tensor::from_vec(v.clone(), &shape, &Device::cpu()).unwrap();
        for g in common::gpus() {
            let t = cpu.to(&g).unwrap();
            for op in ops() {
                let (a, b) = (run(&t, op, Some(dim), keepdim), run(&cpu, op, Some(dim), keepdim));
                match (a, b) {
                    (Ok(a), Ok(b)) if op.starts_with("arg") => {
                        prop_assert_eq!(a.to_vec::<u32>().unwrap(), b.to_vec::<u32>().unwrap());
                    }
                    (Ok(a), Ok(b)) => {
                        prop_assert_eq!(a.shape(), b.shape());
                        assert_close(&values(&a), &values(&b), 1e-5, 1e-5, op);
                    }
                    (Err(_), Err(_)) => {}
                    (a, b) => prop_assert!(false, "{op}: gpu {a:?} vs cpu {b:?}"),
                }
            }
        }
    }
}

/// The GL view of each adapter (`gl:N`) is a separate wgpu device whose shaders go through
/// another compiler: the multi-pass reductions must agree with the CPU there too.
#[test]
fn gl_views_agree_with_cpu() {
    let gl = common::gl_views();
    let shape = [3usize, 5, 7, 11];
    let v = data(shape.iter().product(), 17, 2.0);
    let n = 1 << 20;
    let long: Vec<f32> = data(n, 4, 1.0).iter().map(|x| x + 1.5).collect();
    for d in gl {
        let t = Tensor::from_vec(v.clone(), &shape, &d).unwrap();
        for op in ops() {
            check(&t, &v, &shape, op, None, false);
            check(&t, &v, &shape, op, Some(-3), true);
        }
        let l = Tensor::from_vec(long.clone(), &[n], &d).unwrap();
        for op in ["sum", "max", "argmin"] {
            check(&l, &long, &[n], op, None, false);
        }
    }
}

#[test]
fn long_packed_f32_sums_take_the_four_wide_pass_and_match_the_cpu() {
    // Rows of 16,384 elements and more: lengths with every remainder mod 4, offsets that are
    // and are not multiples of 4, NaN, a row of -0.0, and the mean.
    for device in common::gpus() {
        for n in [16384usize, 16385, 16387, 100_003] {
            let v: Vec<f32> = (0..n + 8)
                .map(|i| ((i * 37) % 101) as f32 * 0.01 - 0.5)
                .collect();
            for start in [0usize, 4, 3] {
                let host = &v[start..start + n];
                let want: f64 = host.iter().map(|&x| x as f64).sum();
                let t = Tensor::from_vec(v.clone(), &[n + 8], &device)
                    .unwrap()
                    .narrow(0, start, n)
                    .unwrap();
                let got = t.sum_all().unwrap().to_scalar::<f32>().unwrap() as f64;
                assert!(
                    (got - want).abs() < 1e-3,
                    "{device} n={n} start={start}: {got} vs {want}"
                );
                let mean = t.mean_all().unwrap().to_scalar::<f32>().unwrap() as f64;
                assert!((mean - want / n as f64).abs() < 1e-6, "{device} mean n={n}");
            }
            let mut with_nan = v.clone();
            with_nan[n - 1] = f32::NAN;
            let t = Tensor::from_vec(with_nan, &[n + 8], &device)
                .unwrap()
                .narrow(0, 0, n)
                .unwrap();
            assert!(
                t.sum_all().unwrap().to_scalar::<f32>().unwrap().is_nan(),
                "{device} NaN"
            );
            let z = Tensor::from_vec(vec![-0.0f32; n], &[n], &device).unwrap();
            let s = z.sum_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(
                s == 0.0 && s.is_sign_negative(),
                "{device}: sum of -0.0 is {s}"
            );
        }
    }
}

/// Every first-pass variant of dim reductions the adapter runs (the subgroup ones where it has
/// subgroups), forced in turn, on every op: rows shorter and longer than 256 and than one
/// subgroup chunk, few and many rows, along the last dim and a middle dim, a strided view, NaN
/// and ties.
#[test]
fn every_reduce_variant_matches_the_reference() {
    for d in gpus() {
        let variants = wgtensor::testing::reduce_variants(&d);
        eprintln!("{d}: reduction first passes {variants:?}");
        assert!(variants.len() >= 2, "{d}: {variants:?}");
        for variant in variants {
            assert!(wgtensor::testing::force_reduce_variant(Some(variant)));
            for shape in [
                vec![300usize, 700],
                vec![3, 20_000],
                vec![1000, 5],
                vec![4, 300, 3],
            ] {
                let v = data(shape.iter().product(), 61, 2.0);
                let t = Tensor::from_vec(v.clone(), &shape, &d).unwrap();
                for op in ops() {
                    for dim in 0..shape.len() as isize {
                        // Products of hundreds of values in [-2, 2] are denormal or zero.
                        if op == "prod" && shape[dim as usize] > 64 {
                            continue;
                        }
                        check(&t, &v, &shape, op, Some(dim), false);
                    }
                }
            }
            // sum/mean of one long packed f32 row take the vec4 first pass (sum.wgsl), in the
            // forced variant too: whole chunks, ragged ends, and a view starting 4 elements in.
            for n in [16_384usize, 16_385, 3 * 16_384 + 7, 100_003] {
                let v = data(n + 4, 63, 2.0);
                let full = Tensor::from_vec(v.clone(), &[n + 4], &d).unwrap();
                let view = full.narrow(0, 4, n).unwrap();
                for op in ["sum", "mean"] {
                    check(&view, &v[4..], &[n], op, None, false);
                    check(&full, &v, &[n + 4], op, Some(0), false);
                }
            }
            // Rows past one subgroup chunk (4,096) and of one element; NaN inside rows (sum
            // and max propagate it, argmax picks the first) and repeated values (ties go to
            // the lowest index).
            for shape in [[3usize, 4097], [300, 1], [2, 300]] {
                let mut v = data(shape[0] * shape[1], 65, 2.0);
                if shape[1] > 1 {
                    v[shape[1] / 2] = f32::NAN;
                    v[shape[1] + 7] = 3.0;
                    v[shape[1] + 9] = 3.0;
                }
                let t = Tensor::from_vec(v.clone(), &shape, &d).unwrap();
                for op in ops().into_iter().filter(|&op| op != "prod") {
                    check(&t, &v, &shape, op, Some(1), false);
                }
            }
            // f16 input (reduced in f32, rounded once): the forced pass against the CPU's.
            let v = data(30 * 700, 66, 2.0);
            let h = Tensor::from_vec(v, &[30, 700], &Device::cpu())
                .and_then(|t| t.to_dtype(DType::F16))
                .unwrap();
            let g = h.to(&d).unwrap();
            for op in ["sum", "max", "argmax"] {
                let (want, got) = (run(&h, op, Some(1), false), run(&g, op, Some(1), false));
                let (want, got) = (want.unwrap(), got.unwrap());
                let as_f32 = |t: &Tensor| match t.dtype() {
                    DType::U32 => t
                        .to_vec::<u32>()
                        .unwrap()
                        .iter()
                        .map(|&i| i as f32)
                        .collect(),
                    _ => values(&t.to_dtype(DType::F32).unwrap()),
                };
                let (want, got) = (as_f32(&want), as_f32(&got));
                // Sums of 700 values in [-2, 2] rounded to f16: within 2 f16 ulps of ~30.
                assert_close(
                    &got,
                    &want,
                    0.0,
                    0.07,
                    &format!("f16 {op} on {d} with {variant}"),
                );
            }
            let v = data(40 * 600, 62, 2.0);
            let t = Tensor::from_vec(v, &[40, 600], &d).unwrap().t().unwrap();
            let packed = values(&t);
            for op in ops().into_iter().filter(|&op| op != "prod") {
                check(&t, &packed, &[600, 40], op, Some(0), true);
            }
        }
        assert!(wgtensor::testing::force_reduce_variant(None));
        assert!(!wgtensor::testing::force_reduce_variant(Some("nope")));
    }
}

/// nansum: NaN reads as 0 in every pass of a multi-pass GPU reduction (the partials are summed
/// plainly), an all-NaN row sums to 0, and NaN elements get no gradient.
#[test]
fn nansum_skips_nan_in_every_pass_and_gradient() {
    let n = 70_000;
    let v: Vec<f32> = (0..n)
        .map(|i| {
            if i % 7 == 3 {
                f32::NAN
            } else {
                (i % 10) as f32 * 0.25
            }
        })
        .collect();
    let want: f64 = v.iter().filter(|x| !x.is_nan()).map(|&x| x as f64).sum();
    for d in devices() {
        let t = Tensor::from_vec(v.clone(), &[n], &d).unwrap();
        let got = t.nansum_all().unwrap().to_scalar::<f32>().unwrap() as f64;
        assert!((got - want).abs() <= 1e-5 * want, "{got} vs {want} on {d}");
        let rows = Tensor::from_vec(vec![f32::NAN, f32::NAN, 1.0, 2.0], &[2, 2], &d).unwrap();
        assert_eq!(
            values(&rows.nansum(1, false).unwrap()),
            vec![0.0, 3.0],
            "{d}"
        );
        let x = Tensor::from_vec(vec![1.0, f32::NAN, 3.0], &[3], &d)
            .unwrap()
            .requires_grad_(true);
        x.nansum_all().unwrap().backward().unwrap();
        assert_eq!(values(&x.grad().unwrap()), vec![1.0, 0.0, 1.0], "{d}");
    }
}
