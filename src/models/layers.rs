//! The parts every decoder family is built from: linear layers, norms, attention over the KV
//! cache (RoPE, q/k norms, grouped heads, sliding windows, logit soft-capping), MLPs, the
//! pre-norm block most families use, and the [`Source`] a file loader reads tensors through.
//! A family file (`llama.rs`, `gpt2.rs`, `qwen3.rs`, ...) only picks and wires these.

use super::cache::KvCache;
use super::config::ModelConfig;
use super::weight::Weight;
use crate::{Error, Result, Tensor};

/// How a loader reads one tensor by name, checks its shape against the config and puts it on
/// the device.
pub(crate) trait Source {
    /// Whether the file holds a tensor of this name.
    fn has(&self, name: &str) -> bool;
    /// An f32 vector (norm weight, bias) of `len` elements.
    fn vector(&mut self, name: &str, len: usize) -> Result<Tensor>;
    /// A `[rows, cols]` matrix in the model's dtype.
    fn matrix(&mut self, name: &str, rows: usize, cols: usize) -> Result<Weight>;
    /// `{name}.weight` (`[rows, cols]`) and, with `bias`, `{name}.bias`.
    fn linear(&mut self, name: &str, rows: usize, cols: usize, bias: bool) -> Result<Linear>;
    /// A q or k projection, read as [`Source::linear`]. Its rows are the RoPE pairs of
    /// `rows / head_dim` heads, which a file may store in its own order (llama.cpp's `llama`
    /// files do); they load in Hugging Face's, the order the model uses.
    fn rope_linear(&mut self, name: &str, rows: usize, cols: usize, bias: bool) -> Result<Linear> {
        self.linear(name, rows, cols, bias)
    }
    /// A Conv1D layer `{name}.weight` stored `[cols, rows]` with its bias (GPT-2), loaded as
    /// a `[rows, cols]` linear layer.
    fn conv1d(&mut self, name: &str, rows: usize, cols: usize) -> Result<Linear>;
    /// A `[rows, cols]` f32 table (GPT-2's learned positions).
    fn table(&mut self, name: &str, rows: usize, cols: usize) -> Result<Tensor>;
}

/// A linear layer: weight `[out, in]` and an optional f32 bias.
pub(crate) struct Linear {
    pub w: Weight,
    pub b: Option<Tensor>,
}

impl Linear {
    pub(crate) fn apply(&self, x: &Tensor) -> Result<Tensor> {
        self.bias(self.w.matmul_t(x)?)
    }

    fn bias(&self, y: Tensor) -> Result<Tensor> {
        match &self.b {
            Some(b) => y.add(b),
            None => Ok(y),
        }
    }

    /// Bytes of the weight and bias.
    pub(crate) fn size_in_bytes(&self) -> usize {
        self.w.size_in_bytes() + self.b.as_ref().map_or(0, |b| b.numel() * 4)
    }

    /// Several layers over the same input (q, k, v; gate, up): quantized weights run as one
    /// grouped matmul (one pass, the input quantized once), the same bits as one by one.
    pub(crate) fn apply_many<const N: usize>(ls: [&Linear; N], x: &Tensor) -> Result<[Tensor; N]> {
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

/// A norm over the last dimension: RMSNorm (weight only) or LayerNorm (weight and bias), f32
/// parameters.
pub(crate) struct Norm {
    pub w: Tensor,
    pub b: Option<Tensor>,
    pub eps: f32,
}

impl Norm {
    /// RMSNorm `{name}` of `len` weights.
    pub(crate) fn rms(src: &mut dyn Source, name: &str, len: usize, eps: f32) -> Result<Norm> {
        Ok(Norm {
            w: src.vector(name, len)?,
            b: None,
            eps,
        })
    }

    /// Gemma's RMSNorm, which scales by `1 + weight`: the sum is formed once, in f32 as
    /// transformers forms it, so the norm runs as a plain RMSNorm.
    pub(crate) fn rms_plus_one(
        src: &mut dyn Source,
        name: &str,
        len: usize,
        eps: f32,
    ) -> Result<Norm> {
        let mut n = Norm::rms(src, name, len, eps)?;
        n.w = n.w.add_scalar(1.0)?;
        Ok(n)
    }

    /// LayerNorm `{prefix}.weight` and `{prefix}.bias`.
    pub(crate) fn layer(src: &mut dyn Source, prefix: &str, len: usize, eps: f32) -> Result<Norm> {
        Ok(Norm {
            w: src.vector(&format!("{prefix}.weight"), len)?,
            b: Some(src.vector(&format!("{prefix}.bias"), len)?),
            eps,
        })
    }

    pub(crate) fn apply(&self, x: &Tensor) -> Result<Tensor> {
        match &self.b {
            Some(b) => x.layer_norm(Some(&self.w), Some(b), self.eps),
            None => x.rms_norm(Some(&self.w), self.eps),
        }
    }

    pub(crate) fn size_in_bytes(&self) -> usize {
        (self.w.numel() + self.b.as_ref().map_or(0, Tensor::numel)) * 4
    }
}

/// What every layer of one forward step shares.
pub(crate) struct Step<'a> {
    pub config: &'a ModelConfig,
    /// Positions the cache held before this step.
    pub start: usize,
    /// The causal mask `[n, start + n]` of a step of several positions.
    pub mask: Option<&'a Tensor>,
    /// The same with the sliding window, when the step reaches past it.
    pub window_mask: Option<&'a Tensor>,
    /// Each of the model's RoPE tables cut to this step's positions: cos and sin, `[n, 1,
    /// head_dim / 2]` each.
    pub ropes: Vec<(Tensor, Tensor)>,
}

/// One decoder block of a family.
pub(crate) trait Block: Send + Sync {
    /// The block over `x` `[n, hidden]`, layer `l`, writing its keys and values to the cache.
    fn forward(&self, l: usize, x: &Tensor, cache: &mut KvCache, step: &Step) -> Result<Tensor>;
    /// Its linear layers, the first being the one [`super::CausalLM::weight_type`] reports.
    fn linears(&self) -> Vec<&Linear>;
    /// Its norms.
    fn norms(&self) -> Vec<&Norm>;
}

/// The q, k and v projections: three layers or one fused `[q; k; v]` layer (GPT-2, Phi-3).
pub(crate) enum Qkv {
    Separate(Linear, Linear, Linear),
    Fused(Linear),
}

/// Self-attention over the KV cache.
pub(crate) struct Attention {
    pub qkv: Qkv,
    pub o: Linear,
    /// RMSNorm over each head's q and k before RoPE (Qwen3, Gemma 3).
    pub q_norm: Option<Norm>,
    pub k_norm: Option<Norm>,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// The factor on `q·k` (`1 / sqrt(head_dim)` unless the family says otherwise).
    pub scale: f32,
    /// `cap * tanh(score / cap)` on the scores before the mask (Gemma 2).
    pub softcap: Option<f32>,
    /// Which of the model's RoPE tables rotates q and k (`None`: no RoPE).
    pub rope: Option<usize>,
}

impl Attention {
    /// Attention with the config's head counts, the usual scale and the first RoPE table.
    pub(crate) fn new(qkv: Qkv, o: Linear, c: &ModelConfig) -> Attention {
        Attention {
            qkv,
            o,
            q_norm: None,
            k_norm: None,
            heads: c.num_heads,
            kv_heads: c.num_kv_heads,
            head_dim: c.head_dim,
            scale: 1.0 / (c.head_dim as f32).sqrt(),
            softcap: None,
            rope: Some(0),
        }
    }

    /// Attention from separate projections `{p}.{q}`, `{p}.{k}`, `{p}.{v}` and `{p}.{o}` of
    /// the config's shapes (q and k RoPE-ordered), biased on q, k and v with `qkv_bias`, on o
    /// with `o_bias`.
    pub(crate) fn separate(
        src: &mut dyn Source,
        p: &str,
        [q, k, v, o]: [&str; 4],
        c: &ModelConfig,
        (qkv_bias, o_bias): (bool, bool),
    ) -> Result<Attention> {
        let (hid, b) = (c.hidden_size, qkv_bias);
        let (qd, kvd) = (c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim);
        let q = src.rope_linear(&format!("{p}.{q}"), qd, hid, b)?;
        let k = src.rope_linear(&format!("{p}.{k}"), kvd, hid, b)?;
        let v = src.linear(&format!("{p}.{v}"), kvd, hid, b)?;
        let o = src.linear(&format!("{p}.{o}"), hid, qd, o_bias)?;
        Ok(Attention::new(Qkv::Separate(q, k, v), o, c))
    }

    pub(crate) fn linears(&self) -> Vec<&Linear> {
        let mut v = match &self.qkv {
            Qkv::Separate(q, k, v) => vec![q, k, v],
            Qkv::Fused(f) => vec![f],
        };
        v.push(&self.o);
        v
    }

    pub(crate) fn norms(&self) -> Vec<&Norm> {
        self.q_norm.iter().chain(&self.k_norm).collect()
    }

    /// The attention output (after `o`) of `x` `[n, hidden]` (already normed) at layer `l`.
    pub(crate) fn forward(
        &self,
        l: usize,
        x: &Tensor,
        cache: &mut KvCache,
        step: &Step,
    ) -> Result<Tensor> {
        let (n, h, kvh, hd) = (x.shape()[0], self.heads, self.kv_heads, self.head_dim);
        let (q, k, v) = match &self.qkv {
            Qkv::Separate(q, k, v) => {
                let [q, k, v] = Linear::apply_many([q, k, v], x)?;
                (q, k, v)
            }
            Qkv::Fused(f) => {
                let t = f.apply(x)?;
                (
                    t.narrow(1, 0, h * hd)?,
                    t.narrow(1, h * hd, kvh * hd)?,
                    t.narrow(1, (h + kvh) * hd, kvh * hd)?,
                )
            }
        };
        let mut q = q.reshape(&[n, h, hd])?;
        let mut k = k.reshape(&[n, kvh, hd])?;
        let v = v.reshape(&[n, kvh, hd])?;
        if let Some(norm) = &self.q_norm {
            q = norm.apply(&q)?;
        }
        if let Some(norm) = &self.k_norm {
            k = norm.apply(&k)?;
        }
        if let Some((cos, sin)) = self.rope.and_then(|i| step.ropes.get(i)) {
            q = rope(&q, cos, sin)?;
            k = rope(&k, cos, sin)?;
        }
        if !cache.batch.is_empty() {
            // A batched decode step: row `i` is the next position of the sequence in
            // `cache.batch[i]`, attending over that cache alone.
            let mut outs = Vec::with_capacity(n);
            for (i, c) in cache.batch.iter_mut().enumerate() {
                c.write(l, &k.narrow(0, i, 1)?, &v.narrow(0, i, 1)?)?;
                let own = Step {
                    config: step.config,
                    start: c.len(),
                    mask: None,
                    window_mask: None,
                    ropes: Vec::new(),
                };
                outs.push(self.attend(l, &q.narrow(0, i, 1)?, c, &own)?);
            }
            let att = Tensor::cat(&outs.iter().collect::<Vec<_>>(), 0)?;
            return self.o.apply(&att);
        }
        cache.write(l, &k, &v)?;
        let att = self.attend(l, &q, cache, step)?;
        self.o.apply(&att)
    }

    /// Attention of `q` `[n, heads, hd]` over the cache of layer `l` (already holding these
    /// positions): the fused decode kernel for one position, fused SDPA for several; with a
    /// soft-cap, composed from tensor ops (the fused kernels cannot cap the scores).
    fn attend(&self, l: usize, q: &Tensor, cache: &KvCache, step: &Step) -> Result<Tensor> {
        let (n, h, kvh, hd) = (q.shape()[0], self.heads, self.kv_heads, self.head_dim);
        let len = step.start + n;
        let window = step.config.window(l);
        let mask = match window {
            Some(_) if step.window_mask.is_some() => step.window_mask,
            _ => step.mask,
        };
        // A decode step of a sliding layer attends to the last `w` positions: those cache rows.
        let first = match window {
            Some(w) if n == 1 && len > w => len - w,
            _ => 0,
        };
        let rows = len - first;
        if n == 1 && self.softcap.is_none() {
            // The kernel reads the first `rows` of what it is given: the whole cache unless a
            // window starts later.
            let (k, v) = if first == 0 {
                (cache.k[l].clone(), cache.v[l].clone())
            } else {
                (
                    cache.k[l].narrow(0, first, rows)?,
                    cache.v[l].narrow(0, first, rows)?,
                )
            };
            let out = Tensor::attention_decode(&q.reshape(&[h, hd])?, &k, &v, rows, self.scale)?;
            return out.reshape(&[1, h * hd]);
        }
        // [rows, kvh, hd] -> [h, rows, hd], each key-value head repeated for its query group.
        let heads = |t: &Tensor| -> Result<Tensor> {
            let t = t.narrow(0, first, rows)?.permute(&[1, 0, 2])?;
            t.unsqueeze(1)?
                .expand(&[kvh, h / kvh, rows, hd])?
                .reshape(&[h, rows, hd])
        };
        let (k, v) = (heads(&cache.k[l])?, heads(&cache.v[l])?);
        let q = q.permute(&[1, 0, 2])?;
        let out = match self.softcap {
            None => Tensor::scaled_dot_product_attention(
                &q,
                &k,
                &v,
                mask,
                false,
                0.0,
                Some(self.scale),
            )?,
            Some(cap) => {
                // Scores `[h, n, rows]` are materialised: O(n x len) memory per head, where
                // the fused paths stream them.
                let s = q.matmul(&k.transpose(1, 2)?)?.mul_scalar(self.scale)?;
                let s = s.mul_scalar(1.0 / cap)?.tanh()?.mul_scalar(cap)?;
                let s = match mask {
                    Some(m) => s.add(m)?,
                    None => s,
                };
                s.softmax(-1)?.matmul(&v)?
            }
        };
        out.permute(&[1, 0, 2])?.reshape(&[n, h * hd])
    }
}

/// RoPE (the rotate-half form of transformers) of `x` `[n, heads, head_dim]` with tables
/// `[n, 1, head_dim / 2]`.
fn rope(x: &Tensor, c: &Tensor, s: &Tensor) -> Result<Tensor> {
    let half = x.shape()[2] / 2;
    let x1 = x.narrow(-1, 0, half)?;
    let x2 = x.narrow(-1, half, half)?;
    let a = x1.mul(c)?.sub(&x2.mul(s)?)?;
    let b = x2.mul(c)?.add(&x1.mul(s)?)?;
    Tensor::cat(&[&a, &b], -1)
}

/// An MLP's activation.
#[derive(Clone, Copy)]
pub(crate) enum Act {
    /// SiLU (SwiGLU when gated).
    Silu,
    /// GELU in the tanh form (GPT-2's `gelu_new`, Gemma's `gelu_pytorch_tanh`).
    GeluTanh,
}

impl Act {
    fn apply(self, x: &Tensor) -> Result<Tensor> {
        match self {
            Act::Silu => x.silu(),
            Act::GeluTanh => gelu_tanh(x),
        }
    }
}

/// The feed-forward network.
pub(crate) enum Mlp {
    /// `down(act(gate(x)) * up(x))`.
    Gated {
        gate: Linear,
        up: Linear,
        down: Linear,
        act: Act,
    },
    /// The same with gate and up fused as one `[gate; up]` layer (Phi-3).
    FusedGated {
        gate_up: Linear,
        down: Linear,
        act: Act,
    },
    /// `down(act(up(x)))` (GPT-2).
    Plain { up: Linear, down: Linear, act: Act },
}

impl Mlp {
    /// The gated MLP `{p}.{gate}`, `{p}.{up}`, `{p}.{down}` of the config's sizes.
    pub(crate) fn gated(
        src: &mut dyn Source,
        p: &str,
        [gate, up, down]: [&str; 3],
        c: &ModelConfig,
        bias: bool,
        act: Act,
    ) -> Result<Mlp> {
        let (hid, inter) = (c.hidden_size, c.intermediate_size);
        Ok(Mlp::Gated {
            gate: src.linear(&format!("{p}.{gate}"), inter, hid, bias)?,
            up: src.linear(&format!("{p}.{up}"), inter, hid, bias)?,
            down: src.linear(&format!("{p}.{down}"), hid, inter, bias)?,
            act,
        })
    }

    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Mlp::Gated {
                gate,
                up,
                down,
                act,
            } => {
                let [g, u] = Linear::apply_many([gate, up], x)?;
                down.apply(&act.apply(&g)?.mul(&u)?)
            }
            Mlp::FusedGated { gate_up, down, act } => {
                let t = gate_up.apply(x)?;
                let half = t.shape()[1] / 2;
                let g = act.apply(&t.narrow(1, 0, half)?)?;
                down.apply(&g.mul(&t.narrow(1, half, half)?)?)
            }
            Mlp::Plain { up, down, act } => down.apply(&act.apply(&up.apply(x)?)?),
        }
    }

    pub(crate) fn linears(&self) -> Vec<&Linear> {
        match self {
            Mlp::Gated { gate, up, down, .. } => vec![gate, up, down],
            Mlp::FusedGated { gate_up, down, .. } => vec![gate_up, down],
            Mlp::Plain { up, down, .. } => vec![up, down],
        }
    }
}

/// The block of every decoder family: `x + attn(norm(x))`, then `x + mlp(norm(x))` (Llama,
/// GPT-2, Qwen, Phi-3); Gemma norms each sub-layer's output again before it joins the residual
/// (`post_attn_norm`, `post_mlp_norm`).
pub(crate) struct PreNormBlock {
    pub attn_norm: Norm,
    pub attn: Attention,
    pub post_attn_norm: Option<Norm>,
    pub mlp_norm: Norm,
    pub mlp: Mlp,
    pub post_mlp_norm: Option<Norm>,
}

impl PreNormBlock {
    /// The block without post-norms.
    pub(crate) fn new(attn_norm: Norm, attn: Attention, mlp_norm: Norm, mlp: Mlp) -> Self {
        PreNormBlock {
            attn_norm,
            attn,
            post_attn_norm: None,
            mlp_norm,
            mlp,
            post_mlp_norm: None,
        }
    }
}

/// `y` normed by `norm` when there is one.
fn post_norm(norm: &Option<Norm>, y: Tensor) -> Result<Tensor> {
    match norm {
        Some(n) => n.apply(&y),
        None => Ok(y),
    }
}

impl Block for PreNormBlock {
    fn forward(&self, l: usize, x: &Tensor, cache: &mut KvCache, step: &Step) -> Result<Tensor> {
        let a = self
            .attn
            .forward(l, &self.attn_norm.apply(x)?, cache, step)?;
        let x = x.add(&post_norm(&self.post_attn_norm, a)?)?;
        let m = self.mlp.forward(&self.mlp_norm.apply(&x)?)?;
        x.add(&post_norm(&self.post_mlp_norm, m)?)
    }

    fn linears(&self) -> Vec<&Linear> {
        let mut v = self.attn.linears();
        v.extend(self.mlp.linears());
        v
    }

    fn norms(&self) -> Vec<&Norm> {
        let mut v = vec![&self.attn_norm];
        v.extend(&self.post_attn_norm);
        v.push(&self.mlp_norm);
        v.extend(&self.post_mlp_norm);
        v.extend(self.attn.norms());
        v
    }
}

/// The head: tied embeddings serve as the output projection unless the file carries its own
/// copy (`None` then means tied).
pub(crate) fn lm_head(src: &mut dyn Source, name: &str, c: &ModelConfig) -> Result<Option<Weight>> {
    if c.tie_word_embeddings && !src.has(name) {
        return Ok(None);
    }
    src.matrix(name, c.vocab_size, c.hidden_size).map(Some)
}

/// GELU in the tanh form of GPT-2 (`gelu_new`):
/// `0.5 x (1 + tanh(sqrt(2 / π) (x + 0.044715 x³)))`.
pub(super) fn gelu_tanh(x: &Tensor) -> Result<Tensor> {
    let c = (2.0f32 / std::f32::consts::PI).sqrt();
    let x3 = x.mul(x)?.mul(x)?;
    let inner = x.add(&x3.mul_scalar(0.044715)?)?.mul_scalar(c)?;
    x.mul(&inner.tanh()?.add_scalar(1.0)?)?.mul_scalar(0.5)
}
