//! Leaf types of the transfer paths: the readback staging pool and the transfer counters, each
//! with its own lock (taken alone, for a lookup or an insert).

use super::memory::Buckets;
use super::sync::lock;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Mutex;

/// Staging buffers kept per size bucket, and in total: reuse is the pinned-memory analog, but a
/// program that once read a huge tensor should not keep that much host-visible memory forever.
const STAGING_PER_BUCKET: usize = 4;
const STAGING_MAX_BYTES: u64 = 256 << 20;

/// Whether to warn about data moved back and forth (`wgtensor::warn_on_transfer_churn`).
pub(crate) static WARN_CHURN: AtomicBool = AtomicBool::new(false);

/// Transfer counters of one device.
#[derive(Default)]
pub(crate) struct TransferCounters {
    pub uploads: AtomicU64,
    pub upload_bytes: AtomicU64,
    pub downloads: AtomicU64,
    pub download_bytes: AtomicU64,
    pub wait_nanos: AtomicU64,
    pub churn: AtomicU64,
    pub direct_uploads: AtomicU64,
    pub direct_downloads: AtomicU64,
    pub(crate) warned: AtomicBool,
    /// Length and a cheap fingerprint of the last bytes read back, to spot them coming back.
    pub(crate) last_read: Mutex<Option<(usize, u64)>>,
}

/// Reusable MAP_READ buffers by bucket size.
#[derive(Default)]
pub(crate) struct StagingPool(Mutex<Buckets>);

impl StagingPool {
    pub(crate) fn take(&self, capacity: u64) -> Option<wgpu::Buffer> {
        lock(&self.0).take(capacity)
    }

    /// Keeps `buffer` for reuse, within the per-bucket and total bounds.
    pub(crate) fn give(&self, capacity: u64, buffer: wgpu::Buffer) {
        let mut f = lock(&self.0);
        if f.count(capacity) < STAGING_PER_BUCKET && f.bytes() + capacity <= STAGING_MAX_BYTES {
            f.keep(capacity, buffer);
        }
    }

    pub(crate) fn clear(&self) {
        lock(&self.0).clear();
    }
}

/// FNV-1a over the length, the first and the last 256 bytes: enough to tell "the same tensor
/// again" in a loop, cheap enough to run on every transfer.
pub(crate) fn fingerprint(bytes: &[u8]) -> (usize, u64) {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let head = &bytes[..bytes.len().min(256)];
    let tail = &bytes[bytes.len().saturating_sub(256)..];
    for &b in head.iter().chain(tail) {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    (bytes.len(), h)
}
