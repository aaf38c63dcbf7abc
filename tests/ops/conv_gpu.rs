//! The GPU's implicit-GEMM convolution (`shaders/conv2d.wgsl`) against the CPU's conv2d (the
//! oracle) on every adapter: forward, NaN, the grid fold past 65,535 workgroups, and the
//! gradients of input, weight and bias; and against the gather + matmul path it replaces.

use crate::common;

use common::{assert_close, data, gpus, values};
use wgtensor::{Conv2dOptions, Device, Tensor};

const RTOL: f32 = 1e-4;
const ATOL: f32 = 1e-4;

/// (input `[n, c, h, w]`, weight `[o, c / g, kh, kw]`, options): 1x1 (strided and padded, so
/// not the matmul shortcut), 3x3, 5x5, stride 2, padding 0/1/2, dilation 2, groups 2,
/// depthwise, batch 1 and 3, sizes off every tile (32 channels, 128 positions, 16 taps), more
/// than 32 output channels per group and K past one step.
fn cases() -> Vec<([usize; 4], [usize; 4], Conv2dOptions)> {
    let o = Conv2dOptions::default;
    vec![
        ([1, 3, 5, 5], [4, 3, 1, 1], o().padding(1)),
        ([3, 5, 7, 6], [6, 5, 1, 1], o().stride(2)),
        ([1, 2, 8, 8], [3, 2, 3, 3], o()),
        ([3, 4, 9, 11], [5, 4, 3, 3], o().padding(1)),
        ([1, 3, 12, 10], [2, 3, 5, 5], o().padding(2)),
        ([3, 4, 13, 9], [7, 4, 3, 3], o().stride(2).padding(1)),
        ([1, 2, 11, 11], [3, 2, 3, 3], o().dilation(2).padding(2)),
        (
            [1, 3, 10, 7],
            [4, 3, 3, 2],
            Conv2dOptions {
                stride: [2, 1],
                padding: [1, 0],
                dilation: [1, 2],
                groups: 1,
            },
        ),
        ([3, 4, 9, 9], [6, 2, 3, 3], o().groups(2).padding(1)),
        ([3, 6, 10, 10], [6, 1, 3, 3], o().groups(6).padding(1)),
        (
            [1, 6, 7, 7],
            [12, 1, 5, 5],
            o().groups(6).padding(2).stride(2),
        ),
        ([3, 9, 15, 13], [37, 9, 3, 3], o().padding(1)),
        ([1, 33, 6, 6], [40, 33, 2, 2], o().stride(2)),
    ]
}

fn tensor(v: Vec<f32>, shape: &[usize], dev: &Device) -> Tensor {
    Tensor::from_vec(v, shape, dev).expect("tensor")
}

#[test]
fn implicit_gemm_matches_the_cpu_on_every_shape() {
    let cpu = Device::cpu();
    for (i, (xs, ws, opts)) in cases().into_iter().enumerate() {
        let xv = data(xs.iter().product(), 10 + i as u64, 1.0);
        let wv = data(ws.iter().product(), 50 + i as u64, 0.5);
        let bv = data(ws[0], 90 + i as u64, 0.5);
        for with_bias in [false, true] {
            let run = |dev: &Device| {
                let b = with_bias.then(|| tensor(bv.clone(), &[ws[0]], dev));
                tensor(xv.clone(), &xs, dev)
                    .conv2d(&tensor(wv.clone(), &ws, dev), b.as_ref(), &opts)
                    .expect("conv2d")
            };
            let want = run(&cpu);
            for dev in gpus() {
                let got = run(&dev);
                assert_eq!(got.shape(), want.shape(), "case {i} on {dev}");
                let ctx = format!("case {i} {xs:?} {ws:?} {opts:?} bias {with_bias} on {dev}");
                assert_close(&values(&got), &values(&want), RTOL, ATOL, &ctx);
            }
        }
    }
}

#[test]
fn implicit_gemm_matches_the_gather_matmul_path() {
    for (i, (xs, ws, opts)) in cases().into_iter().enumerate() {
        let xv = data(xs.iter().product(), 200 + i as u64, 1.0);
        let wv = data(ws.iter().product(), 300 + i as u64, 0.5);
        for dev in gpus() {
            let run = || {
                tensor(xv.clone(), &xs, &dev)
                    .conv2d(&tensor(wv.clone(), &ws, &dev), None, &opts)
                    .expect("conv2d")
            };
            let fused = values(&run());
            let was = wgtensor::testing::set_conv2d_implicit(false);
            let composed = values(&run());
            wgtensor::testing::set_conv2d_implicit(was);
            let ctx = format!("case {i} on {dev}: implicit vs gather + matmul");
            assert_close(&fused, &composed, RTOL, ATOL, &ctx);
        }
    }
}

#[test]
fn unbatched_input_and_nan_propagate() {
    let cpu = Device::cpu();
    let (xs, ws) = ([2, 6, 7], [3, 2, 3, 3]);
    let mut xv = data(xs.iter().product(), 7, 1.0);
    // One NaN: every window that covers it is NaN, the others are finite.
    xv[6 * 7 + 3] = f32::NAN;
    let wv = data(ws.iter().product(), 8, 0.5);
    let opts = Conv2dOptions::default().padding(1);
    let run = |dev: &Device| {
        tensor(xv.clone(), &xs, dev)
            .conv2d(&tensor(wv.clone(), &ws, dev), None, &opts)
            .expect("conv2d")
    };
    let want = values(&run(&cpu));
    let nans = want.iter().filter(|v| v.is_nan()).count();
    assert!(
        nans > 0 && nans < want.len(),
        "the oracle has {nans} NaN of {}",
        want.len()
    );
    for dev in gpus() {
        let got = run(&dev);
        assert_eq!(got.shape(), &[3, 6, 7]);
        assert_close(&values(&got), &want, RTOL, ATOL, &format!("NaN on {dev}"));
    }
}

/// 65,536 tiles of 128 positions and one more: the column tiles fold into a second grid row.
#[test]
fn more_than_65535_workgroups_fold_into_the_grid() {
    let cpu = Device::cpu();
    let width = 65_536 * 128 + 3;
    let xv = data(width, 3, 1.0);
    let wv = vec![0.5f32, -2.0];
    let run = |dev: &Device| {
        tensor(xv.clone(), &[1, 1, 1, width], dev)
            .conv2d(
                &tensor(wv.clone(), &[1, 1, 1, 2], dev),
                None,
                &Conv2dOptions::default().padding(0),
            )
            .expect("conv2d")
    };
    let want = values(&run(&cpu));
    assert_eq!(want.len(), width - 1);
    for dev in gpus() {
        let got = values(&run(&dev));
        assert_close(&got, &want, RTOL, ATOL, &format!("wide conv on {dev}"));
    }
}

/// With the weight's gradient (the gather + matmul path, whose backward reuses its im2col
/// matrix) and without it (the implicit GEMM recorded with the input and bias gradients).
#[test]
fn gradients_match_the_cpu() {
    let cpu = Device::cpu();
    for (i, (xs, ws, opts)) in cases().into_iter().enumerate() {
        let xv = data(xs.iter().product(), 400 + i as u64, 1.0);
        let wv = data(ws.iter().product(), 500 + i as u64, 0.5);
        let bv = data(ws[0], 600 + i as u64, 0.5);
        for weight_grad in [true, false] {
            let run = |dev: &Device| {
                let x = tensor(xv.clone(), &xs, dev).requires_grad_(true);
                let w = tensor(wv.clone(), &ws, dev).requires_grad_(weight_grad);
                let b = tensor(bv.clone(), &[ws[0]], dev).requires_grad_(true);
                let y = x.conv2d(&w, Some(&b), &opts).expect("conv2d");
                // A weighted sum, so each output's gradient differs.
                let r = tensor(data(y.numel(), 700, 1.0), y.shape(), dev);
                y.mul(&r)
                    .and_then(|t| t.sum_all())
                    .and_then(|t| t.backward())
                    .expect("backward");
                assert_eq!(w.grad().is_some(), weight_grad, "case {i} on {dev}");
                [x, b, w].map(|t| t.grad().map(|g| values(&g)))
            };
            let want = run(&cpu);
            for dev in gpus() {
                let got = run(&dev);
                for (k, name) in ["input", "bias", "weight"].iter().enumerate() {
                    let ctx = format!(
                        "case {i} {xs:?} {ws:?}: {name} gradient on {dev} (weight grad {weight_grad})"
                    );
                    match (&got[k], &want[k]) {
                        (Some(a), Some(b)) => assert_close(a, b, 1e-3, 1e-3, &ctx),
                        (None, None) => assert!(k == 2 && !weight_grad, "{ctx}: missing"),
                        _ => panic!("{ctx}: present on one device only"),
                    }
                }
            }
        }
    }
}

/// Run alone in a child process (kernel counters are per device, and the other tests of this
/// binary launch kernels on the same devices): a conv2d forward is one dispatch, the
/// implicit-GEMM kernel, where the gather + matmul path takes several.
#[test]
fn forward_is_one_dispatch_child() {
    if !common::is_child("conv_gpu::forward_is_one_dispatch_child") {
        return;
    }
    for dev in gpus() {
        let x = tensor(data(2 * 3 * 9 * 9, 1, 1.0), &[2, 3, 9, 9], &dev);
        let w = tensor(data(4 * 3 * 3 * 3, 2, 1.0), &[4, 3, 3, 3], &dev);
        let b = tensor(data(4, 3, 1.0), &[4], &dev);
        let opts = Conv2dOptions::default().padding(1);
        let count = |on: bool| {
            let was = wgtensor::testing::set_conv2d_implicit(on);
            // Warm: index maps uploaded, kernels built.
            x.conv2d(&w, Some(&b), &opts).expect("conv2d");
            dev.synchronize().expect("synchronize");
            let before = wgtensor::kernel_stats(&dev).dispatches;
            let y = x.conv2d(&w, Some(&b), &opts).expect("conv2d");
            dev.synchronize().expect("synchronize");
            let n = wgtensor::kernel_stats(&dev).dispatches - before;
            wgtensor::testing::set_conv2d_implicit(was);
            (n, values(&y))
        };
        let (implicit, a) = count(true);
        // A weight that needs its gradient takes the gather + matmul path.
        let wg = w.requires_grad_(true);
        let before = wgtensor::kernel_stats(&dev).dispatches;
        let yg = x.conv2d(&wg, Some(&b), &opts).expect("conv2d");
        dev.synchronize().expect("synchronize");
        let with_grad = wgtensor::kernel_stats(&dev).dispatches - before;
        assert!(
            with_grad > 1,
            "on {dev}: {with_grad} dispatches with a weight gradient"
        );
        assert_close(&values(&yg), &a, RTOL, ATOL, &format!("grad path on {dev}"));
        let (composed, b) = count(false);
        assert_eq!(implicit, 1, "on {dev}: the implicit GEMM is one dispatch");
        assert!(
            composed > 1,
            "on {dev}: gather + matmul took {composed} dispatches"
        );
        assert_close(&a, &b, RTOL, ATOL, &format!("bias in the kernel on {dev}"));
    }
    common::child_done("conv_gpu::forward_is_one_dispatch_child");
}

#[test]
fn forward_is_one_dispatch() {
    common::run_child("conv_gpu::forward_is_one_dispatch_child", &[]);
}
