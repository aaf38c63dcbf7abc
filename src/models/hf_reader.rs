//! Reading a Hugging Face safetensors checkpoint by tensor name for the models outside the
//! decoder families (the BERT-shaped encoders of [`super::Embedder`], [`super::Whisper`]): the
//! checkpoint of a directory, the size check before the first upload, and a [`Reader`] that
//! checks each tensor's dtype and shape against the config before it reaches the device. Also
//! the LayerNorm and biased linear layer both models are built from.

use super::weight::Weight;
use crate::nn::load::Checkpoint;
use crate::{DType, Device, Error, Result, Tensor};
use std::path::{Path, PathBuf};

/// `Ok` for the dtypes a model's weights load in (F32, F16); else `InvalidArgument` of `op`.
pub(super) fn check_dtype(op: &'static str, dtype: DType) -> Result<()> {
    if !matches!(dtype, DType::F32 | DType::F16) {
        return Err(Error::InvalidArgument {
            op,
            message: format!("dtype must be F32 or F16, got {dtype}"),
        });
    }
    Ok(())
}

/// The checkpoint file(s) of a model directory: `model.safetensors` or a sharded index.
pub(super) fn checkpoint_path(op: &'static str, dir: &Path) -> Result<PathBuf> {
    for name in ["model.safetensors", "model.safetensors.index.json"] {
        let p = dir.join(name);
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(Error::Io {
        op,
        path: dir.display().to_string(),
        message: "no model.safetensors or model.safetensors.index.json in this directory".into(),
    })
}

/// Opens the checkpoint `file` and checks that its weights, in `dtype`, fit `device`.
pub(super) fn open(
    op: &'static str,
    file: &Path,
    device: &Device,
    dtype: DType,
) -> Result<Checkpoint> {
    let ckpt = Checkpoint::open(file)?;
    super::fit::check(op, device, super::fit::hf_bytes(&ckpt, dtype))?;
    Ok(ckpt)
}

/// A linear layer `x @ Wᵀ (+ b)`.
pub(super) struct Linear {
    pub w: Weight,
    pub b: Option<Tensor>,
}

impl Linear {
    pub(super) fn apply(&self, x: &Tensor) -> Result<Tensor> {
        match (&self.w, &self.b) {
            // `linear` adds the bias inside the CPU matmul instead of in a second pass.
            (Weight::Dense(w), b) if w.dtype() == DType::F32 => x.linear(w, b.as_ref()),
            (w, Some(b)) => w.matmul_t(x)?.add(b),
            (w, None) => w.matmul_t(x),
        }
    }
}

/// A LayerNorm: f32 weight and bias, and its epsilon.
pub(super) struct Norm {
    w: Tensor,
    b: Tensor,
    eps: f32,
}

impl Norm {
    pub(super) fn apply(&self, x: &Tensor) -> Result<Tensor> {
        x.layer_norm(Some(&self.w), Some(&self.b), self.eps)
    }
}

/// Reads tensors by name (after a prefix), checks their dtype and shape against the config,
/// converts and uploads each; errors are `Error::Format` of `op` naming the file.
#[derive(Clone, Copy)]
pub(super) struct Reader<'a> {
    pub ckpt: &'a Checkpoint,
    pub op: &'static str,
    pub path: &'a Path,
    /// What every name is read after (`"model."`, `"bert."`, ...).
    pub prefix: &'static str,
    pub device: &'a Device,
    /// The dtype of matrices; vectors and tables are f32.
    pub dtype: DType,
}

impl Reader<'_> {
    /// The first of `prefixes` under which the checkpoint holds `probe`; the first of them when
    /// none does. A model is saved bare or inside a task model (`bert.`, `model.`, ...).
    pub(super) fn find_prefix(
        ckpt: &Checkpoint,
        prefixes: &[&'static str],
        probe: &str,
    ) -> &'static str {
        prefixes
            .iter()
            .copied()
            .find(|p| ckpt.shape(&format!("{p}{probe}")).is_some())
            .unwrap_or(prefixes[0])
    }

    fn format_error(&self, message: String) -> Error {
        Error::Format {
            op: self.op,
            path: self.path.display().to_string(),
            message,
        }
    }

    /// Tensor `name` of `shape` on the host, converted to `dtype`.
    pub(super) fn host(&self, name: &str, shape: &[usize], dtype: DType) -> Result<Tensor> {
        let full = format!("{}{name}", self.prefix);
        let missing = || self.format_error(format!("the checkpoint has no tensor {full:?}"));
        let t = self.ckpt.load(&full, Some(dtype))?.ok_or_else(missing)?;
        if !t.dtype().is_float() {
            let message = format!(
                "tensor {full:?} is stored as {}, not a float type",
                t.dtype()
            );
            return Err(self.format_error(message));
        }
        if t.shape() != shape {
            let message = format!(
                "tensor {full:?} has shape {:?}, but config.json implies {shape:?}",
                t.shape()
            );
            return Err(self.format_error(message));
        }
        Ok(t)
    }

    /// An f32 tensor on the device.
    pub(super) fn f32(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        self.host(name, shape, DType::F32)?.to(self.device)
    }

    /// A `[rows, cols]` matrix in the model's dtype on the device.
    pub(super) fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Weight> {
        let t = self.host(name, &[rows, cols], self.dtype)?;
        Ok(Weight::Dense(t.to(self.device)?))
    }

    /// `{name}.weight` `[rows, cols]` and, with `bias`, `{name}.bias`.
    pub(super) fn linear(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
        bias: bool,
    ) -> Result<Linear> {
        let w = self.matrix(&format!("{name}.weight"), rows, cols)?;
        let b = match bias {
            true => Some(self.f32(&format!("{name}.bias"), &[rows])?),
            false => None,
        };
        Ok(Linear { w, b })
    }

    /// The LayerNorm `{name}.weight` and `{name}.bias` of `len` elements.
    pub(super) fn norm(&self, name: &str, len: usize, eps: f32) -> Result<Norm> {
        Ok(Norm {
            w: self.f32(&format!("{name}.weight"), &[len])?,
            b: self.f32(&format!("{name}.bias"), &[len])?,
            eps,
        })
    }
}
