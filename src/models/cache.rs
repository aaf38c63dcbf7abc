//! The KV cache: per layer, keys and values of every position so far, preallocated on the
//! model's device up to a capacity.

use crate::{DType, Device, Error, Result, Tensor};

/// Keys and values of the positions a model has seen, per layer, each a `[capacity, kv_heads,
/// head_dim]` f32 tensor on the model's device, allocated once. A forward step writes its
/// positions in place (one contiguous block per layer and tensor) and attends over the first
/// [`KvCache::len`] positions.
///
/// ```
/// use wgtensor::models::KvCache;
/// use wgtensor::Device;
/// let cache = KvCache::new(2, 16, 2, 8, &Device::cpu())?;
/// assert_eq!((cache.len(), cache.capacity()), (0, 16));
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub struct KvCache {
    pub(crate) k: Vec<Tensor>,
    pub(crate) v: Vec<Tensor>,
    len: usize,
    capacity: usize,
    /// The caches of a batched decode step, one per sequence
    /// ([`crate::models::CausalLM::forward_batch`]): a cache holding these has no layers of
    /// its own, and row `i` of the step attends over `batch[i]`. Empty for a plain cache.
    pub(crate) batch: Vec<KvCache>,
}

impl KvCache {
    /// An empty cache for `layers` layers of `kv_heads` heads of `head_dim`, holding up to
    /// `capacity` positions, on `device`.
    ///
    /// # Errors
    /// Allocation errors (out of memory names the bytes).
    pub fn new(
        layers: usize,
        capacity: usize,
        kv_heads: usize,
        head_dim: usize,
        device: &Device,
    ) -> Result<KvCache> {
        let shape = [capacity, kv_heads, head_dim];
        let make = || {
            (0..layers)
                .map(|_| Tensor::zeros(&shape, DType::F32, device))
                .collect::<Result<Vec<_>>>()
        };
        Ok(KvCache {
            k: make()?,
            v: make()?,
            len: 0,
            capacity,
            batch: Vec::new(),
        })
    }

    /// A cache that holds no layers, no positions and no memory: the placeholder a batched
    /// step leaves while it borrows a sequence's cache.
    pub(crate) fn empty() -> KvCache {
        KvCache {
            k: Vec::new(),
            v: Vec::new(),
            len: 0,
            capacity: 0,
            batch: Vec::new(),
        }
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions the cache can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Forgets every position (the memory stays allocated for the next sequence).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Keeps the first `len` positions only (to rewind a generation).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `len` is more than the cache holds.
    pub fn truncate(&mut self, len: usize) -> Result<()> {
        if len > self.len {
            return Err(Error::InvalidArgument {
                op: "KvCache::truncate",
                message: format!("cannot keep {len} positions of {}", self.len),
            });
        }
        self.len = len;
        Ok(())
    }

    /// Checks that this cache was made for a model of `layers` layers of `kv_heads` key-value
    /// heads of `head_dim` on `device` (the f32 cache [`KvCache::new`] and
    /// [`crate::models::CausalLM::new_cache`] make); `model` names the model in the message.
    pub(crate) fn check_fits(
        &self,
        layers: usize,
        kv_heads: usize,
        head_dim: usize,
        device: &Device,
        model: &str,
    ) -> Result<()> {
        let (got_kvh, got_hd) = self
            .k
            .first()
            .map_or((kv_heads, head_dim), |t| (t.shape()[1], t.shape()[2]));
        let got_dev = self.k.first().map(|t| t.device().clone());
        let fits = self.k.len() == layers
            && self.v.len() == layers
            && (got_kvh, got_hd) == (kv_heads, head_dim)
            && self.k.iter().chain(&self.v).all(|t| {
                t.dtype() == DType::F32
                    && t.device() == device
                    && t.shape() == [self.capacity, kv_heads, head_dim]
            });
        if fits {
            return Ok(());
        }
        let dtype = self.k.first().map_or(DType::F32, Tensor::dtype);
        Err(Error::InvalidArgument {
            op: "forward",
            message: format!(
                "the KV cache holds {} layers of {got_kvh} key-value heads x {got_hd} ({dtype} on                  {}), but {model} needs {layers} layers of {kv_heads} x {head_dim} (f32 on                  {device}); make the cache with this model's new_cache",
                self.k.len(),
                got_dev.map_or_else(|| "no device".to_string(), |d| d.to_string()),
            ),
        })
    }

    /// Checks that `n` more positions fit.
    pub(crate) fn reserve(&self, n: usize) -> Result<()> {
        if self
            .len
            .checked_add(n)
            .is_none_or(|end| end > self.capacity)
        {
            return Err(Error::InvalidArgument {
                op: "forward",
                message: format!(
                    "{n} new position(s) after {} do not fit the KV cache of {} positions (the \
                     model's context); shorten the prompt or the generation",
                    self.len, self.capacity
                ),
            });
        }
        Ok(())
    }

    /// Writes layer `layer`'s keys and values `[n, kv_heads, head_dim]` at the current end.
    pub(crate) fn write(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<()> {
        let at = self.len;
        self.k[layer].write_rows_(at, k)?;
        self.v[layer].write_rows_(at, v)
    }

    pub(crate) fn advance(&mut self, n: usize) {
        self.len += n;
    }
}
