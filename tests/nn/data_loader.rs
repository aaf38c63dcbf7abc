//! DataLoader: every sample exactly once per epoch, in the seeded order (the same for the same
//! seed, another for another epoch), batches equal to the source rows on every device,
//! drop_last, errors that end the epoch, and a prefetching worker whose batches are resident
//! before `next()` asks for them (the step does not wait for its batch's upload).

use crate::common;

use common::{data, devices, values};
use std::time::Duration;
use wgtensor::data::{DataLoader, Dataset, TensorDataset};
use wgtensor::{Device, Error, Result, Tensor};

fn dataset(n: usize) -> (TensorDataset, Vec<f32>) {
    let cpu = Device::cpu();
    let x = data(n * 3, 42, 1.0);
    let xs = Tensor::from_vec(x.clone(), &[n, 3], &cpu).unwrap();
    let ids = Tensor::from_vec((0..n as u32).collect::<Vec<_>>(), &[n], &cpu).unwrap();
    (TensorDataset::new(vec![xs, ids]).unwrap(), x)
}

#[test]
fn batches_are_the_rows_in_seeded_order_on_every_device() {
    let n = 23;
    for dev in devices() {
        for drop_last in [false, true] {
            let (ds, x) = dataset(n);
            let mut loader = DataLoader::new(ds, 5, &dev)
                .unwrap()
                .shuffle(1234)
                .drop_last(drop_last);
            assert_eq!(loader.len(), if drop_last { 4 } else { 5 });
            for epoch in 0..2 {
                let order = loader.indices(epoch);
                let mut seen = Vec::new();
                let mut sizes = Vec::new();
                for batch in loader.iter() {
                    let batch = batch.unwrap();
                    assert_eq!(batch[0].device(), &dev, "batch placed on {dev}");
                    let ids = batch[1].to_vec::<u32>().unwrap();
                    let rows = values(&batch[0]);
                    assert_eq!(batch[0].shape(), &[ids.len(), 3]);
                    for (k, &id) in ids.iter().enumerate() {
                        let i = id as usize;
                        assert_eq!(&rows[k * 3..k * 3 + 3], &x[i * 3..i * 3 + 3], "row {i}");
                    }
                    sizes.push(ids.len());
                    seen.extend(ids.into_iter().map(|i| i as usize));
                }
                let kept = if drop_last { 20 } else { 23 };
                assert_eq!(
                    seen,
                    order[..kept],
                    "epoch {epoch} follows indices({epoch})"
                );
                let mut want = vec![5; 4];
                if !drop_last {
                    want.push(3);
                }
                assert_eq!(sizes, want);
            }
            assert_eq!(loader.stats().batches, 2 * loader.len() as u64);
        }
    }
}

#[test]
fn shuffling_is_deterministic_for_a_seed() {
    let make = |seed| {
        DataLoader::new(dataset(50).0, 8, &Device::cpu())
            .unwrap()
            .shuffle(seed)
    };
    let (a, b, c) = (make(7), make(7), make(8));
    let sorted = |mut v: Vec<usize>| {
        v.sort();
        v
    };
    assert_eq!(a.indices(0), b.indices(0));
    assert_eq!(a.indices(3), b.indices(3));
    assert_ne!(a.indices(0), a.indices(1), "a new order every epoch");
    assert_ne!(a.indices(0), c.indices(0), "another seed, another order");
    assert_eq!(
        sorted(a.indices(0)),
        (0..50).collect::<Vec<_>>(),
        "a permutation"
    );
    let plain = DataLoader::new(dataset(5).0, 2, &Device::cpu()).unwrap();
    assert_eq!(
        plain.indices(9),
        vec![0, 1, 2, 3, 4],
        "no shuffle without a seed"
    );
    // Two loaders with one seed yield the same batches, epoch after epoch.
    let (mut a, mut b) = (make(7), make(7));
    for _ in 0..2 {
        let ids = |l: &mut DataLoader<TensorDataset, Vec<Tensor>>| -> Vec<u32> {
            l.iter()
                .flat_map(|b| b.unwrap()[1].to_vec::<u32>().unwrap())
                .collect()
        };
        assert_eq!(ids(&mut a), ids(&mut b));
    }
}

/// Samples that take `delay` to produce (decoding, augmentation).
struct Slow {
    n: usize,
    delay: Duration,
    fail_at: Option<usize>,
}

impl Dataset for Slow {
    type Item = Vec<f32>;
    fn len(&self) -> usize {
        self.n
    }
    fn get(&self, i: usize) -> Result<Vec<f32>> {
        if Some(i) == self.fail_at {
            return Err(Error::InvalidArgument {
                op: "Slow::get",
                message: format!("sample {i} is corrupt"),
            });
        }
        std::thread::sleep(self.delay);
        Ok(data(1024, i as u64, 1.0))
    }
}

fn slow_loader(dev: &Device, n: usize, fail_at: Option<usize>) -> DataLoader<Slow, Tensor> {
    let ds = Slow {
        n,
        delay: Duration::from_millis(5),
        fail_at,
    };
    DataLoader::with_collate(ds, 4, dev, |items, dev| {
        let rows = items.len();
        let flat: Vec<f32> = items.into_iter().flatten().collect();
        Tensor::from_vec(flat, &[rows, 1024], dev)
    })
    .unwrap()
}

/// The events of one epoch, in the order they happened: the collate function (on the worker)
/// logs `Prepared(k)` when batch `k` is on the device, the step logs `Asked(k)` just before
/// `next()` for batch `k`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Event {
    Prepared(usize),
    Asked(usize),
}

/// The prefetching worker prepares batch k+1 while the step holds batch k: for every batch
/// after the first, `Prepared(k)` comes before `Asked(k)` in the event log, counted, so the
/// step never waits for an upload. No clock is read: the step blocks on a condition variable
/// until the worker says it prepared the next batch, which a loader without prefetching never
/// does while the step runs (the wait's 120 s bound only turns such a hang into a failure).
#[test]
fn next_returns_a_batch_prepared_while_the_step_computed() {
    use std::sync::{Arc, Condvar, Mutex};
    for dev in devices() {
        let log = Arc::new(Mutex::new(Vec::<Event>::new()));
        // How many batches the worker has prepared, and the signal it gives after each.
        let prepared = Arc::new((Mutex::new(0usize), Condvar::new()));
        let ds = Slow {
            n: 24,
            delay: Duration::ZERO,
            fail_at: None,
        };
        let (log_w, prepared_w) = (log.clone(), prepared.clone());
        let mut loader = DataLoader::with_collate(ds, 4, &dev, move |items, dev| {
            let rows = items.len();
            let flat: Vec<f32> = items.into_iter().flatten().collect();
            let t = Tensor::from_vec(flat, &[rows, 1024], dev)?;
            let (count, signal) = &*prepared_w;
            let mut count = count.lock().unwrap();
            log_w.lock().unwrap().push(Event::Prepared(*count));
            *count += 1;
            signal.notify_all();
            Ok(t)
        })
        .unwrap();
        let mut batches = loader.iter();
        let mut k = 0;
        loop {
            log.lock().unwrap().push(Event::Asked(k));
            let Some(batch) = batches.next() else { break };
            let batch = batch.unwrap();
            assert_eq!(batch.device(), &dev);
            assert_eq!(batch.shape(), &[4, 1024]);
            let want = data(1024, 4 * k as u64, 1.0);
            assert_eq!(values(&batch.narrow(0, 0, 1).unwrap()), want, "batch {k}");
            // The step: it lasts until the worker has prepared the next batch (the last batch
            // has none).
            let (count, signal) = &*prepared;
            let (held, wait) = signal
                .wait_timeout_while(count.lock().unwrap(), Duration::from_secs(120), |n| {
                    k + 1 < 6 && *n < k + 2
                })
                .unwrap();
            drop(held);
            assert!(
                !wait.timed_out(),
                "on {dev} the worker did not prepare batch {} while the step held batch {k}",
                k + 1
            );
            k += 1;
        }
        drop(batches);
        assert_eq!(k, 6, "24 samples in batches of 4");
        let log = log.lock().unwrap().clone();
        let at = |e: Event| log.iter().position(|x| *x == e).unwrap();
        let ahead = (1..6)
            .filter(|&k| at(Event::Prepared(k)) < at(Event::Asked(k)))
            .count();
        assert_eq!(
            ahead, 5,
            "on {dev}: batches 1..6 prepared before next() asked for them: {ahead} of 5; events {log:?}"
        );
        assert_eq!(loader.stats().batches, 6);
    }
}

#[test]
fn errors_end_the_epoch_and_bad_arguments_are_errors() {
    let cpu = Device::cpu();
    let mut loader = slow_loader(&cpu, 12, Some(6)); // batch 1 holds sample 6
    let results: Vec<Result<Tensor>> = loader.iter().collect();
    assert_eq!(
        results.len(),
        2,
        "a good batch, then the error, then the end"
    );
    assert!(results[0].is_ok());
    match &results[1] {
        Err(Error::InvalidArgument { message, .. }) => assert!(message.contains("sample 6")),
        other => panic!("expected the dataset's error, got {other:?}"),
    }
    // Dropping an epoch half-way stops its worker (this returns instead of hanging).
    let mut loader = slow_loader(&cpu, 400, None);
    let mut it = loader.iter();
    assert!(it.next().unwrap().is_ok());
    drop(it);

    assert!(DataLoader::new(dataset(4).0, 0, &cpu).is_err());
    let a = Tensor::zeros(&[3, 2], wgtensor::DType::F32, &cpu).unwrap();
    let b = Tensor::zeros(&[4], wgtensor::DType::F32, &cpu).unwrap();
    match TensorDataset::new(vec![a, b]) {
        Err(Error::InvalidArgument { message, .. }) => {
            assert!(
                message.contains("4 rows") && message.contains("has 3"),
                "{message}"
            )
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    assert!(TensorDataset::new(Vec::new()).is_err());
    let (ds, _) = dataset(3);
    assert!(ds.get(3).is_err());
}

/// Panics at sample `panic_at` (in `get`) while `armed`, or in the collate function.
struct Panicky {
    panic_at: usize,
    armed: std::sync::atomic::AtomicBool,
}

impl Dataset for Panicky {
    type Item = f32;
    fn len(&self) -> usize {
        10
    }
    fn get(&self, i: usize) -> Result<f32> {
        if i == self.panic_at && self.armed.load(std::sync::atomic::Ordering::SeqCst) {
            panic!("decoder bug at {i}");
        }
        Ok(i as f32)
    }
}

/// A `Dataset::get` or collate function that panics ends the epoch with an `Err` carrying the
/// panic message and the sample index (not a silently short epoch), and the next epoch works.
#[test]
fn a_panicking_dataset_or_collate_yields_an_err_and_the_next_epoch_works() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    for dev in devices() {
        let ds = Panicky {
            panic_at: 6,
            armed: AtomicBool::new(true),
        };
        let collate_panics = Arc::new(AtomicBool::new(false));
        let flag = collate_panics.clone();
        let mut loader = DataLoader::with_collate(ds, 4, &dev, move |items: Vec<f32>, dev| {
            if flag.load(Ordering::SeqCst) && items.contains(&9.0) {
                panic!("collate cannot stack {} items", items.len());
            }
            let n = items.len();
            Tensor::from_vec(items, &[n], dev)
        })
        .unwrap();
        let results: Vec<Result<Tensor>> = loader.iter().collect();
        assert_eq!(
            results.len(),
            2,
            "{dev}: a good batch, then the panic's error"
        );
        assert_eq!(
            values(results[0].as_ref().unwrap()),
            vec![0.0, 1.0, 2.0, 3.0]
        );
        match &results[1] {
            Err(Error::InvalidArgument { message, .. }) => assert!(
                message.contains("sample 6") && message.contains("decoder bug at 6"),
                "{dev}: {message}"
            ),
            other => panic!("{dev}: expected the panic as an error, got {other:?}"),
        }
        // The next epoch runs whole once the dataset behaves.
        loader.dataset().armed.store(false, Ordering::SeqCst);
        let all: Vec<f32> = loader.iter().flat_map(|b| values(&b.unwrap())).collect();
        assert_eq!(all, (0..10).map(|i| i as f32).collect::<Vec<_>>(), "{dev}");
        // A panic in the collate function: the error names the batch's samples.
        collate_panics.store(true, Ordering::SeqCst);
        let results: Vec<Result<Tensor>> = loader.iter().collect();
        assert_eq!(
            results.len(),
            3,
            "{dev}: two good batches, then the collate panic"
        );
        match &results[2] {
            Err(Error::InvalidArgument { message, .. }) => assert!(
                message.contains("[8, 9]") && message.contains("cannot stack 2 items"),
                "{dev}: {message}"
            ),
            other => panic!("{dev}: expected the collate panic as an error, got {other:?}"),
        }
        collate_panics.store(false, Ordering::SeqCst);
        assert_eq!(loader.iter().filter(|b| b.is_ok()).count(), 3, "{dev}");
    }
}

/// The worker waits for its own uploads only: an error that escaped wgpu's scopes on the
/// training thread is reported to the training thread, not to the loader's worker.
#[test]
fn the_worker_does_not_take_the_training_threads_errors() {
    for dev in common::gpus() {
        let mut loader = slow_loader(&dev, 8, None);
        wgtensor::testing::inject_uncaptured_error(&dev);
        for (k, batch) in loader.iter().enumerate() {
            assert!(
                batch.is_ok(),
                "{dev}: batch {k} took the trainer's error: {batch:?}"
            );
        }
        match dev.synchronize() {
            Err(Error::Wgpu { message, .. }) => {
                assert!(message.contains("escaped"), "{dev}: {message}")
            }
            other => panic!("{dev}: the training thread lost its error: {other:?}"),
        }
        dev.synchronize().expect("the error is reported once");
    }
}
