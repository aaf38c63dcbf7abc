//! The [`DataLoader`]: batching, seeded shuffling and a prefetching worker thread.

use super::{Dataset, TensorDataset};
use crate::{Device, Error, Result, Tensor};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

type CollateFn<I, B> = dyn Fn(Vec<I>, &Device) -> Result<B> + Send + Sync;

/// Time spent preparing batches on the worker and waiting for them in `next()`, summed over
/// every batch delivered so far (all epochs).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LoaderStats {
    /// Batches delivered by `next()`.
    pub batches: u64,
    /// Worker time: reading the samples, collating, uploading and waiting for the upload to
    /// complete on the device.
    pub prepare_time: Duration,
    /// Time the consumer spent blocked in `next()`.
    pub wait_time: Duration,
    /// The longest single `next()` wait.
    pub max_wait: Duration,
}

/// Batches of a [`Dataset`], built on a worker thread and placed on a device before the
/// training loop asks for them (PyTorch's `DataLoader` with `pin_memory` and a prefetching
/// worker).
///
/// Each [`DataLoader::iter`] is one epoch: the indices `0..len` (shuffled when a seed is set,
/// with a different but reproducible order per epoch), cut into batches of `batch_size` (the
/// last one shorter unless `drop_last`). A worker thread reads the samples, runs the collate
/// function, which creates the batch's tensors on the device, and waits until the device holds
/// them; up to `prefetch` finished batches queue ahead of the consumer (default 2). So a step
/// that calls `next()` gets a batch that is already resident and does not wait for its upload
/// unless the step is faster than preparing a batch ([`DataLoader::stats`] tells).
///
/// ```
/// use wgtensor::data::{DataLoader, Dataset};
/// use wgtensor::{Device, Tensor};
/// struct Range(usize);
/// impl Dataset for Range {
///     type Item = f32;
///     fn len(&self) -> usize { self.0 }
///     fn get(&self, i: usize) -> wgtensor::Result<f32> { Ok(i as f32) }
/// }
/// let mut loader = DataLoader::with_collate(Range(10), 4, &Device::best(), |items, dev| {
///     let n = items.len();
///     Tensor::from_vec(items, &[n], dev)
/// })?
/// .shuffle(7)
/// .drop_last(true);
/// let mut seen: Vec<f32> = Vec::new();
/// for batch in loader.iter() {
///     seen.extend(batch?.to_vec::<f32>()?);
/// }
/// assert_eq!(seen.len(), 8); // two full batches; the 2 left over are dropped
/// let order: Vec<f32> = loader.indices(0).iter().take(8).map(|&i| i as f32).collect();
/// assert_eq!(seen, order);   // the seeded order of epoch 0
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub struct DataLoader<D: Dataset, B> {
    dataset: Arc<D>,
    batch_size: usize,
    device: Device,
    seed: Option<u64>,
    drop_last: bool,
    prefetch: usize,
    collate: Arc<CollateFn<D::Item, B>>,
    epoch: u64,
    stats: Arc<Mutex<LoaderStats>>,
}

/// Stacks the rows of a [`TensorDataset`] batch along dim 0 on the host, one tensor per column,
/// and moves each to `device` (the default collate of [`DataLoader::new`]).
///
/// # Errors
/// [`Error::InvalidArgument`] for an empty batch; the errors of `cat` and `to`.
pub fn stack_collate(items: Vec<Vec<Tensor>>, device: &Device) -> Result<Vec<Tensor>> {
    let Some(first) = items.first() else {
        return Err(Error::InvalidArgument {
            op: "stack_collate",
            message: "empty batch".into(),
        });
    };
    (0..first.len())
        .map(|col| {
            let rows: Vec<&Tensor> = items.iter().map(|row| &row[col]).collect();
            Tensor::cat(&rows, 0)?.to(device)
        })
        .collect()
}

impl DataLoader<TensorDataset, Vec<Tensor>> {
    /// A loader over a [`TensorDataset`] whose batches are its tensors' rows stacked along
    /// dim 0, on `device` ([`stack_collate`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `batch_size` is 0.
    pub fn new(dataset: TensorDataset, batch_size: usize, device: &Device) -> Result<Self> {
        DataLoader::with_collate(dataset, batch_size, device, stack_collate)
    }
}

impl<D: Dataset, B: Send + 'static> DataLoader<D, B> {
    /// A loader whose batches are `collate(samples, device)`; `collate` should create its
    /// tensors on `device` (it runs on the worker thread).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `batch_size` is 0.
    pub fn with_collate(
        dataset: D,
        batch_size: usize,
        device: &Device,
        collate: impl Fn(Vec<D::Item>, &Device) -> Result<B> + Send + Sync + 'static,
    ) -> Result<Self> {
        if batch_size == 0 {
            return Err(Error::InvalidArgument {
                op: "DataLoader::new",
                message: "batch_size must be at least 1".into(),
            });
        }
        Ok(DataLoader {
            dataset: Arc::new(dataset),
            batch_size,
            device: device.clone(),
            seed: None,
            drop_last: false,
            prefetch: 2,
            collate: Arc::new(collate),
            epoch: 0,
            stats: Arc::new(Mutex::new(LoaderStats::default())),
        })
    }

    /// Shuffles every epoch, reproducibly: epoch `e` of seed `s` always has the same order.
    #[must_use]
    pub fn shuffle(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Drops the last, incomplete batch of each epoch (default: keep it).
    #[must_use]
    pub fn drop_last(mut self, drop_last: bool) -> Self {
        self.drop_last = drop_last;
        self
    }

    /// Batches prepared ahead of the consumer (default 2, at least 1). Each holds device
    /// memory until it is consumed.
    #[must_use]
    pub fn prefetch(mut self, batches: usize) -> Self {
        self.prefetch = batches.max(1);
        self
    }

    /// The dataset.
    pub fn dataset(&self) -> &D {
        &self.dataset
    }

    /// Batches per epoch.
    pub fn len(&self) -> usize {
        let n = self.dataset.len();
        if self.drop_last {
            n / self.batch_size
        } else {
            n.div_ceil(self.batch_size)
        }
    }

    /// Whether an epoch yields no batch.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Epochs started so far by [`DataLoader::iter`] (set it with [`DataLoader::set_epoch`]
    /// to resume a run with the same orders).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Sets the number of the next epoch.
    pub fn set_epoch(&mut self, epoch: u64) {
        self.epoch = epoch;
    }

    /// The sample order of epoch `epoch`: `0..len` without a seed, else a Fisher-Yates shuffle
    /// driven by wgtensor's Philox generator keyed with `seed`, counter starting at `epoch`'s
    /// block (independent of the global generator, so loading never shifts `rand` streams).
    pub fn indices(&self, epoch: u64) -> Vec<usize> {
        match self.seed {
            Some(seed) => crate::random::permutation(self.dataset.len(), seed, epoch),
            None => (0..self.dataset.len()).collect(),
        }
    }

    /// Time spent preparing and waiting for batches so far.
    pub fn stats(&self) -> LoaderStats {
        *self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts the next epoch: a worker thread begins preparing its batches at once.
    pub fn iter(&mut self) -> Batches<B> {
        let order = self.indices(self.epoch);
        self.epoch += 1;
        let mut chunks: Vec<Vec<usize>> = order
            .chunks(self.batch_size)
            .map(<[usize]>::to_vec)
            .collect();
        if self.drop_last && chunks.last().is_some_and(|c| c.len() < self.batch_size) {
            chunks.pop();
        }
        let (tx, rx) = sync_channel::<(Result<B>, Duration)>(self.prefetch - 1);
        let (dataset, collate, device) = (
            self.dataset.clone(),
            self.collate.clone(),
            self.device.clone(),
        );
        let worker = std::thread::Builder::new()
            .name("wgtensor-data-loader".into())
            .spawn(move || {
                for chunk in chunks {
                    let start = Instant::now();
                    let batch = chunk
                        .iter()
                        .map(|&i| {
                            guarded("Dataset::get", &format!("sample {i}"), || dataset.get(i))
                        })
                        .collect::<Result<Vec<_>>>()
                        .and_then(|items| {
                            let what = format!("the batch of samples {chunk:?}");
                            guarded("DataLoader collate", &what, || collate(items, &device))
                        })
                        // The batch is resident once the device has finished its uploads. Only
                        // this thread's errors are taken: the training thread's stay its own.
                        .and_then(|b| device.wait_own_work("DataLoader").map(|()| b));
                    let failed = batch.is_err();
                    // A closed channel means the consumer dropped the epoch: stop.
                    if tx.send((batch, start.elapsed())).is_err() || failed {
                        break;
                    }
                }
            });
        match worker {
            Ok(handle) => Batches {
                rx: Some(rx),
                worker: Some(handle),
                stats: self.stats.clone(),
                spawn_error: None,
            },
            Err(e) => Batches {
                rx: None,
                worker: None,
                stats: self.stats.clone(),
                spawn_error: Some(Error::InvalidArgument {
                    op: "DataLoader::iter",
                    message: format!("cannot start the loader's worker thread: {e}"),
                }),
            },
        }
    }
}

/// Runs user code (`Dataset::get`, the collate function) on the worker, turning a panic into
/// an error that carries its message and what was being read, so the epoch reports it instead
/// of ending early.
fn guarded<T>(op: &'static str, what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        Err(Error::InvalidArgument {
            op,
            message: format!("panicked on {what}: {}", panic_text(&*p)),
        })
    })
}

/// The message of a panic payload.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// One epoch of a [`DataLoader`]: an iterator of batches (or of the error that stopped the
/// epoch, after which it ends). A `Dataset::get` or collate function that returns an error or
/// panics ends the epoch with an `Err` (a panic's carries its message and the sample index);
/// the next epoch starts afresh. Dropping it stops the worker.
pub struct Batches<B> {
    rx: Option<Receiver<(Result<B>, Duration)>>,
    worker: Option<JoinHandle<()>>,
    stats: Arc<Mutex<LoaderStats>>,
    spawn_error: Option<Error>,
}

impl<B> Iterator for Batches<B> {
    type Item = Result<B>;

    fn next(&mut self) -> Option<Result<B>> {
        if let Some(e) = self.spawn_error.take() {
            return Some(Err(e));
        }
        let start = Instant::now();
        let Ok((batch, prepare)) = self.rx.as_ref()?.recv() else {
            // The worker is gone: it finished the epoch, or died outside the guarded calls.
            self.rx = None;
            let died = self.worker.take().and_then(|h| h.join().err());
            return died.map(|p| {
                Err(Error::InvalidArgument {
                    op: "DataLoader",
                    message: format!("the loader's worker thread panicked: {}", panic_text(&*p)),
                })
            });
        };
        let wait = start.elapsed();
        let mut s = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        s.batches += 1;
        s.prepare_time += prepare;
        s.wait_time += wait;
        s.max_wait = s.max_wait.max(wait);
        Some(batch)
    }
}

impl<B> Drop for Batches<B> {
    fn drop(&mut self) {
        // Closing the channel first unblocks a worker waiting to hand over a batch.
        self.rx = None;
        if let Some(h) = self.worker.take() {
            let _ = h.join();
        }
    }
}
