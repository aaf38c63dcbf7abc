//! Convolution, pooling and padding on every device against direct loops written here (an
//! oracle independent of the im2col + matmul path the library takes on every device).

use crate::common;

use common::{assert_close, data, devices, values};
use wgtensor::nn::{BatchNorm2d, Module};
use wgtensor::{Conv2dOptions, Error, PadMode, Tensor};

/// Direct convolution: `x` `[n, c, h, w]`, `wt` `[o, c / g, kh, kw]`.
#[allow(clippy::too_many_arguments)]
fn conv_ref(
    x: &[f32],
    [n, c, h, w]: [usize; 4],
    wt: &[f32],
    [o, cg, kh, kw]: [usize; 4],
    bias: Option<&[f32]>,
    o2: &Conv2dOptions,
) -> (Vec<f32>, [usize; 2]) {
    let (s, p, d, g) = (o2.stride, o2.padding, o2.dilation, o2.groups);
    let oh = (h + 2 * p[0] - d[0] * (kh - 1) - 1) / s[0] + 1;
    let ow = (w + 2 * p[1] - d[1] * (kw - 1) - 1) / s[1] + 1;
    let og = o / g;
    let mut out = vec![0f32; n * o * oh * ow];
    for b in 0..n {
        for oc in 0..o {
            let grp = oc / og;
            for y in 0..oh {
                for xo in 0..ow {
                    let mut acc = bias.map_or(0.0, |b| b[oc]) as f64;
                    for ci in 0..cg {
                        let ic = grp * cg + ci;
                        for i in 0..kh {
                            for j in 0..kw {
                                let iy = (y * s[0] + i * d[0]) as isize - p[0] as isize;
                                let ix = (xo * s[1] + j * d[1]) as isize - p[1] as isize;
                                if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                    continue;
                                }
                                let xv = x[((b * c + ic) * h + iy as usize) * w + ix as usize];
                                let wv = wt[((oc * cg + ci) * kh + i) * kw + j];
                                acc += xv as f64 * wv as f64;
                            }
                        }
                    }
                    out[((b * o + oc) * oh + y) * ow + xo] = acc as f32;
                }
            }
        }
    }
    (out, [oh, ow])
}

/// (input, weight, options): padding, stride, dilation, groups, 1x1, depthwise, batch 1, odd
/// sizes, and one wide enough that the CPU kernel unfolds it in several blocks of rows.
fn conv_cases() -> Vec<([usize; 4], [usize; 4], Conv2dOptions)> {
    vec![
        ([1, 1, 5, 5], [1, 1, 3, 3], Conv2dOptions::default()),
        (
            [2, 3, 7, 6],
            [4, 3, 3, 2],
            Conv2dOptions::default().stride(2).padding(1),
        ),
        (
            [1, 4, 9, 9],
            [6, 2, 3, 3],
            Conv2dOptions::default().padding(2).dilation(2).groups(2),
        ),
        ([3, 2, 8, 8], [5, 2, 1, 1], Conv2dOptions::default()),
        (
            [2, 6, 5, 7],
            [6, 1, 3, 3],
            Conv2dOptions::default().padding(1).groups(6),
        ),
        (
            [1, 3, 11, 4],
            [2, 3, 2, 3],
            Conv2dOptions {
                stride: [3, 1],
                padding: [0, 2],
                dilation: [1, 2],
                groups: 1,
            },
        ),
        (
            [2, 64, 5, 130],
            [3, 64, 3, 3],
            Conv2dOptions::default().padding(1),
        ),
        // Stride 1 with 8 or more output channels a group: the CPU's direct kernels. 8
        // channels (one 8-lane block, positions not a whole tile), 20 (16 + 4 of 16 lanes),
        // groups of 12 with dilation, a 1x1, and rows wider than a tile.
        (
            [2, 3, 6, 5],
            [8, 3, 3, 3],
            Conv2dOptions::default().padding(1),
        ),
        (
            [1, 5, 7, 9],
            [20, 5, 3, 2],
            Conv2dOptions {
                stride: [1, 1],
                padding: [1, 0],
                dilation: [2, 1],
                groups: 1,
            },
        ),
        (
            [2, 4, 6, 6],
            [24, 2, 3, 3],
            Conv2dOptions::default().padding(2).dilation(2).groups(2),
        ),
        ([1, 8, 4, 4], [16, 8, 1, 1], Conv2dOptions::default()),
        // 8 input channels a group: the input gradient by the direct kernel (flipped taps).
        (
            [1, 16, 7, 8],
            [10, 8, 3, 3],
            Conv2dOptions::default().padding(1).dilation(2).groups(2),
        ),
        (
            [3, 7, 13, 17],
            [33, 7, 5, 5],
            Conv2dOptions::default().padding(2),
        ),
    ]
}

#[test]
fn conv2d_matches_direct_loops_on_every_device() {
    for (xs, ws, o) in conv_cases() {
        let x = data(xs.iter().product(), 1, 1.0);
        let wt = data(ws.iter().product(), 2, 1.0);
        let b = data(ws[0], 3, 1.0);
        let (want, [oh, ow]) = conv_ref(&x, xs, &wt, ws, Some(&b), &o);
        for dev in devices() {
            let xt = Tensor::from_vec(x.clone(), &xs, &dev).unwrap();
            let wtt = Tensor::from_vec(wt.clone(), &ws, &dev).unwrap();
            let bt = Tensor::from_vec(b.clone(), &[ws[0]], &dev).unwrap();
            let y = xt.conv2d(&wtt, Some(&bt), &o).unwrap();
            assert_eq!(y.shape(), &[xs[0], ws[0], oh, ow]);
            assert_close(
                &values(&y),
                &want,
                1e-4,
                1e-4,
                &format!("conv2d {xs:?} {ws:?} {o:?} on {dev}"),
            );
        }
    }
}

/// Gradients of `sum(conv2d(x, wt) * gy)` by direct loops: `(dx, dw)`.
fn conv_grad_ref(
    x: &[f32],
    [n, c, h, w]: [usize; 4],
    wt: &[f32],
    [o, cg, kh, kw]: [usize; 4],
    gy: &[f32],
    o2: &Conv2dOptions,
) -> (Vec<f32>, Vec<f32>) {
    let (s, p, d, g) = (o2.stride, o2.padding, o2.dilation, o2.groups);
    let oh = (h + 2 * p[0] - d[0] * (kh - 1) - 1) / s[0] + 1;
    let ow = (w + 2 * p[1] - d[1] * (kw - 1) - 1) / s[1] + 1;
    let og = o / g;
    let mut dx = vec![0f64; x.len()];
    let mut dw = vec![0f64; wt.len()];
    for b in 0..n {
        for oc in 0..o {
            for y in 0..oh {
                for xo in 0..ow {
                    let gv = gy[((b * o + oc) * oh + y) * ow + xo] as f64;
                    for ci in 0..cg {
                        let ic = oc / og * cg + ci;
                        for i in 0..kh {
                            for j in 0..kw {
                                let iy = (y * s[0] + i * d[0]) as isize - p[0] as isize;
                                let ix = (xo * s[1] + j * d[1]) as isize - p[1] as isize;
                                if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                    continue;
                                }
                                let xi = ((b * c + ic) * h + iy as usize) * w + ix as usize;
                                let wi = ((oc * cg + ci) * kh + i) * kw + j;
                                dx[xi] += gv * wt[wi] as f64;
                                dw[wi] += gv * x[xi] as f64;
                            }
                        }
                    }
                }
            }
        }
    }
    let f = |v: Vec<f64>| v.into_iter().map(|v| v as f32).collect();
    (f(dx), f(dw))
}

#[test]
fn conv2d_gradients_match_direct_loops_on_every_device() {
    for (xs, ws, o) in conv_cases() {
        let x = data(xs.iter().product(), 11, 1.0);
        let wt = data(ws.iter().product(), 12, 1.0);
        let (y, [oh, ow]) = conv_ref(&x, xs, &wt, ws, None, &o);
        let gy = data(y.len(), 13, 1.0);
        assert_eq!(y.len(), xs[0] * ws[0] * oh * ow);
        let (want_dx, want_dw) = conv_grad_ref(&x, xs, &wt, ws, &gy, &o);
        for dev in devices() {
            let xt = Tensor::from_vec(x.clone(), &xs, &dev)
                .unwrap()
                .requires_grad_(true);
            let wtt = Tensor::from_vec(wt.clone(), &ws, &dev)
                .unwrap()
                .requires_grad_(true);
            let g = Tensor::from_vec(gy.clone(), &[xs[0], ws[0], oh, ow], &dev).unwrap();
            xt.conv2d(&wtt, None, &o)
                .unwrap()
                .backward_with(&g)
                .unwrap();
            let ctx = format!("conv2d gradients {xs:?} {ws:?} {o:?} on {dev}");
            let dx = values(&xt.grad().expect("input gradient"));
            assert_close(&dx, &want_dx, 1e-4, 1e-4, &format!("dx of {ctx}"));
            let dw = values(&wtt.grad().expect("weight gradient"));
            assert_close(&dw, &want_dw, 1e-4, 1e-3, &format!("dw of {ctx}"));
            if !dev.is_cpu() {
                continue;
            }
            // The weight alone (the input a constant) takes the same values.
            let w2 = Tensor::from_vec(wt.clone(), &ws, &dev)
                .unwrap()
                .requires_grad_(true);
            let x2 = Tensor::from_vec(x.clone(), &xs, &dev).unwrap();
            x2.conv2d(&w2, None, &o).unwrap().backward_with(&g).unwrap();
            assert_eq!(values(&w2.grad().expect("weight gradient")), dw, "{ctx}");
        }
    }
}

#[test]
fn conv2d_propagates_nan_like_direct_loops() {
    // Stride 2 (unfold and gemm on the CPU), then stride 1 with 8 output channels (the direct
    // kernel), each with a NaN and an infinity in the input.
    let cases = [
        ([4, 3, 3, 3], Conv2dOptions::default().padding(1).stride(2)),
        ([8, 3, 3, 3], Conv2dOptions::default().padding(1)),
    ];
    for (ws, o) in cases {
        let xs = [2, 3, 6, 5];
        let mut x = data(180, 21, 1.0);
        x[40] = f32::NAN;
        x[150] = f32::INFINITY;
        let wt = data(ws.iter().product(), 22, 1.0);
        let (want, _) = conv_ref(&x, xs, &wt, ws, None, &o);
        assert!(want.iter().any(|v| v.is_nan()) && want.iter().any(|v| v.is_finite()));
        assert!(want.iter().any(|v| v.is_infinite()));
        for dev in devices() {
            let xt = Tensor::from_vec(x.clone(), &xs, &dev).unwrap();
            let w = Tensor::from_vec(wt.clone(), &ws, &dev).unwrap();
            let y = xt.conv2d(&w, None, &o).unwrap();
            assert_close(
                &values(&y),
                &want,
                1e-4,
                1e-4,
                &format!("NaN conv2d {ws:?} {o:?} on {dev}"),
            );
        }
    }
}

#[test]
fn conv2d_weight_gradient_reads_only_the_inputs_its_taps_read() {
    // An infinity in the last column: tap column 0 of a 3x3 with padding 1 never reads it
    // (its gradient stays finite), columns 1 and 2 do. 8 output channels take the CPU's
    // direct kernel, which computes thrown-away positions past each row in its forward.
    let (xs, ws) = ([2, 2, 5, 6], [8, 2, 3, 3]);
    let mut x = data(xs.iter().product(), 31, 1.0);
    x[2 * 6 + 5] = f32::INFINITY;
    let wt = data(ws.iter().product(), 32, 1.0);
    let o = Conv2dOptions::default().padding(1);
    let (y, [oh, ow]) = conv_ref(&x, xs, &wt, ws, None, &o);
    let gy = data(y.len(), 33, 1.0);
    let (_, want) = conv_grad_ref(&x, xs, &wt, ws, &gy, &o);
    assert!(want.iter().any(|v| v.is_finite()) && want.iter().any(|v| !v.is_finite()));
    for dev in devices() {
        let xt = Tensor::from_vec(x.clone(), &xs, &dev).unwrap();
        let w = Tensor::from_vec(wt.clone(), &ws, &dev)
            .unwrap()
            .requires_grad_(true);
        let g = Tensor::from_vec(gy.clone(), &[xs[0], ws[0], oh, ow], &dev).unwrap();
        xt.conv2d(&w, None, &o).unwrap().backward_with(&g).unwrap();
        let dw = values(&w.grad().expect("weight gradient"));
        assert_close(
            &dw,
            &want,
            1e-4,
            1e-3,
            &format!("dw with an infinity on {dev}"),
        );
    }
}

#[test]
fn conv2d_reads_non_contiguous_and_unbatched_inputs() {
    let (xs, ws) = ([2, 3, 6, 5], [4, 3, 3, 3]);
    let x = data(180, 4, 1.0);
    let wt = data(4 * 27, 5, 1.0);
    let o = Conv2dOptions::default().padding(1);
    let (want, _) = conv_ref(&x, xs, &wt, ws, None, &o);
    for dev in devices() {
        // Stored as [n, c, w, h] and viewed transposed: a strided input.
        let mut xt_host = vec![0f32; x.len()];
        for b in 0..2 {
            for c in 0..3 {
                for i in 0..6 {
                    for j in 0..5 {
                        xt_host[((b * 3 + c) * 5 + j) * 6 + i] = x[((b * 3 + c) * 6 + i) * 5 + j];
                    }
                }
            }
        }
        let xv = Tensor::from_vec(xt_host, &[2, 3, 5, 6], &dev)
            .unwrap()
            .transpose(2, 3)
            .unwrap();
        assert!(!xv.is_contiguous());
        let w = Tensor::from_vec(wt.clone(), &ws, &dev).unwrap();
        let y = xv.conv2d(&w, None, &o).unwrap();
        assert_close(
            &values(&y),
            &want,
            1e-4,
            1e-4,
            &format!("strided conv2d on {dev}"),
        );
        // Unbatched [C, H, W] gives the first image's output.
        let one = Tensor::from_vec(x[..90].to_vec(), &[3, 6, 5], &dev).unwrap();
        let y1 = one.conv2d(&w, None, &o).unwrap();
        assert_eq!(y1.shape(), &[4, 6, 5]);
        assert_close(
            &values(&y1),
            &want[..120],
            1e-4,
            1e-4,
            &format!("unbatched on {dev}"),
        );
    }
}

#[test]
fn conv1d_matches_direct_loops() {
    let x = data(2 * 3 * 10, 6, 1.0);
    let wt = data(4 * 3 * 3, 7, 1.0);
    let o = Conv2dOptions::default().stride(2).padding(1);
    // conv1d = conv2d with height 1.
    let o2 = Conv2dOptions {
        stride: [1, 2],
        padding: [0, 1],
        ..Default::default()
    };
    let (want, [_, ow]) = conv_ref(&x, [2, 3, 1, 10], &wt, [4, 3, 1, 3], None, &o2);
    for dev in devices() {
        let xt = Tensor::from_vec(x.clone(), &[2, 3, 10], &dev).unwrap();
        let w = Tensor::from_vec(wt.clone(), &[4, 3, 3], &dev).unwrap();
        let y = xt.conv1d(&w, None, &o).unwrap();
        assert_eq!(y.shape(), &[2, 4, ow]);
        assert_close(&values(&y), &want, 1e-4, 1e-4, &format!("conv1d on {dev}"));
    }
}

/// Direct pooling: `(max, argmax offset, mean with padding counted)` per output.
fn pool_ref(
    x: &[f32],
    [n, c, h, w]: [usize; 4],
    k: [usize; 2],
    s: [usize; 2],
    p: [usize; 2],
) -> (Vec<f32>, Vec<u32>, Vec<f32>, [usize; 2]) {
    let oh = (h + 2 * p[0] - k[0]) / s[0] + 1;
    let ow = (w + 2 * p[1] - k[1]) / s[1] + 1;
    let (mut mx, mut ix, mut av) = (vec![], vec![], vec![]);
    for b in 0..n * c {
        for y in 0..oh {
            for xo in 0..ow {
                let (mut best, mut at, mut sum) = (f32::NEG_INFINITY, 0u32, 0f64);
                for i in 0..k[0] {
                    for j in 0..k[1] {
                        let iy = (y * s[0] + i) as isize - p[0] as isize;
                        let jx = (xo * s[1] + j) as isize - p[1] as isize;
                        if iy < 0 || jx < 0 || iy >= h as isize || jx >= w as isize {
                            continue;
                        }
                        let off = iy as usize * w + jx as usize;
                        let v = x[b * h * w + off];
                        sum += v as f64;
                        if v > best {
                            best = v;
                            at = off as u32;
                        }
                    }
                }
                mx.push(best);
                ix.push(at);
                av.push((sum / (k[0] * k[1]) as f64) as f32);
            }
        }
    }
    (mx, ix, av, [oh, ow])
}

#[test]
fn pooling_matches_direct_loops() {
    let cases = [
        ([1, 1, 4, 4], [2, 2], [2, 2], [0, 0]),
        // `MaxPool2d(2)` over odd sides: the last row and column belong to no window.
        ([2, 3, 7, 5], [2, 2], [2, 2], [0, 0]),
        ([2, 3, 7, 5], [3, 3], [2, 2], [1, 1]),
        ([1, 2, 9, 9], [3, 2], [1, 2], [1, 0]),
        ([3, 1, 5, 6], [2, 3], [3, 1], [0, 1]),
    ];
    for (xs, k, s, p) in cases {
        let x = data(xs.iter().product(), 8, 1.0);
        let (mx, ix, av, [oh, ow]) = pool_ref(&x, xs, k, s, p);
        for dev in devices() {
            let t = Tensor::from_vec(x.clone(), &xs, &dev).unwrap();
            let (v, i) = t.max_pool2d_with_indices(k, Some(s), p).unwrap();
            assert_eq!(v.shape(), &[xs[0], xs[1], oh, ow]);
            let ctx = format!("pool {xs:?} k{k:?} s{s:?} p{p:?} on {dev}");
            assert_close(&values(&v), &mx, 0.0, 0.0, &ctx);
            assert_eq!(i.to_vec::<u32>().unwrap(), ix, "{ctx}: indices");
            assert_close(
                &values(&t.avg_pool2d(k, Some(s), p).unwrap()),
                &av,
                1e-5,
                1e-6,
                &ctx,
            );
        }
    }
}

/// A NaN wins a 2x2 window over numbers before and after it, and the first NaN of the window
/// keeps the index (PyTorch's rule), on every device.
#[test]
fn max_pool_2x2_takes_the_first_nan() {
    let n = f32::NAN;
    // Four 2x2 windows of a 4x4 plane: NaN second, NaN first, two NaN (second and fourth), none.
    #[rustfmt::skip]
    let x = vec![
        1.0, n,    n,   5.0,
        3.0, n,    2.0, 9.0,
        4.0, n,    0.5, 0.25,
        7.0, n,    0.75, -1.0,
    ];
    for dev in devices() {
        let t = Tensor::from_vec(x.clone(), &[1, 1, 4, 4], &dev).unwrap();
        let (v, i) = t
            .max_pool2d_with_indices([2, 2], Some([2, 2]), [0, 0])
            .unwrap();
        let v = values(&v);
        assert!(
            v[0].is_nan() && v[1].is_nan() && v[2].is_nan(),
            "{v:?} on {dev}"
        );
        assert_eq!(v[3], 0.75, "on {dev}");
        assert_eq!(
            i.to_vec::<u32>().unwrap(),
            vec![1, 2, 9, 14],
            "indices on {dev}"
        );
    }
}

/// Max pooling's gradient lands on each window's first maximum (ties made common by rounding),
/// overlapping windows adding up, on every device.
#[test]
fn max_pool_gradient_goes_to_the_first_maximum() {
    let cases = [
        ([2, 3, 7, 5], [3, 3], [2, 2], [1, 1]),
        ([1, 2, 9, 9], [3, 2], [1, 2], [1, 0]),
        ([4, 8, 8, 8], [2, 2], [2, 2], [0, 0]),
    ];
    for (xs, k, s, p) in cases {
        let x: Vec<f32> = data(xs.iter().product(), 41, 2.0)
            .iter()
            .map(|v| v.round())
            .collect();
        let (_, ix, _, [oh, ow]) = pool_ref(&x, xs, k, s, p);
        let gy = data(ix.len(), 42, 1.0);
        let (hw, ohw) = (xs[2] * xs[3], oh * ow);
        let mut want = vec![0f32; x.len()];
        for (o, (&i, &g)) in ix.iter().zip(&gy).enumerate() {
            want[o / ohw * hw + i as usize] += g;
        }
        for dev in devices() {
            let t = Tensor::from_vec(x.clone(), &xs, &dev)
                .unwrap()
                .requires_grad_(true);
            let g = Tensor::from_vec(gy.clone(), &[xs[0], xs[1], oh, ow], &dev).unwrap();
            t.max_pool2d(k, Some(s), p)
                .unwrap()
                .backward_with(&g)
                .unwrap();
            let ctx = format!("max_pool2d gradient {xs:?} k{k:?} s{s:?} p{p:?} on {dev}");
            assert_close(&values(&t.grad().unwrap()), &want, 1e-6, 1e-6, &ctx);
        }
    }
}

#[test]
fn adaptive_avg_pool_and_nan_propagation() {
    let x = data(2 * 5 * 7, 9, 1.0);
    // Output 3x2 of a 5x7 plane: rows 0..2, 1..4, 3..5; columns 0..4, 3..7.
    let rows = [(0, 2), (1, 4), (3, 5)];
    let cols = [(0, 4), (3, 7)];
    let mut want = vec![];
    for b in 0..2 {
        for (r0, r1) in rows {
            for (c0, c1) in cols {
                let mut s = 0f64;
                for r in r0..r1 {
                    for c in c0..c1 {
                        s += x[b * 35 + r * 7 + c] as f64;
                    }
                }
                want.push((s / ((r1 - r0) * (c1 - c0)) as f64) as f32);
            }
        }
    }
    for dev in devices() {
        let t = Tensor::from_vec(x.clone(), &[1, 2, 5, 7], &dev).unwrap();
        let y = t.adaptive_avg_pool2d([3, 2]).unwrap();
        assert_close(
            &values(&y),
            &want,
            1e-5,
            1e-6,
            &format!("adaptive on {dev}"),
        );
        // NaN reaches max pooling's and convolution's outputs.
        let mut xn = x.clone();
        xn[0] = f32::NAN;
        let tn = Tensor::from_vec(xn, &[1, 2, 5, 7], &dev).unwrap();
        let c = tn
            .conv2d(
                &Tensor::ones(&[1, 2, 2, 2], wgtensor::DType::F32, &dev).unwrap(),
                None,
                &Conv2dOptions::default(),
            )
            .unwrap();
        assert!(values(&c)[0].is_nan(), "conv2d NaN on {dev}");
    }
}

#[test]
fn pad_matches_direct_loops() {
    let x = data(2 * 3 * 4, 10, 1.0);
    let (h, w) = (3usize, 4usize);
    for (mode, name) in [
        (PadMode::Constant(0.5), "constant"),
        (PadMode::Reflect, "reflect"),
        (PadMode::Replicate, "replicate"),
    ] {
        let (l, r, t, b) = (2usize, 1usize, 1usize, 2usize);
        let mut want = vec![];
        for img in 0..2 {
            for y in 0..h + t + b {
                for xx in 0..w + l + r {
                    let (iy, ix) = (y as isize - t as isize, xx as isize - l as isize);
                    let fix = |i: isize, n: usize| -> Option<usize> {
                        let n = n as isize;
                        match mode {
                            PadMode::Constant(_) => (i >= 0 && i < n).then_some(i as usize),
                            PadMode::Reflect => Some(if i < 0 {
                                -i
                            } else if i >= n {
                                2 * (n - 1) - i
                            } else {
                                i
                            } as usize),
                            PadMode::Replicate => Some(i.clamp(0, n - 1) as usize),
                        }
                    };
                    want.push(match (fix(iy, h), fix(ix, w)) {
                        (Some(a), Some(c)) => x[img * 12 + a * w + c],
                        _ => 0.5,
                    });
                }
            }
        }
        for dev in devices() {
            let tt = Tensor::from_vec(x.clone(), &[2, h, w], &dev).unwrap();
            let y = tt.pad(&[l, r, t, b], mode).unwrap();
            assert_eq!(y.shape(), &[2, h + t + b, w + l + r]);
            assert_close(
                &values(&y),
                &want,
                0.0,
                0.0,
                &format!("pad {name} on {dev}"),
            );
        }
    }
}

#[test]
fn bad_arguments_are_errors_and_leave_tensors_intact() {
    for dev in devices() {
        let x = Tensor::from_vec(data(2 * 4 * 5 * 5, 11, 1.0), &[2, 4, 5, 5], &dev).unwrap();
        let before = values(&x);
        let w = Tensor::ones(&[6, 3, 3, 3], wgtensor::DType::F32, &dev).unwrap();
        let e = x.conv2d(&w, None, &Conv2dOptions::default()).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { op: "conv2d", .. }),
            "{e}"
        );
        assert!(e.to_string().contains("4 channels"), "{e}");
        let big = Tensor::ones(&[1, 4, 7, 7], wgtensor::DType::F32, &dev).unwrap();
        let e = x.conv2d(&big, None, &Conv2dOptions::default()).unwrap_err();
        assert!(e.to_string().contains("span 7"), "{e}");
        assert!(x
            .conv2d(&w, None, &Conv2dOptions::default().groups(0))
            .is_err());
        assert!(
            x.max_pool2d([2, 2], None, [2, 2]).is_err(),
            "padding above half the kernel"
        );
        assert!(
            x.pad(&[5, 5], PadMode::Reflect).is_err(),
            "reflect wider than the dim"
        );
        assert!(x.pad(&[1, 1, 1], PadMode::Reflect).is_err(), "odd pads");
        let ints = Tensor::from_vec(vec![1i32; 4], &[1, 1, 2, 2], &dev).unwrap();
        assert!(ints.max_pool2d([2, 2], None, [0, 0]).is_err());
        assert_eq!(values(&x), before, "input intact on {dev}");
    }
}

#[test]
fn batch_norm_2d_normalises_and_tracks_running_statistics() {
    let x = data(4 * 3 * 2 * 2, 12, 2.0);
    let per = 4 * 4; // values per channel
    let mut mean = [0f64; 3];
    let mut var = [0f64; 3];
    for ch in 0..3 {
        let vals: Vec<f64> = (0..4)
            .flat_map(|b| (0..4).map(move |i| (b, i)))
            .map(|(b, i)| x[(b * 3 + ch) * 4 + i] as f64)
            .collect();
        mean[ch] = vals.iter().sum::<f64>() / per as f64;
        var[ch] = vals.iter().map(|v| (v - mean[ch]).powi(2)).sum::<f64>() / per as f64;
    }
    for dev in devices() {
        let mut bn = BatchNorm2d::new(3, &dev).unwrap();
        let t = Tensor::from_vec(x.clone(), &[4, 3, 2, 2], &dev).unwrap();
        let y = values(&bn.forward(&t).unwrap());
        for (i, &v) in y.iter().enumerate() {
            let ch = (i / 4) % 3;
            let want = ((x[i] as f64 - mean[ch]) / (var[ch] + 1e-5).sqrt()) as f32;
            assert!((v - want).abs() < 1e-4, "bn train on {dev}: {v} vs {want}");
        }
        let rm = values(&bn.running_mean());
        let rv = values(&bn.running_var());
        for ch in 0..3 {
            assert!(
                (rm[ch] as f64 - 0.1 * mean[ch]).abs() < 1e-5,
                "running mean on {dev}"
            );
            let unbiased = var[ch] * per as f64 / (per - 1) as f64;
            assert!(
                (rv[ch] as f64 - (0.9 + 0.1 * unbiased)).abs() < 1e-5,
                "running var on {dev}"
            );
        }
        assert!(!bn.running_mean().requires_grad());
        bn.eval();
        let ye = values(&bn.forward(&t).unwrap());
        let want0 = ((x[0] as f64 - rm[0] as f64) / (rv[0] as f64 + 1e-5).sqrt()) as f32;
        assert!((ye[0] - want0).abs() < 1e-4, "bn eval on {dev}");
        // Moving keeps the statistics buffers, not parameters.
        bn.to(&wgtensor::Device::cpu()).unwrap();
        assert!(!bn.running_var().requires_grad());
        assert_eq!(values(&bn.running_var()), rv);
    }
}

#[test]
fn f16_convolution_and_pooling_follow_f32() {
    let (xs, ws) = ([2, 3, 6, 6], [4, 3, 3, 3]);
    let x = data(216, 13, 1.0);
    let wt = data(108, 14, 0.5);
    let o = Conv2dOptions::default().padding(1).stride(2);
    let (want, _) = conv_ref(&x, xs, &wt, ws, None, &o);
    for dev in devices() {
        let h = |v: &[f32], s: &[usize]| {
            Tensor::from_vec(v.to_vec(), s, &dev)
                .unwrap()
                .to_dtype(wgtensor::DType::F16)
                .unwrap()
        };
        let y = h(&x, &xs).conv2d(&h(&wt, &ws), None, &o).unwrap();
        assert_eq!(y.dtype(), wgtensor::DType::F16);
        let got = values(&y.to_dtype(wgtensor::DType::F32).unwrap());
        assert_close(&got, &want, 1e-2, 1e-2, &format!("f16 conv2d on {dev}"));
        let p = h(&x, &xs).max_pool2d([2, 2], None, [0, 0]).unwrap();
        let (mx, ..) = pool_ref(&x, xs, [2, 2], [2, 2], [0, 0]);
        let got = values(&p.to_dtype(wgtensor::DType::F32).unwrap());
        assert_close(&got, &mx, 1e-3, 1e-3, &format!("f16 max_pool2d on {dev}"));
    }
}
