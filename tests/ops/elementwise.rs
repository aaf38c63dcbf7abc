//! Elementwise ops on every device: unary, binary, tensor-scalar and operator forms, sizes around
//! the workgroup size, a tensor needing a 2-D dispatch grid, numpy broadcasting, NaN/±inf inputs
//! and pow's special values.
//!
//! Each op runs on the CPU and on every GPU from the same host inputs. The CPU result is checked
//! against an independent reference computed here (f64 math, hand-written broadcasting), and every
//! GPU result against the CPU's, at an explicit per-op tolerance. Creation and transfers are in
//! `tests/ops/creation.rs`.

use crate::common;

use common::{assert_close, data, devices, values};
use wgtensor::{DType, Result, Tensor};

/// `|got - want| <= atol + rtol * |want|` (see `common::assert_close`).
#[derive(Clone, Copy, Debug)]
struct Tol(f32, f32);

/// add/sub/mul/div/neg/abs/relu/maximum/minimum: IEEE-exact on the CPU; GPUs may round
/// division by up to 2.5 ULP (Vulkan's bound), well inside 1e-6 relative.
const EXACT: Tol = Tol(1e-6, 0.0);
/// exp/log/sqrt/sigmoid/tanh/gelu on inputs within [-10, 10].
const TRANSCENDENTAL: Tol = Tol(1e-5, 1e-6);
const TRIG: Tol = Tol(1e-5, 1e-5);
const POW: Tol = Tol(1e-5, 0.0);

const SIZES: [usize; 6] = [0, 1, 255, 256, 257, 1000];

struct Unary {
    name: &'static str,
    f: fn(&Tensor) -> Result<Tensor>,
    host: fn(f32) -> f32,
    tol: Tol,
}

type BinaryFn = fn(&Tensor, &Tensor) -> Result<Tensor>;
type ScalarFn = fn(&Tensor, f32) -> Result<Tensor>;

struct Binary {
    name: &'static str,
    f: BinaryFn,
    scalar: ScalarFn,
    host: fn(f32, f32) -> f32,
    tol: Tol,
}

fn f64_op(x: f32, f: fn(f64) -> f64) -> f32 {
    f(x as f64) as f32
}

/// erf in f64 (series near 0, continued fraction for erfc in the tails), accurate to ~1e-12:
/// an independent reference for the library's 1.5e-7 approximation.
fn erf(z: f64) -> f64 {
    let a = z.abs();
    let r = if a.is_nan() || a.is_infinite() {
        a.min(1.0)
    } else if a < 3.0 {
        let (mut term, mut sum, mut n) = (a, a, 0.0);
        while term.abs() > 1e-17 * sum.abs() {
            n += 1.0;
            term *= -a * a / n;
            sum += term / (2.0 * n + 1.0);
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        let mut t = a;
        for k in (1..=80).rev() {
            t = a + (k as f64 / 2.0) / t;
        }
        1.0 - (-a * a).exp() / (std::f64::consts::PI.sqrt() * t)
    };
    r.copysign(z)
}

fn gelu_host(x: f32) -> f32 {
    // gelu(x) -> 0 as x -> -inf (the bare formula would give -inf * 0 = NaN).
    if x == f32::NEG_INFINITY {
        return 0.0;
    }
    f64_op(x, |x| {
        0.5 * x * (1.0 + erf(x * std::f64::consts::FRAC_1_SQRT_2))
    })
}

/// PyTorch's maximum/minimum: NaN in either operand gives NaN.
fn host_max(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else {
        a.max(b)
    }
}

fn host_min(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else {
        a.min(b)
    }
}

fn host_pow(a: f32, b: f32) -> f32 {
    (a as f64).powf(b as f64) as f32
}

const fn un(
    name: &'static str,
    f: fn(&Tensor) -> Result<Tensor>,
    host: fn(f32) -> f32,
    tol: Tol,
) -> Unary {
    Unary { name, f, host, tol }
}

const UNARY: &[Unary] = &[
    un("neg", Tensor::neg, |x| -x, EXACT),
    un("abs", Tensor::abs, f32::abs, EXACT),
    un(
        "relu",
        Tensor::relu,
        |x| if x.is_nan() || x > 0.0 { x } else { 0.0 },
        EXACT,
    ),
    un("exp", Tensor::exp, |x| f64_op(x, f64::exp), TRANSCENDENTAL),
    un("log", Tensor::log, |x| f64_op(x, f64::ln), TRANSCENDENTAL),
    un(
        "sqrt",
        Tensor::sqrt,
        |x| f64_op(x, f64::sqrt),
        TRANSCENDENTAL,
    ),
    un(
        "sigmoid",
        Tensor::sigmoid,
        |x| f64_op(x, |x| 1.0 / (1.0 + (-x).exp())),
        TRANSCENDENTAL,
    ),
    un(
        "tanh",
        Tensor::tanh,
        |x| f64_op(x, f64::tanh),
        TRANSCENDENTAL,
    ),
    un("gelu", Tensor::gelu, gelu_host, TRANSCENDENTAL),
    un(
        "softplus",
        Tensor::softplus,
        |x| {
            if x > 20.0 {
                x
            } else {
                f64_op(x, |x| x.exp().ln_1p())
            }
        },
        TRANSCENDENTAL,
    ),
    un(
        "silu",
        Tensor::silu,
        |x| {
            if x == f32::NEG_INFINITY {
                0.0
            } else {
                f64_op(x, |x| x / (1.0 + (-x).exp()))
            }
        },
        TRANSCENDENTAL,
    ),
    un("sin", Tensor::sin, |x| f64_op(x, f64::sin), TRIG),
    un("cos", Tensor::cos, |x| f64_op(x, f64::cos), TRIG),
];

const fn bin(
    name: &'static str,
    f: BinaryFn,
    scalar: ScalarFn,
    host: fn(f32, f32) -> f32,
    tol: Tol,
) -> Binary {
    Binary {
        name,
        f,
        scalar,
        host,
        tol,
    }
}

const BINARY: &[Binary] = &[
    bin("add", Tensor::add, Tensor::add_scalar, |a, b| a + b, EXACT),
    bin("sub", Tensor::sub, Tensor::sub_scalar, |a, b| a - b, EXACT),
    bin("mul", Tensor::mul, Tensor::mul_scalar, |a, b| a * b, EXACT),
    bin("div", Tensor::div, Tensor::div_scalar, |a, b| a / b, EXACT),
    bin(
        "maximum",
        Tensor::maximum,
        Tensor::maximum_scalar,
        host_max,
        EXACT,
    ),
    bin(
        "minimum",
        Tensor::minimum,
        Tensor::minimum_scalar,
        host_min,
        EXACT,
    ),
    bin("pow", Tensor::pow, Tensor::pow_scalar, host_pow, POW),
];

fn op(name: &str) -> &'static Binary {
    BINARY.iter().find(|o| o.name == name).unwrap()
}

fn unary(name: &str) -> &'static Unary {
    UNARY.iter().find(|o| o.name == name).unwrap()
}

type Operand<'a> = (&'a [f32], &'a [usize]);

/// Runs `f` on every device from the same host operands: the CPU must match `host` and every GPU
/// must match the CPU, within `tol`; the result has shape `out` and stays on the operands' device.
fn check(
    ctx: &str,
    operands: &[Operand],
    f: &dyn Fn(&[Tensor]) -> Result<Tensor>,
    host: &[f32],
    out: &[usize],
    tol: Tol,
) {
    let mut cpu: Option<Vec<f32>> = None;
    for d in devices() {
        let ts: Vec<Tensor> = operands
            .iter()
            .map(|(v, s)| {
                Tensor::from_slice(v, s, &d).unwrap_or_else(|e| panic!("{ctx}: upload to {d}: {e}"))
            })
            .collect();
        let t = f(&ts).unwrap_or_else(|e| panic!("{ctx} on {d}: {e}"));
        assert_eq!(t.shape(), out, "{ctx} on {d}: output shape");
        assert_eq!(
            t.device(),
            &d,
            "{ctx}: the result left the operands' device"
        );
        assert_eq!(t.dtype(), DType::F32, "{ctx} on {d}: dtype");
        let got = values(&t);
        match &cpu {
            None => {
                assert!(d.is_cpu(), "the harness lists the CPU first");
                assert_close(
                    &got,
                    host,
                    tol.0,
                    tol.1,
                    &format!("{ctx} on cpu vs host reference"),
                );
                cpu = Some(got);
            }
            Some(c) => assert_close(&got, c, tol.0, tol.1, &format!("{ctx} on {d} vs cpu")),
        }
    }
}

fn check_unary(op: &Unary, x: &[f32], shape: &[usize], label: &str) {
    let host: Vec<f32> = x.iter().map(|&v| (op.host)(v)).collect();
    let ctx = format!("{} {label}", op.name);
    check(
        &ctx,
        &[(x, shape)],
        &|t| (op.f)(&t[0]),
        &host,
        shape,
        op.tol,
    );
}

/// `op(a, b)` with numpy broadcasting to `out`; the host reference indexes by hand.
fn check_binary(op: &Binary, a: Operand, b: Operand, out: &[usize], label: &str) {
    let n: usize = out.iter().product();
    let at = |v: Operand, i| v.0[broadcast_source(i, out, v.1)];
    let host: Vec<f32> = (0..n).map(|i| (op.host)(at(a, i), at(b, i))).collect();
    let ctx = format!("{} {:?} with {:?} {label}", op.name, a.1, b.1);
    check(&ctx, &[a, b], &|t| (op.f)(&t[0], &t[1]), &host, out, op.tol);
}

fn check_scalar(op: &Binary, x: &[f32], s: f32, label: &str) {
    let host: Vec<f32> = x.iter().map(|&v| (op.host)(v, s)).collect();
    let ctx = format!("{}_scalar({s}) {label}", op.name);
    let shape = [x.len()];
    check(
        &ctx,
        &[(x, &shape)],
        &|t| (op.scalar)(&t[0], s),
        &host,
        &shape,
        op.tol,
    );
}

/// Storage index of output element `i` in an operand of `shape` broadcast to `out`.
fn broadcast_source(mut i: usize, out: &[usize], shape: &[usize]) -> usize {
    let (mut idx, mut stride) = (0, 1);
    for k in 0..out.len() {
        let d = out[out.len() - 1 - k];
        let coord = i % d;
        i /= d;
        if k < shape.len() {
            let s = shape[shape.len() - 1 - k];
            if s != 1 {
                idx += coord * stride;
            }
            stride *= s;
        }
    }
    idx
}

/// Replaces ~30 % of `v` with NaN (two bit patterns), +inf, -inf and -0.0 at pseudo-random places.
fn with_specials(mut v: Vec<f32>, seed: u64) -> Vec<f32> {
    let picks = data(v.len(), seed, 1.0);
    for (x, p) in v.iter_mut().zip(picks) {
        *x = match p {
            p if p > 0.92 => f32::NAN,
            p if p > 0.86 => f32::from_bits(0xffc0_0123), // negative NaN with a payload
            p if p > 0.79 => f32::INFINITY,
            p if p < -0.93 => f32::NEG_INFINITY,
            p if p.abs() < 0.02 => -0.0,
            _ => *x,
        };
    }
    v
}

/// Second operands: for pow every other exponent is an integer, so negative bases give numbers.
fn second_operand(op: &Binary, n: usize, seed: u64) -> Vec<f32> {
    if op.name != "pow" {
        return data(n, seed, 10.0);
    }
    let round = |(i, y): (usize, f32)| if i % 2 == 0 { y.round() } else { y };
    data(n, seed, 3.0)
        .into_iter()
        .enumerate()
        .map(round)
        .collect()
}

#[test]
fn unary_ops_match_cpu_on_all_sizes() {
    for op in UNARY {
        for n in SIZES {
            check_unary(op, &data(n, 11 + n as u64, 10.0), &[n], &format!("n={n}"));
        }
        // A 3-D shape too: results are packed row-major whatever the rank.
        check_unary(op, &data(60, 12, 10.0), &[3, 4, 5], "3-D");
    }
}

#[test]
fn binary_ops_match_cpu_on_all_sizes() {
    for op in BINARY {
        for n in SIZES {
            let a = data(n, 21 + n as u64, 10.0);
            let b = second_operand(op, n, 31 + n as u64);
            check_binary(op, (&a, &[n]), (&b, &[n]), &[n], "");
        }
    }
}

#[test]
fn scalar_ops_match_cpu_on_all_sizes() {
    for op in BINARY {
        let scalars: &[f32] = match op.name {
            "pow" => &[2.0, 3.0, -1.0, 0.5, 0.0],
            _ => &[2.5, -1.5, 0.0],
        };
        for n in SIZES {
            let x = data(n, 41 + n as u64, 10.0);
            for &s in scalars {
                check_scalar(op, &x, s, &format!("n={n}"));
            }
        }
    }
}

#[test]
fn operators_and_scalar_first_forms_match_cpu() {
    type Form = (
        &'static str,
        fn(&[Tensor]) -> Result<Tensor>,
        fn(f32, f32) -> f32,
    );
    let forms: &[Form] = &[
        ("&a + &b", |t| &t[0] + &t[1], |a, b| a + b),
        ("&a - &b", |t| &t[0] - &t[1], |a, b| a - b),
        ("&a * &b", |t| &t[0] * &t[1], |a, b| a * b),
        ("&a / &b", |t| &t[0] / &t[1], |a, b| a / b),
        ("-&a", |t| -&t[0], |a, _| -a),
        ("&a + 2.0", |t| &t[0] + 2.0, |a, _| a + 2.0),
        ("&a * 2.0", |t| &t[0] * 2.0, |a, _| a * 2.0),
        ("&a - 2.0", |t| &t[0] - 2.0, |a, _| a - 2.0),
        ("&a / 2.0", |t| &t[0] / 2.0, |a, _| a / 2.0),
        ("2.0 + &a", |t| 2.0 + &t[0], |a, _| 2.0 + a),
        ("2.0 * &a", |t| 2.0 * &t[0], |a, _| 2.0 * a),
        ("2.0 - &a", |t| 2.0 - &t[0], |a, _| 2.0 - a),
        ("2.0 / &a", |t| 2.0 / &t[0], |a, _| 2.0 / a),
        ("0.0 / &a", |t| 0.0 / &t[0], |a, _| 0.0 / a),
    ];
    for n in SIZES {
        // Zeros in the data exercise 2 / 0 = inf and 0 / 0 = NaN.
        let mut a = data(n, 51 + n as u64, 10.0);
        a.iter_mut().step_by(7).for_each(|x| *x = 0.0);
        let b = data(n, 61 + n as u64, 10.0);
        for (name, f, host) in forms {
            let want: Vec<f32> = a.iter().zip(&b).map(|(&x, &y)| host(x, y)).collect();
            let ctx = format!("{name} n={n}");
            check(
                &ctx,
                &[(&a, &[n]), (&b, &[n])],
                &|t| f(t),
                &want,
                &[n],
                EXACT,
            );
        }
    }
}

/// More than 65,535 workgroups of 256 threads (FAULTS row 7): the dispatch needs a 2-D grid.
/// Only add and relu, to keep the software adapter's runtime low.
#[test]
fn large_tensors_use_a_2d_grid() {
    const N: usize = 16_777_217;
    const { assert!(N > 65_535 * 256) };
    let (a, b) = (data(N, 71, 10.0), data(N, 72, 10.0));
    check_binary(op("add"), (&a, &[N]), (&b, &[N]), &[N], "n=16777217");
    check_unary(unary("relu"), &a, &[N], "n=16777217");
}

#[test]
fn broadcasting_pairs_match_numpy_rules() {
    let pairs: &[(&[usize], &[usize], &[usize])] = &[
        (&[3, 1], &[1, 4], &[3, 4]),
        (&[2, 3, 4], &[4], &[2, 3, 4]),
        (&[5, 1, 3], &[4, 1], &[5, 4, 3]),
        (&[], &[3], &[3]),
        (&[0, 3], &[1, 3], &[0, 3]),
    ];
    for &(sa, sb, out) in pairs {
        for (sa, sb) in [(sa, sb), (sb, sa)] {
            for op in BINARY {
                let a = data(sa.iter().product(), 81, 10.0);
                let b = second_operand(op, sb.iter().product(), 82);
                check_binary(op, (&a, sa), (&b, sb), out, "");
            }
        }
    }
}

#[test]
fn nan_and_inf_give_the_same_results_on_every_device() {
    let n = 1000;
    let x = with_specials(data(n, 91, 10.0), 92);
    assert!(x.iter().any(|v| v.is_nan()) && x.contains(&f32::INFINITY));
    assert!(x.contains(&f32::NEG_INFINITY));
    for op in UNARY {
        check_unary(op, &x, &[n], "with NaN/inf");
    }
    for op in BINARY {
        let b = with_specials(second_operand(op, n, 93), 94);
        check_binary(op, (&x, &[n]), (&b, &[n]), &[n], "with NaN/inf");
        // A broadcast pair runs the strided kernels.
        check_binary(
            op,
            (&x[..40], &[40, 1]),
            (&b[..25], &[1, 25]),
            &[40, 25],
            "with NaN/inf",
        );
        for s in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, 2.0] {
            check_scalar(op, &x, s, "with NaN/inf");
        }
    }
    // The policy itself, spelled out (PyTorch: NaN propagates through maximum, minimum, relu).
    for d in devices() {
        let nan = Tensor::from_vec(vec![f32::NAN, 1.0, f32::NAN], &[3], &d).unwrap();
        let one = Tensor::from_vec(vec![1.0f32, f32::NAN, -5.0], &[3], &d).unwrap();
        for (name, r) in [
            ("maximum", nan.maximum(&one)),
            ("minimum", nan.minimum(&one)),
            ("maximum rev", one.maximum(&nan)),
            ("minimum rev", one.minimum(&nan)),
            ("maximum_scalar(NaN)", one.maximum_scalar(f32::NAN)),
            ("minimum_scalar(NaN)", one.minimum_scalar(f32::NAN)),
        ] {
            let v = values(&r.unwrap());
            assert!(
                v.iter().all(|x| x.is_nan()),
                "{name} on {d} must propagate NaN: {v:?}"
            );
        }
        let r = values(&nan.relu().unwrap());
        assert!(
            r[0].is_nan() && r[1] == 1.0 && r[2].is_nan(),
            "relu on {d}: {r:?}"
        );
    }
}

/// Equal within `tol`, NaN only to NaN, and zeros and infinities with the same sign.
fn same(a: f32, e: f32, tol: Tol) -> bool {
    if e.is_nan() || a.is_nan() {
        return e.is_nan() && a.is_nan();
    }
    if e == 0.0 || e.is_infinite() {
        return a == e && a.is_sign_negative() == e.is_sign_negative();
    }
    (a - e).abs() <= tol.1 + tol.0 * e.abs()
}

const INF: f32 = f32::INFINITY;
const NAN: f32 = f32::NAN;

/// pow(x, y) = want, by C99 `powf` (F.9.4.4), including the signs of zero and infinity.
const POW_TABLE: &[(f32, f32, f32)] = &[
    (-2.0, 3.0, -8.0),
    (-2.0, 2.0, 4.0),
    (-2.0, -3.0, -0.125),
    (-3.0, 2.0, 9.0),
    (3.0, 2.0, 9.0),
    (-2.0, 0.5, NAN),
    (-8.0, 0.333_333_34, NAN),
    (0.0, 0.0, 1.0),
    (0.0, -1.0, INF),
    (-0.0, -1.0, -INF),
    (-0.0, -2.0, INF),
    (-0.0, 3.0, -0.0),
    (-0.0, 0.5, 0.0),
    (0.0, 1.0, 0.0),
    (INF, 2.0, INF),
    (INF, -1.0, 0.0),
    (-INF, 3.0, -INF),
    (-INF, 2.0, INF),
    (-INF, -3.0, -0.0),
    (-INF, 0.5, INF),
    (2.0, INF, INF),
    (0.5, INF, 0.0),
    (2.0, -INF, 0.0),
    (-1.0, INF, 1.0),
    (-1.0, -INF, 1.0),
    (1.0, NAN, 1.0),
    (NAN, 0.0, 1.0),
    (NAN, 1.0, NAN),
    (2.0, NAN, NAN),
    (10.0, 39.0, INF),
    (-1.0, 3.0, -1.0),
    (-2.0, 31.0, -2_147_483_648.0),
];

#[test]
fn pow_special_values_follow_c99() {
    for &(x, y, want) in POW_TABLE {
        let c = host_pow(x, y);
        assert!(
            same(c, want, POW),
            "the table is wrong for pow({x}, {y}): C says {c}"
        );
    }
    let (xs, ys): (Vec<f32>, Vec<f32>) = POW_TABLE.iter().map(|&(x, y, _)| (x, y)).unzip();
    let n = xs.len();
    for d in devices() {
        let x = Tensor::from_slice(&xs, &[n], &d).unwrap();
        let got = values(&x.pow(&Tensor::from_slice(&ys, &[n], &d).unwrap()).unwrap());
        for (&(x, y, want), got) in POW_TABLE.iter().zip(got) {
            assert!(
                same(got, want, POW),
                "pow({x}, {y}) on {d}: got {got}, expected {want}"
            );
        }
    }
}

/// Every special base against every special exponent, as a broadcast [B,1] x [1,E] pow and as
/// pow_scalar: the CPU against f64 C pow, GPUs against the CPU, signs of zero included.
#[test]
fn pow_special_value_grid_agrees_everywhere() {
    let bases = [
        0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, 10.0, 1e-3, -1e-3, -8.0, INF, -INF,
        NAN,
    ];
    let exps = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        2.0,
        -2.0,
        3.0,
        -3.0,
        0.5,
        -0.5,
        0.333_333_34,
        2.5,
        38.0,
        39.0,
        64.0,
        65.0,
        -64.0,
        100.0,
        101.0,
        -101.0,
        INF,
        -INF,
        NAN,
    ];
    let (nb, ne) = (bases.len(), exps.len());
    let host: Vec<f32> = (0..nb * ne)
        .map(|i| host_pow(bases[i / ne], exps[i % ne]))
        .collect();
    let mut cpu: Option<Vec<f32>> = None;
    for d in devices() {
        let b = Tensor::from_slice(&bases, &[nb, 1], &d).unwrap();
        let e = Tensor::from_slice(&exps, &[1, ne], &d).unwrap();
        let grid = values(&b.pow(&e).unwrap());
        let b = Tensor::from_slice(&bases, &[nb], &d).unwrap();
        let mut scalar = vec![0.0; nb * ne];
        for (j, &y) in exps.iter().enumerate() {
            for (i, v) in values(&b.pow_scalar(y).unwrap()).into_iter().enumerate() {
                scalar[i * ne + j] = v;
            }
        }
        let reference = cpu.as_ref().unwrap_or(&host);
        for (label, got) in [("pow", &grid), ("pow_scalar", &scalar)] {
            for (i, (&g, &want)) in got.iter().zip(reference).enumerate() {
                let (x, y) = (bases[i / ne], exps[i % ne]);
                assert!(
                    same(g, want, POW),
                    "{label}({x}, {y}) on {d}: got {g}, expected {want}"
                );
            }
        }
        cpu.get_or_insert(grid);
    }
}
