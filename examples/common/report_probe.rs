//! The device's own limits for `examples/device_report.rs`, measured with kernels written for
//! nothing but that (so wgtensor's kernels can be judged against them): a large buffer-to-buffer
//! copy, a streaming read kernel (vec4 loads, one sum per invocation) and FMA chains in f32 and
//! f16. On the CPU, a parallel copy and a parallel sum over 512 MiB.
//!
//! The GPU kernels are the application's own work on wgtensor's device (`Device::wgpu`), inside
//! wgpu error scopes, so an adapter that refuses one (no f16, a smaller binding) gets a line
//! saying why instead of a panic.
#![allow(dead_code)]

use rayon::prelude::*;
use serde_json::{json, Value};
use std::time::Instant;
use wgtensor::Device;

/// Measured limits; `None` where not measured (the line says why).
#[derive(Default)]
pub struct Limits {
    /// Copy bandwidth, bytes read plus bytes written, GB/s.
    pub copy_gbs: Option<f64>,
    /// Streaming read bandwidth, GB/s: what decode's weight reads can reach.
    pub read_gbs: Option<f64>,
    /// FMA-chain arithmetic, GFLOP/s (an FMA counts 2).
    pub fma_f32: Option<f64>,
    pub fma_f16: Option<f64>,
}

impl Limits {
    pub fn to_json(&self) -> Value {
        json!({"copy_gbs": self.copy_gbs, "read_gbs": self.read_gbs,
               "fma_f32_gflops": self.fma_f32, "fma_f16_gflops": self.fma_f16})
    }
}

fn say(label: &str, r: &Result<f64, String>, unit: &str) {
    match r {
        Ok(v) => println!("  {label}: {v:.1} {unit}"),
        Err(e) => println!("  {label}: not measured: {e}"),
    }
}

/// Measures `dev`'s limits, printing a line for each.
pub fn measure(dev: &Device) -> Limits {
    let (copy, read, f32r, f16r) = match dev.wgpu() {
        None => (
            cpu_copy(),
            cpu_read(),
            Err("the CPU's arithmetic rate is its matmul row below".to_string()),
            Err("the CPU computes f16 through f32".to_string()),
        ),
        Some((d, q)) => {
            let a = wgtensor::adapters()
                .into_iter()
                .find(|a| a.names.contains(&dev.to_string()));
            let limit = a.as_ref().map_or(128 << 20, |a| {
                a.max_storage_buffer_binding_size.min(a.max_buffer_size)
            });
            // 256 MiB (or the binding limit): far past every GPU's last-level cache.
            let bytes = (256u64 << 20).min(limit) & !0xffff;
            let f16 = a.as_ref().is_some_and(|a| a.shader_f16);
            let software = a.as_ref().is_some_and(|a| a.is_software);
            (
                gpu_copy(d, q, bytes),
                gpu_read(d, q, bytes),
                gpu_fma(d, q, false, software),
                if f16 {
                    gpu_fma(d, q, true, software)
                } else {
                    Err("the adapter has no SHADER_F16".to_string())
                },
            )
        }
    };
    say(
        "copy bandwidth (copy_buffer_to_buffer, read + written)",
        &copy,
        "GB/s",
    );
    say("read bandwidth (streaming kernel)", &read, "GB/s");
    say("FMA peak f32", &f32r, "GFLOP/s");
    say("FMA peak f16", &f16r, "GFLOP/s");
    Limits {
        copy_gbs: copy.ok(),
        read_gbs: read.ok(),
        fma_f32: f32r.ok(),
        fma_f16: f16r.ok(),
    }
}

/// Best rate of 3 timed runs of `f` (which returns the work units it did).
fn best_rate(mut f: impl FnMut() -> Result<f64, String>) -> Result<f64, String> {
    f()?;
    let mut best = 0f64;
    for _ in 0..3 {
        let t = Instant::now();
        let units = f()?;
        best = best.max(units / t.elapsed().as_secs_f64());
    }
    Ok(best)
}

fn cpu_copy() -> Result<f64, String> {
    let n = 512 << 20;
    let src = vec![1u8; n];
    let mut dst = vec![0u8; n];
    let chunk = n / rayon::current_num_threads().max(1) / 4;
    best_rate(|| {
        dst.par_chunks_mut(chunk)
            .zip(src.par_chunks(chunk))
            .for_each(|(d, s)| d.copy_from_slice(s));
        Ok(2.0 * n as f64 / 1e9)
    })
}

fn cpu_read() -> Result<f64, String> {
    let n = 128 << 20; // f32s: 512 MiB
    let src = vec![1f32; n];
    best_rate(|| {
        let s: f32 = src
            .par_chunks(1 << 16)
            .map(|c| {
                // 16 independent sums: the compiler keeps them in vector registers.
                let mut acc = [0f32; 16];
                for b in c.chunks_exact(16) {
                    for i in 0..16 {
                        acc[i] += b[i];
                    }
                }
                acc.iter().sum::<f32>()
            })
            .sum();
        std::hint::black_box(s);
        Ok(4.0 * n as f64 / 1e9)
    })
}

/// Runs `record` in error scopes; the first validation or memory error is returned as text.
fn scoped<T>(d: &wgpu::Device, f: impl FnOnce() -> T) -> Result<T, String> {
    let oom = d.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let val = d.push_error_scope(wgpu::ErrorFilter::Validation);
    let t = f();
    let v = pollster::block_on(val.pop());
    let o = pollster::block_on(oom.pop());
    match v.or(o) {
        Some(e) => Err(e.to_string()),
        None => Ok(t),
    }
}

fn wait(d: &wgpu::Device, i: wgpu::SubmissionIndex) -> Result<(), String> {
    d.poll(wgpu::PollType::Wait {
        submission_index: Some(i),
        timeout: Some(std::time::Duration::from_secs(60)),
    })
    .map(drop)
    .map_err(|e| e.to_string())
}

fn storage(d: &wgpu::Device, bytes: u64, usage: wgpu::BufferUsages) -> wgpu::Buffer {
    d.create_buffer(&wgpu::BufferDescriptor {
        label: Some("device_report probe"),
        size: bytes,
        usage,
        mapped_at_creation: false,
    })
}

fn gpu_copy(d: &wgpu::Device, q: &wgpu::Queue, bytes: u64) -> Result<f64, String> {
    let u = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
    let (src, dst) = scoped(d, || (storage(d, bytes, u), storage(d, bytes, u)))?;
    let reps = 8;
    best_rate(|| {
        let mut enc = d.create_command_encoder(&Default::default());
        for _ in 0..reps {
            enc.copy_buffer_to_buffer(&src, 0, &dst, 0, bytes);
        }
        let i = scoped(d, || q.submit([enc.finish()]))?;
        wait(d, i)?;
        Ok(2.0 * (reps * bytes) as f64 / 1e9)
    })
}

/// Runs a one-binding-or-two compute kernel `reps` times per timed submit.
fn kernel_rate(
    d: &wgpu::Device,
    q: &wgpu::Queue,
    wgsl: &str,
    buffers: &[&wgpu::Buffer],
    workgroups: (u32, u32),
    reps: usize,
    units_per_dispatch: f64,
) -> Result<f64, String> {
    let (pipeline, group) = scoped(d, || {
        let module = d.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("device_report probe"),
            source: wgpu::ShaderSource::Wgsl(wgsl.into()),
        });
        let pipeline = d.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("device_report probe"),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        let entries: Vec<wgpu::BindGroupEntry> = buffers
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: b.as_entire_binding(),
            })
            .collect();
        let group = d.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        });
        (pipeline, group)
    })?;
    best_rate(|| {
        let mut enc = d.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: None,
                timestamp_writes: None,
            });
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &group, &[]);
            for _ in 0..reps {
                pass.dispatch_workgroups(workgroups.0, workgroups.1, 1);
            }
        }
        let i = scoped(d, || q.submit([enc.finish()]))?;
        wait(d, i)?;
        Ok(reps as f64 * units_per_dispatch)
    })
}

/// Each invocation sums `LOADS` vec4s a grid apart (neighbouring invocations read neighbouring
/// vec4s) and stores one f32, so nearly all traffic is reads. No loop, so software adapters
/// (which run loops slowly) measure their memory too. Adapters differ in how many loads in flight
/// they need, so the report takes the best of a few `LOADS`.
fn read_wgsl(loads: u32) -> String {
    let sum: Vec<String> = (0..loads)
        .map(|j| format!("src[i + {j}u * stride]"))
        .collect();
    format!(
        r#"
@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let stride = nwg.x * 256u;
    let i = gid.x;
    let acc = {};
    dst[i] = acc.x + acc.y + acc.z + acc.w;
}}
"#,
        sum.join(" + ")
    )
}

fn gpu_read(d: &wgpu::Device, q: &wgpu::Queue, bytes: u64) -> Result<f64, String> {
    let src = scoped(d, || storage(d, bytes, wgpu::BufferUsages::STORAGE))?;
    let mut best: Result<f64, String> = Err("no variant ran".into());
    for loads in [1u32, 4, 8] {
        // 16 bytes x `loads` per invocation, 256 invocations per workgroup.
        let groups = (bytes / (16 * loads as u64 * 256)) as u32;
        if groups > 65535 {
            continue;
        }
        let dst = scoped(d, || {
            storage(d, groups as u64 * 256 * 4, wgpu::BufferUsages::STORAGE)
        })?;
        let r = kernel_rate(
            d,
            q,
            &read_wgsl(loads),
            &[&src, &dst],
            (groups, 1),
            8,
            bytes as f64 / 1e9,
        );
        best = match (best, r) {
            (Ok(a), Ok(b)) => Ok(a.max(b)),
            (Err(_), r) | (r, Err(_)) => r,
        };
    }
    best
}

/// FMA chains: 8 independent vec4 chains per invocation, `ITERS` steps each.
fn fma_wgsl(f16: bool, contract: bool) -> String {
    let t = if f16 { "f16" } else { "f32" };
    format!(
        r#"{enable}
@group(0) @binding(0) var<storage, read_write> dst: array<f32>;
const ITERS: u32 = 2048u;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {{
    let s = {t}(gid.x & 7u) * {t}(0.001);
    var a0 = vec4<{t}>(s); var a1 = a0 + {t}(0.1); var a2 = a0 + {t}(0.2); var a3 = a0 + {t}(0.3);
    var a4 = a0 + {t}(0.4); var a5 = a0 + {t}(0.5); var a6 = a0 + {t}(0.6); var a7 = a0 + {t}(0.7);
    let m = vec4<{t}>({t}(0.999));
    let k = vec4<{t}>({t}(0.001));
    for (var i = 0u; i < ITERS; i++) {{
        {body}
    }}
    let r = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
    dst[gid.y * 65535u * 256u + gid.x] = f32(r.x + r.y + r.z + r.w);
}}
"#,
        enable = if f16 { "enable f16;" } else { "" },
        body = (0..8)
            .map(|i| if contract {
                format!("a{i} = a{i} * m + k;")
            } else {
                format!("a{i} = fma(a{i}, m, k);")
            })
            .collect::<Vec<_>>()
            .join(" ")
    )
}

fn gpu_fma(d: &wgpu::Device, q: &wgpu::Queue, f16: bool, software: bool) -> Result<f64, String> {
    // 2048 workgroups of 256: enough resident work for the largest GPUs; a software adapter
    // (a few CPU cores) is saturated by far fewer.
    let groups = if software { 32 } else { 2048u32 };
    let dst = scoped(d, || {
        storage(d, groups as u64 * 256 * 4, wgpu::BufferUsages::STORAGE)
    })?;
    let flops = groups as f64 * 256.0 * 2048.0 * 8.0 * 4.0 * 2.0;
    // `fma()` and `a * m + k` (which drivers may contract into one instruction): the best of
    // the two, since compilers differ in which they turn into the fastest code.
    let a = kernel_rate(
        d,
        q,
        &fma_wgsl(f16, false),
        &[&dst],
        (groups, 1),
        4,
        flops / 1e9,
    );
    let b = kernel_rate(
        d,
        q,
        &fma_wgsl(f16, true),
        &[&dst],
        (groups, 1),
        4,
        flops / 1e9,
    );
    match (a, b) {
        (Ok(a), Ok(b)) => Ok(a.max(b)),
        (Err(_), r) | (r, Err(_)) => r,
    }
}
