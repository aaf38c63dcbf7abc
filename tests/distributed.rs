//! Collectives and DistributedDataParallel across processes. Run under MPI (`.ci/run` does):
//!
//! ```text
//! mpirun --allow-run-as-root --oversubscribe -n 2 target/debug/deps/distributed-*
//! WGTENSOR_DIST_TEST=peer_exits WGTENSOR_DIST_TIMEOUT=5 mpirun ... -n 3 ...
//! ```
//!
//! Every rank runs the same checks in the same order (they are collectives) on the CPU and on
//! `gpu:0` when there is one, prints `N passed, 0 failed` and exits non-zero on a failure.
//! Launched without mpirun it is a world of one and still checks every collective.

mod common;

use common::{assert_close, data, values};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;
use wgtensor::distributed::{DistributedSampler, ProcessGroup, ReduceOp};
use wgtensor::nn::{DistributedDataParallel, Linear, Module, Sequential, Tanh};
use wgtensor::optim::{Adam, Optimizer, Sgd};
use wgtensor::{DType, Device, Error, Tensor};

const DTYPES: [DType; 5] = [DType::F32, DType::F16, DType::I32, DType::U32, DType::U8];

/// Rank `r`'s value at element `i`: small integers, exact in every dtype and in products.
fn value(r: usize, i: usize) -> f64 {
    ((r + 1) * (i % 3 + 1)) as f64
}

fn tensor_of(vals: &[f64], shape: &[usize], dtype: DType, device: &Device) -> Tensor {
    let t = Tensor::from_vec(
        vals.iter().map(|&v| v as f32).collect(),
        shape,
        &Device::cpu(),
    )
    .unwrap();
    t.to_dtype(dtype).unwrap().to(device).unwrap()
}

fn as_f64(t: &Tensor) -> Vec<f64> {
    values(&t.to_dtype(DType::F32).unwrap().to(&Device::cpu()).unwrap())
        .into_iter()
        .map(f64::from)
        .collect()
}

fn rank_tensor(rank: usize, shape: &[usize], dtype: DType, device: &Device) -> Tensor {
    let n: usize = shape.iter().product();
    let vals: Vec<f64> = (0..n).map(|i| value(rank, i)).collect();
    tensor_of(&vals, shape, dtype, device)
}

fn collectives(g: &ProcessGroup, device: &Device) {
    let (rank, w) = (g.rank(), g.world_size());
    for dtype in DTYPES {
        for shape in [vec![], vec![0], vec![5], vec![2, 3]] {
            let n: usize = shape.iter().product();
            let ctx = format!("{dtype} {shape:?} on {device}");
            let t = rank_tensor(rank, &shape, dtype, device);
            let ops = [
                ReduceOp::Sum,
                ReduceOp::Mean,
                ReduceOp::Max,
                ReduceOp::Min,
                ReduceOp::Product,
            ];
            for op in ops {
                let expect = |i: usize| -> f64 {
                    let k = (i % 3 + 1) as f64;
                    let wf = w as f64;
                    match op {
                        ReduceOp::Sum => k * wf * (wf + 1.0) / 2.0,
                        ReduceOp::Mean => k * (wf + 1.0) / 2.0,
                        ReduceOp::Max => k * wf,
                        ReduceOp::Min => k,
                        ReduceOp::Product => (1..=w).map(|r| r as f64 * k).product(),
                    }
                };
                let got = g.all_reduce(&t, op);
                if op == ReduceOp::Mean && !dtype.is_float() {
                    assert!(
                        matches!(got, Err(Error::InvalidArgument { .. })),
                        "{ctx}: mean of integers is refused"
                    );
                    continue;
                }
                let got = got.unwrap_or_else(|e| panic!("{ctx} all_reduce {op}: {e}"));
                assert_eq!(got.shape(), &shape[..], "{ctx} {op}");
                assert_eq!((got.dtype(), got.device()), (dtype, device), "{ctx} {op}");
                let want: Vec<f64> = (0..n).map(expect).collect();
                assert_eq!(as_f64(&got), want, "{ctx} all_reduce {op}");
            }
            // Broadcast from the last rank; the others' values are overwritten.
            let root = w - 1;
            let b = g.broadcast(&t, root).unwrap();
            let want: Vec<f64> = (0..n).map(|i| value(root, i)).collect();
            assert_eq!(as_f64(&b), want, "{ctx} broadcast");
            assert_eq!(b.device(), device);
        }
        // all_gather with uneven first dims: rank r contributes r rows (rank 0 none).
        let t = rank_tensor(rank, &[rank, 2], dtype, device);
        let parts = g.all_gather(&t).unwrap();
        assert_eq!(parts.len(), w);
        for (r, p) in parts.iter().enumerate() {
            assert_eq!(p.shape(), &[r, 2], "{dtype} all_gather part {r}");
            assert_eq!(p.device(), device);
            let want: Vec<f64> = (0..2 * r).map(|i| value(r, i)).collect();
            assert_eq!(as_f64(p), want, "{dtype} all_gather part {r} on {device}");
        }
        // reduce_scatter (sum) of w + 1 rows (uneven) and of 1 row (most ranks get none).
        for rows in [w + 1, 1, 2 * w] {
            let t = rank_tensor(rank, &[rows, 2], dtype, device);
            let got = g.reduce_scatter(&t, ReduceOp::Sum).unwrap();
            let chunk: Vec<usize> = (0..w)
                .map(|r| rows / w + usize::from(r < rows % w))
                .collect();
            let start: usize = chunk[..rank].iter().sum();
            assert_eq!(
                got.shape(),
                &[chunk[rank], 2],
                "{dtype} reduce_scatter {rows}"
            );
            let wf = w as f64;
            let want: Vec<f64> = (start * 2..(start + chunk[rank]) * 2)
                .map(|i| (i % 3 + 1) as f64 * wf * (wf + 1.0) / 2.0)
                .collect();
            assert_eq!(
                as_f64(&got),
                want,
                "{dtype} reduce_scatter {rows} on {device}"
            );
        }
    }
    // Non-blocking forms: several in flight, waited for out of order.
    let a = rank_tensor(rank, &[4], DType::F32, device);
    let b = rank_tensor(rank, &[3, 2], DType::I32, device);
    let wa = g.all_reduce_async(&a, ReduceOp::Max).unwrap();
    let wb = g.all_gather_async(&b).unwrap();
    let wc = g.broadcast_async(&a, 0).unwrap();
    let wbar = g.barrier_async().unwrap();
    let parts = wb.wait().unwrap();
    assert_eq!(parts.len(), w);
    assert_eq!(
        as_f64(&parts[w - 1]),
        (0..6).map(|i| value(w - 1, i)).collect::<Vec<_>>()
    );
    let m = wa.wait().unwrap();
    assert_eq!(
        as_f64(&m),
        (0..4).map(|i| value(w - 1, i)).collect::<Vec<_>>()
    );
    assert_eq!(
        as_f64(&wc.wait().unwrap()),
        (0..4).map(|i| value(0, i)).collect::<Vec<_>>()
    );
    wbar.wait().unwrap();
    g.barrier().unwrap();
    // Ranks that disagree get the same typed error everywhere (no hang, no corruption).
    let bad = Tensor::ones(&[2 + usize::from(rank == 0)], DType::F32, device).unwrap();
    match g.all_reduce(&bad, ReduceOp::Sum) {
        Err(Error::Distributed {
            op,
            rank: r,
            message,
        }) if w > 1 => {
            assert_eq!((op, r), ("all_reduce", rank));
            assert!(message.contains("rank 0 has float32 [3]"), "{message}");
        }
        Ok(t) if w == 1 => assert_eq!(values(&t), vec![1.0; 3]),
        other => panic!("mismatched shapes: {other:?}"),
    }
    let wrong_dtype = Tensor::ones(
        &[2],
        if rank == 0 { DType::F32 } else { DType::I32 },
        device,
    )
    .unwrap();
    assert_eq!(
        g.broadcast(&wrong_dtype, 0).is_err(),
        w > 1,
        "dtype mismatch in broadcast"
    );
    assert!(matches!(
        g.broadcast(&a, w),
        Err(Error::InvalidArgument { .. })
    ));
}

fn model(device: &Device) -> Sequential {
    let mut m = Sequential::new()
        .add(Linear::new(4, 8, true, &Device::cpu()).unwrap())
        .add(Tanh)
        .add(Linear::new(8, 2, true, &Device::cpu()).unwrap());
    m.to(device).unwrap();
    m
}

fn fresh(m: &Sequential) -> Sequential {
    let mut m = m.clone();
    for (_, p) in m.named_parameters_mut() {
        *p = wgtensor::nn::param(p.detach());
    }
    m
}

fn mse(y: &Tensor, t: &Tensor) -> Tensor {
    y.sub(t)
        .unwrap()
        .pow_scalar(2.0)
        .unwrap()
        .mean_all()
        .unwrap()
}

/// 20 DDP steps (SGD and Adam, overlap on and off, tiny buckets) leave every rank with
/// bit-identical parameters equal to single-process training on the concatenated batch.
fn ddp_matches_single_process(g: &Arc<ProcessGroup>, device: &Device) {
    let (rank, w) = (g.rank(), g.world_size());
    let per = 3;
    let x_all = Tensor::from_vec(data(w * per * 4, 5, 1.0), &[w * per, 4], device).unwrap();
    let t_all = Tensor::from_vec(data(w * per * 2, 6, 1.0), &[w * per, 2], device).unwrap();
    let x = x_all.narrow(0, rank * per, per).unwrap();
    let t = t_all.narrow(0, rank * per, per).unwrap();
    type MakeOpt = fn() -> Box<dyn Optimizer>;
    let opts: [(&str, MakeOpt); 2] = [
        ("sgd", || Box::new(Sgd::new(0.1).momentum(0.9))),
        ("adam", || Box::new(Adam::new(0.01))),
    ];
    for (name, make) in opts {
        for (overlap, bucket) in [(true, 64), (false, 64), (true, 25 << 20)] {
            let ctx = format!("{name} overlap {overlap} bucket {bucket} on {device}");
            // Each rank starts from different weights: construction must broadcast rank 0's.
            wgtensor::manual_seed(100 + rank as u64);
            let mut ddp = DistributedDataParallel::new(model(device), g.clone())
                .unwrap()
                .with_overlap(overlap)
                .with_bucket_bytes(bucket);
            let mut single = fresh(ddp.module());
            let (mut opt, mut opt1) = (make(), make());
            for _ in 0..20 {
                opt.zero_grad(&ddp);
                ddp.backward(&mse(&ddp.forward(&x).unwrap(), &t)).unwrap();
                opt.step(&mut ddp).unwrap();
                opt1.zero_grad(&single);
                mse(&single.forward(&x_all).unwrap(), &t_all)
                    .backward()
                    .unwrap();
                opt1.step(&mut single).unwrap();
            }
            for ((pname, p), (_, s)) in ddp
                .named_parameters()
                .into_iter()
                .zip(single.named_parameters())
            {
                let mine = values(&p);
                assert_close(&mine, &values(&s), 1e-5, 1e-6, &format!("{ctx}: {pname}"));
                // Bit-identical on every rank: gather everyone's copy and compare bits.
                let all = g
                    .all_gather(&p.detach().reshape(&[1, p.numel()]).unwrap())
                    .unwrap();
                for (r, other) in all.iter().enumerate() {
                    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
                    assert_eq!(
                        bits(values(other)),
                        bits(mine.clone()),
                        "{ctx}: {pname} on rank {r}"
                    );
                }
            }
        }
    }
    // no_sync: two local micro-batches accumulate, the second backward averages the sum.
    wgtensor::manual_seed(7);
    let mut ddp = DistributedDataParallel::new(model(device), g.clone()).unwrap();
    let single = fresh(ddp.module());
    let half = per.div_ceil(2);
    let (x1, x2) = (
        x.narrow(0, 0, half).unwrap(),
        x.narrow(0, half, per - half).unwrap(),
    );
    let (t1, t2) = (
        t.narrow(0, 0, half).unwrap(),
        t.narrow(0, half, per - half).unwrap(),
    );
    ddp.no_sync(|d| {
        d.backward(&mse(&d.forward(&x1).unwrap(), &t1)).unwrap();
    });
    let local: Vec<Vec<f32>> = ddp
        .parameters()
        .iter()
        .map(|p| values(&p.grad().unwrap()))
        .collect();
    ddp.backward(&mse(&ddp.forward(&x2).unwrap(), &t2)).unwrap();
    // Reference: every rank's two micro-batch losses, summed over micro-batches, averaged over ranks.
    let mut total: Option<Tensor> = None;
    for r in 0..w {
        for (lo, len) in [(0, half), (half, per - half)] {
            let xs = x_all.narrow(0, r * per + lo, len).unwrap();
            let ts = t_all.narrow(0, r * per + lo, len).unwrap();
            let l = mse(&single.forward(&xs).unwrap(), &ts);
            total = Some(match total {
                None => l,
                Some(s) => s.add(&l).unwrap(),
            });
        }
    }
    total
        .unwrap()
        .mul_scalar(1.0 / w as f32)
        .unwrap()
        .backward()
        .unwrap();
    for ((p, s), l) in ddp.parameters().iter().zip(single.parameters()).zip(&local) {
        let gd = values(&p.grad().unwrap());
        assert_close(
            &gd,
            &values(&s.grad().unwrap()),
            1e-5,
            1e-6,
            "no_sync then sync",
        );
        if w > 1 {
            assert_ne!(&gd, l, "the synced backward changed the local gradient");
        }
    }
}

fn sampler(g: &ProcessGroup) {
    let s = DistributedSampler::new(11, g.rank(), g.world_size())
        .unwrap()
        .seed(3);
    let mine = Tensor::from_vec(
        s.indices(2).into_iter().map(|i| i as i32).collect(),
        &[s.indices(2).len()],
        &Device::cpu(),
    )
    .unwrap();
    let mut all: Vec<i32> = g
        .all_gather(&mine)
        .unwrap()
        .iter()
        .flat_map(|t| t.to_vec::<i32>().unwrap())
        .collect();
    // Every rank has the same count (11 padded to a multiple of the world size by repeating
    // the epoch's first indices), and together they cover the set.
    let per = 11usize.div_ceil(g.world_size());
    assert_eq!(s.indices(2).len(), per, "rank {}", g.rank());
    assert_eq!(all.len(), per * g.world_size());
    all.sort();
    all.dedup();
    assert_eq!(
        all,
        (0..11).collect::<Vec<i32>>(),
        "the shards cover the set"
    );
}

/// Ranks that make different calls: each rank a broadcast root, different reduce ops, one rank
/// in a barrier while the others reduce. Every rank gets `Error::Distributed` naming the
/// disagreement (no hang, no wrong values), and the group stays usable.
fn mismatched_calls(g: &ProcessGroup) {
    let (rank, w) = (g.rank(), g.world_size());
    if w < 2 {
        return;
    }
    let cpu = Device::cpu();
    let t = Tensor::from_vec(vec![rank as f32; 4], &[4], &cpu).unwrap();
    let expect = |r: wgtensor::Result<()>, needle: &str| match r {
        Err(Error::Distributed { message, .. }) => assert!(
            message.contains(needle) && message.contains("different calls"),
            "rank {rank}: {message}"
        ),
        other => panic!("rank {rank}: expected Error::Distributed, got {other:?}"),
    };
    expect(g.broadcast(&t, rank).map(drop), "with root");
    let op = if rank == 0 {
        ReduceOp::Sum
    } else {
        ReduceOp::Max
    };
    expect(g.all_reduce(&t, op).map(drop), "with op");
    let r = if rank == 0 {
        g.barrier()
    } else {
        g.all_reduce(&t, ReduceOp::Sum).map(drop)
    };
    expect(r, "barrier");
    // The mismatches were found before any data moved: the group still works.
    let sum = g
        .all_reduce(&t, ReduceOp::Sum)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(sum, vec![(w * (w - 1) / 2) as f32; 4]);
}

/// all_gather with uneven shards many times over, with allocations in between that would
/// reuse freed count and displacement arrays: every result exact.
fn uneven_all_gather_keeps_its_arrays(g: &ProcessGroup) {
    let (rank, w) = (g.rank(), g.world_size());
    let cpu = Device::cpu();
    for round in 0..50usize {
        let rows = (rank + round) % 3;
        let mine: Vec<i32> = (0..rows * 2)
            .map(|i| (rank * 1000 + round * 10 + i) as i32)
            .collect();
        let t = Tensor::from_vec(mine, &[rows, 2], &cpu).unwrap();
        let work = g.all_gather_async(&t).unwrap();
        // Fresh small allocations of the arrays' size, filled with garbage.
        let junk: Vec<Vec<i32>> = (0..64).map(|_| vec![-7; 2 * w]).collect();
        let got = work.wait().unwrap();
        drop(junk);
        for (r, part) in got.iter().enumerate() {
            let n = (r + round) % 3;
            let want: Vec<i32> = (0..n * 2)
                .map(|i| (r * 1000 + round * 10 + i) as i32)
                .collect();
            assert_eq!(part.shape(), &[n, 2]);
            assert_eq!(
                part.to_vec::<i32>().unwrap(),
                want,
                "round {round} rank {r}"
            );
        }
    }
}

/// The last rank leaves without joining the collective; the others must get the typed error
/// within the timeout instead of hanging.
fn peer_exits(g: ProcessGroup) -> (usize, usize) {
    let (rank, w) = (g.rank(), g.world_size());
    g.barrier().unwrap();
    if rank == w - 1 {
        drop(g); // finalizes MPI and returns, never joining the all_reduce below
        println!("rank {rank}: left early");
        return (1, 0);
    }
    let t = Tensor::ones(&[4], DType::F32, &Device::cpu()).unwrap();
    let started = Instant::now();
    let res = g.all_reduce(&t, ReduceOp::Sum);
    let waited = started.elapsed();
    let ok = matches!(&res, Err(Error::Distributed { op: "all_reduce", rank: r, message })
        if *r == rank && message.contains("WGTENSOR_DIST_TIMEOUT"))
        && waited >= g.timeout()
        && waited < g.timeout() * 2 + std::time::Duration::from_secs(5);
    println!("rank {rank}: after {waited:?}: {res:?}");
    // The group is unusable now; drop it (finalize) like a program that reports and exits.
    drop(g);
    if ok {
        (1, 0)
    } else {
        (0, 1)
    }
}

fn main() {
    let mode = std::env::var("WGTENSOR_DIST_TEST").unwrap_or_default();
    let group = ProcessGroup::init().expect("MPI initializes");
    let (rank, w) = (group.rank(), group.world_size());
    assert!(group.local_rank() < group.local_size());
    let (passed, failed) = if mode == "peer_exits" {
        peer_exits(group)
    } else {
        let g = Arc::new(group);
        let mut devices = vec![Device::cpu()];
        if wgtensor::gpu_count() > 0 {
            devices.push(Device::gpu(0).expect("gpu:0 opens"));
        } else if std::env::var("WGTENSOR_REQUIRE_GPU").is_ok_and(|v| v == "1") {
            panic!("WGTENSOR_REQUIRE_GPU=1 but there is no GPU adapter");
        }
        let mut checks: Vec<(String, Box<dyn Fn()>)> = Vec::new();
        for d in &devices {
            let (g1, d1) = (g.clone(), d.clone());
            checks.push((
                format!("collectives on {d}"),
                Box::new(move || collectives(&g1, &d1)),
            ));
            let (g2, d2) = (g.clone(), d.clone());
            checks.push((
                format!("ddp on {d}"),
                Box::new(move || ddp_matches_single_process(&g2, &d2)),
            ));
        }
        let g3 = g.clone();
        checks.push(("sampler".into(), Box::new(move || sampler(&g3))));
        let g4 = g.clone();
        checks.push((
            "mismatched calls".into(),
            Box::new(move || mismatched_calls(&g4)),
        ));
        let g5 = g.clone();
        checks.push((
            "uneven all_gather".into(),
            Box::new(move || uneven_all_gather_keeps_its_arrays(&g5)),
        ));
        let (mut passed, mut failed) = (0, 0);
        for (name, check) in &checks {
            match std::panic::catch_unwind(AssertUnwindSafe(check)) {
                Ok(()) => {
                    passed += 1;
                    println!("rank {rank}/{w}: {name} ... ok");
                }
                Err(_) => {
                    failed += 1;
                    println!("rank {rank}/{w}: {name} ... FAILED");
                }
            }
        }
        (passed, failed)
    };
    println!("rank {rank}/{w}: {passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}
