//! Devices: `Device::best()` and `WGTENSOR_DEVICE`, canonical names and aliases, what
//! `adapters()` reports, and `Device::from_wgpu` sharing buffers with an application's own wgpu
//! device. Environment variables are process-global, so the `best()` checks run in child
//! processes (`common::run_child`) with the variable set or removed.

use crate::common;

use common::{assert_close, child_done, data, gpus, is_child, run_child, values};
use std::time::Duration;
use wgtensor::{wgpu, AdapterSummary, DType, Device, Error, Tensor};

/// The documented policy, computed from `adapters()`: the first hardware GPU in `gpu:N` order,
/// else the CPU; and a phrase the reason must contain.
fn expected_default() -> (String, &'static str) {
    let adapters = wgtensor::adapters();
    let mut listed: Vec<&AdapterSummary> =
        adapters.iter().filter(|a| a.gpu_index.is_some()).collect();
    listed.sort_by_key(|a| a.gpu_index);
    match listed.iter().find(|a| !a.is_software) {
        Some(a) => (
            format!("gpu:{}", a.gpu_index.unwrap()),
            "first hardware GPU",
        ),
        None if listed.is_empty() => ("cpu".into(), "no GPU adapter was found"),
        None => ("cpu".into(), "software"),
    }
}

/// Child: `best_with_reason()` must give `EXPECT_DEVICE` with a reason containing `EXPECT_REASON`.
#[test]
fn child_best() {
    if !is_child("devices::child_best") {
        return;
    }
    let want = std::env::var("EXPECT_DEVICE").unwrap();
    let phrase = std::env::var("EXPECT_REASON").unwrap();
    let (d, why) = Device::best_with_reason();
    println!(
        "WGTENSOR_DEVICE={:?}: best() = {d}: {why}",
        std::env::var("WGTENSOR_DEVICE").ok()
    );
    assert_eq!(d.to_string(), want, "reason: {why}");
    assert!(why.contains(&phrase), "the reason lacks {phrase:?}: {why}");
    assert_eq!(Device::best(), d, "best() and best_with_reason() disagree");
    assert_eq!(
        "auto".parse::<Device>().unwrap(),
        d,
        "\"auto\" is not best()"
    );
    child_done("devices::child_best");
}

fn best_in_child(wgtensor_device: Option<&str>, want: &str, phrase: &str) {
    let mut envs = vec![("EXPECT_DEVICE", want), ("EXPECT_REASON", phrase)];
    envs.extend(wgtensor_device.map(|v| ("WGTENSOR_DEVICE", v)));
    let out = run_child("devices::child_best", &envs);
    let line = out
        .lines()
        .find_map(|l| l.find("WGTENSOR_DEVICE=").map(|i| &l[i..]));
    eprintln!("child: {}", line.unwrap_or("?"));
}

#[test]
fn best_follows_the_documented_policy() {
    // In this process too: never panics, whatever the environment says.
    let (d, why) = Device::best_with_reason();
    assert!(d.is_cpu() || d.is_gpu());
    assert!(!why.is_empty());
    let (want, phrase) = expected_default();
    if wgtensor::adapters().iter().all(|a| a.is_software) && !wgtensor::adapters().is_empty() {
        assert_eq!(
            (want.as_str(), phrase),
            ("cpu", "software"),
            "only software adapters: the CPU"
        );
    }
    best_in_child(None, &want, phrase);
    best_in_child(Some("auto"), &want, phrase);
}

#[test]
fn wgtensor_device_overrides_best() {
    best_in_child(Some("cpu"), "cpu", "WGTENSOR_DEVICE=cpu selects it");
    let (default, _) = expected_default();
    // Unusable values are ignored with the reason saying so.
    best_in_child(Some("tpu:3"), &default, "WGTENSOR_DEVICE=tpu:3 ignored");
    if gpus().is_empty() {
        best_in_child(Some("gpu:0"), &default, "WGTENSOR_DEVICE=gpu:0 ignored");
        return;
    }
    best_in_child(Some("gpu:0"), "gpu:0", "WGTENSOR_DEVICE=gpu:0 selects it");
    best_in_child(Some("cuda"), "gpu:0", "WGTENSOR_DEVICE=cuda selects it");
    let n = wgtensor::gpu_count();
    best_in_child(Some(&format!("gpu:{n}")), &default, "ignored");
}

#[test]
fn display_is_canonical_and_aliases_are_the_same_device() {
    assert_eq!(Device::cpu().to_string(), "cpu");
    assert_eq!(format!("{:?}", Device::cpu()), "Device(cpu)");
    assert_eq!(Device::default(), Device::cpu());
    assert_eq!("cpu".parse::<Device>().unwrap().to_string(), "cpu");
    for g in gpus() {
        assert!(g.to_string().starts_with("gpu:"), "{g}");
        assert_eq!(
            g.to_string().parse::<Device>().unwrap(),
            g,
            "{g} does not round-trip"
        );
    }
    for a in wgtensor::adapters() {
        let canonical = &a.names[0];
        let first: Device = canonical
            .parse()
            .unwrap_or_else(|e| panic!("{canonical}: {e}"));
        assert_eq!(&first.to_string(), canonical, "Display of {canonical}");
        assert!(
            first.is_gpu() && first.name().starts_with(&a.name),
            "{}: {}",
            first.name(),
            a.name
        );
        for alias in &a.names[1..] {
            let d: Device = alias.parse().unwrap_or_else(|e| panic!("{alias}: {e}"));
            assert_eq!(d, first, "{alias} is not the same device as {canonical}");
            assert_eq!(&d.to_string(), canonical, "{alias} displays as {d}");
        }
        if let Some(i) = a.gpu_index {
            assert_eq!(Device::gpu(i).unwrap(), first);
        }
    }
    // This machine's case: gpu:0 is a Vulkan adapter, reachable as all of these.
    let vulkan0 = wgtensor::adapters()
        .into_iter()
        .find(|a| a.gpu_index == Some(0) && a.backend == "vulkan");
    if let Some(a) = vulkan0 {
        let g0 = Device::gpu(0).unwrap();
        for s in ["cuda:0", "gpu", "vulkan:0", "cuda", "gpu:0", "vulkan"] {
            assert_eq!(s.parse::<Device>().unwrap(), g0, "{s} on {}", a.name);
        }
        assert_eq!(a.names[..4], ["gpu:0", "gpu", "cuda:0", "vulkan:0"]);
    } else {
        eprintln!(
            "gpu:0 is not a Vulkan adapter here: the cuda:0 == gpu == vulkan:0 check SKIPPED"
        );
    }
}

/// A headless run (no `XDG_RUNTIME_DIR`) prints nothing from Mesa: the project's
/// `.cargo/config.toml` sets `NODEVICE_SELECT=1` for every `cargo test` and `cargo run`, which
/// keeps Mesa's device-select layer from opening a Wayland connection for each instance.
#[test]
fn a_headless_run_prints_no_mesa_runtime_dir_noise() {
    use std::process::Command;
    let exe = std::env::current_exe().expect("path of the running test binary");
    let out = Command::new(exe)
        .args([
            "devices::adapters_report_names_and_limits",
            "--exact",
            "--nocapture",
        ])
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("WGTENSOR_DEVICE")
        .output()
        .expect("run the test binary again");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the child failed: {stderr}");
    let noise = stderr.matches("XDG_RUNTIME_DIR").count();
    assert_eq!(noise, 0, "{noise} lines of Mesa noise on stderr:\n{stderr}");
}

#[test]
fn adapters_report_names_and_limits() {
    let adapters = wgtensor::adapters();
    let listed: Vec<usize> = adapters.iter().filter_map(|a| a.gpu_index).collect();
    assert_eq!(
        listed,
        (0..wgtensor::gpu_count()).collect::<Vec<_>>(),
        "gpu:N first, in order"
    );
    assert_eq!(wgtensor::gpu_is_available(), wgtensor::gpu_count() > 0);
    for a in &adapters {
        assert!(!a.name.is_empty() && !a.names.is_empty(), "{a:?}");
        match a.gpu_index {
            Some(i) => assert_eq!(a.names[0], format!("gpu:{i}")),
            None => assert!(a.names[0].starts_with(&format!("{}:", a.backend)), "{a:?}"),
        }
        assert!(
            ["vulkan", "metal", "dx12", "gl"].contains(&a.backend.as_str()),
            "{a:?}"
        );
        assert!(
            a.names
                .iter()
                .any(|n| n.starts_with(&format!("{}:", a.backend))),
            "{a:?}"
        );
        assert_eq!(a.is_software, a.device_type == "Cpu", "{a:?}");
        // The kernels need 256-thread workgroups and bind whole tensors.
        assert!(a.max_compute_invocations_per_workgroup >= 256, "{a:?}");
        assert!(a.max_compute_workgroups_per_dimension >= 65_535, "{a:?}");
        assert!(
            a.max_buffer_size > 0 && a.max_storage_buffer_binding_size > 0,
            "{a:?}"
        );
        assert!(!a.driver.is_empty(), "{a:?}");
        eprintln!(
            "{:?}: {} [{}, {}], max buffer {} MiB",
            a.names,
            a.name,
            a.backend,
            a.device_type,
            a.max_buffer_size >> 20
        );
    }
    if let Some(a) = adapters.iter().find(|a| a.name.contains("llvmpipe")) {
        assert!(
            a.is_software && a.device_type == "Cpu",
            "llvmpipe is a software adapter: {a:?}"
        );
    }
}

/// Opens the application's own device and queue, as a renderer would.
fn app_device() -> Option<(wgpu::Adapter, wgpu::Device, wgpu::Queue)> {
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let options = wgpu::RequestAdapterOptions::default();
    let adapter = match pollster::block_on(instance.request_adapter(&options)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("from_wgpu tests SKIPPED: wgpu found no adapter ({e})");
            return None;
        }
    };
    let desc = wgpu::DeviceDescriptor {
        label: Some("app"),
        required_limits: adapter.limits(),
        ..Default::default()
    };
    let (device, queue) =
        pollster::block_on(adapter.request_device(&desc)).expect("the application's device");
    Some((adapter, device, queue))
}

/// Copies `size` bytes at `offset` of `src` into a buffer of ours and maps it.
fn read_with_own_encoder(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    src: &wgpu::Buffer,
    offset: u64,
    size: u64,
) -> Vec<u8> {
    let padded = size.div_ceil(4) * 4;
    let mine = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("app readback"),
        size: padded,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
        label: Some("app copy"),
    });
    enc.copy_buffer_to_buffer(src, offset, &mine, 0, padded);
    queue.submit([enc.finish()]);
    let (tx, rx) = std::sync::mpsc::channel();
    mine.map_async(wgpu::MapMode::Read, .., move |r| tx.send(r).unwrap());
    let wait = wgpu::PollType::Wait {
        submission_index: None,
        timeout: Some(Duration::from_secs(60)),
    };
    device.poll(wait).expect("poll");
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap()
        .expect("map our buffer");
    let bytes = mine.get_mapped_range(..).unwrap()[..size as usize].to_vec();
    mine.unmap();
    bytes
}

#[test]
fn from_wgpu_shares_buffers_with_the_application() {
    if gpus().is_empty() {
        return; // the harness printed the skip (or failed under WGTENSOR_REQUIRE_GPU=1)
    }
    let Some((adapter, device, queue)) = app_device() else {
        panic!("wgtensor found a GPU but wgpu::Instance::request_adapter did not");
    };
    let dev = Device::from_wgpu(&adapter, device.clone(), queue.clone());
    assert!(
        dev.is_gpu() && dev.to_string().starts_with("wgpu:"),
        "{dev}"
    );
    assert!(
        dev.name().starts_with(&adapter.get_info().name),
        "{}",
        dev.name()
    );
    assert_ne!(
        dev,
        Device::gpu(0).unwrap(),
        "a wrapped device is its own device"
    );
    let (own, _) = dev.wgpu().unwrap();
    assert_eq!(own, &device, "Device::wgpu() returns the wrapped device");

    // wgtensor computes on the application's device ...
    let (a, b) = (data(1000, 1, 10.0), data(1000, 2, 10.0));
    let ta = Tensor::from_slice(&a, &[10, 100], &dev).unwrap();
    let tb = Tensor::from_slice(&b[..100], &[100], &dev).unwrap();
    let c = (&(&ta * &tb).unwrap() + 1.0).unwrap();
    assert_eq!((c.shape(), c.device()), (&[10, 100][..], &dev));
    let cpu = Device::cpu();
    let want = values(&(&(&ta.to(&cpu).unwrap() * &tb.to(&cpu).unwrap()).unwrap() + 1.0).unwrap());
    assert_close(
        &values(&c),
        &want,
        1e-6,
        0.0,
        "(a * b) + 1 on the wrapped device vs cpu",
    );

    // ... and the application reads the result with its own encoder.
    let view = c.wgpu_buffer().unwrap();
    assert_eq!((view.offset, view.size), (0, 4000));
    assert!(view.buffer.size() >= view.size);
    assert!(view
        .buffer
        .usage()
        .contains(wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC));
    let bytes = read_with_own_encoder(&device, &queue, view.buffer, view.offset, view.size);
    let got: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|w| f32::from_le_bytes(w.try_into().unwrap()))
        .collect();
    assert_close(
        &got,
        &want,
        1e-6,
        0.0,
        "read back by the application's own encoder",
    );

    // Views of other dtypes cover exactly their elements (the buffer is padded to 4 bytes).
    let h = Tensor::from_vec(vec![wgtensor::f16::from_f32(0.5); 3], &[3], &dev).unwrap();
    let hv = h.wgpu_buffer().unwrap();
    assert_eq!((hv.offset, hv.size, h.dtype()), (0, 6, DType::F16));
    let raw = read_with_own_encoder(&device, &queue, hv.buffer, 0, 6);
    assert_eq!(
        raw,
        [0x00, 0x38, 0x00, 0x38, 0x00, 0x38],
        "f16 0.5 is 0x3800"
    );
    assert!(matches!(
        Tensor::ones(&[2], DType::F32, &cpu).unwrap().wgpu_buffer(),
        Err(Error::InvalidArgument { .. })
    ));

    // wgtensor replaced wgpu's panicking error handler on the application's device.
    wgtensor::testing::inject_uncaptured_error(&dev);
    assert!(matches!(dev.synchronize(), Err(Error::Wgpu { .. })));
    assert_close(
        &values(&c),
        &want,
        1e-6,
        0.0,
        "result after an injected error",
    );
    dev.synchronize().unwrap();
}

#[test]
fn an_application_destroying_its_device_gives_device_lost_from_every_call() {
    if gpus().is_empty() {
        return; // the harness printed the skip (or failed under WGTENSOR_REQUIRE_GPU=1)
    }
    let Some((adapter, device, queue)) = app_device() else {
        return;
    };
    let dev = Device::from_wgpu(&adapter, device.clone(), queue);
    let t = Tensor::from_vec(vec![1f32, 2.0, 3.0], &[3], &dev).unwrap();
    let kept = t.mul_scalar(2.0).unwrap();
    dev.synchronize().unwrap();
    // A real loss, as a driver reset or the application itself would cause it.
    device.destroy();
    let lost = |what: &str, r: Result<(), wgtensor::Error>| match r {
        Err(wgtensor::Error::DeviceLost { .. }) => {}
        other => panic!("{what} after destroy: expected DeviceLost, got {other:?}"),
    };
    // Every call, from the first one on, says DeviceLost (not a raw wgpu error).
    lost(
        "from_vec",
        Tensor::from_vec(vec![1f32; 4], &[4], &dev).map(|_| ()),
    );
    lost("add", t.add(&t).and_then(|x| x.to_vec::<f32>()).map(|_| ()));
    lost("to_vec", kept.to_vec::<f32>().map(|_| ()));
    lost("wgpu_buffer", t.wgpu_buffer().map(|_| ()));
    lost("synchronize", dev.synchronize());
    lost(
        "zeros",
        Tensor::zeros(&[4], wgtensor::DType::F32, &dev).map(|_| ()),
    );
}

#[test]
fn a_view_that_cannot_be_bound_where_it_starts_says_so() {
    for d in gpus() {
        let t = Tensor::from_vec((0..512).map(|i| i as f32).collect(), &[512], &d).unwrap();
        // 4 bytes in: no adapter binds storage there (the alignment is at least 4, usually 256).
        match t.narrow(0, 1, 8).unwrap().wgpu_buffer() {
            Err(wgtensor::Error::InvalidArgument { op, message }) => {
                assert_eq!(op, "wgpu_buffer");
                assert!(message.contains(".contiguous()"), "{message}");
            }
            Ok(v) => assert_eq!(v.offset % 256, 0, "an offset the adapter accepts"),
            Err(e) => panic!("{d}: {e}"),
        }
        // The suggested fix works: the copy starts at 0 and holds the view's elements.
        let c = t.narrow(0, 1, 8).unwrap().contiguous().unwrap();
        let v = c.wgpu_buffer().unwrap();
        assert_eq!((v.offset, v.size), (0, 32), "{d}");
        assert_eq!(
            c.to_vec::<f32>().unwrap(),
            (1..9).map(|i| i as f32).collect::<Vec<_>>()
        );
    }
}

#[test]
fn from_wgpu_buffer_adopts_the_applications_buffer_without_a_copy() {
    if gpus().is_empty() {
        return;
    }
    let Some((adapter, device, queue)) = app_device() else {
        panic!("wgtensor found a GPU but wgpu::Instance::request_adapter did not");
    };
    let dev = Device::from_wgpu(&adapter, device.clone(), queue.clone());
    let usage =
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
    let make = |size: u64, usage| {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("app data"),
            size,
            usage,
            mapped_at_creation: false,
        })
    };
    let vals: Vec<f32> = (0..12).map(|i| i as f32 - 4.5).collect();
    let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    let app = make(48, usage);
    queue.write_buffer(&app, 0, &bytes);
    {
        let t = Tensor::from_wgpu_buffer(&app, &[3, 4], DType::F32, &dev).unwrap();
        assert_eq!(t.shape(), &[3, 4]);
        assert_eq!(values(&t), vals, "the tensor reads the application's data");
        let doubled = values(&t.mul_scalar(2.0).unwrap());
        assert_eq!(doubled, vals.iter().map(|v| v * 2.0).collect::<Vec<_>>());
        // The tensor is the buffer: wgpu_buffer hands the same buffer back.
        assert_eq!(t.wgpu_buffer().unwrap().buffer, &app);
    }
    // Dropped: the buffer is the application's again and is never reused by wgtensor.
    let others: Vec<Tensor> = (0..8)
        .map(|_| Tensor::full(&[12], 7.0, DType::F32, &dev).unwrap())
        .collect();
    dev.synchronize().unwrap();
    assert!(others.iter().all(|t| values(t) == vec![7.0; 12]));
    let back = read_with_own_encoder(&device, &queue, &app, 0, 48);
    assert_eq!(back, bytes, "the application's buffer was left untouched");
    // Typed errors: a missing usage, a buffer too small, the CPU as device.
    let bare = make(48, wgpu::BufferUsages::STORAGE);
    match Tensor::from_wgpu_buffer(&bare, &[12], DType::F32, &dev) {
        Err(Error::InvalidArgument { message, .. }) => {
            assert!(message.contains("COPY_SRC"), "{message}")
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    assert!(matches!(
        Tensor::from_wgpu_buffer(&app, &[13], DType::F32, &dev),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        Tensor::from_wgpu_buffer(&app, &[4], DType::F32, &Device::cpu()),
        Err(Error::InvalidArgument { .. })
    ));
    // f16 and u8 views of the same bytes.
    let h = Tensor::from_wgpu_buffer(&app, &[24], DType::F16, &dev).unwrap();
    assert_eq!(h.numel(), 24);
    let u = Tensor::from_wgpu_buffer(&app, &[48], DType::U8, &dev).unwrap();
    assert_eq!(u.to_vec::<u8>().unwrap(), bytes);
}

#[test]
fn the_applications_wgpu_errors_stay_the_applications() {
    if gpus().is_empty() {
        return;
    }
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    // A buffer wgpu refuses: MAP_READ with STORAGE needs a feature the app did not request.
    let invalid = |device: &wgpu::Device| {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("the application's mistake"),
            size: 16,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        })
    };
    // With a handler: the application's error reaches it, and wgtensor is not disturbed.
    let Some((adapter, device, queue)) = app_device() else {
        panic!("wgtensor found a GPU but wgpu::Instance::request_adapter did not");
    };
    let seen = Arc::new(AtomicUsize::new(0));
    let s2 = seen.clone();
    let dev = Device::from_wgpu_with_error_handler(
        &adapter,
        device.clone(),
        queue,
        Arc::new(move |_e: wgpu::Error| {
            s2.fetch_add(1, Ordering::SeqCst);
        }),
    );
    let t = Tensor::from_slice(&[1f32, 2.0, 3.0], &[3], &dev).unwrap();
    assert_eq!(values(&t.mul_scalar(2.0).unwrap()), vec![2.0, 4.0, 6.0]);
    let _bad = invalid(&device);
    assert_eq!(
        seen.load(Ordering::SeqCst),
        1,
        "the application's handler fired"
    );
    let next = t.add_scalar(1.0).unwrap();
    assert_eq!(
        values(&next),
        vec![2.0, 3.0, 4.0],
        "wgtensor's next call is unaffected"
    );
    dev.synchronize().unwrap();
    assert_eq!(
        seen.load(Ordering::SeqCst),
        1,
        "wgtensor's own work raised nothing"
    );
    // Without one: the application's error is logged, and wgtensor's next call still works.
    let Some((adapter, device, queue)) = app_device() else {
        unreachable!()
    };
    let dev = Device::from_wgpu(&adapter, device.clone(), queue);
    let t = Tensor::from_slice(&[5f32], &[1], &dev).unwrap();
    let _bad = invalid(&device);
    assert_eq!(values(&t.neg().unwrap()), vec![-5.0]);
    dev.synchronize().unwrap();
}

/// Child: GL is not probed by opening the best device or counting GPUs, only when asked for.
#[test]
fn child_lazy_gl() {
    if !is_child("devices::child_lazy_gl") {
        return;
    }
    let n = wgtensor::gpu_count();
    let _ = Device::best();
    if n > 0 {
        let first = Device::gpu(0).unwrap();
        first.synchronize().unwrap();
        assert!(
            !wgtensor::testing::gl_probed(),
            "GL probed without being asked for"
        );
    }
    // Asking for GL enumerates it (once); gl:0 opens where a GL adapter exists.
    let gl: Result<Device, _> = "gl:0".parse();
    assert!(wgtensor::testing::gl_probed());
    if let Ok(d) = gl {
        let t = Tensor::from_slice(&[1f32, 2.0], &[2], &d).unwrap();
        assert_eq!(values(&t.mul_scalar(3.0).unwrap()), vec![3.0, 6.0]);
    }
    assert_eq!(
        wgtensor::gpu_count(),
        n,
        "GPU numbering is not changed by the GL probe"
    );
    child_done("devices::child_lazy_gl");
}

#[test]
fn gl_is_probed_only_when_asked_for() {
    if is_child("devices::child_lazy_gl") || gpus().iter().all(|d| d.to_string().starts_with("gl"))
    {
        return;
    }
    // WGPU_BACKEND unset, as on a user's machine (CI's GL phase sets it).
    let out = run_child("devices::child_lazy_gl", &[("WGPU_BACKEND", "")]);
    assert!(out.contains("all checks passed"), "{out}");
}
