//! PyTorch's `DistributedSampler`: each rank iterates over its own shard of the indices.

use crate::{Error, Result};

/// Splits the indices `0..len` of a data set between `world_size` ranks: every rank gets a
/// disjoint shard (rank `r` takes positions `r, r + world, r + 2 world, ...` of the epoch's
/// permutation), so the shards together cover the data set once. The permutation is drawn from
/// `seed + epoch`, identical on every rank; [`DistributedSampler::shuffle`]`(false)` keeps the
/// natural order. With [`DistributedSampler::drop_last`] every rank gets `len / world` indices
/// (the tail is dropped), so all ranks run the same number of steps.
///
/// ```
/// use wgtensor::distributed::DistributedSampler;
/// let s = DistributedSampler::new(5, 1, 2)?.shuffle(false);
/// assert_eq!(s.indices(0), vec![1, 3]);
/// let all: Vec<usize> = (0..2)
///     .flat_map(|r| DistributedSampler::new(5, r, 2).unwrap().indices(3))
///     .collect();
/// let mut sorted = all.clone();
/// sorted.sort();
/// assert_eq!(sorted, vec![0, 1, 2, 3, 4]);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistributedSampler {
    len: usize,
    rank: usize,
    world_size: usize,
    seed: u64,
    shuffle: bool,
    drop_last: bool,
}

impl DistributedSampler {
    /// A sampler over `0..len` for `rank` of `world_size` (shuffled, seed 0, keeping the tail).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for `world_size == 0` or `rank >= world_size`.
    ///
    /// ```
    /// use wgtensor::distributed::DistributedSampler;
    /// assert!(DistributedSampler::new(10, 2, 2).is_err());
    /// assert_eq!(DistributedSampler::new(10, 0, 3)?.indices(0).len(), 4);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn new(len: usize, rank: usize, world_size: usize) -> Result<DistributedSampler> {
        if world_size == 0 || rank >= world_size {
            return Err(Error::InvalidArgument {
                op: "DistributedSampler::new",
                message: format!(
                    "rank {rank} is not in a world of {world_size} ranks; pass the process \
                     group's rank() and world_size()"
                ),
            });
        }
        Ok(DistributedSampler {
            len,
            rank,
            world_size,
            seed: 0,
            shuffle: true,
            drop_last: false,
        })
    }

    /// Sets the seed of the permutation (the same on every rank).
    ///
    /// ```
    /// use wgtensor::distributed::DistributedSampler;
    /// let a = DistributedSampler::new(100, 0, 2)?.seed(1).indices(0);
    /// let b = DistributedSampler::new(100, 0, 2)?.seed(2).indices(0);
    /// assert_ne!(a, b);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    #[must_use]
    pub fn seed(mut self, seed: u64) -> DistributedSampler {
        self.seed = seed;
        self
    }

    /// Whether each epoch permutes the indices (default true).
    ///
    /// ```
    /// use wgtensor::distributed::DistributedSampler;
    /// assert_eq!(DistributedSampler::new(4, 0, 2)?.shuffle(false).indices(9), vec![0, 2]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    #[must_use]
    pub fn shuffle(mut self, shuffle: bool) -> DistributedSampler {
        self.shuffle = shuffle;
        self
    }

    /// Whether to drop the last `len % world_size` indices of each epoch so every rank gets
    /// the same count (default false).
    ///
    /// ```
    /// use wgtensor::distributed::DistributedSampler;
    /// let s = DistributedSampler::new(5, 0, 2)?.shuffle(false).drop_last(true);
    /// assert_eq!(s.indices(0), vec![0, 2]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    #[must_use]
    pub fn drop_last(mut self, drop_last: bool) -> DistributedSampler {
        self.drop_last = drop_last;
        self
    }

    /// This rank's indices for `epoch` (PyTorch's `set_epoch` + iteration).
    ///
    /// ```
    /// use wgtensor::distributed::DistributedSampler;
    /// let s = DistributedSampler::new(100, 0, 4)?;
    /// assert_ne!(s.indices(0), s.indices(1)); // a new permutation every epoch
    /// assert_eq!(s.indices(1), s.indices(1)); // reproducible
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn indices(&self, epoch: u64) -> Vec<usize> {
        let mut all: Vec<usize> = if self.shuffle {
            crate::random::permutation(self.len, self.seed, epoch)
        } else {
            (0..self.len).collect()
        };
        if self.drop_last {
            all.truncate(self.len - self.len % self.world_size);
        }
        all.into_iter()
            .skip(self.rank)
            .step_by(self.world_size)
            .collect()
    }
}
