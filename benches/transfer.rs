//! Uploads and readbacks (`to_vec`, and the zero-copy `map_read`) of 1 KiB, 1 MiB and 64 MiB on
//! every GPU adapter: wgtensor next to the
//! plain wgpu path written here (`queue.write_buffer` into a buffer; copy into a `MAP_READ`
//! staging buffer, map, copy out), measured in the same run on the same wgpu device.
//!
//! Run: `cargo bench --bench transfer`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;
use wgtensor::{wgpu, Device, Tensor};

fn wait(device: &wgpu::Device) {
    device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
}

/// The plain path's readback: copy, submit, map, wait, copy out, unmap. The staging buffer is
/// reused across iterations, as a careful hand-written program would.
fn plain_read(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    src: &wgpu::Buffer,
    staging: &wgpu::Buffer,
    bytes: u64,
) -> Vec<f32> {
    let mut enc = device.create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(src, 0, staging, 0, bytes);
    queue.submit([enc.finish()]);
    staging.map_async(wgpu::MapMode::Read, .., |r| r.unwrap());
    wait(device);
    let out = bytemuck::cast_slice::<u8, f32>(&staging.get_mapped_range(..).unwrap()).to_vec();
    staging.unmap();
    out
}

fn transfers(c: &mut Criterion) {
    for i in 0..wgtensor::gpu_count() {
        let dev = Device::gpu(i).unwrap();
        let (device, queue) = dev.wgpu().unwrap();
        let mut group = c.benchmark_group(format!("transfer_{}", dev.to_string().replace(':', "")));
        group
            .sample_size(10)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(2));
        for (label, bytes) in [
            ("1KiB", 1usize << 10),
            ("1MiB", 1 << 20),
            ("64MiB", 64 << 20),
        ] {
            let n = bytes / 4;
            let host: Vec<f32> = (0..n).map(|i| i as f32).collect();
            group.throughput(Throughput::Bytes(bytes as u64));

            // Uploads: both paths end with the data on the GPU (a submit and a wait).
            let plain_buf = device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size: bytes as u64,
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_DST
                    | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            });
            group.bench_with_input(BenchmarkId::new("upload_plain_wgpu", label), &n, |b, _| {
                b.iter(|| {
                    queue.write_buffer(&plain_buf, 0, bytemuck::cast_slice(&host));
                    queue.submit([]);
                    wait(device);
                })
            });
            group.bench_with_input(BenchmarkId::new("upload_wgtensor", label), &n, |b, _| {
                b.iter(|| {
                    let t = Tensor::from_slice(&host, &[n], &dev).unwrap();
                    dev.synchronize().unwrap();
                    black_box(t)
                })
            });

            // Readbacks into a host Vec<f32>.
            let staging = device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size: bytes as u64,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            group.bench_with_input(
                BenchmarkId::new("readback_plain_wgpu", label),
                &n,
                |b, _| {
                    b.iter(|| {
                        black_box(plain_read(
                            device,
                            queue,
                            &plain_buf,
                            &staging,
                            bytes as u64,
                        ))
                    })
                },
            );
            let t = Tensor::from_slice(&host, &[n], &dev).unwrap();
            // Both paths must read the same data (the upload bench may have been filtered out).
            queue.write_buffer(&plain_buf, 0, bytemuck::cast_slice(&host));
            queue.submit([]);
            wait(device);
            assert_eq!(
                t.to_vec::<f32>().unwrap(),
                plain_read(device, queue, &plain_buf, &staging, bytes as u64)
            );
            group.bench_with_input(BenchmarkId::new("readback_wgtensor", label), &n, |b, _| {
                b.iter(|| black_box(t.to_vec::<f32>().unwrap()))
            });
            // Zero-copy: the closure reads the mapped memory (touching every 1024th element so
            // the pages are really read) instead of receiving a new Vec.
            group.bench_with_input(BenchmarkId::new("map_read_wgtensor", label), &n, |b, _| {
                b.iter(|| {
                    black_box(
                        t.map_read(|v: &[f32]| v.iter().step_by(1024).sum::<f32>())
                            .unwrap(),
                    )
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, transfers);
criterion_main!(benches);
