//! The causal language model: embedding, decoder blocks of either family, final norm, LM head;
//! `forward` over new positions with a KV cache.

use super::cache::KvCache;
use super::config::{Architecture, ModelConfig};
use super::rope::Rope;
use super::weight::Weight;
use crate::{DType, Device, Error, Result, Tensor};

/// A linear layer: weight `[out, in]` and an optional f32 bias.
pub(crate) struct Linear {
    pub w: Weight,
    pub b: Option<Tensor>,
}

impl Linear {
    fn apply(&self, x: &Tensor) -> Result<Tensor> {
        self.bias(self.w.matmul_t(x)?)
    }

    fn bias(&self, y: Tensor) -> Result<Tensor> {
        match &self.b {
            Some(b) => y.add(b),
            None => Ok(y),
        }
    }

    /// Several layers over the same input (q, k, v; gate, up): quantized weights run as one
    /// grouped matmul (one pass, the input quantized once), the same bits as one by one.
    fn apply_many<const N: usize>(ls: [&Linear; N], x: &Tensor) -> Result<[Tensor; N]> {
        let qs: Vec<_> = ls
            .iter()
            .filter_map(|l| match &l.w {
                Weight::Quantized(q) => Some(q),
                Weight::Dense(_) => None,
            })
            .collect();
        let ys = if qs.len() == N {
            crate::QTensor::matmul_t_many(&qs, x)?
        } else {
            ls.iter()
                .map(|l| l.w.matmul_t(x))
                .collect::<Result<Vec<_>>>()?
        };
        let ys = ls
            .iter()
            .zip(ys)
            .map(|(l, y)| l.bias(y))
            .collect::<Result<Vec<_>>>()?;
        ys.try_into().map_err(|_| Error::InvalidArgument {
            op: "forward",
            message: "a grouped projection lost an output (a wgtensor bug)".into(),
        })
    }
}

/// A norm: RMSNorm (weight only) or LayerNorm (weight and bias), f32 parameters.
pub(crate) struct Norm {
    pub w: Tensor,
    pub b: Option<Tensor>,
}

/// One decoder block.
pub(crate) enum Block {
    /// Pre-norm attention + SwiGLU MLP.
    Llama(LlamaBlock),
    /// Pre-norm attention (fused QKV) + GELU MLP.
    Gpt2(Gpt2Block),
}

/// The weights of a Llama-family block.
pub(crate) struct LlamaBlock {
    pub attn_norm: Norm,
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub o: Linear,
    pub mlp_norm: Norm,
    pub gate: Linear,
    pub up: Linear,
    pub down: Linear,
}

/// The weights of a GPT-2 block.
pub(crate) struct Gpt2Block {
    pub ln1: Norm,
    pub qkv: Linear,
    pub proj: Linear,
    pub ln2: Norm,
    pub fc: Linear,
    pub fc_proj: Linear,
}

impl Block {
    /// The block's two norms and its linear layers.
    fn weights(&self) -> ([&Norm; 2], Vec<&Linear>) {
        match self {
            Block::Llama(b) => (
                [&b.attn_norm, &b.mlp_norm],
                vec![&b.q, &b.k, &b.v, &b.o, &b.gate, &b.up, &b.down],
            ),
            Block::Gpt2(b) => ([&b.ln1, &b.ln2], vec![&b.qkv, &b.proj, &b.fc, &b.fc_proj]),
        }
    }
}

/// A pretrained causal language model on a device (see [`super::AutoModel::load`]).
pub struct CausalLM {
    pub(crate) config: ModelConfig,
    pub(crate) device: Device,
    pub(crate) dtype: DType,
    pub(crate) embed: Weight,
    /// GPT-2's learned positions `[n_positions, hidden]`.
    pub(crate) positions: Option<Tensor>,
    pub(crate) blocks: Vec<Block>,
    pub(crate) final_norm: Norm,
    /// The output projection (`None`: tied to the embedding).
    pub(crate) lm_head: Option<Weight>,
    /// RoPE (Llama family): its tables are built for the caches that ask.
    pub(crate) rope: Option<Rope>,
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
        let w = match self.blocks.first() {
            Some(Block::Llama(b)) => &b.q.w,
            Some(Block::Gpt2(b)) => &b.qkv.w,
            None => &self.embed,
        };
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
        let lin = |l: &Linear| l.w.size_in_bytes() + l.b.as_ref().map_or(0, |b| b.numel() * 4);
        let norm = |n: &Norm| (n.w.numel() + n.b.as_ref().map_or(0, Tensor::numel)) * 4;
        let blocks: usize = self
            .blocks
            .iter()
            .map(|b| {
                let (norms, linears) = b.weights();
                norms.into_iter().map(norm).sum::<usize>()
                    + linears.into_iter().map(lin).sum::<usize>()
            })
            .sum();
        self.embed.size_in_bytes()
            + self
                .positions
                .as_ref()
                .map_or(0, |p| p.numel() * p.dtype().size_in_bytes())
            + blocks
            + norm(&self.final_norm)
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
        let rope = match &self.rope {
            Some(r) => {
                let (cos, sin) = r.tables(cache.capacity(), &self.device)?;
                let rows = |t: Tensor| t.narrow(0, start, n)?.unsqueeze(1);
                Some((rows(cos)?, rows(sin)?))
            }
            None => None,
        };
        let step = Step {
            start,
            mask: mask.as_ref(),
            window_mask: window_mask.as_ref(),
            rope,
        };
        for (l, block) in self.blocks.iter().enumerate() {
            x = self.block(l, block, &x, cache, &step)?;
        }
        cache.advance(n);
        if last_only && n > 1 {
            x = x.narrow(0, n - 1, 1)?;
        }
        let x = self.norm(&self.final_norm, &x)?;
        self.lm_head.as_ref().unwrap_or(&self.embed).matmul_t(&x)
    }

    fn norm(&self, n: &Norm, x: &Tensor) -> Result<Tensor> {
        let eps = self.config.norm_eps;
        match self.config.architecture {
            Architecture::Llama => x.rms_norm(Some(&n.w), eps),
            Architecture::Gpt2 => x.layer_norm(Some(&n.w), n.b.as_ref(), eps),
        }
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

    /// RoPE (the rotate-half form of transformers) of `x` `[n, heads, head_dim]` with the
    /// step's tables `[n, 1, head_dim / 2]` (`None`: no RoPE).
    fn rope(&self, x: &Tensor, rope: Option<&(Tensor, Tensor)>) -> Result<Tensor> {
        let Some((c, s)) = rope else {
            return Ok(x.clone());
        };
        let half = self.config.head_dim / 2;
        let x1 = x.narrow(-1, 0, half)?;
        let x2 = x.narrow(-1, half, half)?;
        let a = x1.mul(c)?.sub(&x2.mul(s)?)?;
        let b = x2.mul(c)?.add(&x1.mul(s)?)?;
        Tensor::cat(&[&a, &b], -1)
    }

    /// Attention of `q` `[n, heads, hd]` over the cache of layer `l` (already holding these
    /// positions): the fused decode kernel for one position, composed attention for several.
    fn attend(
        &self,
        l: usize,
        q: &Tensor,
        start: usize,
        cache: &KvCache,
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        let c = &self.config;
        let (n, h, kvh, hd) = (q.shape()[0], c.num_heads, c.num_kv_heads, c.head_dim);
        let scale = 1.0 / (hd as f32).sqrt();
        let len = start + n;
        if n == 1 {
            // A sliding window attends to the last `w` positions only: those rows of the cache.
            let (k, v, len) = match c.window(l).filter(|&w| len > w) {
                Some(w) => (
                    cache.k[l].narrow(0, len - w, w)?,
                    cache.v[l].narrow(0, len - w, w)?,
                    w,
                ),
                None => (cache.k[l].clone(), cache.v[l].clone(), len),
            };
            let out = Tensor::attention_decode(&q.reshape(&[h, hd])?, &k, &v, len, scale)?;
            return out.reshape(&[1, h * hd]);
        }
        // [len, kvh, hd] -> [h, len, hd], each key-value head repeated for its query group.
        let heads = |t: &Tensor| -> Result<Tensor> {
            let t = t.narrow(0, 0, len)?.permute(&[1, 0, 2])?;
            t.unsqueeze(1)?
                .expand(&[kvh, h / kvh, len, hd])?
                .reshape(&[h, len, hd])
        };
        let (k, v) = (heads(&cache.k[l])?, heads(&cache.v[l])?);
        let q = q.permute(&[1, 0, 2])?;
        let out = Tensor::scaled_dot_product_attention(&q, &k, &v, mask, false, 0.0, Some(scale))?;
        out.permute(&[1, 0, 2])?.reshape(&[n, h * hd])
    }

    fn block(
        &self,
        l: usize,
        block: &Block,
        x: &Tensor,
        cache: &mut KvCache,
        step: &Step,
    ) -> Result<Tensor> {
        let (start, rope) = (step.start, step.rope.as_ref());
        let mask = match self.config.window(l) {
            Some(_) if step.window_mask.is_some() => step.window_mask,
            _ => step.mask,
        };
        let c = &self.config;
        let (n, h, kvh, hd) = (x.shape()[0], c.num_heads, c.num_kv_heads, c.head_dim);
        match block {
            Block::Llama(b) => {
                let a = self.norm(&b.attn_norm, x)?;
                let [qa, ka, va] = Linear::apply_many([&b.q, &b.k, &b.v], &a)?;
                let qs = self.rope(&qa.reshape(&[n, h, hd])?, rope)?;
                let ks = self.rope(&ka.reshape(&[n, kvh, hd])?, rope)?;
                let vs = va.reshape(&[n, kvh, hd])?;
                cache.write(l, &ks, &vs)?;
                let att = self.attend(l, &qs, start, cache, mask)?;
                let x = x.add(&b.o.apply(&att)?)?;
                let m = self.norm(&b.mlp_norm, &x)?;
                let [ga, ua] = Linear::apply_many([&b.gate, &b.up], &m)?;
                let g = ga.silu()?.mul(&ua)?;
                x.add(&b.down.apply(&g)?)
            }
            Block::Gpt2(b) => {
                let a = self.norm(&b.ln1, x)?;
                let t = b.qkv.apply(&a)?;
                let d = h * hd;
                let qs = t.narrow(1, 0, d)?.reshape(&[n, h, hd])?;
                let ks = t.narrow(1, d, d)?.reshape(&[n, h, hd])?;
                let vs = t.narrow(1, 2 * d, d)?.reshape(&[n, h, hd])?;
                cache.write(l, &ks, &vs)?;
                let att = self.attend(l, &qs, start, cache, mask)?;
                let x = x.add(&b.proj.apply(&att)?)?;
                let m = self.norm(&b.ln2, &x)?;
                x.add(&b.fc_proj.apply(&gelu_tanh(&b.fc.apply(&m)?)?)?)
            }
        }
    }
}

/// What every layer of one forward step shares.
struct Step<'a> {
    /// Positions the cache held before this step.
    start: usize,
    /// The causal mask of a step of several positions.
    mask: Option<&'a Tensor>,
    /// The same with the sliding window, when the step reaches past it.
    window_mask: Option<&'a Tensor>,
    /// RoPE's cos and sin for this step's positions, `[n, 1, head_dim / 2]` each.
    rope: Option<(Tensor, Tensor)>,
}

/// GELU in the tanh form of GPT-2 (`gelu_new`):
/// `0.5 x (1 + tanh(sqrt(2 / π) (x + 0.044715 x³)))`.
fn gelu_tanh(x: &Tensor) -> Result<Tensor> {
    let c = (2.0f32 / std::f32::consts::PI).sqrt();
    let x3 = x.mul(x)?.mul(x)?;
    let inner = x.add(&x3.mul_scalar(0.044715)?)?.mul_scalar(c)?;
    x.mul(&inner.tanh()?.add_scalar(1.0)?)?.mul_scalar(0.5)
}
