//! PyTorch's `DistributedSampler`: each rank iterates over its own shard of the indices.

use crate::{Error, Result};

/// Splits the indices `0..len` of a data set between `world_size` ranks: every rank gets a
/// disjoint shard (rank `r` takes positions `r, r + world, r + 2 world, ...` of the epoch's
/// permutation), so the shards together cover the data set once. The permutation is drawn from
/// `seed + epoch`, identical on every rank; [`DistributedSampler::shuffle`]`(false)` keeps the
/// natural order. Every rank gets the same number of indices, so all ranks run the same number
/// of steps: `ceil(len / world)`, the permutation padded by repeating its first indices (as
/// PyTorch does), or with [`DistributedSampler::drop_last`] `len / world` (the tail dropped).
///
/// ```
/// use wgtensor::distributed::DistributedSampler;
/// let s = DistributedSampler::new(5, 1, 2)?.shuffle(false);
/// assert_eq!(s.indices(0), vec![1, 3, 0]); // 5 padded to 6 with the first index
/// let all: Vec<usize> = (0..2)
///     .flat_map(|r| DistributedSampler::new(5, r, 2).unwrap().indices(3))
///     .collect();
/// let mut sorted = all.clone();
/// sorted.sort();
/// sorted.dedup();
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

    setters! {
        /// Sets the seed of the permutation (the same on every rank).
        ///
        /// ```
        /// use wgtensor::distributed::DistributedSampler;
        /// let a = DistributedSampler::new(100, 0, 2)?.seed(1).indices(0);
        /// let b = DistributedSampler::new(100, 0, 2)?.seed(2).indices(0);
        /// assert_ne!(a, b);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        seed: u64;
        /// Whether each epoch permutes the indices (default true).
        ///
        /// ```
        /// use wgtensor::distributed::DistributedSampler;
        /// assert_eq!(DistributedSampler::new(4, 0, 2)?.shuffle(false).indices(9), vec![0, 2]);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        shuffle: bool;
        /// Whether to drop the last `len % world_size` indices of each epoch so every rank gets
        /// the same count (default false).
        ///
        /// ```
        /// use wgtensor::distributed::DistributedSampler;
        /// let s = DistributedSampler::new(5, 0, 2)?.shuffle(false).drop_last(true);
        /// assert_eq!(s.indices(0), vec![0, 2]);
        /// # Ok::<(), wgtensor::Error>(())
        /// ```
        drop_last: bool;
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
        } else if !all.is_empty() {
            // Every rank must run the same number of steps, or DDP's collectives hang at the
            // end of the epoch: pad to a multiple of the world size by repeating indices from
            // the start (PyTorch's padding, cycling when the padding is longer than the data).
            let total = self.len.div_ceil(self.world_size) * self.world_size;
            let pad: Vec<usize> = all.iter().copied().cycle().take(total - self.len).collect();
            all.extend(pad);
        }
        all.into_iter()
            .skip(self.rank)
            .step_by(self.world_size)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::DistributedSampler;

    /// 10 samples over 3 ranks: 4 each (PyTorch pads 10 to 12 with the first 2 indices of the
    /// epoch's order); uneven shards would leave one rank waiting in a collective.
    #[test]
    fn every_rank_gets_the_same_count_padded_like_pytorch() {
        for (len, world) in [(10, 3), (11, 2), (2, 5), (1, 4), (12, 3), (0, 3)] {
            for shuffle in [false, true] {
                let shards: Vec<Vec<usize>> = (0..world)
                    .map(|r| {
                        let s = DistributedSampler::new(len, r, world).unwrap().seed(4);
                        s.shuffle(shuffle).indices(1)
                    })
                    .collect();
                let per = len.div_ceil(world);
                for s in &shards {
                    assert_eq!(s.len(), per, "{len} over {world}: {shards:?}");
                }
                // Interleaved back, the shards are the epoch's order followed by its start.
                let order = if shuffle {
                    crate::random::permutation(len, 4, 1)
                } else {
                    (0..len).collect()
                };
                let merged: Vec<usize> = (0..per * world)
                    .map(|i| shards[i % world][i / world])
                    .collect();
                let want: Vec<usize> = order.iter().copied().cycle().take(per * world).collect();
                assert_eq!(merged, want, "{len} over {world}");
                let dropped: Vec<usize> = (0..world)
                    .map(|r| {
                        DistributedSampler::new(len, r, world)
                            .unwrap()
                            .drop_last(true)
                    })
                    .map(|s| s.indices(1).len())
                    .collect();
                assert_eq!(dropped, vec![len / world; world]);
            }
        }
    }
}
