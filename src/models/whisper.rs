//! Whisper speech to text (`model_type` `whisper`) from a Hugging Face directory, as
//! transformers' `WhisperForConditionalGeneration` computes it: the encoder (two convolutions
//! with GELU, the position table, pre-norm blocks, a final norm), the decoder (token and learned
//! positions, causal self-attention over a growing KV cache, cross-attention over the encoder's
//! keys and values computed once per window, a final norm, the output tied to the token table)
//! and greedy decoding as `generate` runs it with `generation_config.json`: the forced prompt
//! (`decoder_start_token_id`, language, task, `<|notimestamps|>`; `forced_decoder_ids` in older
//! checkpoints; the language detected when none is set), `suppress_tokens`,
//! `begin_suppress_tokens` at the first generated position, `max_length` / `max_new_tokens`.
//!
//! Audio longer than one window (30 s) is transcribed in consecutive windows, each decoded on its
//! own with the same prompt, and the texts joined: transformers' long-form path needs timestamp
//! tokens to seek, which this decoder does not produce.

use super::hf_reader::{check_dtype, Linear, Norm, Reader};
use super::tokenizer::Tokenizer;
use super::weight::Weight;
use super::whisper_audio::LogMel;
use super::whisper_generation::{format_error, Generation, OP};
use crate::{Conv2dOptions, DType, Device, Error, Result, Tensor};
use serde_json::Value;
use std::path::Path;

/// `nn.LayerNorm`'s default, which Whisper's layers keep.
const EPS: f32 = 1e-5;

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(super::config::io_error(OP, path))?;
    serde_json::from_str(&text).map_err(|e| format_error(path, e.to_string()))
}

/// The hyper-parameters of `config.json`.
#[derive(Clone, Debug)]
struct Config {
    vocab: usize,
    d: usize,
    mels: usize,
    enc_layers: usize,
    dec_layers: usize,
    enc_heads: usize,
    dec_heads: usize,
    enc_ffn: usize,
    dec_ffn: usize,
    source_positions: usize,
    target_positions: usize,
}

impl Config {
    fn read(path: &Path, v: &Value) -> Result<Config> {
        // Whisper refuses sizes from 2^31 on (the encoder configs take any positive size).
        let uint = |k: &str| {
            super::config::positive_uint(v, k, (1 << 31) - 1).map_err(|m| format_error(path, m))
        };
        match v.get("model_type").and_then(Value::as_str) {
            Some("whisper") => {}
            Some(other) => {
                let message = format!("model_type {other:?} is not whisper");
                return Err(format_error(path, message));
            }
            None => {
                return Err(format_error(
                    path,
                    "config.json has no \"model_type\"".into(),
                ))
            }
        }
        let act = v.get("activation_function").and_then(Value::as_str);
        if act.is_some_and(|a| a != "gelu") {
            let message = format!("activation_function {act:?} is not implemented (gelu)");
            return Err(format_error(path, message));
        }
        if v.get("scale_embedding").and_then(Value::as_bool) == Some(true) {
            return Err(format_error(
                path,
                "scale_embedding true is not implemented".into(),
            ));
        }
        let c = Config {
            vocab: uint("vocab_size")?,
            d: uint("d_model")?,
            mels: uint("num_mel_bins")?,
            enc_layers: uint("encoder_layers")?,
            dec_layers: uint("decoder_layers")?,
            enc_heads: uint("encoder_attention_heads")?,
            dec_heads: uint("decoder_attention_heads")?,
            enc_ffn: uint("encoder_ffn_dim")?,
            dec_ffn: uint("decoder_ffn_dim")?,
            source_positions: uint("max_source_positions")?,
            target_positions: uint("max_target_positions")?,
        };
        for (k, h) in [("encoder", c.enc_heads), ("decoder", c.dec_heads)] {
            if !c.d.is_multiple_of(h) || c.d / h > 256 {
                let message = format!("d_model {} does not split into {h} {k} heads", c.d);
                return Err(format_error(path, message));
            }
        }
        Ok(c)
    }
}

struct Attn {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
}

struct Mlp {
    fc1: Linear,
    fc2: Linear,
}

impl Mlp {
    fn apply(&self, x: &Tensor) -> Result<Tensor> {
        self.fc2.apply(&self.fc1.apply(x)?.gelu()?)
    }
}

/// An encoder layer, or a decoder layer's self-attention and MLP.
struct Layer {
    attn: Attn,
    attn_norm: Norm,
    mlp: Mlp,
    mlp_norm: Norm,
}

impl Layer {
    /// Layer `{p}`: `self_attn`, its norm, the MLP and `final_layer_norm`.
    fn read(r: &Reader, p: &str, d: usize, ffn: usize) -> Result<Layer> {
        Ok(Layer {
            attn: attn(r, &format!("{p}.self_attn"), d)?,
            attn_norm: r.norm(&format!("{p}.self_attn_layer_norm"), d, EPS)?,
            mlp: mlp(r, p, d, ffn)?,
            mlp_norm: r.norm(&format!("{p}.final_layer_norm"), d, EPS)?,
        })
    }
}

struct DecoderLayer {
    own: Layer,
    cross: Attn,
    cross_norm: Norm,
}

/// The attention layers `{p}.{q,k,v,out}_proj` (no bias on k).
fn attn(r: &Reader, p: &str, d: usize) -> Result<Attn> {
    Ok(Attn {
        q: r.linear(&format!("{p}.q_proj"), d, d, true)?,
        k: r.linear(&format!("{p}.k_proj"), d, d, false)?,
        v: r.linear(&format!("{p}.v_proj"), d, d, true)?,
        o: r.linear(&format!("{p}.out_proj"), d, d, true)?,
    })
}

fn mlp(r: &Reader, p: &str, d: usize, ffn: usize) -> Result<Mlp> {
    Ok(Mlp {
        fc1: r.linear(&format!("{p}.fc1"), ffn, d, true)?,
        fc2: r.linear(&format!("{p}.fc2"), d, ffn, true)?,
    })
}

/// What [`Whisper::transcribe`] returns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Transcript {
    /// The text: each window's tokens decoded without special tokens, trimmed, joined by spaces.
    pub text: String,
    /// The generated tokens of every window, concatenated: what a plain
    /// `WhisperForConditionalGeneration.generate` call returns for each window (no prompt, no
    /// end-of-text token).
    pub ids: Vec<u32>,
    /// The full sequence of each 30-s window, as `generate(..., return_dict_in_generate=True)`
    /// returns it: the prompt, the generated tokens and the end-of-text token when one was
    /// generated.
    pub windows: Vec<Vec<u32>>,
}

/// A Whisper model on a device: front end, encoder, decoder, generation settings and tokenizer.
///
/// ```no_run
/// use wgtensor::models::{read_wav, Whisper};
/// use wgtensor::{DType, Device};
/// let whisper = Whisper::load("whisper-tiny", &Device::best(), DType::F32)?;
/// let samples = read_wav("speech.wav", 16_000)?;
/// let t = whisper.transcribe(&samples)?;
/// println!("{} {:?}", t.text, t.ids);
/// # Ok::<(), wgtensor::Error>(())
/// ```
pub struct Whisper {
    c: Config,
    mel: LogMel,
    generation: Generation,
    tokenizer: Option<Tokenizer>,
    device: Device,
    conv1: (Tensor, Tensor),
    conv2: (Tensor, Tensor),
    enc_positions: Tensor,
    encoder: Vec<Layer>,
    enc_norm: Norm,
    tokens: Weight,
    dec_positions: Tensor,
    decoder: Vec<DecoderLayer>,
    dec_norm: Norm,
    head: Weight,
}

impl std::fmt::Debug for Whisper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Whisper(d_model {}, {}+{} layers, {} mels, vocab {} on {})",
            self.c.d, self.c.enc_layers, self.c.dec_layers, self.c.mels, self.c.vocab, self.device
        )
    }
}

/// A decoder's state during one window: the self-attention keys and values so far
/// (`[len, heads, head_dim]` per layer) and the cross-attention ones of the encoder.
struct State {
    self_kv: Vec<Option<(Tensor, Tensor)>>,
    cross_kv: Vec<(Tensor, Tensor)>,
    len: usize,
}

impl Whisper {
    /// Loads a Hugging Face Whisper directory: `config.json`, `model.safetensors`,
    /// `preprocessor_config.json`, `generation_config.json` (optional: `config.json`'s ids are
    /// used without it) and `tokenizer.json` (optional: without it the text is empty). Matrices
    /// in `dtype` (F32 or F16); norms, biases, convolutions and position tables stay f32.
    ///
    /// # Errors
    /// [`Error::Io`] for a missing file; [`Error::Format`] naming an unknown architecture, a
    /// missing or invalid config field, or a missing or misshapen tensor;
    /// [`Error::InvalidArgument`] for another dtype; allocation errors.
    pub fn load(path: impl AsRef<Path>, device: &Device, dtype: DType) -> Result<Whisper> {
        let dir = path.as_ref();
        check_dtype(OP, dtype)?;
        let cpath = dir.join("config.json");
        let cv = read_json(&cpath)?;
        let c = Config::read(&cpath, &cv)?;
        let mel = LogMel::from_file(dir.join("preprocessor_config.json"))?;
        if mel.n_mels() != c.mels || mel.frames() != 2 * c.source_positions {
            let message = format!(
                "preprocessor_config.json gives {} mels x {} frames, config.json expects {} x {}",
                mel.n_mels(),
                mel.frames(),
                c.mels,
                2 * c.source_positions
            );
            return Err(format_error(dir, message));
        }
        let gpath = dir.join("generation_config.json");
        let gv = if gpath.is_file() {
            read_json(&gpath)?
        } else {
            Value::Null
        };
        let generation = Generation::read(&gpath, &gv, &cv)?;
        let tpath = dir.join("tokenizer.json");
        let tokenizer = match tpath.is_file() {
            true => Some(Tokenizer::from_file(&tpath)?),
            false => None,
        };
        let file = dir.join("model.safetensors");
        let ckpt = super::hf_reader::open(OP, &file, device, dtype)?;
        let r = Reader {
            ckpt: &ckpt,
            op: OP,
            path: &file,
            prefix: Reader::find_prefix(&ckpt, &["model.", ""], "encoder.conv1.weight"),
            device,
            dtype,
        };
        let d = c.d;
        let conv = |name: &str, cin: usize| -> Result<(Tensor, Tensor)> {
            Ok((
                r.f32(&format!("encoder.{name}.weight"), &[d, cin, 3])?,
                r.f32(&format!("encoder.{name}.bias"), &[d])?,
            ))
        };
        let encoder = (0..c.enc_layers)
            .map(|i| Layer::read(&r, &format!("encoder.layers.{i}"), d, c.enc_ffn))
            .collect::<Result<Vec<_>>>()?;
        let decoder = (0..c.dec_layers)
            .map(|i| {
                let p = format!("decoder.layers.{i}");
                Ok(DecoderLayer {
                    own: Layer::read(&r, &p, d, c.dec_ffn)?,
                    cross: attn(&r, &format!("{p}.encoder_attn"), d)?,
                    cross_norm: r.norm(&format!("{p}.encoder_attn_layer_norm"), d, EPS)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let tokens = r.matrix("decoder.embed_tokens.weight", c.vocab, d)?;
        // The output projection is tied to the token table unless the file holds its own.
        let head = match ckpt.shape("proj_out.weight") {
            Some(_) => {
                let hr = Reader { prefix: "", ..r };
                hr.linear("proj_out", c.vocab, d, false)?.w
            }
            None => tokens.clone(),
        };
        Ok(Whisper {
            conv1: conv("conv1", c.mels)?,
            conv2: conv("conv2", d)?,
            enc_positions: r.f32("encoder.embed_positions.weight", &[c.source_positions, d])?,
            encoder,
            enc_norm: r.norm("encoder.layer_norm", d, EPS)?,
            tokens,
            dec_positions: r.f32("decoder.embed_positions.weight", &[c.target_positions, d])?,
            decoder,
            dec_norm: r.norm("decoder.layer_norm", d, EPS)?,
            head,
            c,
            mel,
            generation,
            tokenizer,
            device: device.clone(),
        })
    }

    /// The log-mel front end (`preprocessor_config.json`).
    pub fn log_mel(&self) -> &LogMel {
        &self.mel
    }

    /// The device the model runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The encoder's output `[max_source_positions, d_model]` for one window's features
    /// `[num_mel_bins, 2 * max_source_positions]`.
    ///
    /// # Errors
    /// A shape mismatch; device errors.
    pub fn encode(&self, features: &Tensor) -> Result<Tensor> {
        let (d, heads) = (self.c.d, self.c.enc_heads);
        let n = self.c.source_positions;
        let x = features.unsqueeze(0)?;
        let o1 = Conv2dOptions::default().padding(1);
        let x = x.conv1d(&self.conv1.0, Some(&self.conv1.1), &o1)?.gelu()?;
        let x = x
            .conv1d(&self.conv2.0, Some(&self.conv2.1), &o1.stride(2))?
            .gelu()?;
        let mut x = x
            .reshape(&[d, n])?
            .t()?
            .add(&self.enc_positions)?
            .contiguous()?;
        let split = |t: Tensor| t.reshape(&[n, heads, d / heads])?.permute(&[1, 0, 2]);
        for l in &self.encoder {
            let h = l.attn_norm.apply(&x)?;
            let (q, k, v) = (
                split(l.attn.q.apply(&h)?)?,
                split(l.attn.k.apply(&h)?)?,
                split(l.attn.v.apply(&h)?)?,
            );
            let a = Tensor::scaled_dot_product_attention(&q, &k, &v, None, false, 0.0, None)?;
            let a = a.permute(&[1, 0, 2])?.reshape(&[n, d])?;
            x = x.add(&l.attn.o.apply(&a)?)?;
            x = x.add(&l.mlp.apply(&l.mlp_norm.apply(&x)?)?)?;
        }
        self.enc_norm.apply(&x)
    }

    /// A fresh decoder state over an encoder output: each layer's cross-attention keys and
    /// values, computed once.
    fn state(&self, enc: &Tensor) -> Result<State> {
        let (d, heads, n) = (self.c.d, self.c.dec_heads, self.c.source_positions);
        let cross_kv = self
            .decoder
            .iter()
            .map(|l| {
                let k = l.cross.k.apply(enc)?.reshape(&[n, heads, d / heads])?;
                let v = l.cross.v.apply(enc)?.reshape(&[n, heads, d / heads])?;
                Ok((k, v))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(State {
            self_kv: (0..self.decoder.len()).map(|_| None).collect(),
            cross_kv,
            len: 0,
        })
    }

    /// Runs one token at the next position; returns the logits `[vocab]` on the host.
    fn step(&self, s: &mut State, token: u32) -> Result<Vec<f32>> {
        let (d, heads) = (self.c.d, self.c.dec_heads);
        let hd = d / heads;
        let scale = 1.0 / (hd as f32).sqrt();
        if s.len >= self.c.target_positions || token as usize >= self.c.vocab {
            return Err(Error::InvalidArgument {
                op: "Whisper::transcribe",
                message: format!("token {token} at position {} is out of range", s.len),
            });
        }
        let mut x = self
            .tokens
            .rows(&[token])?
            .add(&self.dec_positions.narrow(0, s.len, 1)?)?;
        let n = self.c.source_positions;
        for (i, l) in self.decoder.iter().enumerate() {
            let h = l.own.attn_norm.apply(&x)?;
            let q = l.own.attn.q.apply(&h)?.reshape(&[heads, hd])?;
            let k = l.own.attn.k.apply(&h)?.reshape(&[1, heads, hd])?;
            let v = l.own.attn.v.apply(&h)?.reshape(&[1, heads, hd])?;
            let (k, v) = match s.self_kv[i].take() {
                Some((kc, vc)) => (Tensor::cat(&[&kc, &k], 0)?, Tensor::cat(&[&vc, &v], 0)?),
                None => (k, v),
            };
            let a = Tensor::attention_decode(&q, &k, &v, s.len + 1, scale)?;
            s.self_kv[i] = Some((k, v));
            x = x.add(&l.own.attn.o.apply(&a.reshape(&[1, d])?)?)?;
            let h = l.cross_norm.apply(&x)?;
            let q = l.cross.q.apply(&h)?.reshape(&[heads, hd])?;
            let (kc, vc) = &s.cross_kv[i];
            let a = Tensor::attention_decode(&q, kc, vc, n, scale)?;
            x = x.add(&l.cross.o.apply(&a.reshape(&[1, d])?)?)?;
            x = x.add(&l.own.mlp.apply(&l.own.mlp_norm.apply(&x)?)?)?;
        }
        s.len += 1;
        let logits = self.head.matmul_t(&self.dec_norm.apply(&x)?)?;
        logits.to_vec::<f32>()
    }

    /// Greedy ids of one window (prompt, generated tokens, end of text), as `generate` returns
    /// them, and the prompt's length.
    fn decode_window(&self, features: &Tensor) -> Result<(Vec<u32>, usize)> {
        let enc = self.encode(features)?;
        let mut s = self.state(&enc)?;
        let g = &self.generation;
        let mut ids: Vec<u32> = Vec::new();
        let mut logits = Vec::new();
        for p in &g.prompt {
            let t = match p {
                Some(t) => *t,
                None => {
                    // Language detection: the logits after the start token, only language ids.
                    let best = g
                        .detect_among
                        .iter()
                        .filter(|&&t| (t as usize) < logits.len())
                        .copied()
                        .fold(None, |b: Option<u32>, t| match b {
                            Some(b) if logits[b as usize] >= logits[t as usize] => Some(b),
                            _ => Some(t),
                        });
                    best.ok_or_else(|| Error::InvalidArgument {
                        op: "Whisper::transcribe",
                        message: "no lang_to_id token is inside the vocabulary".into(),
                    })?
                }
            };
            ids.push(t);
            logits = self.step(&mut s, t)?;
        }
        let begin = ids.len();
        let limit = match g.max_new_tokens {
            Some(m) => begin + m,
            None => g.max_length + begin.min(self.c.target_positions / 2 - 1),
        }
        .min(self.c.target_positions);
        while ids.len() < limit {
            for &t in &g.suppress {
                if let Some(x) = logits.get_mut(t as usize) {
                    *x = f32::NEG_INFINITY;
                }
            }
            if ids.len() == begin {
                for &t in &g.begin_suppress {
                    if let Some(x) = logits.get_mut(t as usize) {
                        *x = f32::NEG_INFINITY;
                    }
                }
            }
            // The first maximum, as torch.argmax picks it.
            let mut best = 0;
            for (i, &x) in logits.iter().enumerate() {
                if x > logits[best] {
                    best = i;
                }
            }
            let t = best as u32;
            ids.push(t);
            if g.eos.contains(&t) || ids.len() >= limit {
                break;
            }
            logits = self.step(&mut s, t)?;
        }
        Ok((ids, begin))
    }

    /// Transcribes mono samples at 16 kHz ([`LogMel::sampling_rate`]; see
    /// [`read_wav`](super::read_wav) for files): greedy decoding window by window (30 s each).
    ///
    /// ```no_run
    /// # let whisper = wgtensor::models::Whisper::load("whisper-tiny", &wgtensor::Device::cpu(), wgtensor::DType::F32)?;
    /// let silence = vec![0f32; 16_000];
    /// let t = whisper.transcribe(&silence)?;
    /// println!("{}", t.text);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// Device errors; a tokenizer failure decoding the text.
    pub fn transcribe(&self, samples: &[f32]) -> Result<Transcript> {
        let w = self.mel.window_samples();
        let mut out = Transcript::default();
        let mut texts = Vec::new();
        let mut start = 0;
        loop {
            let end = (start + w).min(samples.len());
            let features = self.mel.features(&samples[start..end], &self.device)?;
            let (ids, begin) = self.decode_window(&features)?;
            log::debug!(
                "whisper window at {} s: {} ids",
                start / self.mel.sampling_rate() as usize,
                ids.len()
            );
            if let Some(t) = &self.tokenizer {
                let text = t.decode(&ids, true)?;
                if !text.trim().is_empty() {
                    texts.push(text.trim().to_string());
                }
            }
            let mut new = &ids[begin.min(ids.len())..];
            if let Some((last, rest)) = new.split_last() {
                if self.generation.eos.contains(last) {
                    new = rest;
                }
            }
            out.ids.extend_from_slice(new);
            out.windows.push(ids);
            start += w;
            if start >= samples.len() {
                break;
            }
        }
        out.text = texts.join(" ");
        Ok(out)
    }
}
