//! The pretrained-model tests (feature `models`), one module per area: Hugging Face directories
//! against transformers (`hf`), model families (`families`), GGUF files (`gguf`,
//! `gguf_models`), decoding (`decode`), batched generation (`batch`), chat templates (`chat`),
//! sentence embeddings (`embed`), speech to text (`whisper`), hostile checkpoints (`hostile`) and
//! the examples' command lines (`example_cli`): one test binary, so it links once. The
//! memory-budget tests keep a binary of their own (`models_budget.rs`): they compare
//! process-wide allocation counts that any test beside them would move.

#[path = "../common/mod.rs"]
mod common;

mod batch;
mod chat;
mod decode;
mod embed;
mod example_cli;
mod families;
mod gguf;
mod gguf_models;
mod hf;
mod hostile;
mod hostile_families;
mod whisper;
