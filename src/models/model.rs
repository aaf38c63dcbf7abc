//! The causal language model every family assembles: embedding, the family's decoder blocks,
//! final norm, LM head; `forward` over new positions with a KV cache. Nothing here knows a
//! family: each family file builds the blocks (see `families.rs`).

use super::cache::KvCache;
use super::config::ModelConfig;
use super::layers::{Block, Norm, Step};
use super::rope::Rope;
use super::weight::Weight;
use crate::{DType, Device, Error, Result, Tensor};

/// A pretrained causal language model on a device (see [`super::AutoModel::load`]).
pub struct CausalLM {
    pub(crate) config: ModelConfig,
    pub(crate) device: Device,
    pub(crate) dtype: DType,
    pub(crate) embed: Weight,
    /// The factor on the embedding rows (Gemma's `sqrt(hidden)`, rounded to the model's dtype).
    pub(crate) embed_scale: Option<f32>,
    /// GPT-2's learned positions `[n_positions, hidden]`.
    pub(crate) positions: Option<Tensor>,
    pub(crate) blocks: Vec<Box<dyn Block>>,
    pub(crate) final_norm: Norm,
    /// The output projection (`None`: tied to the embedding).
    pub(crate) lm_head: Option<Weight>,
    /// `cap * tanh(logit / cap)` on the output logits (Gemma 2).
    pub(crate) final_softcap: Option<f32>,
    /// The RoPE tables the blocks' attention picks from (none without RoPE; Gemma 3 has a
    /// local and a global one): built for the caches that ask.
    pub(crate) ropes: Vec<Rope>,
}

impl std::fmt::Debug for CausalLM {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.config;
        write!(
            f,
            "CausalLM({}, {} layers, hidden {}, vocab {}, {} on {})",
            c.model_type, c.num_layers, c.hidden_size, c.vocab_size, self.dtype, self.device
        )
    }
}

impl CausalLM {
    /// A model of `blocks` with RoPE from the config and no embedding scale, learned positions
    /// or soft-cap; a family sets those fields after.
    pub(crate) fn assemble(
        config: &ModelConfig,
        device: &Device,
        dtype: DType,
        embed: Weight,
        blocks: Vec<Box<dyn Block>>,
        final_norm: Norm,
        lm_head: Option<Weight>,
    ) -> CausalLM {
        CausalLM {
            config: config.clone(),
            device: device.clone(),
            dtype,
            embed,
            embed_scale: None,
            positions: None,
            blocks,
            final_norm,
            lm_head,
            final_softcap: None,
            ropes: vec![Rope::new(config)],
        }
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The dtype dense weights are stored in (f32 or f16).
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// What the weight matrices are stored as: `f32`, `f16`, or a ggml block type (`Q8_0`,
    /// `Q4_0`, ...) for quantized files (read from the first layer's q projection).
    pub fn weight_type(&self) -> String {
        let first = self
            .blocks
            .first()
            .and_then(|b| b.linears().first().map(|l| &l.w));
        let w = first.unwrap_or(&self.embed);
        match w {
            Weight::Dense(t) => t.dtype().to_string(),
            Weight::Quantized(q) => format!("{:?}", q.qtype()),
        }
    }

    /// An empty KV cache for this model holding up to `capacity` positions (at most the
    /// model's context length), on its device.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `capacity` exceeds the context length; allocation
    /// errors.
    pub fn new_cache(&self, capacity: usize) -> Result<KvCache> {
        let c = &self.config;
        if capacity == 0 || capacity > c.max_position_embeddings {
            return Err(Error::InvalidArgument {
                op: "new_cache",
                message: format!(
                    "capacity must be in 1..={} (the model's context length), got {capacity}",
                    c.max_position_embeddings
                ),
            });
        }
        // Keys and values, f32, counted against the budget before any is allocated.
        let bytes = [c.num_layers, capacity, c.num_kv_heads, c.head_dim, 4, 2]
            .iter()
            .try_fold(1u64, |a, &x| a.checked_mul(x as u64))
            .unwrap_or(u64::MAX);
        super::fit::check("new_cache", &self.device, bytes)?;
        KvCache::new(
            c.num_layers,
            capacity,
            c.num_kv_heads,
            c.head_dim,
            &self.device,
        )
    }

    /// Bytes of weights on the device.
    pub fn size_in_bytes(&self) -> usize {
        let blocks: usize = self
            .blocks
            .iter()
            .map(|b| {
                b.norms()
                    .into_iter()
                    .map(Norm::size_in_bytes)
                    .sum::<usize>()
                    + b.linears()
                        .into_iter()
                        .map(|l| l.size_in_bytes())
                        .sum::<usize>()
            })
            .sum();
        self.embed.size_in_bytes()
            + self
                .positions
                .as_ref()
                .map_or(0, |p| p.numel() * p.dtype().size_in_bytes())
            + blocks
            + self.final_norm.size_in_bytes()
            + self.lm_head.as_ref().map_or(0, Weight::size_in_bytes)
    }

    /// Logits `[ids.len, vocab]` (f32, on the model's device) of the positions `ids` appended
    /// after the `cache.len()` positions the cache holds; the cache grows by `ids.len`.
    ///
    /// ```no_run
    /// # fn main() -> wgtensor::Result<()> {
    /// let model = wgtensor::models::AutoModel::load("model_dir", &wgtensor::Device::cpu(), wgtensor::DType::F32)?;
    /// let mut cache = model.new_cache(64)?;
    /// let logits = model.forward(&[1, 2, 3], &mut cache)?;
    /// assert_eq!(logits.shape()[0], 3);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `ids` is empty or does not fit the cache, or when the
    /// cache was made for another model (layers, heads, head dim, dtype or device differ);
    /// [`Error::IndexOutOfRange`]-style errors for ids past the vocabulary; device errors.
    pub fn forward(&self, ids: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        self.run(ids, cache, false)
    }

    /// Like [`CausalLM::forward`], but only the last position's logits, `[vocab]`: prefill
    /// skips the output projection of every other position.
    ///
    /// # Errors
    /// See [`CausalLM::forward`].
    pub fn forward_last(&self, ids: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        let n = self.config.vocab_size;
        self.run(ids, cache, true)?.reshape(&[n])
    }

    fn run(&self, ids: &[u32], cache: &mut KvCache, last_only: bool) -> Result<Tensor> {
        if self.device.is_cpu() {
            // Each CPU kernel's parallel loop, called from outside rayon's pool, hands its
            // jobs to the workers and puts this thread to sleep until they finish: two thread
            // wake-ups per loop, ~60 loops a decode step. Run from a worker, a loop splits its
            // work with the calling thread. (Grad mode is per thread: set where it runs.)
            return rayon::scope(|_| self.run_here(ids, cache, last_only));
        }
        self.run_here(ids, cache, last_only)
    }

    fn run_here(&self, ids: &[u32], cache: &mut KvCache, last_only: bool) -> Result<Tensor> {
        let _guard = crate::no_grad();
        let n = ids.len();
        if n == 0 {
            return Err(Error::InvalidArgument {
                op: "forward",
                message: "no token ids".into(),
            });
        }
        let c = &self.config;
        cache.check_fits(
            c.num_layers,
            c.num_kv_heads,
            c.head_dim,
            &self.device,
            &format!("{self:?}"),
        )?;
        cache.reserve(n)?;
        let vocab = self.config.vocab_size;
        if let Some((i, &bad)) = ids
            .iter()
            .enumerate()
            .find(|(_, id)| **id as usize >= vocab)
        {
            return Err(Error::InvalidArgument {
                op: "forward",
                message: format!("token id {bad} at index {i} is past the vocabulary of {vocab}"),
            });
        }
        let start = cache.len();
        let mut x = self.embed.rows(ids)?;
        if let Some(s) = self.embed_scale {
            x = x.mul_scalar(s)?;
        }
        if let Some(p) = &self.positions {
            x = x.add(&p.narrow(0, start, n)?.to_dtype(DType::F32)?)?;
        }
        let mask = if n > 1 {
            Some(self.causal_mask(start, n, None)?)
        } else {
            None
        };
        let window_mask = match c.sliding_window {
            Some(w) if n > 1 && start + n > w => Some(self.causal_mask(start, n, Some(w))?),
            _ => None,
        };
        // Tables for every position this cache can hold (so decode steps reuse them), cut to
        // this step's positions once for every layer.
        let mut ropes = Vec::with_capacity(self.ropes.len());
        for r in &self.ropes {
            let (cos, sin) = r.tables(cache.capacity(), &self.device)?;
            let rows = |t: Tensor| t.narrow(0, start, n)?.unsqueeze(1);
            ropes.push((rows(cos)?, rows(sin)?));
        }
        let step = Step {
            config: c,
            start,
            mask: mask.as_ref(),
            window_mask: window_mask.as_ref(),
            ropes,
        };
        for (l, block) in self.blocks.iter().enumerate() {
            x = block.forward(l, &x, cache, &step)?;
        }
        cache.advance(n);
        if last_only && n > 1 {
            x = x.narrow(0, n - 1, 1)?;
        }
        self.head(&x)
    }

    /// The logits of hidden states `x` `[n, hidden]`: final norm, output projection, soft-cap.
    fn head(&self, x: &Tensor) -> Result<Tensor> {
        let x = self.final_norm.apply(x)?;
        let logits = self.lm_head.as_ref().unwrap_or(&self.embed).matmul_t(&x)?;
        match self.final_softcap {
            Some(cap) => logits.mul_scalar(1.0 / cap)?.tanh()?.mul_scalar(cap),
            None => Ok(logits),
        }
    }

    /// One decode step of several sequences at once: `ids[i]` is the next token of the
    /// sequence `caches[i]` holds, and row `i` of the logits `[ids.len, vocab]` (f32, on the
    /// model's device) is what [`CausalLM::forward`] of `&[ids[i]]` on `caches[i]` gives, up
    /// to rounding; each cache grows by one position. The caches may hold different numbers
    /// of positions (ragged sequences, no padding): every linear layer runs as one matmul
    /// over the `[ids.len, hidden]` rows, so the weights are read once for the whole batch,
    /// while attention and RoPE run per sequence over its own cache at its own position.
    ///
    /// ```no_run
    /// # fn main() -> wgtensor::Result<()> {
    /// let model = wgtensor::models::AutoModel::load("model_dir", &wgtensor::Device::cpu(), wgtensor::DType::F32)?;
    /// let mut caches = vec![model.new_cache(64)?, model.new_cache(64)?];
    /// model.forward_last(&[1, 2, 3], &mut caches[0])?; // prefill, one sequence at a time
    /// model.forward_last(&[1, 5], &mut caches[1])?;
    /// let logits = model.forward_batch(&[4, 6], &mut caches)?; // both next tokens at once
    /// assert_eq!(logits.shape()[0], 2);
    /// assert_eq!((caches[0].len(), caches[1].len()), (4, 3));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `ids` is empty, when `ids` and `caches` differ in
    /// length, or for any sequence where [`CausalLM::forward`] would fail (a full cache, a
    /// cache of another model, an id past the vocabulary); device errors. On an error no
    /// cache has grown.
    pub fn forward_batch(&self, ids: &[u32], caches: &mut [KvCache]) -> Result<Tensor> {
        if ids.is_empty() || ids.len() != caches.len() {
            return Err(Error::InvalidArgument {
                op: "forward_batch",
                message: format!(
                    "{} ids for {} caches: pass one next id per sequence, and at least one",
                    ids.len(),
                    caches.len()
                ),
            });
        }
        // The sequences' caches move into one batch cache for the step, and back after it.
        let mut batch = KvCache::empty();
        batch.batch = caches
            .iter_mut()
            .map(|c| std::mem::replace(c, KvCache::empty()))
            .collect();
        let r = if self.device.is_cpu() {
            // As in `run`: the CPU kernels' loops split their work with this thread.
            rayon::scope(|_| self.run_batch(ids, &mut batch))
        } else {
            self.run_batch(ids, &mut batch)
        };
        for (c, b) in caches.iter_mut().zip(batch.batch) {
            *c = b;
        }
        r
    }

    /// [`CausalLM::forward_batch`] on the batch cache `batch` (its `batch` holds one cache per
    /// id).
    fn run_batch(&self, ids: &[u32], batch: &mut KvCache) -> Result<Tensor> {
        let _guard = crate::no_grad();
        let c = &self.config;
        let n = ids.len();
        let vocab = c.vocab_size;
        let name = format!("{self:?}");
        for (i, (cache, &id)) in batch.batch.iter().zip(ids).enumerate() {
            let at = |e: Error| match e {
                Error::InvalidArgument { message, .. } => Error::InvalidArgument {
                    op: "forward_batch",
                    message: format!("sequence {i}: {message}"),
                },
                e => e,
            };
            cache
                .check_fits(
                    c.num_layers,
                    c.num_kv_heads,
                    c.head_dim,
                    &self.device,
                    &name,
                )
                .map_err(at)?;
            cache.reserve(1).map_err(at)?;
            if id as usize >= vocab {
                return Err(Error::InvalidArgument {
                    op: "forward_batch",
                    message: format!(
                        "token id {id} of sequence {i} is past the vocabulary of {vocab}"
                    ),
                });
            }
        }
        // Each sequence's position: how many its cache holds.
        let starts: Vec<u32> = batch.batch.iter().map(|c| c.len() as u32).collect();
        let at = Tensor::from_slice(&starts, &[n], &self.device)?;
        let mut x = self.embed.rows(ids)?;
        if let Some(s) = self.embed_scale {
            x = x.mul_scalar(s)?;
        }
        if let Some(p) = &self.positions {
            x = x.add(&Weight::Dense(p.clone()).rows(&starts)?)?;
        }
        let capacity = batch.batch.iter().map(KvCache::capacity).max().unwrap_or(0);
        let mut ropes = Vec::with_capacity(self.ropes.len());
        for r in &self.ropes {
            let (cos, sin) = r.tables(capacity, &self.device)?;
            let rows = |t: Tensor| t.index_select(0, &at)?.unsqueeze(1);
            ropes.push((rows(cos)?, rows(sin)?));
        }
        let step = Step {
            config: c,
            start: 0,
            mask: None,
            window_mask: None,
            ropes,
        };
        for (l, block) in self.blocks.iter().enumerate() {
            x = block.forward(l, &x, batch, &step)?;
        }
        for cache in &mut batch.batch {
            cache.advance(1);
        }
        self.head(&x)
    }

    /// `[n, start + n]`: 0 where position `start + i` may attend, -inf past it and, with a
    /// sliding `window`, before `start + i + 1 - window` (transformers' window: the query
    /// and the `window - 1` positions before it).
    fn causal_mask(&self, start: usize, n: usize, window: Option<usize>) -> Result<Tensor> {
        let s = start + n;
        let mut m = vec![0f32; n * s];
        for i in 0..n {
            let row = &mut m[i * s..(i + 1) * s];
            row[start + i + 1..].fill(f32::NEG_INFINITY);
            if let Some(w) = window {
                row[..(start + i + 1).saturating_sub(w)].fill(f32::NEG_INFINITY);
            }
        }
        Tensor::from_vec(m, &[n, s], &self.device)
    }
}
