//! Pretrained language models on any device (feature `models`).
//!
//! The top layer of wgtensor: it builds on tensors, `nn` and the checkpoint loaders, and nothing
//! below imports it.

pub mod gguf;
