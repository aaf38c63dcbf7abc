//! The device-side error word. Kernels that read ids (`shaders/ids.wgsl` is prepended to them)
//! never read or write outside a tensor: an out-of-range id gives zeros and is recorded here
//! (`[reported, id bits, bound, op code]`). Nothing waits for it: the next readback copies the
//! word into its own staging buffer behind the data (and clears it in the same batch), so
//! checking costs no extra round trip, and `Device::synchronize` reads it when armed. Only
//! batches that ran such a kernel pay for the check.
//!
//! Each thread has its own word (one of `SLOTS`, bound at a dynamic offset), so a bad id is
//! reported to the thread that launched the op, never to an unrelated readback of another
//! thread sharing the device (threads past `SLOTS` share words).
//!
//! A leaf: owns its buffer, its bind group and the `armed` flag; callers hand it the device.

use crate::{Error, Result};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Bytes of the error word (four u32).
pub(crate) const BYTES: u64 = 16;

/// Error words per device (one per thread; a bit each in `armed`).
const SLOTS: usize = 64;

static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static SLOT: usize = NEXT_SLOT.fetch_add(1, Ordering::Relaxed) % SLOTS;
}

/// The calling thread's error word.
pub(crate) fn slot() -> usize {
    SLOT.with(|s| *s)
}

/// Ops that report through the error word, by code (the low byte of the word's last entry;
/// bit 8 says the ids were signed).
const OPS: [&str; 6] = [
    "index_select",
    "gather",
    "scatter_add",
    "index_add",
    "cross_entropy",
    "QTensor::gather_rows",
];

/// The code a kernel reports for `op` with ids of the given signedness.
pub(crate) fn code(op: &'static str, signed: bool) -> u32 {
    let k = OPS.iter().position(|&o| o == op).unwrap_or(0) as u32;
    k | (u32::from(signed) << 8)
}

pub(crate) struct ErrorWord {
    pub buffer: wgpu::Buffer,
    /// A small read-only buffer bound where an entry point has no use for an input.
    pub dummy: wgpu::Buffer,
    bind: OnceLock<wgpu::BindGroup>,
    /// Bit `s`: a checking kernel of slot `s` was recorded since its word was last read.
    armed: AtomicU64,
    /// Bytes between words: `min_storage_buffer_offset_alignment` (dynamic offsets).
    stride: u64,
}

impl ErrorWord {
    pub(crate) fn new(dev: &wgpu::Device, align: u64) -> ErrorWord {
        let stride = align.max(BYTES);
        let make = |label, size, usage| {
            dev.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size,
                usage,
                mapped_at_creation: false,
            })
        };
        use wgpu::BufferUsages as U;
        ErrorWord {
            buffer: make(
                "wgtensor::id_errors",
                stride * SLOTS as u64,
                U::STORAGE | U::COPY_SRC | U::COPY_DST,
            ),
            dummy: make("wgtensor::unused_input", BYTES, U::STORAGE),
            bind: OnceLock::new(),
            armed: AtomicU64::new(0),
            stride,
        }
    }

    /// The bind group of `@group(1)` (the word), made once with `layout`.
    pub(crate) fn bind_group(
        &self,
        dev: &wgpu::Device,
        layout: &wgpu::BindGroupLayout,
    ) -> &wgpu::BindGroup {
        self.bind.get_or_init(|| {
            dev.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("wgtensor::id_errors"),
                layout,
                entries: &[wgpu::BindGroupEntry {
                    binding: 0,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: &self.buffer,
                        offset: 0,
                        size: wgpu::BufferSize::new(BYTES),
                    }),
                }],
            })
        })
    }

    /// The dynamic offset of the calling thread's word.
    pub(crate) fn offset(&self) -> u32 {
        (slot() as u64 * self.stride) as u32
    }

    /// Notes that the calling thread recorded a kernel that may report.
    pub(crate) fn arm(&self) {
        self.armed.fetch_or(1 << slot(), Ordering::SeqCst);
    }

    /// Whether the calling thread's word must be read with its next readback; clears the flag
    /// (the caller copies and clears the word in the batch it submits next).
    pub(crate) fn take_armed(&self) -> bool {
        let bit = 1u64 << slot();
        self.armed.fetch_and(!bit, Ordering::SeqCst) & bit != 0
    }

    /// Records the copy of the calling thread's word to `staging` at `at`, then clears it.
    pub(crate) fn copy_and_clear(
        &self,
        enc: &mut wgpu::CommandEncoder,
        staging: &wgpu::Buffer,
        at: u64,
    ) {
        let from = slot() as u64 * self.stride;
        enc.copy_buffer_to_buffer(&self.buffer, from, staging, at, BYTES);
        enc.clear_buffer(&self.buffer, from, Some(BYTES));
    }
}

/// The error recorded in `bytes` (the word as read back), if any.
pub(crate) fn decode(bytes: &[u8]) -> Result<()> {
    let w: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if w.len() < 4 || w[0] == 0 {
        return Ok(());
    }
    let op = OPS.get((w[3] & 0xff) as usize).copied().unwrap_or("index");
    let index = if w[3] & 0x100 != 0 {
        i64::from(w[1] as i32)
    } else {
        i64::from(w[1])
    };
    Err(Error::IndexOutOfRange {
        op,
        index,
        bound: w[2] as usize,
    })
}
