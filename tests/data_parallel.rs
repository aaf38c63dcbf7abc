//! DataParallel equals a single-device run: on [cpu], [cpu, cpu], [cpu, gpu:0] and
//! [gpu:0, a second logical device on the same adapter] (how CI tests multi-GPU on one adapter),
//! for odd batch sizes (1, 3, 7), batches smaller than the device count, and outputs gathered on
//! either device. Errors from a shard come back typed.

mod common;

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
