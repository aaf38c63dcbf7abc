//! Generation: sampling on the device (greedy, temperature, top-k, top-p, repetition penalty)
//! with only the chosen id (4 bytes) read back per step, as a loop or a streaming iterator.

use super::cache::KvCache;
use super::model::CausalLM;
use crate::{DType, Error, Generator, Result, Tensor};
use std::path::Path;
use std::time::{Duration, Instant};

/// The `eos_token_id` of `dir/generation_config.json` (an id or a list of ids), which
/// transformers' `generate` stops at in preference to `config.json`'s; `None` when the file or
/// the key is absent.
pub(crate) fn generation_eos(dir: &Path) -> Result<Option<Vec<u32>>> {
    let path = dir.join("generation_config.json");
    if !path.is_file() {
        return Ok(None);
    }
    let op = "AutoModel::load";
    let text = std::fs::read_to_string(&path).map_err(super::config::io_error(op, &path))?;
    let bad = |message: String| Error::Format {
        op,
        path: path.display().to_string(),
        message,
    };
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let one = |x: &serde_json::Value| {
        x.as_u64()
            .and_then(|id| u32::try_from(id).ok())
            .ok_or_else(|| bad(format!("eos_token_id {x} is not a 32-bit token id")))
    };
    match v.get("eos_token_id") {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::Array(a)) => a.iter().map(one).collect::<Result<_>>().map(Some),
        Some(x) => Ok(Some(vec![one(x)?])),
    }
}

/// How [`CausalLM::generate`] chooses tokens. `Default` is greedy decoding of 32 tokens.
///
/// ```
/// let o = wgtensor::models::GenerateOptions { temperature: 0.7, top_p: 0.9, seed: Some(1), ..Default::default() };
/// assert_eq!(o.top_k, 0);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateOptions {
    /// Tokens generated at most. The generation also stops when the model's context is full:
    /// the cache holds `min(prompt.len() + max_new_tokens, context)` positions (the sum
    /// saturating, so `usize::MAX` means "until EOS or the end of the context").
    pub max_new_tokens: usize,
    /// Softmax temperature; 0 is greedy (argmax). Temperatures below
    /// [`GenerateOptions::GREEDY_BELOW`] are greedy too: their distribution is one-hot to f32
    /// precision, and `1 / temperature` would overflow.
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches `top_p` (1: all).
    pub top_p: f32,
    /// transformers' repetition penalty: logits of tokens already in the sequence are divided
    /// by it when positive, multiplied when negative (1: off).
    pub repetition_penalty: f32,
    /// Sampling draws from a [`crate::Generator`] of this generation's own, made from this
    /// seed: the same seed gives the same ids whatever other threads sample or draw at the
    /// same time, and the global generator is left alone (the ids are those that
    /// [`crate::manual_seed`] with this seed gave before). `None` draws from the global
    /// generator.
    pub seed: Option<u64>,
    /// Ids that end the generation (included in the output); `None`: the model's
    /// `eos_token_id` (every id of `generation_config.json`'s `eos_token_id`, an int or a list,
    /// when the model directory has one; else `config.json`'s, or a GGUF file's EOS).
    pub eos_token_ids: Option<Vec<u32>>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_new_tokens: 32,
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            repetition_penalty: 1.0,
            seed: None,
            eos_token_ids: None,
        }
    }
}

impl GenerateOptions {
    /// Temperatures in `(0, GREEDY_BELOW)` sample greedily (argmax), as 0 does. At 1e-5 any
    /// two logits more than 2e-4 apart already give the larger one every time (the Gumbel
    /// noise that samples spans less than 20), and far below it the scaled logits overflow
    /// f32 (`1 / 1e-39` is infinite) and would sample garbage.
    pub const GREEDY_BELOW: f32 = 1e-5;

    /// Whether these options choose by argmax.
    fn greedy(&self) -> bool {
        self.temperature < Self::GREEDY_BELOW
    }

    fn validate(&self) -> Result<()> {
        let bad = |message: String| {
            Err(Error::InvalidArgument {
                op: "generate",
                message,
            })
        };
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return bad(format!(
                "temperature must be finite and >= 0, got {}",
                self.temperature
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad(format!("top_p must be in (0, 1], got {}", self.top_p));
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty.is_finite()) {
            return bad(format!(
                "repetition_penalty must be finite and > 0, got {}",
                self.repetition_penalty
            ));
        }
        Ok(())
    }
}

impl CausalLM {
    /// Generates up to `options.max_new_tokens` ids after `prompt` (stopping after an EOS id,
    /// which is included); returns the new ids.
    ///
    /// ```no_run
    /// use wgtensor::models::{AutoModel, GenerateOptions};
    /// let model = AutoModel::load("model_dir", &wgtensor::Device::best(), wgtensor::DType::F32)?;
    /// let ids = model.generate(&[1, 15043], &GenerateOptions { max_new_tokens: 8, ..Default::default() })?;
    /// assert!(ids.len() <= 8);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty prompt, one that leaves no room in the context,
    /// or bad options; the errors of [`CausalLM::forward`].
    pub fn generate(&self, prompt: &[u32], options: &GenerateOptions) -> Result<Vec<u32>> {
        self.stream(prompt, options)?.collect()
    }

    /// Generates after each of several prompts at once, as [`CausalLM::generate`] does for
    /// one: returns the new ids of each prompt, in order. The prompts may differ in length
    /// (each sequence keeps its own KV cache, so nothing is padded), and each sequence stops
    /// on its own, at an EOS id, `max_new_tokens` or a full context; a finished sequence
    /// leaves the batch, so later steps run only the others.
    ///
    /// Each prompt is prefilled alone; then every decode step runs the current token of all
    /// unfinished sequences through [`CausalLM::forward_batch`], where each linear layer is
    /// one matmul over the batch: the weights are read once per step for all of them, which
    /// is what makes a batch faster than its sequences one after the other. Greedy ids are
    /// those each prompt gets from [`CausalLM::generate`] alone, unless two logits are close
    /// enough for the batched matmul's rounding to swap them. Sampling with a `seed` gives
    /// every sequence its own generator of that seed (as if generated alone); without one,
    /// the sequences draw from the global generator in turn.
    ///
    /// ```no_run
    /// use wgtensor::models::{AutoModel, GenerateOptions};
    /// let model = AutoModel::load("model_dir", &wgtensor::Device::best(), wgtensor::DType::F32)?;
    /// let prompts = vec![vec![1, 15043], vec![1, 450, 4996, 17354]];
    /// let opts = GenerateOptions { max_new_tokens: 8, ..Default::default() };
    /// let out = model.generate_batch(&prompts, &opts)?;
    /// assert_eq!(out.len(), 2);
    /// assert_eq!(out[0], model.generate(&prompts[0], &opts)?); // greedy: the same ids
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (op `generate_batch`) for no prompts, an empty prompt, one
    /// that leaves no room in the context, or bad options, naming the prompt; the errors of
    /// [`CausalLM::forward`] and [`CausalLM::forward_batch`].
    pub fn generate_batch<P: AsRef<[u32]>>(
        &self,
        prompts: &[P],
        options: &GenerateOptions,
    ) -> Result<Vec<Vec<u32>>> {
        const OP: &str = "generate_batch";
        if prompts.is_empty() {
            return Err(Error::InvalidArgument {
                op: OP,
                message: "no prompts: pass at least one sequence of ids".into(),
            });
        }
        let mut streams = Vec::with_capacity(prompts.len());
        for (i, p) in prompts.iter().enumerate() {
            let s = self.stream(p.as_ref(), options).map_err(|e| match e {
                Error::InvalidArgument { message, .. } => Error::InvalidArgument {
                    op: OP,
                    message: format!("prompt {i}: {message}"),
                },
                e => e,
            })?;
            streams.push(s);
        }
        let mut out = vec![Vec::new(); streams.len()];
        // Prefill: each prompt alone (they differ in length), giving its first id.
        for (s, o) in streams.iter_mut().zip(&mut out) {
            if let Some(id) = s.next() {
                o.push(id?);
            }
        }
        let device = self.device().clone();
        loop {
            let active: Vec<usize> = (0..streams.len())
                .filter(|&i| streams[i].wants_step())
                .collect();
            if active.is_empty() {
                return Ok(out);
            }
            let ids: Vec<u32> = active.iter().map(|&i| streams[i].next_input[0]).collect();
            let mut caches: Vec<KvCache> = active
                .iter()
                .map(|&i| std::mem::replace(&mut streams[i].cache, KvCache::empty()))
                .collect();
            // The step (forward, the choices, their readback) in one submit.
            let chosen = device.one_submit(|| {
                let logits = self.forward_batch(&ids, &mut caches)?;
                let vocab = self.config.vocab_size;
                active
                    .iter()
                    .enumerate()
                    .map(|(j, &i)| streams[i].choose(&logits.narrow(0, j, 1)?.reshape(&[vocab])?))
                    .collect::<Result<Vec<u32>>>()
            });
            for (&i, c) in active.iter().zip(caches) {
                streams[i].cache = c;
            }
            for (&i, id) in active.iter().zip(chosen?) {
                streams[i].accept(id);
                out[i].push(id);
            }
        }
    }

    /// The generation of [`CausalLM::generate`] as an iterator of ids: each `next` runs one
    /// step (the first one the prompt) and reads back only the chosen id.
    ///
    /// # Errors
    /// See [`CausalLM::generate`].
    pub fn stream(&self, prompt: &[u32], options: &GenerateOptions) -> Result<TokenStream<'_>> {
        options.validate()?;
        if prompt.is_empty() {
            return Err(Error::InvalidArgument {
                op: "generate",
                message: "the prompt has no ids (a BOS id at least is needed)".into(),
            });
        }
        let ctx = self.config.max_position_embeddings;
        if prompt.len() >= ctx {
            return Err(Error::InvalidArgument {
                op: "generate",
                message: format!(
                    "the prompt has {} tokens, the model's context {ctx}: no room to generate",
                    prompt.len()
                ),
            });
        }
        // The documented rule: room for the prompt and every new token, clamped to the
        // context (a sum past usize::MAX saturates rather than wrapping to a small cache).
        let capacity = prompt.len().saturating_add(options.max_new_tokens).min(ctx);
        let cache = self.new_cache(capacity)?;
        self.start(cache, prompt, options)
    }

    /// [`CausalLM::stream`] continuing a sequence already in `cache`: `new_ids` follow the
    /// positions it holds (a chat's next turn after [`TokenStream::into_cache`] of the last
    /// one, without running the conversation again). The generation stops when the cache is
    /// full, so make it with room ([`CausalLM::new_cache`]). The repetition penalty sees
    /// `new_ids` and the generated ids only.
    ///
    /// ```no_run
    /// use wgtensor::models::{AutoModel, GenerateOptions};
    /// let model = AutoModel::load("model_dir", &wgtensor::Device::best(), wgtensor::DType::F32)?;
    /// let opts = GenerateOptions::default();
    /// let mut s = model.stream_with_cache(model.new_cache(512)?, &[1, 15043], &opts)?;
    /// let first: Vec<u32> = s.by_ref().collect::<Result<_, _>>()?;
    /// let cache = s.into_cache(); // the prompt and the ids fed back so far
    /// let more = model.stream_with_cache(cache, &[29892], &opts)?;
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for empty `new_ids`, ones that do not fit in the cache, or
    /// bad options; a cache of another model fails at the first step, as in
    /// [`CausalLM::forward`].
    pub fn stream_with_cache(
        &self,
        cache: KvCache,
        new_ids: &[u32],
        options: &GenerateOptions,
    ) -> Result<TokenStream<'_>> {
        options.validate()?;
        if new_ids.is_empty() {
            return Err(Error::InvalidArgument {
                op: "generate",
                message: "no new ids to continue the cached sequence with".into(),
            });
        }
        if cache.len() + new_ids.len() >= cache.capacity() {
            return Err(Error::InvalidArgument {
                op: "generate",
                message: format!(
                    "the cache holds {} of {} positions: no room for {} new ids and a reply; \
                     start again with a larger cache or a shorter conversation",
                    cache.len(),
                    cache.capacity(),
                    new_ids.len()
                ),
            });
        }
        self.start(cache, new_ids, options)
    }

    /// A generation of `prompt` after what `cache` holds.
    fn start(
        &self,
        cache: KvCache,
        prompt: &[u32],
        options: &GenerateOptions,
    ) -> Result<TokenStream<'_>> {
        let seen = if options.repetition_penalty != 1.0 {
            let mut m = vec![0u8; self.config.vocab_size];
            for &id in prompt {
                if let Some(x) = m.get_mut(id as usize) {
                    *x = 1;
                }
            }
            Some(Tensor::from_vec(
                m,
                &[self.config.vocab_size],
                &self.device,
            )?)
        } else {
            None
        };
        Ok(TokenStream {
            model: self,
            cache,
            options: options.clone(),
            eos: options
                .eos_token_ids
                .clone()
                .unwrap_or_else(|| self.config.eos_token_ids.clone()),
            next_input: prompt.to_vec(),
            produced: 0,
            done: options.max_new_tokens == 0,
            generator: options.seed.map(Generator::new),
            seen,
            prefill: Duration::ZERO,
            prompt_len: prompt.len(),
            decode: Duration::ZERO,
        })
    }
}

/// The ids of a generation, one per `next` (see [`CausalLM::stream`]); also times prefill
/// and decode.
pub struct TokenStream<'a> {
    model: &'a CausalLM,
    cache: KvCache,
    options: GenerateOptions,
    eos: Vec<u32>,
    next_input: Vec<u32>,
    produced: usize,
    done: bool,
    /// The generation's own generator (a seeded generation); `None`: the global one.
    generator: Option<Generator>,
    /// U8 `[vocab]`: ids already in the sequence (repetition penalty only).
    seen: Option<Tensor>,
    prefill: Duration,
    prompt_len: usize,
    decode: Duration,
}

impl TokenStream<'_> {
    /// Prompt tokens per second of the prefill step (forward over the prompt and the first
    /// choice); 0 before it ran.
    pub fn prefill_tokens_per_second(&self) -> f64 {
        rate(self.prompt_len, self.prefill)
    }

    /// Generated tokens per second after the first (one forward step and choice each).
    pub fn decode_tokens_per_second(&self) -> f64 {
        rate(self.produced.saturating_sub(1), self.decode)
    }

    /// The KV cache (prompt and generated positions so far).
    pub fn cache(&self) -> &KvCache {
        &self.cache
    }

    /// The KV cache, to continue the sequence with [`CausalLM::stream_with_cache`]. It holds
    /// the prompt and every generated id but the last, which was never fed back (feed it
    /// first, or truncate the cache to what the next prompt shares with it).
    ///
    /// ```no_run
    /// # let model = wgtensor::models::AutoModel::load("m", &wgtensor::Device::best(), wgtensor::DType::F32)?;
    /// let mut s = model.stream(&[1, 2, 3], &Default::default())?;
    /// let ids: Vec<u32> = s.by_ref().collect::<Result<_, _>>()?;
    /// assert_eq!(s.into_cache().len(), 3 + ids.len() - 1);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn into_cache(self) -> KvCache {
        self.cache
    }

    /// Whether the generation goes on: not stopped, under `max_new_tokens`, and the cache
    /// has room for the next input (else it is done).
    fn wants_step(&mut self) -> bool {
        if self.done || self.produced >= self.options.max_new_tokens {
            return false;
        }
        if self.cache.len() + self.next_input.len() > self.cache.capacity() {
            // The context is full.
            self.done = true;
            return false;
        }
        true
    }

    /// Records the chosen `id`: the next input, and the end at an EOS id.
    fn accept(&mut self, id: u32) {
        self.produced += 1;
        self.next_input = vec![id];
        if self.eos.contains(&id) {
            self.done = true;
        }
    }

    fn step(&mut self) -> Result<u32> {
        let t0 = Instant::now();
        // The whole step (forward, choice, the id's readback) in one submit.
        let device = self.model.device().clone();
        let id = device.one_submit(|| {
            let logits = self.model.forward_last(&self.next_input, &mut self.cache)?;
            self.choose(&logits)
        })?;
        if self.produced == 0 {
            self.prefill = t0.elapsed();
        } else {
            self.decode += t0.elapsed();
        }
        Ok(id)
    }

    /// Picks the next id on the device; reads back 4 bytes.
    fn choose(&mut self, logits: &Tensor) -> Result<u32> {
        let o = &self.options;
        let mut l = logits.clone();
        if let Some(seen) = &self.seen {
            let p = o.repetition_penalty;
            let penalized = l
                .lt_scalar(0.0)?
                .where_cond(&l.mul_scalar(p)?, &l.mul_scalar(1.0 / p)?)?;
            l = seen.where_cond(&penalized, &l)?;
        }
        let chosen = if o.greedy() {
            l.argmax_all()?
        } else {
            l = l.mul_scalar(1.0 / o.temperature)?;
            let v = l.numel();
            if o.top_k > 0 && o.top_k < v {
                let (vals, _) = l.topk(o.top_k, -1, true)?;
                let kth = vals.narrow(0, o.top_k - 1, 1)?;
                l = l.masked_fill(&l.lt(&kth)?, f32::NEG_INFINITY)?;
            }
            if o.top_p < 1.0 {
                // The smallest prefix of the sorted distribution reaching top_p: a sorted entry
                // stays when the mass before it is below top_p (the first always does).
                let (sorted, _) = l.topk(v, -1, true)?;
                let probs = sorted.softmax(-1)?;
                let before = probs.cumsum(-1)?.sub(&probs)?;
                let dropped = before.ge_scalar(o.top_p)?;
                let kept_min = sorted.masked_fill(&dropped, f32::INFINITY)?.min_all()?;
                l = l.masked_fill(&l.lt(&kept_min.reshape(&[1])?)?, f32::NEG_INFINITY)?;
            }
            // Gumbel-max: argmax(l + g), g = -log(-log u), samples softmax(l) exactly.
            let u = match &mut self.generator {
                Some(g) => Tensor::rand_with(&[v], l.device(), g)?,
                None => Tensor::rand(&[v], l.device())?,
            };
            let u = u.clamp(1e-20, 1.0 - 1e-7)?;
            let g = u.log()?.neg()?.log()?.neg()?;
            l.add(&g)?.argmax_all()?
        };
        let id = chosen.to_scalar::<u32>()?;
        if let Some(seen) = &mut self.seen {
            let one = Tensor::ones(&[1], DType::U8, seen.device())?;
            *seen = seen.slice_assign(0, id as usize, &one)?;
        }
        Ok(id)
    }
}

fn rate(n: usize, t: Duration) -> f64 {
    if t.is_zero() {
        0.0
    } else {
        n as f64 / t.as_secs_f64()
    }
}

impl Iterator for TokenStream<'_> {
    type Item = Result<u32>;

    fn next(&mut self) -> Option<Result<u32>> {
        if !self.wants_step() {
            return None;
        }
        match self.step() {
            Ok(id) => {
                self.accept(id);
                Some(Ok(id))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}
