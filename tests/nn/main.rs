//! Autograd, modules, optimizers, training, data loading, checkpoints and safetensors: one test
//! binary of the `nn` area. Tests that seed or draw from the global random generator take
//! `common::rng_lock()`.

#[path = "../common/mod.rs"]
mod common;

mod autograd;
mod checkpoint_formats;
mod data_loader;
mod data_parallel;
mod grad_scaler;
mod mixed_precision;
mod nn;
mod optim;
mod safetensors;
mod train;
