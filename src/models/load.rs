//! Loading a Hugging Face model directory: `config.json` plus `model.safetensors` or a sharded
//! `model.safetensors.index.json`, one tensor at a time onto the device.

use super::config::ModelConfig;
use super::families::family;
use super::layers::{Linear, Source};
use super::model::CausalLM;
use super::weight::Weight;
use crate::nn::load::Checkpoint;
use crate::{DType, Device, Result, Tensor};
use std::path::Path;

/// Called while loading with (bytes of weights loaded, total bytes).
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64);

/// Where a loader puts a model's tensors (`device`, floating weights in `dtype`) and whom it
/// tells of its progress: what `AutoModel::load` hands each file format's loader.
pub(super) struct Target<'a> {
    pub device: &'a Device,
    pub dtype: DType,
    pub progress: Progress<'a>,
}

pub(super) use super::config::format_error;

/// `Ok` when tensor `name` has the shape `want` that `source` (`config.json`, the metadata)
/// implies; else a format error about the file at `path`.
pub(super) fn check_shape(
    path: &str,
    name: &str,
    got: &[usize],
    want: &[usize],
    source: &str,
) -> Result<()> {
    if got != want {
        let message = format!("tensor {name:?} has shape {got:?}, but {source} implies {want:?}");
        return Err(format_error(path, message));
    }
    Ok(())
}

/// Bytes of weights loaded so far, reported to the caller's [`Progress`] after each tensor.
pub(super) struct Meter<'a> {
    done: u64,
    total: u64,
    progress: Progress<'a>,
}

impl<'a> Meter<'a> {
    pub(super) fn new(total: u64, progress: Progress<'a>) -> Self {
        Meter {
            done: 0,
            total,
            progress,
        }
    }

    /// Counts `bytes` more as loaded and reports (never past the total).
    pub(super) fn advance(&mut self, bytes: u64) {
        self.done += bytes;
        (self.progress)(self.done.min(self.total), self.total);
    }
}

/// Reads tensors by name from a checkpoint, converts each on the host and uploads it before
/// reading the next, so the host holds one tensor at a time beyond the mapped files.
struct Loader<'a> {
    ckpt: &'a Checkpoint,
    path: String,
    device: &'a Device,
    dtype: DType,
    meter: Meter<'a>,
}

impl Loader<'_> {
    fn host(&mut self, name: &str, dtype: DType) -> Result<Tensor> {
        let missing = || format_error(&self.path, format!("the checkpoint has no tensor {name:?}"));
        let t = self.ckpt.load(name, Some(dtype))?.ok_or_else(missing)?;
        if !t.dtype().is_float() {
            // Weights are floats; an integer tensor would load and fail at the first product.
            let message = format!(
                "tensor {name:?} is stored as {}, but model weights must be F32, F16 or BF16",
                t.dtype()
            );
            return Err(format_error(&self.path, message));
        }
        self.meter
            .advance((t.numel() * t.dtype().size_in_bytes()) as u64);
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
        check_shape(&self.path, name, t.shape(), want, "config.json")
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

    /// Hugging Face checkpoints keep q and k rows in their own order: the default
    /// [`Source::rope_linear`] reads them as they are.
    fn linear(&mut self, name: &str, rows: usize, cols: usize, bias: bool) -> Result<Linear> {
        self.linear_t(name, rows, cols, bias, false)
    }

    fn conv1d(&mut self, name: &str, rows: usize, cols: usize) -> Result<Linear> {
        self.linear_t(name, rows, cols, true, true)
    }

    fn table(&mut self, name: &str, rows: usize, cols: usize) -> Result<Tensor> {
        let t = self.host(name, DType::F32)?;
        self.check(name, &t, &[rows, cols])?;
        t.to(self.device)
    }
}

/// Loads a Hugging Face model directory (see [`super::AutoModel::load`]).
pub(crate) fn load_hf(dir: &Path, to: Target<'_>) -> Result<CausalLM> {
    let (device, dtype) = (to.device, to.dtype);
    let config_path = dir.join("config.json");
    let mut config = ModelConfig::from_file(&config_path)?;
    let fam = family(&config.model_type, &config_path.display().to_string())?;
    if let Some(eos) = super::generate::generation_eos(dir)? {
        // transformers' generate stops at generation_config.json's ids (Llama 3 Instruct
        // lists <|eot_id|> there besides config.json's <|end_of_text|>).
        config.eos_token_ids = eos;
    }
    let op = "AutoModel::load";
    let file = super::hf_reader::checkpoint_path(op, dir)?;
    let ckpt = super::hf_reader::open(op, &file, device, dtype)?;
    let total = ckpt.data_bytes();
    let mut ld = Loader {
        ckpt: &ckpt,
        path: file.display().to_string(),
        device,
        dtype,
        meter: Meter::new(total, to.progress),
    };
    (fam.load)(&mut ld, &config, device, dtype)
}
