//! Size checks a device makes before an op builds anything for its result: questions about the
//! device, not its data, so they are answered here from `backend(device)` rather than by a
//! `BackendStorage` method (which needs an operand's storage).

use super::{backend, Backend};
use crate::{Device, Result};

/// `Error::BufferTooLarge` naming `op` when a buffer of `bytes` (a whole number of 4-byte
/// words) cannot exist on `device` (a GPU's `max_buffer_size`); the CPU has no such limit (an
/// allocation it cannot make is an out-of-memory error when it is made).
pub(crate) fn check_buffer_size(op: &'static str, device: &Device, bytes: u64) -> Result<()> {
    match backend(device) {
        Backend::Cpu => Ok(()),
        Backend::Gpu(g) => g.check_buffer_size(op, bytes),
    }
}
