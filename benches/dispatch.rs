//! Cost per op: a chain of 100 elementwise ops on 4,096 f32 on every GPU adapter, ending in a
//! readback of the result (fused: the chain runs as few generated kernels), next to 100
//! plain-wgpu dispatches of an equivalent kernel recorded here (prebuilt pipeline and bind
//! groups, one submit per dispatch as in wgpu's compute examples), in the same run. Also
//! `wgtensor_ops_unfused`: the same chain with every intermediate read back, so each op is its
//! own dispatch (the launch cost without fusion).
//! Also the soak of FAULTS row 25: 10,000 x (create -> op -> drop) with `memory_reserved` flat.
//!
//! `wgtensor_record_only` times the recording of the chain alone (host cost per launch; divide
//! by 100 for the cost of one op).
//!
//! Run: `cargo bench --bench dispatch`

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::time::Duration;
use wgtensor::{wgpu, DType, Device, Tensor};

const N: u32 = 4096;
const CHAIN: usize = 100;

const PLAIN_WGSL: &str = r#"
@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&dst)) { dst[id.x] = src[id.x] + 1.0; }
}
"#;

struct Plain {
    pipeline: wgpu::ComputePipeline,
    binds: [wgpu::BindGroup; 2],
}

fn plain(device: &wgpu::Device) -> Plain {
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: None,
        source: wgpu::ShaderSource::Wgsl(PLAIN_WGSL.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: None,
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let buf = || {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: N as u64 * 4,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        })
    };
    let (a, b) = (buf(), buf());
    let layout = pipeline.get_bind_group_layout(0);
    let bind = |src: &wgpu::Buffer, dst: &wgpu::Buffer| {
        device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &layout,
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: src.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: dst.as_entire_binding(),
                },
            ],
        })
    };
    let binds = [bind(&a, &b), bind(&b, &a)];
    Plain { pipeline, binds }
}

fn chain(c: &mut Criterion) {
    for i in 0..wgtensor::gpu_count() {
        let dev = Device::gpu(i).unwrap();
        let (device, queue) = dev.wgpu().unwrap();
        let p = plain(device);
        let mut group = c.benchmark_group(format!("chain100_{}", dev.to_string().replace(':', "")));
        group
            .sample_size(20)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(3));
        group.bench_function("plain_wgpu_dispatches", |b| {
            b.iter(|| {
                for k in 0..CHAIN {
                    let mut enc = device.create_command_encoder(&Default::default());
                    {
                        let mut pass = enc.begin_compute_pass(&Default::default());
                        pass.set_pipeline(&p.pipeline);
                        pass.set_bind_group(0, &p.binds[k % 2], &[]);
                        pass.dispatch_workgroups(N / 256, 1, 1);
                    }
                    queue.submit([enc.finish()]);
                }
                device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
            })
        });
        let x = Tensor::zeros(&[N as usize], DType::F32, &dev).unwrap();
        group.bench_function("wgtensor_ops", |b| {
            b.iter(|| {
                let mut t = x.clone();
                for _ in 0..CHAIN {
                    t = t.add_scalar(1.0).unwrap();
                }
                black_box(t.to_vec::<f32>().unwrap())
            })
        });
        group.bench_function("wgtensor_ops_unfused", |b| {
            b.iter(|| {
                let mut t = x.clone();
                for _ in 0..CHAIN {
                    t = t.add_scalar(1.0).unwrap();
                    // Synchronising materialises each op: one dispatch (and wait) per op.
                    dev.synchronize().unwrap();
                }
                black_box(t.to_vec::<f32>().unwrap())
            })
        });
        // Host cost alone: the time to record the chain (kernel lookups, params, bind groups,
        // the submit every 64 ops), without waiting for the GPU, which runs untimed after.
        group.bench_function("wgtensor_record_only", |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let began = std::time::Instant::now();
                    let mut t = x.clone();
                    for _ in 0..CHAIN {
                        t = t.add_scalar(1.0).unwrap();
                    }
                    total += began.elapsed();
                    dev.synchronize().unwrap();
                    black_box(t);
                }
                total
            })
        });
        group.finish();
    }
}

fn soak(c: &mut Criterion) {
    let mut devices = vec![Device::cpu()];
    devices.extend((0..wgtensor::gpu_count()).map(|i| Device::gpu(i).unwrap()));
    for dev in devices {
        let mut group = c.benchmark_group(format!("soak_{}", dev.to_string().replace(':', "")));
        group
            .sample_size(10)
            .measurement_time(Duration::from_secs(3));
        let step = || {
            let a = Tensor::full(&[64, 64], 1.0, DType::F32, &dev).unwrap();
            black_box(a.relu().unwrap());
        };
        for _ in 0..100 {
            step();
        }
        dev.synchronize().unwrap();
        let reserved = wgtensor::memory_reserved(&dev);
        group.bench_function("create_op_drop_x10000", |b| {
            b.iter(|| {
                for _ in 0..10_000 {
                    step();
                }
                dev.synchronize().unwrap();
            })
        });
        let after = wgtensor::memory_reserved(&dev);
        println!("soak on {dev}: memory_reserved before {reserved} B, after {after} B");
        assert_eq!(
            reserved, after,
            "memory_reserved grew during the soak on {dev}"
        );
        group.finish();
    }
}

criterion_group!(benches, chain, soak);
criterion_main!(benches);
