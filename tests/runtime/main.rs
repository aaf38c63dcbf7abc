//! Devices, adapters, autotuning, determinism, thread counts, kernel counters, the device
//! report and the source-layering check: one test binary. Tests that need process-wide
//! state of their own (environment variables, autotune cache) run in child processes of this
//! binary (`common::run_child`, or their own `--exact` child commands).

#[path = "../common/mod.rs"]
mod common;

mod autotune;
mod determinism;
mod device_report;
mod devices;
mod kernel_stats;
mod layers;
mod thread_counts;
