//! The tensor-op tests, one module per op family (elementwise, integer, compare, reduce, rows,
//! softmax, matmul, convolutions, attention, gather/scatter, joins, views, dtypes, f16,
//! quantized matrices, creation, large tensors, fusion, shader validation, property tests): one
//! test binary, so a fresh `cargo test` links it once. Tests that seed or draw from the global
//! random generator take `common::rng_lock()`.

#[path = "../common/mod.rs"]
mod common;

mod attention;
mod attention_fused;
mod compare;
mod conv;
mod conv_fused;
mod conv_gpu;
mod creation;
mod cross_entropy;
mod dtypes;
mod elementwise;
mod f16;
mod fusion;
mod gather;
mod integer;
mod join;
mod large;
mod large_random;
mod layer_norm;
mod matmul;
mod matmul_kernels;
mod proptest_dtypes;
mod proptest_elementwise;
mod quant;
mod reduce;
mod rows;
mod shaders;
mod softmax;
mod views;
