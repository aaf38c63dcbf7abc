//! Multi-process training (PyTorch's `torch.distributed`): a [`ProcessGroup`] over the MPI world
//! (feature `mpi`), collectives on tensors of any device and dtype, and the
//! [`DistributedSampler`] that gives each rank its own shard of a data set.
//!
//! Every collective is blocking (`all_reduce`) or non-blocking (`all_reduce_async`, returning a
//! [`Work`] to wait on). Before moving data, the ranks exchange each operand's dtype and shape,
//! so a disagreement is reported as the same [`crate::Error::Distributed`] on every rank instead
//! of corrupting memory or hanging. A collective a peer never joins (it exited or crashed) fails
//! with that error once `WGTENSOR_DIST_TIMEOUT` seconds (default 300) have passed.
//!
//! ```
//! use wgtensor::distributed::DistributedSampler;
//! let rank0 = DistributedSampler::new(10, 0, 2)?.seed(7).indices(0);
//! let rank1 = DistributedSampler::new(10, 1, 2)?.seed(7).indices(0);
//! assert_eq!(rank0.len() + rank1.len(), 10);
//! assert!(rank0.iter().all(|i| !rank1.contains(i))); // disjoint
//! # Ok::<(), wgtensor::Error>(())
//! ```

#[cfg(feature = "mpi")]
mod buffers;
#[cfg(feature = "mpi")]
mod group;
mod sampler;

#[cfg(feature = "mpi")]
pub use group::{ProcessGroup, Work};
pub use sampler::DistributedSampler;

/// How a reduction combines the ranks' values (PyTorch's `ReduceOp`).
///
/// `Mean` is the sum divided by the world size, for float dtypes only.
///
/// ```
/// use wgtensor::distributed::ReduceOp;
/// assert_eq!(ReduceOp::Sum.to_string(), "sum");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Elementwise sum.
    Sum,
    /// Elementwise sum divided by the number of ranks (float dtypes).
    Mean,
    /// Elementwise maximum.
    Max,
    /// Elementwise minimum.
    Min,
    /// Elementwise product.
    Product,
}

impl std::fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Product => "product",
        })
    }
}

/// The timeout of a collective: `WGTENSOR_DIST_TIMEOUT` seconds (a positive number), else 300 s.
///
/// ```
/// assert!(wgtensor::distributed::timeout_from_env().as_secs_f64() > 0.0);
/// ```
pub fn timeout_from_env() -> std::time::Duration {
    let secs = std::env::var("WGTENSOR_DIST_TIMEOUT")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0);
    match secs {
        Some(s) => std::time::Duration::from_secs_f64(s),
        None => std::time::Duration::from_secs(300),
    }
}
