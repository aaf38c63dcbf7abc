//! DataParallel equals a single-device run: on [cpu], [cpu, cpu], [cpu, gpu:0] and
//! [gpu:0, a second logical device on the same adapter] (how CI tests multi-GPU on one adapter),
//! for odd batch sizes (1, 3, 7), batches smaller than the device count, and outputs gathered on
//! either device. Errors from a shard come back typed.

use crate::common;

use common::{assert_close, data, values};
use wgtensor::nn::{DataParallel, Dropout, LayerNorm, Linear, Module, Sequential, Tanh};
use wgtensor::{DType, Device, Error, Tensor};

fn model() -> Sequential {
    let cpu = Device::cpu();
    let mut m = Sequential::new()
        .add(Linear::new(5, 16, true, &cpu).unwrap())
        .add(LayerNorm::new(16, &cpu).unwrap())
        .add(Tanh)
        .add(Dropout::new(0.3).unwrap())
        .add(Linear::new(16, 3, true, &cpu).unwrap());
    m.eval();
    m
}

/// Device lists to test: always CPU ones; with a GPU, the mixed and two-logical-device ones.
fn device_sets() -> Vec<Vec<Device>> {
    let cpu = Device::cpu();
    let mut sets = vec![vec![cpu.clone()], vec![cpu.clone(), cpu.clone()]];
    if let Some(g) = common::gpus().into_iter().next() {
        let second = Device::gpu_logical(0).expect("a second logical device on gpu:0");
        assert_ne!(g, second, "a logical device is a distinct device");
        assert!(second.to_string().starts_with("gpu:0#"), "{second}");
        sets.push(vec![cpu.clone(), g.clone()]);
        sets.push(vec![g.clone(), second.clone()]);
        sets.push(vec![second, cpu, g.clone()]);
        // One device twice: two threads submitting to one queue.
        sets.push(vec![g.clone(), g]);
    }
    sets
}

#[test]
fn data_parallel_equals_a_single_device_run() {
    let m = model();
    for devices in device_sets() {
        for output in [Device::cpu(), devices[devices.len() - 1].clone()] {
            let dp = DataParallel::new(m.clone(), &devices, &output).unwrap();
            // Replicas live on their devices; the original stays where it was.
            for (i, d) in devices.iter().enumerate() {
                let r = dp.replica(i).unwrap();
                assert!(
                    r.parameters().iter().all(|p| p.device() == d),
                    "replica {i} on {d}"
                );
            }
            assert!(m.parameters().iter().all(|p| p.is_cpu()));
            for batch in [1usize, 2, 3, 7] {
                let x = Tensor::from_vec(
                    data(batch * 5, batch as u64, 1.0),
                    &[batch, 5],
                    &Device::cpu(),
                )
                .unwrap();
                let want = values(&m.forward(&x).unwrap());
                let y = dp.forward(&x).unwrap();
                assert_eq!(y.shape(), &[batch, 3]);
                assert_eq!(y.device(), &output);
                let ctx = format!("{devices:?} -> {output}, batch {batch}");
                assert_close(&values(&y), &want, 1e-5, 1e-5, &ctx);
                // Input already on a replica device works too (shards move from there).
                let y2 = dp.forward(&x.to(&devices[0]).unwrap()).unwrap();
                assert_close(&values(&y2), &want, 1e-5, 1e-5, &ctx);
            }
        }
    }
}

#[test]
fn logical_devices_are_independent() {
    let Some(g) = common::gpus().into_iter().next() else {
        return;
    };
    let a = Device::gpu_logical(0).unwrap();
    let b = Device::gpu_logical(0).unwrap();
    assert_ne!(a, b);
    assert_ne!(a.to_string(), b.to_string());
    assert_eq!(a.name(), g.name(), "same adapter");
    let t = Tensor::from_vec(vec![1f32, 2.0, 3.0], &[3], &a).unwrap();
    let u = Tensor::from_vec(vec![1f32, 1.0, 1.0], &[3], &b).unwrap();
    assert!(matches!(t.add(&u), Err(Error::DeviceMismatch { .. })));
    let s = t.add(&u.to(&a).unwrap()).unwrap();
    assert_eq!(values(&s), vec![2.0, 3.0, 4.0]);
    assert_eq!(values(&s.to(&g).unwrap()), vec![2.0, 3.0, 4.0]);
    // Not a device string: each call opens a new device, so it cannot be named.
    assert!(a.to_string().parse::<Device>().is_err());
}

#[test]
fn errors_from_a_shard_are_returned_typed() {
    let cpu = Device::cpu();
    let mut devices = vec![cpu.clone(), cpu.clone()];
    devices.extend(common::gpus());
    let dp = DataParallel::new(model(), &devices, &cpu).unwrap();
    let wrong = Tensor::ones(&[4, 6], DType::F32, &cpu).unwrap();
    assert!(matches!(
        dp.forward(&wrong),
        Err(Error::ShapeMismatch { .. })
    ));
    // An empty batch runs on one replica and gives an empty output.
    let empty = Tensor::zeros(&[0, 5], DType::F32, &cpu).unwrap();
    assert_eq!(dp.forward(&empty).unwrap().shape(), &[0, 3]);
    let scalar = Tensor::ones(&[], DType::F32, &cpu).unwrap();
    assert!(matches!(
        dp.forward(&scalar),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        DataParallel::new(model(), &[], &cpu),
        Err(Error::InvalidArgument { .. })
    ));
    let mut dp = dp;
    assert!(matches!(dp.to(&cpu), Err(Error::InvalidArgument { .. })));
}

#[test]
fn train_mode_and_loaded_weights_reach_every_replica() {
    let cpu = Device::cpu();
    let mut devices = vec![cpu.clone()];
    devices.extend(common::gpus());
    devices.push(cpu.clone());
    let mut dp = DataParallel::new(model(), &devices, &cpu).unwrap();
    let source = model();
    let path = std::env::temp_dir().join(format!("wgtensor_{}_dp.safetensors", std::process::id()));
    source.save_weights(&path).unwrap();
    dp.load_weights(&path, &cpu).unwrap();
    let x = Tensor::from_vec(data(6 * 5, 77, 1.0), &[6, 5], &cpu).unwrap();
    let want = values(&source.forward(&x).unwrap());
    assert_close(
        &values(&dp.forward(&x).unwrap()),
        &want,
        1e-5,
        1e-5,
        "after load_weights",
    );
    for i in 0..devices.len() {
        let r = dp.replica(i).unwrap();
        assert_eq!(
            values(&r.parameters()[0]),
            values(&source.parameters()[0]),
            "replica {i}"
        );
    }
    std::fs::remove_file(&path).ok();
    // train() reaches the Dropout of every replica: outputs change between calls.
    dp.train();
    let a = values(&dp.forward(&x).unwrap());
    assert_ne!(a, want);
    dp.eval();
    assert_close(
        &values(&dp.forward(&x).unwrap()),
        &want,
        1e-5,
        1e-5,
        "back in eval",
    );
}

/// The training model: no Dropout, so replicas and the single-device run see the same function.
fn train_model() -> Sequential {
    let cpu = Device::cpu();
    Sequential::new()
        .add(Linear::new(5, 16, true, &cpu).unwrap())
        .add(LayerNorm::new(16, &cpu).unwrap())
        .add(Tanh)
        .add(Linear::new(16, 3, true, &cpu).unwrap())
}

/// A copy with its own parameter leaves: clones of a module share grad slots, as PyTorch
/// parameters shared between modules do.
fn fresh(m: &Sequential) -> Sequential {
    let mut m = m.clone();
    for (_, p) in m.named_parameters_mut() {
        *p = wgtensor::nn::param(p.detach());
    }
    m
}

/// Mean squared error against `target`, computed on the loss's device.
fn loss(y: &Tensor, target: &Tensor) -> Tensor {
    y.sub(target)
        .unwrap()
        .pow_scalar(2.0)
        .unwrap()
        .mean_all()
        .unwrap()
}

/// Device lists for training: [cpu, cpu] always; [cpu, gpu:0], [gpu:0, cpu] and [gpu:0, gl:0]
/// (a Vulkan and a GL device) where they exist.
fn training_sets() -> Vec<Vec<Device>> {
    let cpu = Device::cpu();
    let mut sets = vec![vec![cpu.clone(), cpu.clone()]];
    if let Some(g) = common::gpus().into_iter().next() {
        sets.push(vec![cpu.clone(), g.clone()]);
        sets.push(vec![g.clone(), cpu.clone(), cpu.clone()]);
        if let Some(gl) = common::gl_views().into_iter().find(|d| d != &g) {
            sets.push(vec![g, gl]);
        }
    }
    sets
}

/// The case: after one backward the primary holds the gradient of the whole batch (not
/// of its own shard), equal to a single-device backward on all 8 rows.
#[test]
fn backward_reduces_every_replica_gradient_onto_the_primary() {
    let cpu = Device::cpu();
    let m = train_model();
    let x = Tensor::from_vec(data(8 * 5, 11, 1.0), &[8, 5], &cpu).unwrap();
    let t = Tensor::from_vec(data(8 * 3, 12, 1.0), &[8, 3], &cpu).unwrap();
    let single = fresh(&m);
    loss(&single.forward(&x).unwrap(), &t).backward().unwrap();
    let want: Vec<Vec<f32>> = single
        .parameters()
        .iter()
        .map(|p| values(&p.grad().expect("single-device grad")))
        .collect();
    for devices in training_sets() {
        let dp = DataParallel::new(fresh(&m), &devices, &cpu).unwrap();
        loss(&dp.forward(&x).unwrap(), &t).backward().unwrap();
        for ((name, p), w) in dp.named_parameters().into_iter().zip(&want) {
            let g = p
                .grad()
                .unwrap_or_else(|| panic!("{name} has no grad on {devices:?}"));
            assert_eq!(
                g.device(),
                &devices[0],
                "{name}: grad on the primary's device"
            );
            assert_close(
                &values(&g),
                w,
                1e-5,
                1e-6,
                &format!("{devices:?} grad {name}"),
            );
        }
        // A second forward/backward accumulates, as in PyTorch.
        loss(&dp.forward(&x).unwrap(), &t).backward().unwrap();
        let p0 = &dp.parameters()[0];
        let doubled: Vec<f32> = want[0].iter().map(|v| 2.0 * v).collect();
        assert_close(
            &values(&p0.grad().unwrap()),
            &doubled,
            1e-5,
            1e-6,
            "accumulated",
        );
    }
}

/// 20 steps of SGD (momentum) and of Adam through DataParallel give the parameters of the
/// single-device model trained on the whole batch, and the replicas follow the primary.
#[test]
fn training_through_data_parallel_equals_single_device_training() {
    use wgtensor::optim::{Adam, Optimizer, Sgd};
    let cpu = Device::cpu();
    let x = Tensor::from_vec(data(9 * 5, 21, 1.0), &[9, 5], &cpu).unwrap();
    let t = Tensor::from_vec(data(9 * 3, 22, 1.0), &[9, 3], &cpu).unwrap();
    type MakeOptimizer = fn() -> Box<dyn Optimizer>;
    let optimizers: Vec<(&str, MakeOptimizer)> = vec![
        ("sgd", || Box::new(Sgd::new(0.05).momentum(0.9))),
        ("adam", || Box::new(Adam::new(0.01))),
    ];
    for (opt_name, make) in optimizers {
        let mut single = train_model();
        let start = fresh(&single);
        let mut opt = make();
        let mut first_loss = 0.0;
        for step in 0..20 {
            opt.zero_grad(&single);
            let l = loss(&single.forward(&x).unwrap(), &t);
            if step == 0 {
                first_loss = l.to_scalar::<f32>().unwrap();
            }
            l.backward().unwrap();
            opt.step(&mut single).unwrap();
        }
        let last = loss(&single.forward(&x).unwrap(), &t)
            .to_scalar::<f32>()
            .unwrap();
        assert!(last < first_loss, "{opt_name}: training lowers the loss");
        for devices in training_sets() {
            let mut dp = DataParallel::new(fresh(&start), &devices, &cpu).unwrap();
            let mut opt = make();
            for _ in 0..20 {
                opt.zero_grad(&dp);
                loss(&dp.forward(&x).unwrap(), &t).backward().unwrap();
                opt.step(&mut dp).unwrap();
            }
            let ctx = format!("{opt_name} on {devices:?}");
            for ((name, p), (_, w)) in dp
                .named_parameters()
                .into_iter()
                .zip(single.named_parameters())
            {
                assert_eq!(
                    p.device(),
                    &devices[0],
                    "{ctx}: {name} stays on the primary"
                );
                assert_close(
                    &values(&p),
                    &values(&w),
                    1e-5,
                    1e-6,
                    &format!("{ctx}: {name}"),
                );
            }
            // The next forward replicates the stepped parameters.
            dp.forward(&x).unwrap();
            for (i, d) in devices.iter().enumerate().skip(1) {
                let r = dp.replica(i).unwrap();
                for ((name, p), (_, w)) in
                    r.named_parameters().into_iter().zip(dp.named_parameters())
                {
                    assert_eq!(p.device(), d);
                    assert_eq!(
                        values(&p),
                        values(&w),
                        "{ctx}: replica {i} {name} re-synced"
                    );
                }
            }
        }
    }
}
