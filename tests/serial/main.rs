//! Tests that read or set state every test of the process shares: the memory, transfer and
//! kernel counters of the shared devices (`memory_allocated`, `transfer_stats`, `kernel_stats`),
//! the shared devices' timeouts, process-wide switches (`set_f16_accumulation`), device-wide
//! profiles (`Device::profile`), the global random generator, and two threads sharing one device
//! for minutes (`concurrent_device`, which other tests running beside it would slow past its
//! timeouts). Every test here holds `common::serial()` for its whole body, so they run one at a
//! time and no other test of this binary moves a counter under them; the other test binaries
//! never run in the same process.

#[path = "../common/mod.rs"]
mod common;

mod autograd_checkpoint;
mod concurrent_device;
mod f16_accumulate;
mod map_read_faults;
mod memory;
mod memory_faults;
mod profile;
mod random;
mod resident_step;
mod scatter;
mod sizes;
