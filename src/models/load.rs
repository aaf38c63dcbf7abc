//! Loading a Hugging Face model directory: `config.json` plus `model.safetensors` or a sharded
//! `model.safetensors.index.json`, one tensor at a time onto the device.

use super::config::{Architecture, ModelConfig};
use super::llama::{self, Names, Source};
use super::model::{Block, CausalLM, Linear, Norm};
use super::weight::Weight;
use crate::nn::load::Checkpoint;
use crate::{DType, Device, Error, Result, Tensor};
use std::path::Path;

/// Called while loading with (bytes of weights loaded, total bytes).
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64);

/// Reads tensors by name from a checkpoint, converts each on the host and uploads it before
/// reading the next, so the host holds one tensor at a time beyond the mapped files.
struct Loader<'a> {
    ckpt: &'a Checkpoint,
    path: String,
    device: &'a Device,
    dtype: DType,
    done: u64,
    total: u64,
    progress: Progress<'a>,
}

impl Loader<'_> {
    fn host(&mut self, name: &str, dtype: DType) -> Result<Tensor> {
        let t = self
            .ckpt
            .load(name, Some(dtype))?
            .ok_or_else(|| Error::Format {
                op: "AutoModel::load",
                path: self.path.clone(),
                message: format!("the checkpoint has no tensor {name:?}"),
            })?;
        self.done += (t.numel() * t.dtype().size_in_bytes()) as u64;
        (self.progress)(self.done.min(self.total), self.total);
        Ok(t)
    }

    /// A `[rows, cols]` matrix in the model's dtype; `transposed` files hold `[cols, rows]`
    /// (GPT-2's Conv1D).
    fn matrix_t(
        &mut self,
        name: &str,
        rows: usize,
        cols: usize,
        transposed: bool,
    ) -> Result<Weight> {
        let t = self.host(name, self.dtype)?;
        let t = if transposed {
            self.check(name, &t, &[cols, rows])?;
            t.t()?.contiguous()?
        } else {
            self.check(name, &t, &[rows, cols])?;
            t
        };
        Ok(Weight::Dense(t.to(self.device)?))
    }

    /// A linear layer whose `transposed` weight is read as in [`Loader::matrix_t`].
    fn linear_t(
        &mut self,
        prefix: &str,
        rows: usize,
        cols: usize,
        bias: bool,
        transposed: bool,
    ) -> Result<Linear> {
        let w = self.matrix_t(&format!("{prefix}.weight"), rows, cols, transposed)?;
        let b = if bias {
            Some(self.vector(&format!("{prefix}.bias"), rows)?)
        } else {
            None
        };
        Ok(Linear { w, b })
    }

    fn check(&self, name: &str, t: &Tensor, want: &[usize]) -> Result<()> {
        if t.shape() != want {
            return Err(Error::Format {
                op: "AutoModel::load",
                path: self.path.clone(),
                message: format!(
                    "tensor {name:?} has shape {:?}, but config.json implies {want:?}",
                    t.shape()
                ),
            });
        }
        Ok(())
    }
}

impl Source for Loader<'_> {
    fn has(&self, name: &str) -> bool {
        self.ckpt.shape(name).is_some()
    }

    fn vector(&mut self, name: &str, len: usize) -> Result<Tensor> {
        let t = self.host(name, DType::F32)?;
        self.check(name, &t, &[len])?;
        t.to(self.device)
    }

    fn matrix(&mut self, name: &str, rows: usize, cols: usize) -> Result<Weight> {
        self.matrix_t(name, rows, cols, false)
    }

    fn linear(
        &mut self,
        prefix: &str,
        rows: usize,
        cols: usize,
        bias: bool,
        rope_heads: Option<usize>,
    ) -> Result<Linear> {
        if let Some(heads) = rope_heads {
            // Only llama.cpp files store permuted rows; a Hugging Face checkpoint never does.
            return Err(Error::Format {
                op: "AutoModel::load",
                path: self.path.clone(),
                message: format!(
                    "{prefix}: Hugging Face checkpoints keep q and k rows in their own order, \
                     so there are no rows permuted over {heads} heads to restore"
                ),
            });
        }
        self.linear_t(prefix, rows, cols, bias, false)
    }
}

/// Llama-family tensor names in a Hugging Face checkpoint.
const HF_LLAMA: Names = Names {
    embed: "model.embed_tokens.weight",
    layer: "model.layers",
    attn_norm: "input_layernorm",
    q: "self_attn.q_proj",
    k: "self_attn.k_proj",
    v: "self_attn.v_proj",
    o: "self_attn.o_proj",
    mlp_norm: "post_attention_layernorm",
    gate: "mlp.gate_proj",
    up: "mlp.up_proj",
    down: "mlp.down_proj",
    final_norm: "model.norm.weight",
    lm_head: "lm_head.weight",
};

/// The checkpoint file(s) of a model directory.
fn checkpoint_path(dir: &Path) -> Result<std::path::PathBuf> {
    for name in ["model.safetensors", "model.safetensors.index.json"] {
        let p = dir.join(name);
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(Error::Io {
        op: "AutoModel::load",
        path: dir.display().to_string(),
        message: "no model.safetensors or model.safetensors.index.json in this directory".into(),
    })
}

/// Loads a Hugging Face model directory (see [`super::AutoModel::load`]).
pub(crate) fn load_hf(
    dir: &Path,
    device: &Device,
    dtype: DType,
    progress: Progress<'_>,
) -> Result<CausalLM> {
    let config = ModelConfig::from_file(dir.join("config.json"))?;
    let file = checkpoint_path(dir)?;
    let ckpt = Checkpoint::open(&file)?;
    super::fit::check(device, super::fit::hf_bytes(&ckpt, dtype))?;
    let mut ld = Loader {
        total: ckpt.data_bytes(),
        ckpt: &ckpt,
        path: file.display().to_string(),
        device,
        dtype,
        done: 0,
        progress,
    };
    let c = &config;
    let (hid, inter, voc) = (c.hidden_size, c.intermediate_size, c.vocab_size);
    let qd = c.num_heads * c.head_dim;
    let model = match c.architecture {
        Architecture::Llama => llama::build(&mut ld, &HF_LLAMA, c, device, dtype, false)?,
        Architecture::Gpt2 => {
            // Hub checkpoints of GPT-2 name tensors with or without the `transformer.` prefix.
            let pre = if ld.has("transformer.wte.weight") {
                "transformer."
            } else {
                ""
            };
            let embed = ld.matrix(&format!("{pre}wte.weight"), voc, hid)?;
            let pos = ld.host(&format!("{pre}wpe.weight"), DType::F32)?;
            ld.check("wpe.weight", &pos, &[c.max_position_embeddings, hid])?;
            let positions = Some(pos.to(device)?);
            let mut blocks = Vec::with_capacity(c.num_layers);
            for i in 0..c.num_layers {
                let p = format!("{pre}h.{i}");
                let mut norm = |n: &str| -> Result<Norm> {
                    Ok(Norm {
                        w: ld.vector(&format!("{p}.{n}.weight"), hid)?,
                        b: Some(ld.vector(&format!("{p}.{n}.bias"), hid)?),
                    })
                };
                let ln1 = norm("ln_1")?;
                let ln2 = norm("ln_2")?;
                blocks.push(Block::Gpt2 {
                    ln1,
                    qkv: ld.linear_t(&format!("{p}.attn.c_attn"), 3 * qd, hid, true, true)?,
                    proj: ld.linear_t(&format!("{p}.attn.c_proj"), hid, qd, true, true)?,
                    ln2,
                    fc: ld.linear_t(&format!("{p}.mlp.c_fc"), inter, hid, true, true)?,
                    fc_proj: ld.linear_t(&format!("{p}.mlp.c_proj"), hid, inter, true, true)?,
                });
            }
            let final_norm = Norm {
                w: ld.vector(&format!("{pre}ln_f.weight"), hid)?,
                b: Some(ld.vector(&format!("{pre}ln_f.bias"), hid)?),
            };
            let lm_head = if ld.has("lm_head.weight") && !c.tie_word_embeddings {
                Some(ld.matrix("lm_head.weight", voc, hid)?)
            } else {
                None
            };
            CausalLM {
                config: config.clone(),
                device: device.clone(),
                dtype,
                embed,
                positions,
                blocks,
                final_norm,
                lm_head,
                rope: None,
            }
        }
    };
    Ok(model)
}
