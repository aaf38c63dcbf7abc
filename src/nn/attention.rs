//! Attention layers: `MultiheadAttention` and a pre-norm `TransformerBlock`.

use super::{Dropout, LayerNorm, Linear, Module};
use crate::{Device, Error, Result, Tensor};

/// Multi-head attention over batch-first `[N, L, E]` inputs, PyTorch's
/// `nn.MultiheadAttention(embed_dim, num_heads, bias=True, batch_first=True)`, with the same
/// parameter names (`in_proj_weight` `[3E, E]`, `in_proj_bias`, `out_proj.weight`,
/// `out_proj.bias`) so PyTorch state dicts load.
///
/// [`Module::forward`] is self-attention (causal when built with `causal = true`);
/// [`MultiheadAttention::attend`] takes separate query, key and value and a mask.
///
/// ```
/// use wgtensor::nn::{Module, MultiheadAttention};
/// use wgtensor::{Device, Tensor};
/// let d = Device::best();
/// let mha = MultiheadAttention::new(16, 4, true, &d)?;
/// let x = Tensor::randn(&[2, 5, 16], &d)?;
/// assert_eq!(mha.forward(&x)?.shape(), &[2, 5, 16]);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct MultiheadAttention {
    heads: usize,
    in_proj: Linear,
    out_proj: Linear,
    causal: bool,
    dropout: f32,
    training: bool,
}

impl MultiheadAttention {
    /// `embed_dim` split over `heads`; `causal` masks future positions in
    /// [`Module::forward`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `heads` does not divide `embed_dim`; device errors.
    ///
    /// ```
    /// use wgtensor::nn::{Module, MultiheadAttention};
    /// let m = MultiheadAttention::new(8, 2, false, &wgtensor::Device::cpu())?;
    /// assert_eq!(m.num_parameters(), 4 * (8 * 8 + 8));
    /// assert!(MultiheadAttention::new(8, 3, false, &wgtensor::Device::cpu()).is_err());
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn new(
        embed_dim: usize,
        heads: usize,
        causal: bool,
        device: &Device,
    ) -> Result<MultiheadAttention> {
        if heads == 0 || !embed_dim.is_multiple_of(heads) {
            return Err(Error::InvalidArgument {
                op: "MultiheadAttention::new",
                message: format!("{heads} heads must divide embed_dim {embed_dim}"),
            });
        }
        Ok(MultiheadAttention {
            heads,
            in_proj: Linear::new(embed_dim, 3 * embed_dim, true, device)?,
            out_proj: Linear::new(embed_dim, embed_dim, true, device)?,
            causal,
            dropout: 0.0,
            training: true,
        })
    }

    /// Dropout on the attention weights while training (PyTorch's `dropout`).
    ///
    /// ```
    /// let m = wgtensor::nn::MultiheadAttention::new(8, 2, true, &wgtensor::Device::cpu())?.with_dropout(0.1);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn with_dropout(mut self, p: f32) -> MultiheadAttention {
        self.dropout = p;
        self
    }

    /// `[N, L, E]` to `[N, heads, L, E / heads]`.
    fn split(&self, t: &Tensor) -> Result<Tensor> {
        let &[n, l, e] = t.shape() else {
            return Err(Error::InvalidArgument {
                op: "MultiheadAttention::forward",
                message: format!("expects [batch, seq, embed], got {:?}", t.shape()),
            });
        };
        t.reshape(&[n, l, self.heads, e / self.heads])?
            .transpose(1, 2)
    }

    /// Attention of `query` `[N, L, E]` over `key`/`value` `[N, S, E]`: projections, per-head
    /// [`Tensor::scaled_dot_product_attention`] (with `mask` and `is_causal` as there), and the
    /// output projection.
    ///
    /// # Errors
    /// Shape errors naming the operands; the errors of the ops.
    ///
    /// ```
    /// use wgtensor::nn::MultiheadAttention;
    /// use wgtensor::{Device, Tensor};
    /// let d = Device::cpu();
    /// let m = MultiheadAttention::new(8, 2, false, &d)?;
    /// let q = Tensor::randn(&[1, 3, 8], &d)?;
    /// let kv = Tensor::randn(&[1, 6, 8], &d)?;
    /// assert_eq!(m.attend(&q, &kv, &kv, None, false)?.shape(), &[1, 3, 8]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn attend(
        &self,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        mask: Option<&Tensor>,
        is_causal: bool,
    ) -> Result<Tensor> {
        let w = self.in_proj.weight();
        let e = w.shape()[1];
        let b = self.in_proj_bias();
        let proj = |x: &Tensor, i: usize| -> Result<Tensor> {
            let bi = b.as_ref().map(|b| b.narrow(0, i * e, e)).transpose()?;
            x.linear(&w.narrow(0, i * e, e)?, bi.as_ref())
        };
        // Three projections with row blocks of the packed weight, also for self-attention:
        // splitting one [.., 3E] product instead would make backward assemble a [.., 3E]
        // gradient of the activations from three zero-padded pieces, where this way only the
        // small [3E, E] weight gradient is assembled.
        let (q, k, v) = (proj(query, 0)?, proj(key, 1)?, proj(value, 2)?);
        let p = if self.training { self.dropout } else { 0.0 };
        let o = Tensor::scaled_dot_product_attention(
            &self.split(&q)?,
            &self.split(&k)?,
            &self.split(&v)?,
            mask,
            is_causal,
            p,
            None,
        )?;
        let &[n, l, _] = query.shape() else {
            unreachable!("checked by split")
        };
        let o = o.transpose(1, 2)?.reshape(&[n, l, e])?;
        self.out_proj.forward(&o)
    }

    fn in_proj_bias(&self) -> Option<Tensor> {
        self.in_proj.bias().cloned()
    }
}

impl Module for MultiheadAttention {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.attend(x, x, x, None, self.causal)
    }
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut v = Vec::new();
        for (n, t) in self.in_proj.named_parameters() {
            v.push((format!("in_proj_{n}"), t));
        }
        for (n, t) in self.out_proj.named_parameters() {
            v.push((format!("out_proj.{n}"), t));
        }
        v
    }
    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        let mut v = Vec::new();
        for (n, t) in self.in_proj.named_parameters_mut() {
            v.push((format!("in_proj_{n}"), t));
        }
        for (n, t) in self.out_proj.named_parameters_mut() {
            v.push((format!("out_proj.{n}"), t));
        }
        v
    }
    fn set_training(&mut self, training: bool) {
        self.training = training;
    }
}

/// A pre-norm transformer block (GPT-2 style): `x + attn(ln_1(x))`, then
/// `x + mlp(ln_2(x))` with a `dim -> hidden -> dim` GELU MLP; dropout on both residual
/// branches while training. Parameters: `ln_1.*`, `attn.*`, `ln_2.*`, `mlp.fc.*`,
/// `mlp.proj.*`.
///
/// ```
/// use wgtensor::nn::{Module, TransformerBlock};
/// use wgtensor::{Device, Tensor};
/// let d = Device::best();
/// let block = TransformerBlock::new(16, 2, 64, true, 0.0, &d)?;
/// let x = Tensor::randn(&[2, 7, 16], &d)?;
/// assert_eq!(block.forward(&x)?.shape(), &[2, 7, 16]);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct TransformerBlock {
    ln_1: LayerNorm,
    attn: MultiheadAttention,
    ln_2: LayerNorm,
    fc: Linear,
    proj: Linear,
    drop: Dropout,
}

impl TransformerBlock {
    /// `dim` features, `heads` attention heads, an MLP of `hidden` units, causal attention
    /// when `causal`, residual dropout `dropout`.
    ///
    /// # Errors
    /// As [`MultiheadAttention::new`] and [`Dropout::new`].
    ///
    /// ```
    /// use wgtensor::nn::{Module, TransformerBlock};
    /// let b = TransformerBlock::new(8, 2, 32, true, 0.1, &wgtensor::Device::cpu())?;
    /// assert!(b.named_parameters().iter().any(|(n, _)| n == "attn.in_proj_weight"));
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn new(
        dim: usize,
        heads: usize,
        hidden: usize,
        causal: bool,
        dropout: f32,
        device: &Device,
    ) -> Result<TransformerBlock> {
        Ok(TransformerBlock {
            ln_1: LayerNorm::new(dim, device)?,
            attn: MultiheadAttention::new(dim, heads, causal, device)?,
            ln_2: LayerNorm::new(dim, device)?,
            fc: Linear::new(dim, hidden, true, device)?,
            proj: Linear::new(hidden, dim, true, device)?,
            drop: Dropout::new(dropout)?,
        })
    }
}

impl Module for TransformerBlock {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let a = self.attn.forward(&self.ln_1.forward(x)?)?;
        let x = x.add(&self.drop.forward(&a)?)?;
        let h = self.fc.forward(&self.ln_2.forward(&x)?)?.gelu()?;
        let m = self.proj.forward(&h)?;
        x.add(&self.drop.forward(&m)?)
    }
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut v = Vec::new();
        let parts: [(&str, &dyn Module); 5] = [
            ("ln_1", &self.ln_1),
            ("attn", &self.attn),
            ("ln_2", &self.ln_2),
            ("mlp.fc", &self.fc),
            ("mlp.proj", &self.proj),
        ];
        for (p, m) in parts {
            for (n, t) in m.named_parameters() {
                v.push((format!("{p}.{n}"), t));
            }
        }
        v
    }
    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        let mut v = Vec::new();
        let parts: [(&str, &mut dyn Module); 5] = [
            ("ln_1", &mut self.ln_1),
            ("attn", &mut self.attn),
            ("ln_2", &mut self.ln_2),
            ("mlp.fc", &mut self.fc),
            ("mlp.proj", &mut self.proj),
        ];
        for (p, m) in parts {
            for (n, t) in m.named_parameters_mut() {
                v.push((format!("{p}.{n}"), t));
            }
        }
        v
    }
    fn set_training(&mut self, training: bool) {
        self.attn.set_training(training);
        self.drop.set_training(training);
    }
}
