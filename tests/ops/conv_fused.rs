//! The CPU's fused kernels of the convolution layers against the op-by-op composition they
//! replace: `BatchNorm2d` (one kernel each way, one autograd node) against mean / sub / mul /
//! div / sqrt ops, and `conv2d` with its bias added inside the kernel against the convolution
//! plus a broadcast add. Forward values, every gradient, the running statistics, eval mode,
//! edge sizes (1x1 planes, batch 1, one channel), NaN, and the same bits at 1 and 3 threads.
//! The GPU path (the composition) is checked against the CPU kernel on every adapter.

use crate::common;

use common::{assert_close, data, devices, values};
use wgtensor::nn::{BatchNorm2d, Module};
use wgtensor::{Conv2dOptions, Device, Tensor};

/// The composition `BatchNorm2d` ran before its CPU kernel (training: the batch's biased
/// statistics; eval: the given running ones), through tracked ops.
fn bn_composed(
    x: &Tensor,
    wb: Option<(&Tensor, &Tensor)>,
    running: Option<(&Tensor, &Tensor)>,
    eps: f32,
) -> Tensor {
    let c = x.shape()[1];
    let dims = [0isize, 2, 3];
    let (mean, var) = match running {
        None => {
            let mean = x.mean_dims(&dims, true).unwrap();
            let centered = x.sub(&mean).unwrap();
            let var = centered
                .mul(&centered)
                .unwrap()
                .mean_dims(&dims, true)
                .unwrap();
            (mean, var)
        }
        Some((m, v)) => (
            m.reshape(&[1, c, 1, 1]).unwrap(),
            v.reshape(&[1, c, 1, 1]).unwrap(),
        ),
    };
    let std = var.add_scalar(eps).unwrap().sqrt().unwrap();
    let y = x.sub(&mean).unwrap().div(&std).unwrap();
    match wb {
        Some((w, b)) => y
            .mul(&w.reshape(&[1, c, 1, 1]).unwrap())
            .unwrap()
            .add(&b.reshape(&[1, c, 1, 1]).unwrap())
            .unwrap(),
        None => y,
    }
}

fn leaf(v: &[f32], shape: &[usize], dev: &Device) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape, dev)
        .unwrap()
        .requires_grad_(true)
}

/// `(y, dx, dweight, dbias)` of one batch norm, by the layer (`layer = true`) or the
/// composition, with weight `1 + w0` and bias `b0` set through the layer's parameters.
fn bn_run(
    shape: [usize; 4],
    x: &[f32],
    affine: bool,
    train: bool,
    layer: bool,
    dev: &Device,
) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
    let c = shape[1];
    let w0: Vec<f32> = data(c, 31, 0.5).iter().map(|v| 1.0 + v).collect();
    let b0 = data(c, 32, 0.5);
    let (rm0, rv0) = (
        data(c, 33, 1.0),
        data(c, 34, 0.4).iter().map(|v| 1.0 + v).collect::<Vec<_>>(),
    );
    let xt = leaf(x, &shape, dev);
    let gy = Tensor::from_vec(data(x.len(), 35, 1.0), &shape, dev).unwrap();
    let (y, w, b) = if layer {
        let mut bn = BatchNorm2d::with_options(c, 1e-5, 0.1, affine, dev).unwrap();
        let mut sd = vec![("running_mean", rm0.clone()), ("running_var", rv0.clone())];
        if affine {
            sd.push(("weight", w0.clone()));
            sd.push(("bias", b0.clone()));
        }
        for (name, p) in bn.named_parameters_mut() {
            if let Some((_, v)) = sd.iter().find(|(n, _)| *n == name) {
                let rg = p.requires_grad();
                *p = Tensor::from_vec(v.clone(), &[c], dev)
                    .unwrap()
                    .requires_grad_(rg);
            }
        }
        if !train {
            bn.eval();
        }
        let y = bn.forward(&xt).unwrap();
        let ps = bn.parameters();
        let (w, b) = if affine {
            (Some(ps[0].clone()), Some(ps[1].clone()))
        } else {
            (None, None)
        };
        (y, w, b)
    } else {
        let (w, b) = (leaf(&w0, &[c], dev), leaf(&b0, &[c], dev));
        let rm = Tensor::from_vec(rm0, &[c], dev).unwrap();
        let rv = Tensor::from_vec(rv0, &[c], dev).unwrap();
        let y = bn_composed(
            &xt,
            affine.then_some((&w, &b)),
            (!train).then_some((&rm, &rv)),
            1e-5,
        );
        (y, affine.then_some(w), affine.then_some(b))
    };
    y.backward_with(&gy).unwrap();
    let grad = |t: Option<Tensor>| t.map_or(vec![], |t| values(&t.grad().expect("gradient")));
    (values(&y), grad(Some(xt)), grad(w), grad(b))
}

fn bn_shapes() -> Vec<[usize; 4]> {
    vec![
        [2, 3, 4, 5],
        [1, 1, 1, 1],
        [1, 4, 1, 1],
        [3, 1, 5, 7],
        [5, 2, 1, 3],
        [64, 16, 8, 8], // large enough for the parallel path
    ]
}

#[test]
fn batch_norm_kernel_matches_the_composition_forward_and_gradients() {
    let cpu = Device::cpu();
    for shape in bn_shapes() {
        let n: usize = shape.iter().product();
        let x = data(n, 30, 3.0).iter().map(|v| v + 1.5).collect::<Vec<_>>();
        for affine in [true, false] {
            for train in [true, false] {
                let ctx = format!("batch_norm {shape:?} affine {affine} train {train}");
                let want = bn_run(shape, &x, affine, train, false, &cpu);
                for dev in devices() {
                    let got = bn_run(shape, &x, affine, train, true, &dev);
                    let ctx = format!("{ctx} on {dev}");
                    assert_close(&got.0, &want.0, 1e-4, 1e-5, &format!("y of {ctx}"));
                    // A single element per channel leaves dx a difference of equal terms.
                    let atol = if shape[0] * shape[2] * shape[3] == 1 {
                        1e-3
                    } else {
                        1e-4
                    };
                    assert_close(&got.1, &want.1, 1e-3, atol, &format!("dx of {ctx}"));
                    assert_close(&got.2, &want.2, 1e-4, 1e-4, &format!("dweight of {ctx}"));
                    assert_close(&got.3, &want.3, 1e-4, 1e-4, &format!("dbias of {ctx}"));
                    assert_eq!(got.2.len(), if affine { shape[1] } else { 0 }, "{ctx}");
                }
            }
        }
    }
}

#[test]
fn batch_norm_kernel_updates_running_statistics_like_the_composition() {
    let (shape, c) = ([4, 3, 3, 2], 3);
    let x = data(shape.iter().product(), 40, 2.0);
    let per = (4 * 3 * 2) as f64;
    for dev in devices() {
        let bn = BatchNorm2d::new(c, &dev).unwrap();
        let xt = Tensor::from_vec(x.clone(), &shape, &dev).unwrap();
        bn.forward(&xt).unwrap();
        bn.forward(&xt).unwrap();
        let (rm, rv) = (values(&bn.running_mean()), values(&bn.running_var()));
        for ch in 0..c {
            let vals: Vec<f64> = (0..4)
                .flat_map(|b| (0..6).map(move |i| (b * 3 + ch) * 6 + i))
                .map(|i| x[i] as f64)
                .collect();
            let mean = vals.iter().sum::<f64>() / per;
            let var = vals.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / per;
            let unbiased = var * per / (per - 1.0);
            // Two updates with momentum 0.1 from (0, 1).
            let want_m = 0.1 * mean * 0.9 + 0.1 * mean;
            let want_v = (0.9 + 0.1 * unbiased) * 0.9 + 0.1 * unbiased;
            assert!(
                (rm[ch] as f64 - want_m).abs() < 1e-5,
                "running mean on {dev}"
            );
            assert!(
                (rv[ch] as f64 - want_v).abs() < 1e-5,
                "running var on {dev}"
            );
        }
        assert!(!bn.running_mean().requires_grad());
        assert_eq!(bn.running_var().device(), &dev);
    }
}

#[test]
fn batch_norm_kernel_propagates_nan_per_channel() {
    let shape = [2, 3, 2, 2];
    let mut x = data(24, 41, 1.0);
    x[5] = f32::NAN; // image 0, channel 1
    for dev in devices() {
        for train in [true, false] {
            let want = bn_run(shape, &x, true, train, false, &Device::cpu());
            let got = bn_run(shape, &x, true, train, true, &dev);
            let ctx = format!("NaN batch_norm train {train} on {dev}");
            assert_close(&got.0, &want.0, 1e-4, 1e-5, &ctx);
            assert_close(&got.1, &want.1, 1e-3, 1e-4, &ctx);
            // Channel 1 is NaN in training (its statistics are), only its element in eval.
            let nan: Vec<bool> = got.0.iter().map(|v| v.is_nan()).collect();
            for (i, &isnan) in nan.iter().enumerate() {
                let ch = (i / 4) % 3;
                let want = if train { ch == 1 } else { i == 5 };
                assert_eq!(isnan, want, "{ctx}: element {i}");
            }
        }
    }
}

/// A conv2d with a bias, by the layer's one call, against the convolution without bias plus a
/// broadcast add (the composition), forward and the gradients of input, weight and bias.
#[test]
fn conv2d_bias_in_the_kernel_matches_conv_plus_add() {
    let cases = [
        (
            [2, 3, 5, 5],
            [4, 3, 3, 3],
            Conv2dOptions::default().padding(1),
        ),
        (
            [1, 1, 1, 1],
            [2, 1, 1, 1],
            Conv2dOptions::default().padding(1),
        ),
        (
            [3, 4, 6, 7],
            [6, 2, 3, 2],
            Conv2dOptions::default().stride(2).groups(2),
        ),
        (
            [2, 2, 7, 7],
            [3, 2, 3, 3],
            Conv2dOptions::default().dilation(2).padding(2),
        ),
        (
            [64, 16, 4, 4],
            [32, 16, 3, 3],
            Conv2dOptions::default().padding(1),
        ),
    ];
    for (xs, ws, o) in cases {
        let x = data(xs.iter().product(), 50, 1.0);
        let w = data(ws.iter().product(), 51, 1.0);
        let b = data(ws[0], 52, 1.0);
        let run = |fused: bool, dev: &Device| {
            let (xt, wt, bt) = (
                leaf(&x, &xs, dev),
                leaf(&w, &ws, dev),
                leaf(&b, &[ws[0]], dev),
            );
            let y = if fused {
                xt.conv2d(&wt, Some(&bt), &o).unwrap()
            } else {
                let y = xt.conv2d(&wt, None, &o).unwrap();
                y.add(&bt.reshape(&[1, ws[0], 1, 1]).unwrap()).unwrap()
            };
            let gy = Tensor::from_vec(data(y.numel(), 53, 1.0), y.shape(), dev).unwrap();
            y.backward_with(&gy).unwrap();
            let g = |t: &Tensor| values(&t.grad().expect("gradient"));
            (values(&y), g(&xt), g(&wt), g(&bt))
        };
        let want = run(false, &Device::cpu());
        for dev in devices() {
            let got = run(true, &dev);
            let ctx = format!("conv2d + bias {xs:?} {ws:?} {o:?} on {dev}");
            if dev.is_cpu() {
                // Added in the kernel after the sum: the composition's rounding exactly.
                assert_eq!(got.0, want.0, "y of {ctx}");
                assert_eq!(got.1, want.1, "dx of {ctx}");
                assert_eq!(got.2, want.2, "dweight of {ctx}");
            }
            assert_close(&got.0, &want.0, 1e-4, 1e-4, &format!("y of {ctx}"));
            assert_close(&got.1, &want.1, 1e-4, 1e-4, &format!("dx of {ctx}"));
            assert_close(&got.2, &want.2, 1e-4, 1e-3, &format!("dweight of {ctx}"));
            assert_close(&got.3, &want.3, 1e-4, 1e-3, &format!("dbias of {ctx}"));
        }
    }
}

/// Child body of `fused_conv_layers_give_the_same_bits_at_any_thread_count`: a hash of the
/// bits of every output and gradient of a conv + batch norm + max pool step.
#[test]
fn fused_conv_bits_child() {
    if !common::is_child("conv_fused::fused_conv_bits_child") {
        return;
    }
    let cpu = Device::cpu();
    for shape in bn_shapes() {
        let x = data(shape.iter().product(), 60, 2.0);
        let (y, dx, dw, db) = bn_run(shape, &x, true, true, true, &cpu);
        let h = [y, dx, dw, db]
            .concat()
            .iter()
            .fold(0xcbf29ce484222325u64, |h, v| {
                (h ^ v.to_bits() as u64).wrapping_mul(0x100000001b3)
            });
        println!("BITS bn {shape:?} {h:016x}");
    }
    let (xs, ws) = ([64, 16, 4, 4], [32, 16, 3, 3]);
    let xt = leaf(&data(xs.iter().product(), 61, 1.0), &xs, &cpu);
    let wt = leaf(&data(ws.iter().product(), 62, 1.0), &ws, &cpu);
    let bt = leaf(&data(ws[0], 63, 1.0), &[ws[0]], &cpu);
    let y = xt
        .conv2d(&wt, Some(&bt), &Conv2dOptions::default().padding(1))
        .unwrap()
        .max_pool2d([2, 2], None, [0, 0])
        .unwrap();
    y.backward_with(&Tensor::ones(y.shape(), wgtensor::DType::F32, &cpu).unwrap())
        .unwrap();
    let g = |t: &Tensor| values(&t.grad().expect("gradient"));
    let h = [values(&y), g(&xt), g(&wt), g(&bt)]
        .concat()
        .iter()
        .fold(0xcbf29ce484222325u64, |h, v| {
            (h ^ v.to_bits() as u64).wrapping_mul(0x100000001b3)
        });
    println!("BITS conv {h:016x}");
    // One image: the output channels split into a number of parts that follows the threads.
    let (xs, ws) = ([1, 8, 9, 9], [64, 8, 3, 3]);
    let x = Tensor::from_vec(data(xs.iter().product(), 64, 1.0), &xs, &cpu).unwrap();
    let w = Tensor::from_vec(data(ws.iter().product(), 65, 1.0), &ws, &cpu).unwrap();
    let y = x
        .conv2d(&w, None, &Conv2dOptions::default().padding(1))
        .unwrap();
    let h = values(&y).iter().fold(0xcbf29ce484222325u64, |h, v| {
        (h ^ v.to_bits() as u64).wrapping_mul(0x100000001b3)
    });
    println!("BITS conv one image {h:016x}");
    common::child_done("conv_fused::fused_conv_bits_child");
}

#[test]
fn fused_conv_layers_give_the_same_bits_at_any_thread_count() {
    let lines = |threads: &str| -> Vec<String> {
        let out = common::run_child(
            "conv_fused::fused_conv_bits_child",
            &[("RAYON_NUM_THREADS", threads)],
        );
        let v: Vec<String> = out
            .lines()
            .filter_map(|l| l.find("BITS ").map(|i| l[i..].to_string()))
            .collect();
        assert_eq!(v.len(), bn_shapes().len() + 2, "{out}");
        v
    };
    assert_eq!(lines("1"), lines("3"), "1 vs 3 threads");
}
