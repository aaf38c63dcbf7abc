//! Gradients of every differentiable op: checked against central finite differences on the CPU
//! (f64 sums of f32 forwards) and, on every adapter, against the CPU gradient.

use crate::common;

use common::{assert_close, data, devices, values};
use wgtensor::{DType, Device, Result, Tensor};

type F = fn(&[Tensor]) -> Result<Tensor>;

/// One differentiable function of a few inputs.
struct Case {
    name: &'static str,
    shapes: &'static [&'static [usize]],
    /// Inputs in [0.5, 1.5] (log, sqrt, div, pow) instead of [-1, 1].
    positive: bool,
    f: F,
}

fn case(name: &'static str, shapes: &'static [&'static [usize]], f: F) -> Case {
    Case {
        name,
        shapes,
        positive: false,
        f,
    }
}

fn pos(name: &'static str, shapes: &'static [&'static [usize]], f: F) -> Case {
    Case {
        name,
        shapes,
        positive: true,
        f,
    }
}

fn inputs_host(c: &Case) -> Vec<Vec<f32>> {
    c.shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let n = s.iter().product();
            let v = data(n, 17 + i as u64 * 31, 1.0);
            if c.positive {
                v.iter().map(|x| x.abs() + 0.5).collect()
            } else {
                v
            }
        })
        .collect()
}

fn make(host: &[Vec<f32>], shapes: &[&[usize]], dev: &Device, grad: bool) -> Vec<Tensor> {
    host.iter()
        .zip(shapes)
        .map(|(v, s)| {
            let t = Tensor::from_vec(v.clone(), s, dev).unwrap();
            if grad {
                t.requires_grad_(true)
            } else {
                t
            }
        })
        .collect()
}

/// Analytic gradients of `sum(f(x) * w)` on `dev`, read back.
fn analytic(c: &Case, host: &[Vec<f32>], w: &[f32], dev: &Device) -> Vec<Vec<f32>> {
    let xs = make(host, c.shapes, dev, true);
    let y = (c.f)(&xs).unwrap_or_else(|e| panic!("{}: forward on {dev}: {e}", c.name));
    assert!(
        y.requires_grad(),
        "{}: result does not require grad",
        c.name
    );
    let wt = Tensor::from_vec(w.to_vec(), y.shape(), dev).unwrap();
    y.backward_with(&wt)
        .unwrap_or_else(|e| panic!("{}: backward on {dev}: {e}", c.name));
    xs.iter()
        .map(|x| {
            // An input that does not reach the output (a mask's source) gets no gradient,
            // as in PyTorch: that is a zero derivative.
            let Some(g) = x.grad() else {
                return vec![0.0; x.numel()];
            };
            assert_eq!(g.shape(), x.shape(), "{}: grad shape", c.name);
            assert_eq!(g.device(), dev, "{}: grad device", c.name);
            values(&g)
        })
        .collect()
}

fn objective(c: &Case, host: &[Vec<f32>], w: &[f32]) -> f64 {
    let xs = make(host, c.shapes, &Device::cpu(), false);
    let y = values(&(c.f)(&xs).unwrap());
    y.iter().zip(w).map(|(&a, &b)| a as f64 * b as f64).sum()
}

fn check(c: &Case) {
    let host = inputs_host(c);
    let cpu = Device::cpu();
    let out_n = (c.f)(&make(&host, c.shapes, &cpu, false)).unwrap().numel();
    let w: Vec<f32> = data(out_n, 99, 1.0);
    let expected = analytic(c, &host, &w, &cpu);

    // Finite differences: (f(x + e) - f(x - e)) / 2e per element.
    let eps = 1e-3f32;
    for (i, x) in host.iter().enumerate() {
        let mut numeric = Vec::with_capacity(x.len());
        for j in 0..x.len() {
            let mut plus = host.to_vec();
            plus[i][j] += eps;
            let mut minus = host.to_vec();
            minus[i][j] -= eps;
            let d = (objective(c, &plus, &w) - objective(c, &minus, &w)) / (2.0 * eps as f64);
            numeric.push(d as f32);
        }
        assert_close(
            &expected[i],
            &numeric,
            2e-2,
            2e-2,
            &format!("{}: input {i} vs finite differences", c.name),
        );
    }

    for dev in devices().into_iter().filter(|d| d.is_gpu()) {
        let got = analytic(c, &host, &w, &dev);
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert_close(g, e, 1e-4, 1e-5, &format!("{}: input {i} on {dev}", c.name));
        }
    }
}

fn run(cases: Vec<Case>) {
    for c in &cases {
        check(c);
    }
}

#[test]
fn elementwise_binary_with_broadcasting() {
    run(vec![
        case("add", &[&[2, 3], &[3]], |x| x[0].add(&x[1])),
        case("sub", &[&[2, 1, 3], &[4, 1]], |x| x[0].sub(&x[1])),
        case("mul", &[&[2, 3], &[2, 1]], |x| x[0].mul(&x[1])),
        pos("div", &[&[3, 4], &[4]], |x| x[0].div(&x[1])),
        case("maximum", &[&[2, 3], &[3]], |x| x[0].maximum(&x[1])),
        case("minimum", &[&[2, 3], &[2, 1]], |x| x[0].minimum(&x[1])),
        pos("pow", &[&[2, 3], &[3]], |x| x[0].pow(&x[1])),
        pos("rem (fmod)", &[&[2, 3], &[3]], |x| {
            x[0].mul_scalar(3.0)?.rem(&x[1].add_scalar(1.0)?)
        }),
        case("same input twice", &[&[5]], |x| x[0].mul(&x[0])),
        case("diamond", &[&[4]], |x| {
            let a = x[0].exp()?;
            a.mul(&x[0].sin()?)?.add(&a)
        }),
    ]);
}

#[test]
fn elementwise_scalar() {
    run(vec![
        case("add_scalar", &[&[5]], |x| x[0].add_scalar(2.0)),
        case("sub_scalar", &[&[5]], |x| x[0].sub_scalar(2.0)),
        case("mul_scalar", &[&[5]], |x| x[0].mul_scalar(-3.0)),
        case("div_scalar", &[&[5]], |x| x[0].div_scalar(4.0)),
        pos("pow_scalar", &[&[5]], |x| x[0].pow_scalar(2.5)),
        case("maximum_scalar", &[&[6]], |x| x[0].maximum_scalar(0.1)),
        case("minimum_scalar", &[&[6]], |x| x[0].minimum_scalar(0.1)),
        case("scalar - x", &[&[5]], |x| 2.0 - &x[0]),
        pos("scalar / x", &[&[5]], |x| 3.0 / &x[0]),
        case("scalar * x", &[&[5]], |x| 2.0 * &x[0]),
        case("scalar + x", &[&[5]], |x| 2.0 + &x[0]),
        pos("rem_scalar", &[&[5]], |x| {
            x[0].mul_scalar(3.0)?.rem_scalar(2.0)
        }),
    ]);
}

#[test]
fn elementwise_unary() {
    run(vec![
        case("neg", &[&[6]], |x| x[0].neg()),
        case("abs", &[&[6]], |x| x[0].abs()),
        case("exp", &[&[6]], |x| x[0].exp()),
        pos("log", &[&[6]], |x| x[0].log()),
        pos("sqrt", &[&[6]], |x| x[0].sqrt()),
        case("relu", &[&[8]], |x| x[0].relu()),
        case("sigmoid", &[&[6]], |x| x[0].sigmoid()),
        case("tanh", &[&[6]], |x| x[0].tanh()),
        case("gelu", &[&[8]], |x| x[0].mul_scalar(3.0)?.gelu()),
        case("softplus", &[&[8]], |x| x[0].mul_scalar(3.0)?.softplus()),
        case("silu", &[&[8]], |x| x[0].mul_scalar(3.0)?.silu()),
        case("sin", &[&[6]], |x| x[0].sin()),
        case("cos", &[&[6]], |x| x[0].cos()),
    ]);
}

#[test]
fn matmul_all_shape_rules() {
    run(vec![
        case("2-D @ 2-D", &[&[3, 4], &[4, 5]], |x| x[0].matmul(&x[1])),
        case("1-D @ 2-D", &[&[4], &[4, 5]], |x| x[0].matmul(&x[1])),
        case("2-D @ 1-D", &[&[3, 4], &[4]], |x| x[0].matmul(&x[1])),
        case("1-D @ 1-D", &[&[4], &[4]], |x| x[0].matmul(&x[1])),
        case("batched @ 2-D", &[&[2, 3, 4], &[4, 5]], |x| {
            x[0].matmul(&x[1])
        }),
        case(
            "4-D @ 2-D (weight shared by the batch)",
            &[&[2, 2, 3, 4], &[4, 5]],
            |x| x[0].matmul(&x[1]),
        ),
        case("permuted batch @ 2-D", &[&[3, 2, 4], &[4, 5]], |x| {
            x[0].transpose(0, 1)?.matmul(&x[1])
        }),
        case("broadcast batches", &[&[2, 1, 3, 4], &[3, 4, 2]], |x| {
            x[0].matmul(&x[1])
        }),
        case("batched @ 1-D", &[&[2, 3, 4], &[4]], |x| x[0].matmul(&x[1])),
        case("1-D @ batched", &[&[4], &[2, 4, 3]], |x| x[0].matmul(&x[1])),
    ]);
}

#[test]
fn reductions() {
    run(vec![
        case("sum_all", &[&[2, 3]], |x| x[0].sum_all()),
        case("sum dim", &[&[2, 3, 2]], |x| x[0].sum(1, false)),
        case("sum keepdim", &[&[2, 3]], |x| x[0].sum(0, true)),
        case("mean_all", &[&[2, 3]], |x| x[0].mean_all()),
        case("mean dim", &[&[2, 3]], |x| x[0].mean(-1, false)),
        case("mean keepdim", &[&[3, 2]], |x| x[0].mean(0, true)),
        pos("prod_all", &[&[2, 3]], |x| x[0].prod_all()),
        pos("prod dim", &[&[2, 3]], |x| x[0].prod(1, true)),
        case("max_all", &[&[2, 3]], |x| x[0].max_all()),
        case("max dim", &[&[3, 4]], |x| x[0].max(1, false)),
        case("min keepdim", &[&[3, 4]], |x| x[0].min(0, true)),
        case("min_all", &[&[5]], |x| x[0].min_all()),
        case("sum of 0-d", &[&[]], |x| x[0].sum(0, false)),
    ]);
}

#[test]
fn softmax_and_log_softmax() {
    run(vec![
        case("softmax last", &[&[3, 4]], |x| x[0].softmax(-1)),
        case("softmax dim 0", &[&[3, 4]], |x| x[0].softmax(0)),
        case("log_softmax", &[&[3, 4]], |x| x[0].log_softmax(-1)),
        case("log_softmax 3-D", &[&[2, 3, 2]], |x| x[0].log_softmax(1)),
    ]);
}

#[test]
fn views_and_joins() {
    run(vec![
        case("reshape", &[&[2, 6]], |x| {
            x[0].reshape(&[3, 4])?.mul_scalar(2.0)
        }),
        case("transpose", &[&[2, 3, 4]], |x| x[0].transpose(0, 2)),
        case("permute", &[&[2, 3, 4]], |x| x[0].permute(&[1, 2, 0])),
        case("t", &[&[2, 3]], |x| x[0].t()),
        case("narrow", &[&[3, 5]], |x| x[0].narrow(1, 1, 2)),
        case("squeeze", &[&[2, 1, 3]], |x| x[0].squeeze(1)),
        case("unsqueeze", &[&[2, 3]], |x| x[0].unsqueeze(0)),
        case("expand", &[&[3, 1]], |x| x[0].expand(&[2, 3, 4])),
        case("broadcast_as", &[&[4]], |x| x[0].broadcast_as(&[3, 4])),
        case("flatten", &[&[2, 3]], |x| x[0].flatten()),
        case("contiguous", &[&[2, 3]], |x| x[0].t()?.contiguous()),
        case("cat", &[&[2, 1], &[2, 3], &[2, 2]], |x| {
            Tensor::cat(&[&x[0], &x[1], &x[2]], 1)
        }),
        case("stack", &[&[3], &[3]], |x| {
            Tensor::stack(&[&x[0], &x[1]], 1)
        }),
        case("view of a view", &[&[4, 3]], |x| {
            x[0].t()?.narrow(0, 1, 2)?.reshape(&[8])
        }),
    ]);
}

#[test]
fn selections() {
    run(vec![
        case("where_cond", &[&[2, 3], &[2, 3], &[3]], |x| {
            x[0].gt_scalar(0.0)?.where_cond(&x[1], &x[2])
        }),
        case("clamp", &[&[8]], |x| x[0].clamp(-0.5, 0.5)),
        case("index_select dim 0 with repeats", &[&[4, 3]], |x| {
            let ids = Tensor::from_vec(vec![2u32, 0, 2, 3, 2], &[5], x[0].device())?;
            x[0].index_select(0, &ids)
        }),
        case("index_select dim 1", &[&[2, 4, 3]], |x| {
            let ids = Tensor::from_vec(vec![3i32, 1], &[2], x[0].device())?;
            x[0].index_select(1, &ids)
        }),
    ]);
}

#[test]
fn a_small_network() {
    run(vec![case(
        "mlp + log_softmax",
        &[&[4, 3], &[3, 5], &[5], &[5, 2]],
        |x| {
            let h = x[0].matmul(&x[1])?.add(&x[2])?.tanh()?;
            h.matmul(&x[3])?.log_softmax(-1)?.mean(0, false)
        },
    )]);
}

#[test]
fn to_device_is_differentiable() {
    for dev in devices() {
        let x = Tensor::from_vec(vec![1f32, 2.0, 3.0], &[3], &Device::cpu())
            .unwrap()
            .requires_grad_(true);
        let y = x.to(&dev).unwrap().mul_scalar(2.0).unwrap();
        let y = y.mul(&y).unwrap().sum_all().unwrap(); // sum (2x)^2 -> 8x
        y.backward().unwrap();
        let g = x.grad().unwrap();
        assert!(g.is_cpu(), "the gradient returns to the source device");
        assert_close(&values(&g), &[8.0, 16.0, 24.0], 1e-6, 0.0, "to");
    }
}

#[test]
fn grads_accumulate_and_clear() -> Result<()> {
    let x = Tensor::from_vec(vec![1f32, -2.0], &[2], &Device::cpu())?.requires_grad_(true);
    x.mul_scalar(3.0)?.sum_all()?.backward()?;
    x.mul(&x)?.sum_all()?.backward()?;
    assert_eq!(values(&x.grad().unwrap()), vec![3.0 + 2.0, 3.0 - 4.0]);
    x.zero_grad();
    assert!(x.grad().is_none());
    Ok(())
}

#[test]
fn no_grad_detach_and_leaves() -> Result<()> {
    let d = Device::cpu();
    let x = Tensor::from_vec(vec![1f32, 2.0], &[2], &d)?.requires_grad_(true);
    let c = Tensor::from_vec(vec![5f32, 6.0], &[2], &d)?;
    assert!(x.is_leaf() && x.requires_grad() && !c.requires_grad());
    assert!(!c.mul(&c)?.requires_grad(), "no input requires grad");
    let y = wgtensor::no_grad_scope(|| x.mul(&c))?;
    assert!(!y.requires_grad() && y.is_leaf());
    assert!(wgtensor::is_grad_enabled());
    {
        let _g = wgtensor::no_grad();
        assert!(!x.exp()?.requires_grad());
    }
    assert!(x.exp()?.requires_grad());
    // A detached branch contributes nothing.
    let z = x.mul(&c)?.add(&x.detach().mul_scalar(100.0)?)?;
    z.sum_all()?.backward()?;
    assert_eq!(values(&x.grad().unwrap()), vec![5.0, 6.0]);
    // Comparisons and argmax carry no gradient.
    assert!(!x.gt_scalar(0.0)?.requires_grad());
    assert!(!x.argmax_all()?.requires_grad());
    // The data is shared, not copied.
    assert_eq!(values(&x.detach()), vec![1.0, 2.0]);
    Ok(())
}

#[test]
fn backward_errors_are_typed() -> Result<()> {
    let d = Device::cpu();
    let x = Tensor::ones(&[3], DType::F32, &d)?.requires_grad_(true);
    let y = x.mul_scalar(2.0)?;
    let err = y.backward().unwrap_err().to_string();
    assert!(
        err.contains("[3]") && err.contains("backward_with"),
        "{err}"
    );
    let plain = Tensor::ones(&[1], DType::F32, &d)?;
    assert!(plain
        .backward()
        .unwrap_err()
        .to_string()
        .contains("require grad"));
    let wrong = Tensor::ones(&[4], DType::F32, &d)?;
    assert!(matches!(
        y.backward_with(&wrong),
        Err(wgtensor::Error::ShapeMismatch { .. })
    ));
    Ok(())
}

#[test]
fn max_ties_share_the_gradient() -> Result<()> {
    for dev in devices() {
        let x = Tensor::from_vec(vec![1f32, 3.0, 3.0, 0.0], &[4], &dev)?.requires_grad_(true);
        x.max_all()?.backward()?;
        assert_eq!(
            values(&x.grad().unwrap()),
            vec![0.0, 0.5, 0.5, 0.0],
            "{dev}"
        );
    }
    Ok(())
}

#[test]
fn long_chains_backward_and_drop_without_recursion() -> Result<()> {
    let x = Tensor::ones(&[2], DType::F32, &Device::cpu())?.requires_grad_(true);
    let mut y = x.clone();
    for _ in 0..100_000 {
        y = y.add_scalar(1e-6)?;
    }
    y.sum_all()?.backward()?;
    assert_eq!(values(&x.grad().unwrap()), vec![1.0, 1.0]);
    drop(y); // frees 100,000 nodes; recursion would overflow the test thread's stack
    Ok(())
}

#[test]
fn convolution_pooling_and_padding() {
    use wgtensor::{Conv2dOptions, PadMode};
    run(vec![
        case(
            "conv2d padded strided",
            &[&[2, 3, 5, 4], &[4, 3, 3, 2], &[4]],
            |x| {
                x[0].conv2d(
                    &x[1],
                    Some(&x[2]),
                    &Conv2dOptions::default().stride(2).padding(1),
                )
            },
        ),
        case(
            "conv2d dilated grouped",
            &[&[1, 4, 6, 6], &[2, 2, 2, 2]],
            |x| x[0].conv2d(&x[1], None, &Conv2dOptions::default().dilation(2).groups(2)),
        ),
        case("conv2d 1x1", &[&[2, 3, 2, 3], &[2, 3, 1, 1]], |x| {
            x[0].conv2d(&x[1], None, &Conv2dOptions::default())
        }),
        case("conv1d", &[&[2, 2, 7], &[3, 2, 3]], |x| {
            x[0].conv1d(&x[1], None, &Conv2dOptions::default().padding(1))
        }),
        case("max_pool2d", &[&[2, 2, 5, 5]], |x| {
            x[0].max_pool2d([3, 3], Some([2, 2]), [1, 1])
        }),
        case("avg_pool2d", &[&[1, 2, 4, 5]], |x| {
            x[0].avg_pool2d([2, 2], Some([1, 2]), [1, 0])
        }),
        case("adaptive_avg_pool2d", &[&[1, 2, 5, 7]], |x| {
            x[0].adaptive_avg_pool2d([3, 2])
        }),
        case("pad reflect", &[&[2, 3, 4]], |x| {
            x[0].pad(&[2, 1, 1, 2], PadMode::Reflect)
        }),
        case("pad constant", &[&[2, 3]], |x| {
            x[0].pad(&[1, 2], PadMode::Constant(3.0))
        }),
    ]);
}

#[test]
fn attention_ops() {
    use wgtensor::DType;
    run(vec![
        case("sdpa causal", &[&[2, 4, 3], &[2, 4, 3], &[2, 4, 5]], |x| {
            Tensor::scaled_dot_product_attention(&x[0], &x[1], &x[2], None, true, 0.0, None)
        }),
        case(
            "sdpa float mask",
            &[&[1, 3, 2], &[1, 5, 2], &[1, 5, 2], &[3, 5]],
            |x| {
                Tensor::scaled_dot_product_attention(
                    &x[0],
                    &x[1],
                    &x[2],
                    Some(&x[3]),
                    false,
                    0.0,
                    Some(0.7),
                )
            },
        ),
        case("tril", &[&[3, 4]], |x| x[0].tril(0)),
        case("triu", &[&[2, 3, 3]], |x| x[0].triu(1)),
        case("masked_fill", &[&[3, 4]], |x| {
            let m = Tensor::from_vec(vec![1u8, 0, 0, 1], &[4], x[0].device())?;
            x[0].masked_fill(&m, -2.0)
        }),
        case("logsumexp", &[&[3, 5]], |x| {
            x[0].mul_scalar(3.0)?.logsumexp(-1, false)
        }),
        case("var", &[&[4, 3]], |x| x[0].var(0, 1, true)),
        case("std", &[&[4, 3]], |x| x[0].std(1, 0, false)),
        case("sum_dims", &[&[2, 3, 4]], |x| x[0].sum_dims(&[0, 2], false)),
        case("mean_dims", &[&[2, 3, 4]], |x| {
            x[0].mean_dims(&[1, 2], true)
        }),
        case("cumsum", &[&[3, 5]], |x| x[0].cumsum(1)),
        case("topk", &[&[2, 6]], |x| Ok(x[0].topk(3, 1, true)?.0)),
        case("slice_assign", &[&[2, 5], &[2, 2]], |x| {
            x[0].slice_assign(1, 2, &x[1])
        }),
        case("rms_norm", &[&[3, 4], &[4]], |x| {
            x[0].rms_norm(Some(&x[1]), 1e-5)
        }),
        case("silu via zeros", &[&[4]], |x| {
            x[0].add(&Tensor::zeros(&[4], DType::F32, x[0].device())?)?
                .silu()
        }),
    ]);
}

/// GELU's CPU gradient is one pass of its own kernel; the other devices run the op table's
/// formula. They agree at sizes 0, 1, one past a parallel block and on a transposed view, and
/// a NaN input gives a NaN gradient there only.
#[test]
fn gelu_gradient_one_pass_matches_every_device() -> Result<()> {
    let cpu = Device::cpu();
    for shape in [&[0usize][..], &[1], &[4097], &[3, 4097]] {
        let n: usize = shape.iter().product();
        let mut xv = data(n, 41, 4.0);
        if n > 1 {
            xv[1] = f32::NAN;
        }
        let gv = data(n, 42, 2.0);
        let grad = |d: &Device| -> Result<Vec<f32>> {
            let leaf = Tensor::from_vec(xv.clone(), shape, d)?.requires_grad_(true);
            // A 2-d input goes through as its transpose's transpose: a strided view.
            let x = if shape.len() == 2 {
                leaf.t()?.contiguous()?.t()?
            } else {
                leaf.clone()
            };
            let g = Tensor::from_vec(gv.clone(), shape, d)?;
            x.gelu()?.backward_with(&g)?;
            Ok(values(&leaf.grad().expect("gelu's input gradient")))
        };
        let want = grad(&cpu)?;
        assert_eq!(want.len(), n);
        for (i, w) in want.iter().enumerate() {
            assert_eq!(w.is_nan(), i == 1 && n > 1, "cpu gelu grad [{i}] = {w}");
        }
        for d in devices() {
            let got = grad(&d)?;
            assert_close(
                &got,
                &want,
                1e-4,
                1e-5,
                &format!("gelu grad {shape:?} on {d}"),
            );
        }
    }
    Ok(())
}

/// A linear layer's weight gradient (`x @ w.t()`, the rhs a transposed view): on every device
/// it has the bits of `(xᵀ dy)ᵀ` written out, and it arrives packed (a GPU computes it as
/// `dyᵀ x`, the same sums of the same products, so the optimizer needs no strided pass).
#[test]
fn linear_weight_gradient_is_packed_with_the_bits_of_x_t_dy() -> Result<()> {
    for d in devices() {
        for (m, k, n) in [(128, 784, 256), (7, 5, 3), (1, 9, 4)] {
            let x = Tensor::from_slice(&data(m * k, 3, 1.0), &[m, k], &d)?;
            let w = Tensor::from_slice(&data(n * k, 5, 0.1), &[n, k], &d)?.requires_grad_(true);
            let dy = Tensor::from_slice(&data(m * n, 9, 1.0), &[m, n], &d)?;
            x.matmul(&w.t()?)?.mul(&dy)?.sum_all()?.backward()?;
            let g = w.grad().expect("weight gradient");
            let want = x.t()?.matmul(&dy)?.t()?.to_vec::<f32>()?;
            let got = g.to_vec::<f32>()?;
            let same = got
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{d} {m}x{k}x{n}: the weight gradient's bits");
            if d.is_gpu() {
                assert!(g.is_contiguous(), "{d} {m}x{k}x{n}: packed");
            }
        }
    }
    Ok(())
}

/// `x.linear(w, b)` (one pass on the CPU: the bias goes into the product's output before the
/// gemm kernel adds its sums) has the bits of `x.matmul(w.t()).add(b)`, forward and every
/// gradient, on every device: through gemm's microkernel (K up to 512), its term-by-term paths
/// (K <= 2, one output column, tiny outputs), the one-row kernel, K past one depth block,
/// a batch of rows, empty products and NaN.
#[test]
fn linear_has_the_bits_of_matmul_then_add() -> Result<()> {
    let bits = |t: &Tensor| -> Result<Vec<u32>> {
        Ok(t.to_vec::<f32>()?
            .iter()
            .map(|v| if v.is_nan() { u32::MAX } else { v.to_bits() })
            .collect())
    };
    for d in devices() {
        for (lead, k, n) in [
            (vec![256usize], 64usize, 192usize),
            (vec![4, 16], 64, 65),
            (vec![300], 513, 65),
            (vec![7], 5, 3),
            (vec![5], 2, 7),
            (vec![40], 64, 1),
            (vec![1], 9, 4),
            (vec![0], 4, 3),
            (vec![3], 0, 2),
        ] {
            let m: usize = lead.iter().product();
            let mut xs = data(m * k, 3, 1.0);
            if let Some(v) = xs.get_mut(k + 1) {
                *v = f32::NAN;
            }
            let shape = [lead.clone(), vec![k]].concat();
            let run = |fused: bool| -> Result<Vec<Vec<u32>>> {
                let x = Tensor::from_vec(xs.clone(), &shape, &d)?.requires_grad_(true);
                let w = Tensor::from_vec(data(n * k, 5, 0.1), &[n, k], &d)?.requires_grad_(true);
                let b = Tensor::from_vec(data(n, 7, 1.0), &[n], &d)?.requires_grad_(true);
                let y = if fused {
                    x.linear(&w, Some(&b))?
                } else {
                    x.matmul(&w.t()?)?.add(&b)?
                };
                let g = Tensor::from_vec(data(y.numel(), 9, 1.0), y.shape(), &d)?;
                y.backward_with(&g)?;
                let grad = |t: &Tensor| t.grad().expect("a gradient");
                // The weight's gradient arrives packed (as `(Gᵀ X)ᵀ` through the transpose),
                // so an optimizer reads it without a strided copy.
                assert!(
                    grad(&w).is_contiguous(),
                    "{d}: weight gradient is a strided view"
                );
                Ok(vec![
                    bits(&y)?,
                    bits(&grad(&x))?,
                    bits(&grad(&w))?,
                    bits(&grad(&b))?,
                ])
            };
            let (fused, composed) = (run(true)?, run(false)?);
            for (i, (a, b)) in fused.iter().zip(&composed).enumerate() {
                assert_eq!(a, b, "{d} {lead:?}x{k}x{n}: tensor {i} (y, dx, dw, db)");
            }
        }
    }
    Ok(())
}
