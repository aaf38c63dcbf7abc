//! nn layers on every device: each layer is built once on the CPU, its parameters moved to each
//! device with `Module::to`, and the forward pass compared with the CPU's (the oracle). The CPU
//! results are checked against formulas computed here on host data. Also: `Module::to` moves
//! every parameter, parameter names and order, Sequential indexing, Dropout train vs eval.

use crate::common;

use common::{assert_close, data, devices, values};
use wgtensor::nn::{
    Dropout, Embedding, Identity, LayerNorm, Linear, Module, ReLU, Sequential, Sigmoid, Softmax,
    Tanh, GELU,
};
use wgtensor::{DType, Device, Error, Tensor};

const TOL: (f32, f32) = (1e-5, 1e-5);

/// Runs `module` (built on the CPU) on `x` on every device; asserts each output equals the CPU
/// output within `TOL`, lives on that device, and returns the CPU output.
fn on_every_device<M: Module + Clone>(module: &M, x: &Tensor, name: &str) -> Vec<f32> {
    let expected = module.forward(x).unwrap();
    let want = values(&expected);
    for device in devices() {
        let mut m = module.clone();
        m.to(&device).unwrap();
        let y = m.forward(&x.to(&device).unwrap()).unwrap();
        assert_eq!(y.device(), &device, "{name}: output device");
        assert_eq!(y.shape(), expected.shape(), "{name} on {device}: shape");
        assert_close(
            &values(&y),
            &want,
            TOL.0,
            TOL.1,
            &format!("{name} on {device}"),
        );
    }
    want
}

#[test]
fn linear_is_x_times_w_transposed_plus_b_on_every_device() {
    let cpu = Device::cpu();
    let layer = Linear::new(5, 3, true, &cpu).unwrap();
    assert_eq!(layer.weight().shape(), &[3, 5]);
    assert_eq!(layer.bias().unwrap().shape(), &[3]);
    let (w, b) = (values(layer.weight()), values(layer.bias().unwrap()));
    // PyTorch's init bound 1/sqrt(in_features), and not all one value.
    let k = 1.0 / 5f32.sqrt();
    assert!(
        w.iter().chain(&b).all(|v| v.abs() <= k),
        "init outside ±{k}"
    );
    assert!(w.iter().any(|&v| v != w[0]));
    // Leading dims [2, 4] around the feature dim.
    let xs = data(2 * 4 * 5, 7, 1.0);
    let x = Tensor::from_vec(xs.clone(), &[2, 4, 5], &cpu).unwrap();
    let got = on_every_device(&layer, &x, "Linear");
    let mut want = Vec::new();
    for row in xs.chunks(5) {
        for o in 0..3 {
            let dot: f32 = (0..5).map(|i| row[i] * w[o * 5 + i]).sum();
            want.push(dot + b[o]);
        }
    }
    assert_close(&got, &want, 1e-5, 1e-6, "Linear vs host formula");
    let no_bias = Linear::new(5, 2, false, &cpu).unwrap();
    assert_eq!(no_bias.named_parameters().len(), 1);
    on_every_device(&no_bias, &x, "Linear without bias");
}

#[test]
fn linear_rejects_bad_shapes() {
    let cpu = Device::cpu();
    let layer = Linear::new(4, 2, true, &cpu).unwrap();
    let x = Tensor::ones(&[3, 5], DType::F32, &cpu).unwrap();
    assert!(matches!(
        layer.forward(&x),
        Err(Error::ShapeMismatch { .. })
    ));
    let w = Tensor::ones(&[2, 4], DType::F32, &cpu).unwrap();
    let bad_bias = Tensor::ones(&[3], DType::F32, &cpu).unwrap();
    assert!(matches!(
        Linear::from_weights(w.clone(), Some(bad_bias)),
        Err(Error::InvalidArgument { .. })
    ));
    let w1 = Tensor::ones(&[8], DType::F32, &cpu).unwrap();
    assert!(matches!(
        Linear::from_weights(w1, None),
        Err(Error::InvalidArgument { .. })
    ));
    for gpu in common::gpus() {
        let b = Tensor::ones(&[2], DType::F32, &gpu).unwrap();
        assert!(matches!(
            Linear::from_weights(w.clone(), Some(b)),
            Err(Error::DeviceMismatch { .. })
        ));
        // Parameters on the GPU, input on the CPU: a device mismatch, never a silent move.
        let mut l = layer.clone();
        l.to(&gpu).unwrap();
        let x = Tensor::ones(&[1, 4], DType::F32, &cpu).unwrap();
        assert!(matches!(l.forward(&x), Err(Error::DeviceMismatch { .. })));
    }
}

#[test]
fn embedding_looks_up_rows_for_ids_of_any_shape() {
    let cpu = Device::cpu();
    let emb = Embedding::new(7, 3, &cpu).unwrap();
    let w = values(emb.weight());
    let ids: Vec<u32> = vec![6, 0, 2, 2, 5, 1];
    let want: Vec<f32> = ids
        .iter()
        .flat_map(|&i| w[i as usize * 3..i as usize * 3 + 3].to_vec())
        .collect();
    for device in devices() {
        let mut e = emb.clone();
        e.to(&device).unwrap();
        let u = Tensor::from_vec(ids.clone(), &[2, 3], &device).unwrap();
        let i32s: Vec<i32> = ids.iter().map(|&i| i as i32).collect();
        let s = Tensor::from_vec(i32s, &[3, 1, 2], &device).unwrap();
        let y = e.forward(&u).unwrap();
        assert_eq!(y.shape(), &[2, 3, 3]);
        assert_eq!(values(&y), want, "{device} u32 ids");
        let y = e.forward(&s).unwrap();
        assert_eq!(y.shape(), &[3, 1, 2, 3]);
        assert_eq!(values(&y), want, "{device} i32 ids");
        let bad = Tensor::from_vec(vec![7u32], &[1], &device).unwrap();
        // On a GPU the kernel finds the bad id; it surfaces at the readback.
        assert!(matches!(
            e.forward(&bad).and_then(|y| y.to_vec::<f32>()),
            Err(Error::IndexOutOfRange {
                index: 7,
                bound: 7,
                ..
            })
        ));
    }
    // N(0, 1) init: mean near 0 and spread near 1 over a larger table.
    let big = values(Embedding::new(100, 50, &cpu).unwrap().weight());
    let mean = big.iter().sum::<f32>() / big.len() as f32;
    let var = big.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / big.len() as f32;
    assert!(
        mean.abs() < 0.1 && (var - 1.0).abs() < 0.15,
        "mean {mean} var {var}"
    );
}

#[test]
fn layer_norm_normalises_the_last_dim() {
    let cpu = Device::cpu();
    let mut ln = LayerNorm::new(6, &cpu).unwrap();
    // Non-trivial affine parameters, set through named_parameters_mut.
    let gamma = data(6, 11, 1.0);
    let beta = data(6, 12, 1.0);
    for (name, p) in ln.named_parameters_mut() {
        let v = if name == "weight" { &gamma } else { &beta };
        *p = Tensor::from_vec(v.clone(), &[6], &cpu).unwrap();
    }
    let xs = data(4 * 6, 13, 3.0);
    let x = Tensor::from_vec(xs.clone(), &[2, 2, 6], &cpu).unwrap();
    let got = on_every_device(&ln, &x, "LayerNorm");
    let mut want = Vec::new();
    for row in xs.chunks(6) {
        let mean = row.iter().map(|&v| v as f64).sum::<f64>() / 6.0;
        let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / 6.0;
        for (i, &v) in row.iter().enumerate() {
            let n = (v as f64 - mean) / (var + 1e-5).sqrt();
            want.push((n * gamma[i] as f64 + beta[i] as f64) as f32);
        }
    }
    assert_close(&got, &want, 1e-4, 1e-5, "LayerNorm vs host formula");
    let plain = LayerNorm::with_options(6, 1e-5, false, &cpu).unwrap();
    assert_eq!(plain.num_parameters(), 0);
    on_every_device(&plain, &x, "LayerNorm without affine");
    let wrong = Tensor::ones(&[2, 5], DType::F32, &cpu).unwrap();
    assert!(matches!(
        ln.forward(&wrong),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(LayerNorm::with_options(6, -1.0, true, &cpu).is_err());
}

#[test]
fn activations_and_softmax_match_their_formulas() {
    let xs = data(3 * 8, 21, 4.0);
    let x = Tensor::from_vec(xs.clone(), &[3, 8], &Device::cpu()).unwrap();
    let check = |got: Vec<f32>, f: &dyn Fn(f32) -> f32, name: &str| {
        let want: Vec<f32> = xs.iter().map(|&v| f(v)).collect();
        assert_close(&got, &want, 1e-5, 1e-6, name);
    };
    check(on_every_device(&ReLU, &x, "ReLU"), &|v| v.max(0.0), "ReLU");
    check(
        on_every_device(&Sigmoid, &x, "Sigmoid"),
        &|v| 1.0 / (1.0 + (-v).exp()),
        "Sigmoid",
    );
    check(on_every_device(&Tanh, &x, "Tanh"), &|v| v.tanh(), "Tanh");
    check(
        on_every_device(&Identity, &x, "Identity"),
        &|v| v,
        "Identity",
    );
    // GELU(x) = x Φ(x); spot values instead of an erf implementation.
    let g = on_every_device(&GELU, &x, "GELU");
    for (&v, &y) in xs.iter().zip(&g) {
        assert!(
            y >= v.min(0.0) - 0.2 && y <= v.max(0.0) + 1e-6,
            "GELU({v}) = {y}"
        );
    }
    let spot = Tensor::from_vec(vec![1f32, -1.0], &[2], &Device::cpu()).unwrap();
    assert_close(
        &values(&GELU.forward(&spot).unwrap()),
        &[0.841_344_7, -0.158_655_3],
        1e-5,
        1e-6,
        "GELU(±1)",
    );
    for dim in [0isize, -1] {
        let got = on_every_device(&Softmax::new(dim), &x, "Softmax");
        let d = dim.rem_euclid(2) as usize;
        let (rows, len, stride) = if d == 1 { (3, 8, 1) } else { (8, 3, 8) };
        for r in 0..rows {
            let base = if d == 1 { r * 8 } else { r };
            let idx: Vec<usize> = (0..len).map(|k| base + k * stride).collect();
            let m = idx.iter().map(|&i| xs[i]).fold(f32::NEG_INFINITY, f32::max);
            let s: f32 = idx.iter().map(|&i| (xs[i] - m).exp()).sum();
            for &i in &idx {
                let want = (xs[i] - m).exp() / s;
                assert!((got[i] - want).abs() < 1e-6, "softmax dim {dim} at {i}");
            }
        }
    }
    assert!(Softmax::new(2).forward(&x).is_err());
}

#[test]
fn dropout_drops_and_scales_in_training_and_is_identity_in_eval() {
    for device in devices() {
        let x = Tensor::from_vec(data(4000, 31, 1.0), &[40, 100], &device).unwrap();
        let xs = values(&x);
        let mut drop = Dropout::new(0.25).unwrap();
        assert!(
            drop.is_training(),
            "modules start in training mode, as in PyTorch"
        );
        let y = drop.forward(&x).unwrap();
        assert_eq!(y.device(), &device);
        let ys = values(&y);
        let mut dropped = 0;
        for (&a, &b) in xs.iter().zip(&ys) {
            if b == 0.0 && a != 0.0 {
                dropped += 1;
            } else {
                assert!(
                    (b - a / 0.75).abs() <= 1e-6 * a.abs().max(1.0),
                    "{a} -> {b}"
                );
            }
        }
        // 1000 expected of 4000; 6 standard deviations is ±165.
        assert!(
            (835..=1165).contains(&dropped),
            "{device}: dropped {dropped} of 4000"
        );
        // Another call draws another mask.
        assert_ne!(
            values(&drop.forward(&x).unwrap()),
            ys,
            "{device}: same mask twice"
        );
        drop.eval();
        assert!(!drop.is_training());
        assert_eq!(
            values(&drop.forward(&x).unwrap()),
            xs,
            "{device}: eval is identity"
        );
        drop.train();
        let all = Dropout::new(1.0).unwrap().forward(&x).unwrap();
        assert!(values(&all).iter().all(|&v| v == 0.0));
        assert_eq!(values(&Dropout::new(0.0).unwrap().forward(&x).unwrap()), xs);
    }
    for p in [-0.1f32, 1.5, f32::NAN] {
        assert!(
            matches!(Dropout::new(p), Err(Error::InvalidArgument { .. })),
            "p = {p}"
        );
    }
}

fn mlp(device: &Device) -> Sequential {
    Sequential::new()
        .add(Linear::new(6, 8, true, device).unwrap())
        .add(LayerNorm::new(8, device).unwrap())
        .add(GELU)
        .add(Dropout::new(0.5).unwrap())
        .add(Linear::new(8, 3, false, device).unwrap())
        .add(Softmax::new(-1))
}

#[test]
fn sequential_names_order_indexing_and_composition() {
    let cpu = Device::cpu();
    let mut model = mlp(&cpu);
    let names: Vec<String> = model
        .named_parameters()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        ["0.weight", "0.bias", "1.weight", "1.bias", "4.weight"]
    );
    let mut_names: Vec<String> = model
        .named_parameters_mut()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(mut_names, names);
    assert_eq!(model.len(), 6);
    assert!(!model.is_empty());
    assert_eq!(model.num_parameters(), 6 * 8 + 8 + 8 + 8 + 8 * 3);
    assert_eq!(model[4].named_parameters()[0].1.shape(), &[3, 8]);
    assert!(model.get(6).is_none());
    assert_eq!(model.dtype(), Some(DType::F32));
    model.eval();
    let x = Tensor::from_vec(data(5 * 6, 41, 1.0), &[5, 6], &cpu).unwrap();
    // The composition by hand equals the container's forward.
    let mut y = x.clone();
    for i in 0..model.len() {
        y = model[i].forward(&y).unwrap();
    }
    let got = on_every_device(&model, &x, "Sequential (eval)");
    assert_eq!(got, values(&y));
    // Rows of the final softmax sum to one.
    for row in got.chunks(3) {
        assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5);
    }
    // train() reaches the Dropout inside: two training runs differ.
    model.train();
    let a = values(&model.forward(&x).unwrap());
    let b = values(&model.forward(&x).unwrap());
    assert_ne!(a, b, "dropout inside Sequential is active in training");
    // IndexMut reaches the layer.
    model[3].eval();
    assert_eq!(values(&model.forward(&x).unwrap()), got);
    assert_eq!(Sequential::new().forward(&x).unwrap().shape(), x.shape());
}

#[test]
fn module_to_moves_every_parameter_and_back() {
    for device in devices() {
        let mut model = mlp(&Device::cpu());
        model.eval();
        let before: Vec<Vec<f32>> = model.parameters().iter().map(values).collect();
        model.to(&device).unwrap();
        assert_eq!(model.device(), Some(device.clone()));
        for (name, p) in model.named_parameters() {
            assert_eq!(p.device(), &device, "{name} did not move to {device}");
        }
        let x = Tensor::ones(&[2, 6], DType::F32, &device).unwrap();
        assert_eq!(model.forward(&x).unwrap().device(), &device);
        model.to(&Device::cpu()).unwrap();
        for (name, p) in model.named_parameters() {
            assert!(p.is_cpu(), "{name} did not come back");
        }
        let after: Vec<Vec<f32>> = model.parameters().iter().map(values).collect();
        assert_eq!(before, after, "a round trip to {device} changed values");
    }
    assert_eq!(Sequential::new().add(ReLU).device(), None);
}
