//! Device-level faults from /work/shared/FAULTS.md: row 14 (device indices that do not exist,
//! unparsable device strings), row 15 (no adapter at all) and row 18 (device lost). Rows 15 and
//! 18 change process-wide state (adapter discovery, a destroyed shared device), so their bodies
//! run in child processes of this test binary (`common::run_child`); the `child_*` entry points
//! return at once in a normal run.

use crate::common;

use common::{child_done, gpus, is_child, run_child, values};
use wgtensor::{DType, Device, Error, Result, Tensor};

// Row 14 ---------------------------------------------------------------------------------------

#[test]
fn row14_bad_device_strings_are_typed_errors() {
    let n = wgtensor::gpu_count();
    for input in ["gpu:7", "cuda:7"] {
        match (input.parse::<Device>(), n) {
            (Err(e @ Error::InvalidDevice { .. }), 1..) => {
                let msg = e.to_string();
                assert!(
                    msg.contains(&format!("{n} GPU(s) exist")) && msg.contains(input),
                    "{msg}"
                );
            }
            (Err(Error::GpuUnavailable { requested, .. }), 0) => assert_eq!(requested, input),
            (other, _) => panic!("{input:?} with {n} GPU(s): got {other:?}"),
        }
    }
    assert!(matches!(
        (Device::gpu(7), n),
        (Err(Error::InvalidDevice { .. }), 1..) | (Err(Error::GpuUnavailable { .. }), 0)
    ));
    for input in [
        "tpu", "gpu:x", "cuda:-1", "", "gpu:", ":0", "gpu:0:1", "cpu:1", "vulkan:x", "auto:0",
        "gpu 0",
    ] {
        match input.parse::<Device>() {
            Err(e @ Error::InvalidDevice { .. }) => {
                let msg = e.to_string();
                for part in [
                    format!("{input:?}"),
                    "valid forms".into(),
                    "gpu:N".into(),
                    "cuda:N".into(),
                    "gl[:N]".into(),
                ] {
                    assert!(
                        msg.contains(&part),
                        "{input:?}: message lacks {part:?}: {msg}"
                    );
                }
                // A kind that exists must not be called unknown ("cpu:1", "auto:0").
                let kind = input.split(':').next().unwrap();
                if ["cpu", "auto", "gpu", "cuda", "vulkan"].contains(&kind) {
                    assert!(!msg.contains("is not a device kind"), "{input:?}: {msg}");
                }
                let Error::InvalidDevice { input: got, .. } = e else {
                    unreachable!()
                };
                assert_eq!(got, input);
            }
            other => panic!("{input:?}: expected InvalidDevice, got {other:?}"),
        }
    }
}

#[test]
fn row14_every_valid_form_parses_where_its_backend_exists() {
    for s in ["cpu", "CPU", " cpu ", "cpu:0"] {
        assert_eq!(s.parse::<Device>().unwrap(), Device::cpu(), "{s:?}");
    }
    let auto: Device = "auto".parse().unwrap();
    assert_eq!(auto, Device::best());
    let have_gpu = wgtensor::gpu_count() > 0;
    let backends: Vec<String> = wgtensor::adapters()
        .into_iter()
        .map(|a| a.backend)
        .collect();
    let forms = [
        "gpu", "gpu:0", "cuda", "cuda:0", "GPU:0", "vulkan", "vulkan:0", "metal", "metal:0",
        "dx12", "dx12:0", "gl", "gl:0",
    ];
    for s in forms {
        let kind = s.split(':').next().unwrap().to_lowercase();
        let exists = if kind == "gpu" || kind == "cuda" {
            have_gpu
        } else {
            backends.contains(&kind)
        };
        match s.parse::<Device>() {
            Ok(d) => assert!(
                exists && d.is_gpu(),
                "{s:?} parsed to {d} without a {kind} adapter"
            ),
            Err(Error::GpuUnavailable { requested, reason }) => {
                assert!(!exists, "{s:?} exists but did not open: {reason}");
                assert_eq!(requested, s);
            }
            Err(e) => panic!("{s:?}: expected a device or GpuUnavailable, got {e:?}"),
        }
    }
}

// Row 15 ---------------------------------------------------------------------------------------

/// Runs `child_no_adapter` with every Vulkan driver hidden and GL excluded.
#[test]
fn row15_no_adapter_falls_back_to_the_cpu() {
    let hide = [
        ("VK_DRIVER_FILES", "/nonexistent.json"),
        ("VK_ICD_FILENAMES", "/nonexistent.json"),
    ];
    run_child(
        "device_faults::child_no_adapter",
        &[
            hide[0],
            hide[1],
            ("WGPU_BACKEND", "vulkan"),
            ("WGTENSOR_REQUIRE_GPU", "0"),
        ],
    );
}

#[test]
fn child_no_adapter() {
    if !is_child("device_faults::child_no_adapter") {
        return;
    }
    assert_eq!(wgtensor::gpu_count(), 0);
    assert!(!wgtensor::gpu_is_available() && wgtensor::adapters().is_empty());
    let (best, why) = Device::best_with_reason();
    assert!(best.is_cpu(), "best() = {best}");
    assert!(
        why.to_lowercase().contains("no gpu adapter was found"),
        "reason: {why}"
    );
    assert_eq!(Device::best(), Device::cpu());
    assert_eq!("auto".parse::<Device>().unwrap(), Device::cpu());
    let unavailable = |what: &str, r: Result<Device>| match r {
        Err(e @ Error::GpuUnavailable { .. }) => assert!(
            e.to_string().contains("no GPU adapter was found"),
            "{what}: {e}"
        ),
        other => panic!("{what}: expected GpuUnavailable, got {other:?}"),
    };
    unavailable("Device::gpu(0)", Device::gpu(0));
    for s in [
        "gpu", "gpu:0", "cuda", "cuda:0", "gpu:7", "vulkan", "vulkan:0", "gl:0",
    ] {
        unavailable(s, s.parse());
    }
    let t = Tensor::from_vec(vec![1f32, 2.0, 3.0], &[3], &Device::cpu()).unwrap();
    assert!(matches!(t.gpu(), Err(Error::GpuUnavailable { .. })));
    let y = (&(&t * 2.0).unwrap() + &t).unwrap().relu().unwrap();
    assert_eq!(values(&y), vec![3.0, 6.0, 9.0]);
    child_done("device_faults::child_no_adapter");
}

// Row 18 (bonus) -------------------------------------------------------------------------------

#[test]
fn row18_device_loss_is_reported_by_every_later_call() {
    if gpus().is_empty() {
        return; // the harness printed the skip (or failed under WGTENSOR_REQUIRE_GPU=1)
    }
    run_child("device_faults::child_device_lost", &[]);
}

#[test]
fn child_device_lost() {
    if !is_child("device_faults::child_device_lost") {
        return;
    }
    let g = Device::gpu(0).unwrap();
    let sentinel = Tensor::from_vec(vec![1f32, 2.0, 3.0], &[3], &g).unwrap();
    let host = Tensor::ones(&[3], DType::F32, &Device::cpu()).unwrap();
    g.synchronize().unwrap();
    wgtensor::testing::destroy_device(&g);
    fn lost<T>(what: &str, r: Result<T>) {
        match r {
            Err(Error::DeviceLost { device, .. }) => assert_eq!(device, "gpu:0", "{what}"),
            Err(e) => panic!("{what} after destroy: expected DeviceLost, got {e:?}"),
            Ok(_) => panic!("{what} after destroy succeeded"),
        }
    }
    for round in 0..2 {
        lost("from_vec", Tensor::from_vec(vec![1f32; 4], &[4], &g));
        lost("from_vec u8", Tensor::from_vec(vec![1u8; 3], &[3], &g));
        lost("zeros", Tensor::zeros(&[4], DType::F32, &g));
        lost("full", Tensor::full(&[4], 2.0, DType::F32, &g));
        lost("arange", Tensor::arange(0.0, 4.0, 1.0, &g));
        lost("randn", Tensor::randn(&[4], &g));
        lost("cpu -> gpu", host.to(&g));
        lost("add", sentinel.add(&sentinel));
        lost("relu", sentinel.relu());
        lost("mul_scalar", sentinel.mul_scalar(2.0));
        lost("to_vec", sentinel.to_vec::<f32>());
        lost("cpu()", sentinel.cpu());
        lost("synchronize", g.synchronize());
        let shown = sentinel.to_string();
        assert!(
            shown.contains("lost") && shown.contains("gpu:0"),
            "round {round}: {shown}"
        );
    }
    // The CPU is unaffected; dropping tensors of the lost device is fine.
    assert_eq!(values(&host.add(&host).unwrap()), vec![2.0; 3]);
    // Opening the device again (as the DeviceLost message says) gives a fresh, working device;
    // tensors of the lost one stay lost.
    for again in [Device::gpu(0).unwrap(), "gpu:0".parse::<Device>().unwrap()] {
        let t = Tensor::from_vec(vec![1f32, 2.0], &[2], &again).unwrap();
        assert_eq!(
            values(&t.mul_scalar(3.0).unwrap()),
            vec![3.0, 6.0],
            "reopened {again}"
        );
    }
    lost("to_vec after reopening", sentinel.to_vec::<f32>());
    drop(sentinel);
    child_done("device_faults::child_device_lost");
}
