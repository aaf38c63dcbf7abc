//! The fault tests (FAULTS.md rows): invalid arguments, hostile sizes and ids, device loss
//! (in child processes), optimizer faults: one test binary.

#[path = "../common/mod.rs"]
mod common;

mod device_faults;
mod faults;
mod id_faults;
mod optim_faults;
mod size_faults;
