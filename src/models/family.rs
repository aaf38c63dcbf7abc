//! What a decoder family file declares: its `model_type`, its config and its loader. Apart
//! from the registry (`families.rs`) that lists the families, so a family file and the
//! registry do not import each other.

use super::config::{ConfigSpec, ModelConfig};
use super::layers::Source;
use super::model::CausalLM;
use crate::{DType, Device, Result};

/// One family: the `model_type` it runs, what its config holds, how its weights load.
pub(crate) struct Family {
    pub model_type: &'static str,
    pub config: ConfigSpec,
    /// Builds the model from a Hugging Face checkpoint (tensor names as transformers writes
    /// them), reading tensors in file order so progress advances as the loader walks the file.
    pub load: Loader,
    /// The same from a llama.cpp GGUF file whose `general.architecture` is `model_type`
    /// (llama.cpp's tensor names); `None`: such files are refused.
    pub gguf: Option<Loader>,
}

/// Builds a model from the tensors a [`Source`] reads.
pub(crate) type Loader = fn(&mut dyn Source, &ModelConfig, &Device, DType) -> Result<CausalLM>;
