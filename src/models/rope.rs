//! Rotary position embeddings: the cos/sin tables every rotary family shares, below the model
//! and family files that use them.

use super::config::ModelConfig;
use crate::storage::try_vec;
use crate::{Device, Error, Result, Tensor};
use std::sync::Mutex;

/// RoPE's cos and sin of `position * inv_freq`, `[len, head_dim / 2]` each, built on first use
/// for the positions a KV cache can hold and rebuilt larger when a larger cache asks: a model
/// with a context of 2^24 positions costs nothing at load, and a short generation only the
/// rows it can reach. Each build is counted against the device's memory budget first, and its
/// host buffer is reserved fallibly, so a hostile size is [`crate::Error::OutOfMemory`], never
/// an abort.
pub(crate) struct Rope {
    inv_freq: Vec<f32>,
    /// The tables built so far (their row count is how many positions they cover).
    tables: Mutex<Option<(Tensor, Tensor)>>,
}

impl Rope {
    pub(crate) fn new(c: &ModelConfig) -> Rope {
        Rope::from_inv_freq(c.inv_freq())
    }

    /// Tables of these inverse frequencies (a family with several bases: Gemma 3's local
    /// layers).
    pub(crate) fn from_inv_freq(inv_freq: Vec<f32>) -> Rope {
        Rope {
            inv_freq,
            tables: Mutex::new(None),
        }
    }

    /// Tables covering positions `0..len` at least, on `device`.
    pub(crate) fn tables(&self, len: usize, device: &Device) -> Result<(Tensor, Tensor)> {
        // The lock only guards two tensor handles, valid even if a builder panicked.
        let mut t = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((cos, sin)) = t.as_ref().filter(|(c, _)| c.shape()[0] >= len) {
            return Ok((cos.clone(), sin.clone()));
        }
        // Dropped first, so a larger table never coexists with the one it replaces.
        *t = None;
        let half = self.inv_freq.len();
        let n = len
            .checked_mul(half)
            .ok_or_else(|| Error::InvalidArgument {
                op: "rope tables",
                message: format!("{len} positions x {half} frequencies overflow usize"),
            })?;
        super::fit::check("rope tables", device, (n as u64).saturating_mul(8))?;
        let mut cos = try_vec::<f32>("rope tables", n)?;
        let mut sin = try_vec::<f32>("rope tables", n)?;
        for p in 0..len {
            for &f in &self.inv_freq {
                // The angle rounded to f32 first, as transformers forms it.
                let a = (p as f32 * f) as f64;
                cos.push(a.cos() as f32);
                sin.push(a.sin() as f32);
            }
        }
        let built = (
            Tensor::from_vec(cos, &[len, half], device)?,
            Tensor::from_vec(sin, &[len, half], device)?,
        );
        *t = Some(built.clone());
        Ok(built)
    }
}
