//! Data-parallel training over MPI: every process (rank) trains the same MLP on its own shard of
//! two interleaved spirals, and `nn::DistributedDataParallel` averages the gradients across ranks
//! after each backward, so all ranks keep identical weights.
//!
//! ```text
//! cargo build --release --features mpi --example ddp_train
//! mpirun -n 2 target/release/examples/ddp_train                  # one host, 2 processes
//! mpirun --hostfile hosts -n 8 target/release/examples/ddp_train  # several hosts
//! mpirun -n 2 target/release/examples/ddp_train --bench          # collective and step timings
//! ```
//!
//! Each rank picks `gpu:{local_rank}` when that GPU exists (so a multi-GPU host gives one GPU to
//! each process), else the best device (`WGTENSOR_DEVICE` overrides). Rank 0 prints the result.

use std::f32::consts::PI;
use std::sync::Arc;
use std::time::Instant;
use wgtensor::distributed::{DistributedSampler, ProcessGroup, ReduceOp};
use wgtensor::nn::{self, DistributedDataParallel, Linear, Module, ReLU, Sequential};
use wgtensor::optim::{Adam, Optimizer};
use wgtensor::{Device, Result, Tensor};

/// `n` points of two spiral arms (class = index parity), the same on every rank (seeded).
fn spirals(n: usize) -> Result<(Vec<f32>, Vec<u32>)> {
    wgtensor::manual_seed(11);
    let cpu = Device::cpu();
    let t = Tensor::rand(&[n], &cpu)?.to_vec::<f32>()?;
    let eps = Tensor::randn(&[n, 2], &cpu)?.to_vec::<f32>()?;
    let mut xy = Vec::with_capacity(2 * n);
    let mut labels = Vec::with_capacity(n);
    for i in 0..n {
        let class = (i % 2) as u32;
        let r = 0.1 + 0.9 * t[i];
        let theta = 3.0 * PI * r + PI * class as f32;
        xy.push(r * theta.cos() + 0.02 * eps[2 * i]);
        xy.push(r * theta.sin() + 0.02 * eps[2 * i + 1]);
        labels.push(class);
    }
    Ok((xy, labels))
}

fn model(device: &Device) -> Result<Sequential> {
    Ok(Sequential::new()
        .add(Linear::new(2, 128, true, device)?)
        .add(ReLU)
        .add(Linear::new(128, 128, true, device)?)
        .add(ReLU)
        .add(Linear::new(128, 2, true, device)?))
}

/// The device of this rank: its own GPU on a multi-GPU host, else the best one.
fn device_for(g: &ProcessGroup) -> Device {
    if std::env::var_os("WGTENSOR_DEVICE").is_none() && g.local_rank() < wgtensor::gpu_count() {
        if let Ok(d) = Device::gpu(g.local_rank()) {
            return d;
        }
    }
    Device::best()
}

/// Rows `idx` of the data set as tensors on `device`.
fn batch(xy: &[f32], labels: &[u32], idx: &[usize], device: &Device) -> Result<(Tensor, Tensor)> {
    let x: Vec<f32> = idx
        .iter()
        .flat_map(|&i| [xy[2 * i], xy[2 * i + 1]])
        .collect();
    let y: Vec<u32> = idx.iter().map(|&i| labels[i]).collect();
    Ok((
        Tensor::from_vec(x, &[idx.len(), 2], device)?,
        Tensor::from_vec(y, &[idx.len()], device)?,
    ))
}

fn train(
    g: &Arc<ProcessGroup>,
    device: &Device,
    steps: usize,
    overlap: bool,
) -> Result<(f32, f64)> {
    let n = 4096;
    let (xy, labels) = spirals(n)?;
    // Different initial weights on every rank: construction broadcasts rank 0's.
    wgtensor::manual_seed(100 + g.rank() as u64);
    let mut ddp = DistributedDataParallel::new(model(device)?, g.clone())?.with_overlap(overlap);
    let mut opt = Adam::new(0.01);
    let sampler = DistributedSampler::new(n, g.rank(), g.world_size())?
        .seed(5)
        .drop_last(true);
    let per_rank_batch = 256 / g.world_size();
    let mut started = None;
    let mut step = 0;
    'epochs: for epoch in 0.. {
        let mine = sampler.indices(epoch);
        for chunk in mine.chunks_exact(per_rank_batch) {
            if step == 5 {
                // Timing starts after the warm-up steps (pipelines compiled, buffers pooled).
                device.synchronize()?;
                started = Some(Instant::now());
            }
            let (x, y) = batch(&xy, &labels, chunk, device)?;
            opt.zero_grad(&ddp);
            ddp.backward(&nn::cross_entropy(&ddp.forward(&x)?, &y)?)?;
            opt.step(&mut ddp)?;
            step += 1;
            if step == steps {
                break 'epochs;
            }
        }
    }
    device.synchronize()?;
    let per_step = started.map_or(0.0, |t| {
        t.elapsed().as_secs_f64() * 1e3 / (steps - 5) as f64
    });
    // Accuracy on the whole set (every rank holds the same weights).
    let all: Vec<usize> = (0..n).collect();
    let (x, _) = batch(&xy, &labels, &all, device)?;
    let pred = wgtensor::no_grad_scope(|| ddp.forward(&x))?
        .argmax(-1, false)?
        .to_vec::<u32>()?;
    let hits = pred.iter().zip(&labels).filter(|(p, l)| p == l).count();
    Ok((hits as f32 / n as f32, per_step))
}

/// all_reduce of 64 MiB of f32 through wgtensor and through rsmpi on the same host buffer.
fn bench_all_reduce(g: &ProcessGroup) -> Result<(f64, f64)> {
    use mpi::collective::{CommunicatorCollectives, SystemOperation};
    let n = 16 << 20;
    let cpu = Device::cpu();
    let t = Tensor::ones(&[n], wgtensor::DType::F32, &cpu)?;
    let host = vec![1f32; n];
    let mut out = vec![0f32; n];
    let reps = 5;
    let mut best = (f64::INFINITY, f64::INFINITY);
    for _ in 0..reps {
        g.barrier()?;
        let s = Instant::now();
        let r = g.all_reduce(&t, ReduceOp::Sum)?;
        best.0 = best.0.min(s.elapsed().as_secs_f64());
        drop(r);
        g.barrier()?;
        let s = Instant::now();
        g.communicator()
            .all_reduce_into(&host[..], &mut out[..], SystemOperation::sum());
        best.1 = best.1.min(s.elapsed().as_secs_f64());
    }
    let gb = (n * 4) as f64 / 1e9;
    Ok((gb / best.0, gb / best.1))
}

fn main() -> Result<()> {
    let group = Arc::new(ProcessGroup::init()?);
    let device = device_for(&group);
    let bench = std::env::args().any(|a| a == "--bench");
    let steps = if std::env::var("CI").is_ok_and(|v| v == "true") {
        60
    } else {
        200
    };
    let (accuracy, ms) = train(&group, &device, steps, true)?;
    if group.rank() == 0 {
        println!(
            "{} ranks on {device}: {steps} steps of batch 256, {ms:.2} ms per step",
            group.world_size()
        );
        println!("train accuracy: {:.2}%", accuracy * 100.0);
    }
    if bench {
        let (_, no_overlap) = train(&group, &device, steps, false)?;
        let (ours, theirs) = bench_all_reduce(&group)?;
        if group.rank() == 0 {
            println!("DDP step: {ms:.2} ms with overlap, {no_overlap:.2} ms without");
            println!(
                "all_reduce 64 MiB f32: wgtensor {ours:.2} GB/s, rsmpi all_reduce_into {theirs:.2} GB/s ({:.2}x)",
                ours / theirs
            );
        }
    }
    Ok(())
}
