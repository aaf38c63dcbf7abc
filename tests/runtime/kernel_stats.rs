//! Kernel counters (`wgtensor::kernel_stats`) and the batched launch path they measure: one
//! submit per batch, pipelines compiled once, bind groups reused, and errors still typed and
//! attributed when dispatches run without per-op error scopes.
//!
//! Each test opens its own logical device (`Device::gpu_logical`) so that other tests running in
//! parallel do not move its counters.

use crate::common;

use common::{assert_close, gpus, values};
use wgtensor::{DType, Device, Error, KernelStats, Tensor};

/// A private device on the adapter of every `gpu:N`.
fn private_gpus() -> Vec<Device> {
    (0..gpus().len())
        .map(|i| Device::gpu_logical(i).expect("the adapter of a listed gpu opens again"))
        .collect()
}

/// `x -> x * 1.5 + 0.25` repeated `n` times, on the device and on the host.
fn chain(x: &Tensor, n: usize) -> Tensor {
    let mut t = x.clone();
    for _ in 0..n / 2 {
        t = t.mul_scalar(1.5).unwrap().add_scalar(0.25).unwrap();
    }
    t
}

fn chain_host(x: &[f32], n: usize) -> Vec<f32> {
    x.iter()
        .map(|&v| (0..n / 2).fold(v, |v, _| v * 1.5 + 0.25))
        .collect()
}

#[test]
fn cpu_reports_zero() {
    let cpu = Device::cpu();
    let x = Tensor::ones(&[8], DType::F32, &cpu).unwrap();
    let _ = chain(&x, 4).to_vec::<f32>().unwrap();
    assert_eq!(wgtensor::kernel_stats(&cpu), KernelStats::default());
    wgtensor::reset_kernel_stats(&cpu);
}

/// One step of the chain that cannot fuse with the next: `cat` of one tensor copies it with a
/// kernel of its own, so every step is two dispatches (the fused mul + add, then the copy).
fn unfused_chain(x: &Tensor, n: usize) -> Tensor {
    let mut t = x.clone();
    for _ in 0..n / 2 {
        let step = t.mul_scalar(1.5).unwrap().add_scalar(0.25).unwrap();
        t = Tensor::cat(&[&step], 0).unwrap();
    }
    t
}

#[test]
fn a_chain_of_ten_elementwise_ops_is_one_dispatch_one_submit() {
    for dev in private_gpus() {
        let host = common::data(1000, 7, 1.0);
        let x = Tensor::from_slice(&host, &[1000], &dev).unwrap();
        dev.synchronize().unwrap();
        wgtensor::reset_kernel_stats(&dev);
        assert_eq!(wgtensor::kernel_stats(&dev), KernelStats::default());

        let y = chain(&x, 10);
        let got = y.to_vec::<f32>().unwrap();
        assert_close(&got, &chain_host(&host, 10), 1e-5, 1e-5, "chain of 10 ops");
        let s = wgtensor::kernel_stats(&dev);
        assert_eq!(
            s.dispatches, 1,
            "{dev}: 10 elementwise ops fuse into one kernel: {s:?}"
        );
        assert_eq!(
            s.submits, 1,
            "{dev}: the fused kernel and the readback are one batch: {s:?}"
        );
        assert_eq!(s.fused_kernels, 1, "{dev}: {s:?}");

        // The same chain again compiles nothing new and reuses the bind groups of the pooled
        // buffers it gets back.
        let before = wgtensor::kernel_stats(&dev);
        for _ in 0..3 {
            let got = chain(&x, 10).to_vec::<f32>().unwrap();
            assert_close(&got, &chain_host(&host, 10), 1e-5, 1e-5, "repeated chain");
        }
        let after = wgtensor::kernel_stats(&dev);
        assert_eq!(
            after.pipelines_compiled, before.pipelines_compiled,
            "{dev}: pipelines stop growing on repeat"
        );
        assert_eq!(after.dispatches, before.dispatches + 3, "{dev}");
        assert_eq!(after.submits, before.submits + 3, "{dev}");
        assert_eq!(after.fused_kernels, before.fused_kernels, "{dev}: cached");
        assert!(
            after.bind_groups_created < before.bind_groups_created + 3,
            "{dev}: repeated launches on pooled buffers reuse bind groups: {before:?} -> {after:?}"
        );

        // More dispatches than one batch holds are submitted in several batches, and stay
        // correct.
        wgtensor::reset_kernel_stats(&dev);
        let long = unfused_chain(&x, 150).to_vec::<f32>().unwrap();
        assert_close(
            &long,
            &chain_host(&host, 150),
            1e-4,
            1e-4,
            "chain of 150 ops",
        );
        let s = wgtensor::kernel_stats(&dev);
        assert_eq!(s.dispatches, 150, "{dev}: {s:?}");
        assert!(
            (3..=4).contains(&s.submits),
            "{dev}: 150 ops in batches of 64: {s:?}"
        );
    }
}

#[test]
fn pipelines_compile_once_per_kernel() {
    for dev in private_gpus() {
        let x = Tensor::from_slice(&[1f32, -2.0, 3.0, -4.0], &[4], &dev).unwrap();
        wgtensor::reset_kernel_stats(&dev);
        let first = x.relu().unwrap().exp().unwrap();
        assert_close(
            &values(&first),
            &[1f32.exp(), 1.0, 3f32.exp(), 1.0],
            1e-5,
            1e-6,
            "relu then exp",
        );
        let compiled = wgtensor::kernel_stats(&dev).pipelines_compiled;
        assert!(compiled >= 1, "{dev}: first use compiles");
        for _ in 0..5 {
            let _ = values(&x.relu().unwrap().exp().unwrap());
        }
        assert_eq!(
            wgtensor::kernel_stats(&dev).pipelines_compiled,
            compiled,
            "{dev}"
        );
    }
}

#[test]
fn injected_error_is_typed_and_earlier_tensors_survive() {
    for dev in private_gpus() {
        let host = common::data(256, 3, 2.0);
        let x = Tensor::from_slice(&host, &[256], &dev).unwrap();
        let kept = chain(&x, 4);
        dev.synchronize().unwrap();

        wgtensor::testing::inject_uncaptured_error(&dev);
        match x.add_scalar(1.0) {
            Err(Error::Wgpu {
                op,
                device,
                message,
            }) => {
                assert_eq!(
                    op, "add_scalar",
                    "{dev}: the op that found the error is named"
                );
                assert_eq!(device, dev.to_string());
                assert!(message.contains("Validation Error"), "{message}");
            }
            other => panic!("{dev}: expected Error::Wgpu, got {:?}", other.map(|_| ())),
        }
        // The error was reported once; the device and earlier results are intact.
        assert_close(&values(&kept), &chain_host(&host, 4), 1e-5, 1e-5, "kept");
        let again = x.add_scalar(1.0).unwrap();
        let want: Vec<f32> = host.iter().map(|v| v + 1.0).collect();
        assert_close(&values(&again), &want, 1e-6, 1e-6, "after the error");

        // An error arriving while a batch is being recorded: the batch still runs.
        let pending = chain(&x, 6);
        wgtensor::testing::inject_uncaptured_error(&dev);
        assert!(matches!(
            dev.synchronize(),
            Err(Error::Wgpu {
                op: "synchronize",
                ..
            })
        ));
        assert_close(
            &values(&pending),
            &chain_host(&host, 6),
            1e-5,
            1e-5,
            "batch kept",
        );
    }
}

#[test]
fn destroyed_device_gives_typed_errors() {
    for dev in private_gpus() {
        let x = Tensor::from_slice(&[1f32, 2.0, 3.0], &[3], &dev).unwrap();
        let y = x.add_scalar(1.0).unwrap();
        dev.synchronize().unwrap();
        wgtensor::testing::destroy_device(&dev);
        let lost = |what: &str, e: Error| match e {
            Error::DeviceLost { op, device, .. } => {
                assert_eq!((op, device), (what, dev.to_string()), "the op is named")
            }
            other => panic!("{what} on a destroyed {dev}: expected DeviceLost, got {other:?}"),
        };
        lost("add_scalar", x.add_scalar(1.0).map(|_| ()).unwrap_err());
        lost("to_vec", y.to_vec::<f32>().map(|_| ()).unwrap_err());
        lost("synchronize", dev.synchronize().unwrap_err());
    }
}

#[test]
fn readbacks_and_recording_from_two_threads() {
    // A readback waits for the GPU with no lock held: the other thread keeps recording (and its
    // submits wait only while a buffer is mapped). Both must finish with the right values.
    for dev in private_gpus() {
        let host = common::data(4096, 11, 1.0);
        let x = Tensor::from_slice(&host, &[4096], &dev).unwrap();
        let want_x = host.clone();
        let want_chain = chain_host(&host, 8);
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                for _ in 0..20 {
                    assert_eq!(x.to_vec::<f32>().unwrap(), want_x, "{dev}: readback");
                }
            });
            let recorder = s.spawn(|| {
                for _ in 0..20 {
                    let y = chain(&x, 8);
                    let got = y.to_vec::<f32>().unwrap();
                    assert_close(&got, &want_chain, 1e-5, 1e-5, "chain beside readbacks");
                }
            });
            reader.join().unwrap();
            recorder.join().unwrap();
        });
        dev.synchronize().unwrap();
    }
}

#[test]
fn an_op_on_a_destroyed_application_buffer_is_a_typed_error() {
    // Dispatches run without per-op error scopes. An op reading a buffer the application holds
    // (`wgpu_buffer`) runs and is submitted at once, so when the application destroyed that
    // buffer, that op is the one that fails, with a typed error naming it. The device is
    // private: its pool now holds a destroyed buffer.
    for dev in private_gpus() {
        let x = Tensor::from_slice(&[1f32, 2.0, 3.0, 4.0], &[4], &dev).unwrap();
        let y = Tensor::from_slice(&[5f32, 6.0], &[2], &dev).unwrap();
        let view = x.wgpu_buffer().unwrap(); // submits what is pending
        view.buffer.destroy();
        match x.add_scalar(1.0) {
            Err(Error::Wgpu { op, message, .. }) => {
                assert_eq!(op, "add_scalar", "{dev}: {message}");
                assert!(message.contains("Validation Error"), "{dev}: {message}");
            }
            other => panic!("{dev}: expected Error::Wgpu, got {:?}", other.map(|_| ())),
        }
        // Work in later batches on other buffers is unaffected.
        assert_eq!(y.to_vec::<f32>().unwrap(), vec![5.0, 6.0], "{dev}");
    }
}

/// An Adam step of the 784-256-10 MLP on a GPU: per parameter, the two moments and then the
/// parameter, each one generated kernel (the parameter's reads the moments, it does not compute
/// them again; the weight gradients arrive packed, so no copy packs them): 4 x 3 = 12
/// dispatches, recorded without a submit. The whole training step stays within 32 dispatches
/// and the one submit of reading the loss. Values against the CPU.
#[test]
fn an_mlp_adam_step_is_twelve_kernels_and_no_submit() {
    use wgtensor::nn::{self, Linear, Module, ReLU, Sequential};
    use wgtensor::optim::{Adam, Optimizer};
    let cpu = Device::cpu();
    let make = || -> Sequential {
        wgtensor::manual_seed(3);
        Sequential::new()
            .add(Linear::new(784, 256, true, &cpu).unwrap())
            .add(ReLU)
            .add(Linear::new(256, 10, true, &cpu).unwrap())
    };
    let host_x = common::data(128 * 784, 11, 1.0);
    let labels: Vec<u32> = (0..128u32).map(|i| i % 10).collect();
    let run = |dev: &Device, counted: bool| -> (Vec<f32>, Option<(KernelStats, KernelStats)>) {
        let mut model = make();
        model.to(dev).unwrap();
        let x = Tensor::from_slice(&host_x, &[128, 784], dev).unwrap();
        let y = Tensor::from_vec(labels.clone(), &[128], dev).unwrap();
        let mut opt = Adam::new(1e-3);
        let mut stats = None;
        // Two steps: the first creates the moments, the second is the steady state.
        for step in 0..2 {
            opt.zero_grad(&model);
            let loss = nn::cross_entropy(&model.forward(&x).unwrap(), &y).unwrap();
            loss.backward().unwrap();
            if step == 1 && counted {
                dev.synchronize().unwrap();
                wgtensor::reset_kernel_stats(dev);
                opt.step(&mut model).unwrap();
                let adam = wgtensor::kernel_stats(dev);
                let _ = loss.to_vec::<f32>().unwrap();
                stats = Some((adam, wgtensor::kernel_stats(dev)));
            } else {
                opt.step(&mut model).unwrap();
            }
        }
        let mut params = Vec::new();
        for (_, p) in model.named_parameters() {
            params.extend(p.to_vec::<f32>().unwrap());
        }
        (params, stats)
    };
    let (want, _) = run(&cpu, false);
    for dev in private_gpus() {
        let (got, stats) = run(&dev, true);
        assert_close(
            &got,
            &want,
            1e-5,
            1e-4,
            "MLP parameters after two Adam steps",
        );
        let (adam, _) = stats.expect("counted");
        assert_eq!(adam.dispatches, 12, "{dev}: {adam:?}");
        assert_eq!(
            adam.submits, 0,
            "{dev}: the step waits for nothing: {adam:?}"
        );

        // A whole step, from zero_grad to reading the loss.
        let mut model = make();
        model.to(&dev).unwrap();
        let x = Tensor::from_slice(&host_x, &[128, 784], &dev).unwrap();
        let y = Tensor::from_vec(labels.clone(), &[128], &dev).unwrap();
        let mut opt = Adam::new(1e-3);
        for step in 0..3 {
            dev.synchronize().unwrap();
            wgtensor::reset_kernel_stats(&dev);
            opt.zero_grad(&model);
            let loss = nn::cross_entropy(&model.forward(&x).unwrap(), &y).unwrap();
            loss.backward().unwrap();
            opt.step(&mut model).unwrap();
            assert!(loss.to_scalar::<f32>().unwrap().is_finite());
            let s = wgtensor::kernel_stats(&dev);
            if step > 0 {
                assert!(s.dispatches <= 32, "{dev}: a training step: {s:?}");
                assert_eq!(s.submits, 1, "{dev}: one submit, at the loss read: {s:?}");
            }
        }
    }
}
