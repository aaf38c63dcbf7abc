//! Elementwise fusion: chains of elementwise ops on a GPU are recorded lazily and run as one
//! generated kernel. Whatever the chain (broadcasting, strided inputs, NaN, shared
//! subexpressions, chains longer than one kernel holds, more inputs than one kernel binds,
//! f16 and integer dtypes), results must match the CPU, on every adapter and on GL views.

use crate::common;

use common::{assert_close, data, devices, gl_views, values};
use wgtensor::{DType, Device, Result, Tensor};

/// Every device the tests run on: the CPU, every adapter, and the GL views of them.
fn all_devices() -> Vec<Device> {
    let mut d = devices();
    d.extend(gl_views());
    d
}

/// A chain of 10+ elementwise ops mixing unary, binary with broadcasting, scalar, comparison,
/// `where`, `clamp` and a cast, over a transposed view, a broadcast row and NaN/inf values.
fn chain(x: &Tensor, row: &Tensor) -> Result<Tensor> {
    let xt = x.t()?; // strided input
    let a = (&(&xt * 2.0)? + row)?; // broadcast row
    let b = a.tanh()?.mul_scalar(3.0)?;
    let c = b.maximum(&xt)?.sub_scalar(0.5)?;
    let mask = c.gt_scalar(0.0)?;
    let d = mask.where_cond(&c, &a.neg()?)?;
    let e = d.clamp(-4.0, 4.0)?.exp()?;
    let f = (&e / &(&xt.abs()? + 1.0)?)?;
    f.to_dtype(DType::F16)?.to_dtype(DType::F32)?.sqrt()
}

fn inputs(d: &Device) -> Result<(Tensor, Tensor)> {
    let mut xv = data(7 * 33, 5, 3.0);
    xv[3] = f32::NAN;
    xv[40] = f32::INFINITY;
    xv[41] = f32::NEG_INFINITY;
    let x = Tensor::from_vec(xv, &[7, 33], d)?;
    let row = Tensor::from_vec(data(7, 6, 1.0), &[7], d)?;
    Ok((x, row))
}

#[test]
fn a_chain_of_ten_ops_matches_the_cpu() {
    let (x, row) = inputs(&Device::cpu()).unwrap();
    let want = values(&chain(&x, &row).unwrap());
    for d in all_devices() {
        let (x, row) = inputs(&d).unwrap();
        let got = values(&chain(&x, &row).unwrap());
        assert_close(&got, &want, 2e-3, 1e-5, &format!("fused chain on {d}"));
    }
}

#[test]
fn fused_and_op_by_op_results_agree() {
    // Reading every intermediate materialises it, so the next op reads a buffer instead of
    // inlining: the same chain runs op by op.
    for d in all_devices() {
        let (x, row) = inputs(&d).unwrap();
        let fused = values(&chain(&x, &row).unwrap());
        let mut t = x.t().unwrap().contiguous().unwrap();
        let mut steps = Vec::new();
        for k in 0..6 {
            t = match k {
                0 => (&t * 2.0).unwrap(),
                1 => (&t + &row).unwrap(),
                2 => t.tanh().unwrap(),
                3 => t.mul_scalar(3.0).unwrap(),
                4 => t.sub_scalar(0.5).unwrap(),
                _ => t.exp().unwrap(),
            };
            steps.push(values(&t));
        }
        let mut lazy = (&(&x.t().unwrap() * 2.0).unwrap() + &row).unwrap();
        lazy = lazy.tanh().unwrap().mul_scalar(3.0).unwrap();
        lazy = lazy.sub_scalar(0.5).unwrap().exp().unwrap();
        assert_close(
            &values(&lazy),
            &steps[5],
            1e-5,
            1e-6,
            &format!("chain on {d}"),
        );
        assert_eq!(fused.len(), 7 * 33);
    }
}

#[test]
fn a_tensor_used_twice_and_kept_for_later_reads_the_same() {
    for d in all_devices() {
        let x = Tensor::from_vec(data(300, 9, 2.0), &[300], &d).unwrap();
        let a = x.exp().unwrap(); // pending, used three times below
        let b = (&a + &a).unwrap();
        let c = (&a * &b).unwrap().sub(&x).unwrap();
        let host: Vec<f32> = data(300, 9, 2.0);
        let want: Vec<f32> = host.iter().map(|v| v.exp() * 2.0 * v.exp() - v).collect();
        assert_close(&values(&c), &want, 1e-5, 1e-5, &format!("shared on {d}"));
        // `a` itself is still readable (materialised on its own).
        let want_a: Vec<f32> = host.iter().map(|v| v.exp()).collect();
        assert_close(&values(&a), &want_a, 1e-6, 0.0, &format!("kept on {d}"));
    }
}

#[test]
fn chains_longer_than_one_kernel_split_correctly() {
    for d in all_devices() {
        let x = Tensor::from_vec(data(1000, 3, 1.0), &[1000], &d).unwrap();
        let mut t = x.clone();
        let mut want = data(1000, 3, 1.0);
        for k in 0..200 {
            t = t
                .mul_scalar(0.99)
                .unwrap()
                .add_scalar(k as f32 * 1e-3)
                .unwrap();
            for w in &mut want {
                *w = *w * 0.99 + k as f32 * 1e-3;
            }
        }
        assert_close(&values(&t), &want, 1e-4, 1e-5, &format!("400 ops on {d}"));
    }
}

#[test]
fn sums_of_more_inputs_than_one_kernel_binds() {
    for d in all_devices() {
        let parts: Vec<Vec<f32>> = (0..11).map(|k| data(257, 20 + k, 1.0)).collect();
        let ts: Vec<Tensor> = parts
            .iter()
            .map(|p| Tensor::from_vec(p.clone(), &[257], &d).unwrap())
            .collect();
        let mut acc = ts[0].clone();
        for t in &ts[1..] {
            acc = (&acc + t).unwrap();
        }
        let want: Vec<f32> = (0..257).map(|i| parts.iter().map(|p| p[i]).sum()).collect();
        assert_close(
            &values(&acc),
            &want,
            1e-5,
            1e-5,
            &format!("11 inputs on {d}"),
        );
    }
}

#[test]
fn f16_and_integer_chains_match_the_cpu() {
    let run = |d: &Device| -> (Vec<f32>, Vec<i32>) {
        let h = Tensor::from_vec(data(513, 4, 4.0), &[513], d)
            .unwrap()
            .to_dtype(DType::F16)
            .unwrap();
        let hr = h
            .mul_scalar(1.5)
            .unwrap()
            .sigmoid()
            .unwrap()
            .add(&h)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap();
        let i =
            Tensor::from_vec((0..513).map(|v| v - 256).collect::<Vec<i32>>(), &[513], d).unwrap();
        let ir = i
            .mul_scalar(7.0)
            .unwrap()
            .rem_scalar(5.0)
            .unwrap()
            .abs()
            .unwrap()
            .add(&i)
            .unwrap();
        (hr.to_vec::<f32>().unwrap(), ir.to_vec::<i32>().unwrap())
    };
    let (hw, iw) = run(&Device::cpu());
    for d in all_devices() {
        let (h, i) = run(&d);
        // Every f16 step rounds as the op-by-op path does: the bits agree.
        assert_eq!(
            h.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            hw.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "f16 chain on {d}"
        );
        assert_eq!(i, iw, "i32 chain on {d}");
    }
}

#[test]
fn errors_stay_eager_in_a_chain() {
    for d in all_devices() {
        let a = Tensor::ones(&[3], DType::F32, &d).unwrap().exp().unwrap();
        let b = Tensor::ones(&[4], DType::F32, &d).unwrap();
        assert!(a.add(&b).is_err(), "shape mismatch on {d}");
        let i = Tensor::ones(&[3], DType::I32, &d).unwrap();
        assert!(a.add(&i).is_err(), "dtype mismatch on {d}");
        // The pending tensor is intact after the failed ops.
        assert_close(
            &values(&a),
            &[std::f32::consts::E; 3],
            1e-6,
            0.0,
            "after errors",
        );
    }
}

#[test]
fn a_pending_result_read_through_a_reshape_stays_correct() {
    // y = exp(strided x) is pending with an input laid out over [3, 4]; reading it as [12] (or
    // [2, 6]) next to another strided operand of that shape must not mix the two layouts.
    let host: Vec<f32> = (0..12).map(|i| i as f32 * 0.1).collect();
    let other: Vec<f32> = (0..24).map(|i| i as f32).collect();
    let run = |d: &Device| -> Vec<f32> {
        let x = Tensor::from_vec(host.clone(), &[4, 3], d)
            .unwrap()
            .t()
            .unwrap(); // [3, 4] strided
        let y = x.exp().unwrap();
        let q = Tensor::from_vec(other.clone(), &[6, 4], d)
            .unwrap()
            .narrow(1, 1, 2)
            .unwrap()
            .t()
            .unwrap(); // [2, 6] strided
        let z = y.reshape(&[2, 6]).unwrap();
        values(&(&z + &q).unwrap())
    };
    let want = run(&Device::cpu());
    for d in all_devices() {
        assert_close(
            &run(&d),
            &want,
            1e-6,
            1e-6,
            &format!("reshaped pending on {d}"),
        );
    }
}

#[test]
fn four_wide_kernels_handle_tails_and_offsets() {
    // Packed 32-bit inputs at offsets that are multiples of 4 take the vec4 kernels; other
    // offsets the scalar ones. Every length mod 4, every adapter, against the CPU.
    let cpu = Device::cpu();
    for device in common::gpus() {
        for n in [1usize, 3, 4, 5, 8, 1023, 1025, 4099] {
            for start in [0usize, 4, 1] {
                let a: Vec<f32> = (0..n + 8).map(|i| i as f32 * 0.5 - 3.0).collect();
                let b: Vec<f32> = (0..n + 8).map(|i| (i % 7) as f32 + 0.25).collect();
                let run = |d: &Device| {
                    let ta = Tensor::from_vec(a.clone(), &[n + 8], d)
                        .unwrap()
                        .narrow(0, start, n)
                        .unwrap();
                    let tb = Tensor::from_vec(b.clone(), &[n + 8], d)
                        .unwrap()
                        .narrow(0, start, n)
                        .unwrap();
                    let i = Tensor::from_vec((0..n as i32).collect::<Vec<_>>(), &[n], d).unwrap();
                    let f = ta
                        .mul(&tb)
                        .unwrap()
                        .add_scalar(1.0)
                        .unwrap()
                        .sqrt()
                        .unwrap();
                    let g = i.add(&i).unwrap().mul(&i).unwrap();
                    (f.to_vec::<f32>().unwrap(), g.to_vec::<i32>().unwrap())
                };
                let (want_f, want_i) = run(&cpu);
                let (got_f, got_i) = run(&device);
                assert_eq!(got_i, want_i, "{device} n={n} start={start}");
                for (g, w) in got_f.iter().zip(&want_f) {
                    assert!(
                        (g.is_nan() && w.is_nan()) || (g - w).abs() <= 1e-5 * w.abs().max(1.0),
                        "{device} n={n} start={start}: {g} vs {w}"
                    );
                }
            }
        }
    }
}

/// The backward formulas of elementwise ops run fused on the CPU too (gelu's is 11 ops, silu's
/// 6): the gradient has the bits of the same formula run op by op, NaN, infinities and 0
/// included, in f32 and f16, at sizes below and above the parallel threshold. f32 gelu has its
/// own one-pass kernel: it matches the formula's values.
#[test]
fn elementwise_backward_runs_fused_with_the_op_by_op_bits() -> Result<()> {
    let cpu = Device::cpu();
    for n in [5usize, 4097, 40_000] {
        for dtype in [DType::F32, DType::F16] {
            let mut xv = data(n, 31, 4.0);
            xv[0] = 0.0;
            xv[1] = f32::NAN;
            xv[2] = f32::INFINITY;
            xv[3] = f32::NEG_INFINITY;
            let gv = data(n, 32, 2.0);
            let x = Tensor::from_vec(xv.clone(), &[n], &cpu)?.to_dtype(dtype)?;
            let g = Tensor::from_vec(gv, &[n], &cpu)?.to_dtype(dtype)?;
            let leaf = || -> Result<Tensor> {
                Ok(Tensor::from_vec(xv.clone(), &[n], &cpu)?
                    .to_dtype(dtype)?
                    .requires_grad_(true))
            };
            // Every NaN as one: a commutative op's NaN operand order (hence the NaN's sign) is
            // the compiler's choice, and the vectorised and scalar loops may choose differently.
            let bits = |t: &Tensor| -> Result<Vec<u32>> {
                Ok(t.to_dtype(DType::F32)?
                    .to_vec::<f32>()?
                    .iter()
                    .map(|v| {
                        if v.is_nan() {
                            f32::NAN.to_bits()
                        } else {
                            v.to_bits()
                        }
                    })
                    .collect())
            };
            let l = leaf()?;
            l.gelu()?.backward_with(&g)?;
            let got = l.grad().expect("gelu's input gradient");
            // gelu's gradient as the table states it, one op at a time.
            let gelu = x.gelu()?;
            let half = Tensor::full(&[], 0.5, dtype, &cpu)?;
            let cdf = x.eq_scalar(0.0)?.where_cond(&half, &gelu.div(&x)?)?;
            let pdf = x
                .mul(&x)?
                .mul_scalar(-0.5)?
                .exp()?
                .mul_scalar(1.0 / (2.0 * std::f32::consts::PI).sqrt())?;
            let want = g.mul(&cdf.add(&x.mul(&pdf)?)?)?;
            if dtype == DType::F16 {
                assert_eq!(bits(&got)?, bits(&want)?, "gelu n {n} {dtype:?}");
            } else {
                // f32 takes the one-pass kernel (Φ from erf itself, not gelu(x) / x): the
                // formula's values, not its bits; NaN where it has NaN (±inf: inf · 0).
                let (got, want) = (got.to_vec::<f32>()?, want.to_vec::<f32>()?);
                for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                    let close = (a - b).abs() <= 1e-5 * (1.0 + b.abs());
                    assert!(
                        close || (a.is_nan() && b.is_nan()),
                        "gelu n {n} [{i}]: {a} vs {b}"
                    );
                }
                // silu's 6-op formula keeps the bit check in f32.
                let l = leaf()?;
                l.silu()?.backward_with(&g)?;
                let s = x.sigmoid()?;
                let slope = s.mul(&x.mul(&s.neg()?.add_scalar(1.0)?)?.add_scalar(1.0)?)?;
                let want = g.mul(&slope)?;
                let got = l.grad().expect("silu's input gradient");
                assert_eq!(bits(&got)?, bits(&want)?, "silu n {n} {dtype:?}");
            }
            // And a binary op's: d(a / b)/db = -(g (a / b)) / b.
            let a = Tensor::from_vec(data(n, 33, 3.0), &[n], &cpu)?.to_dtype(dtype)?;
            let b = leaf()?;
            a.div(&b)?.backward_with(&g)?;
            let want_b = g.mul(&a.div(&x)?)?.div(&x)?.neg()?;
            let got_b = b.grad().expect("the divisor's gradient");
            assert_eq!(bits(&got_b)?, bits(&want_b)?, "div n {n} {dtype:?}");
        }
    }
    Ok(())
}
