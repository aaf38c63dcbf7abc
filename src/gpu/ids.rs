//! Device-side id checks. Kernels that read ids (`shaders/ids.wgsl` is prepended to them) never
//! read or write outside a tensor: an out-of-range id gives zeros and is recorded in an error
//! word (`[reported, id bits, bound, op code]`). Nothing waits for it.
//!
//! The error follows the data, not the thread: every checking launch gets a word of its own (a
//! [`Check`]), and the buffer it writes is tainted with it. A launch or copy whose input is
//! tainted taints its output with the same checks, so anything derived from a bad gather
//! carries them too. A readback of a tainted buffer copies the pending words into its staging
//! buffer behind the data (the same submit and wait, no extra round trip) and fails if any
//! recorded a bad id; the data stays poisoned (every later readback of it fails too). A check
//! that came back clean is forgotten. `Device::synchronize` resolves the checks launched by the
//! calling thread and reports each error it finds once. There is no limit on threads or checks:
//! words come from a pool that grows by chunks and reuses the words of forgotten checks.
//!
//! A leaf: owns its buffers, bind groups and maps; callers hand it the device.

use super::sync::{lock, GlTurn};
use crate::{Error, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::ThreadId;

/// Bytes of an error word (four u32).
pub(crate) const BYTES: u64 = 16;

/// Words per chunk buffer of the pool.
const PER_CHUNK: u32 = 64;

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

struct Chunk {
    buffer: wgpu::Buffer,
    bind: OnceLock<wgpu::BindGroup>,
}

/// The words: chunk buffers and the free list (`(chunk, word, dirty)`; a dirty word may hold
/// an old report and is cleared before its next launch).
#[derive(Default)]
struct Pool {
    chunks: Vec<Arc<Chunk>>,
    free: Vec<(usize, u32, bool)>,
}

enum State {
    Pending,
    Clean,
    Failed { error: Error, reported: bool },
}

/// One checking launch's error word and what is known of it.
pub(crate) struct Check {
    chunk: Arc<Chunk>,
    at: (usize, u32),
    stride: u64,
    thread: ThreadId,
    state: Mutex<State>,
    pool: Arc<Mutex<Pool>>,
}

impl Drop for Check {
    fn drop(&mut self) {
        // The word may hold a report nobody read: cleared before its next launch.
        lock(&self.pool).free.push((self.at.0, self.at.1, true));
    }
}

impl Check {
    fn offset(&self) -> u64 {
        u64::from(self.at.1) * self.stride
    }

    /// The dynamic offset of this check's word in its chunk's bind group.
    pub(crate) fn dynamic_offset(&self) -> u32 {
        self.offset() as u32
    }

    /// The bind group of `@group(1)` holding this check's word (at `dynamic_offset`).
    pub(crate) fn bind_group(
        &self,
        dev: &wgpu::Device,
        layout: &wgpu::BindGroupLayout,
    ) -> wgpu::BindGroup {
        let c = &self.chunk;
        c.bind
            .get_or_init(|| {
                dev.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some("wgtensor::id_errors"),
                    layout,
                    entries: &[wgpu::BindGroupEntry {
                        binding: 0,
                        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer: &c.buffer,
                            offset: 0,
                            size: wgpu::BufferSize::new(BYTES),
                        }),
                    }],
                })
            })
            .clone()
    }

    /// Records the copy of this check's word to `staging` at `at`. The word is not cleared: if
    /// this readback fails before it is decoded, the next one reads the same report.
    pub(crate) fn copy(&self, enc: &mut wgpu::CommandEncoder, staging: &wgpu::Buffer, at: u64) {
        enc.copy_buffer_to_buffer(&self.chunk.buffer, self.offset(), staging, at, BYTES);
    }

    /// Records the outcome read back for this check (`bytes`: its word); the error, if any.
    pub(crate) fn resolve(&self, bytes: &[u8]) -> Result<()> {
        let r = decode(bytes);
        let mut s = lock(&self.state);
        if let (State::Pending, Err(e)) = (&*s, &r) {
            *s = State::Failed {
                error: e.clone(),
                reported: false,
            };
        } else if matches!(*s, State::Pending) {
            *s = State::Clean;
        }
        r
    }

    /// Notes that this check's error was returned to a caller (so `synchronize` does not
    /// report it again).
    pub(crate) fn mark_reported(&self) {
        if let State::Failed { reported, .. } = &mut *lock(&self.state) {
            *reported = true;
        }
    }

    fn is_clean(&self) -> bool {
        matches!(*lock(&self.state), State::Clean)
    }
}

/// The id checks of one device.
pub(crate) struct IdChecks {
    /// A small read-only buffer bound where an entry point has no use for an input.
    pub dummy: wgpu::Buffer,
    pool: Arc<Mutex<Pool>>,
    /// Buffers whose contents depend on checks not known to be clean.
    taints: Mutex<HashMap<wgpu::Buffer, Vec<Arc<Check>>>>,
    /// Checks not yet known clean, for `synchronize` of the thread that launched them.
    outstanding: Mutex<Vec<Weak<Check>>>,
    /// Bytes between words: `min_storage_buffer_offset_alignment` (dynamic offsets).
    stride: u64,
    /// On wgpu's GL backend: a new chunk is created in the GL turn (`sync::GlTurn`).
    gl: bool,
}

impl IdChecks {
    pub(crate) fn new(dev: &wgpu::Device, align: u64, gl: bool) -> IdChecks {
        IdChecks {
            dummy: dev.create_buffer(&wgpu::BufferDescriptor {
                label: Some("wgtensor::unused_input"),
                size: BYTES,
                usage: wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            }),
            pool: Arc::default(),
            taints: Mutex::default(),
            outstanding: Mutex::default(),
            stride: align.max(BYTES),
            gl,
        }
    }

    /// A word for a new checking launch, and whether it must be cleared (recorded in the same
    /// batch, before the launch) because it held an earlier check.
    pub(crate) fn acquire(&self, dev: &wgpu::Device) -> (Arc<Check>, bool) {
        let mut p = lock(&self.pool);
        if p.free.is_empty() {
            let k = p.chunks.len();
            let _turn = GlTurn::take(self.gl);
            p.chunks.push(Arc::new(Chunk {
                // Fresh buffers are zero-filled: clean words.
                buffer: dev.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("wgtensor::id_errors"),
                    size: self.stride * u64::from(PER_CHUNK),
                    usage: wgpu::BufferUsages::STORAGE
                        | wgpu::BufferUsages::COPY_SRC
                        | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                }),
                bind: OnceLock::new(),
            }));
            p.free.extend((0..PER_CHUNK).rev().map(|w| (k, w, false)));
        }
        let (k, w, dirty) = p.free.pop().expect("refilled above");
        let check = Arc::new(Check {
            chunk: p.chunks[k].clone(),
            at: (k, w),
            stride: self.stride,
            thread: std::thread::current().id(),
            state: Mutex::new(State::Pending),
            pool: self.pool.clone(),
        });
        (check, dirty)
    }

    /// Records the clear of `check`'s word (before the launch that uses it).
    pub(crate) fn clear(&self, enc: &mut wgpu::CommandEncoder, check: &Check) {
        enc.clear_buffer(&check.chunk.buffer, check.offset(), Some(BYTES));
    }

    /// After a launch or copy from `inputs` into `output`: `output` depends on the inputs'
    /// checks (and on `new`, the launch's own). Its earlier taints stay (a partial write keeps
    /// the old contents).
    pub(crate) fn propagate(
        &self,
        inputs: &[&wgpu::Buffer],
        output: &wgpu::Buffer,
        new: Option<&Arc<Check>>,
    ) {
        if let Some(c) = new {
            // Registered only now, after the launch was recorded: a readback that copies the
            // word is then recorded after the kernel that writes it.
            let mut o = lock(&self.outstanding);
            o.push(Arc::downgrade(c));
            if o.len() >= 1024 && o.len().is_power_of_two() {
                // A thread that launches without ever reading back: drop freed checks.
                o.retain(|w| w.strong_count() > 0);
            }
        }
        let mut t = lock(&self.taints);
        if t.is_empty() && new.is_none() {
            return;
        }
        let mut add: Vec<Arc<Check>> = new.into_iter().cloned().collect();
        for i in inputs {
            if let Some(v) = t.get(*i) {
                add.extend(v.iter().filter(|c| !c.is_clean()).cloned());
            }
        }
        if add.is_empty() {
            return;
        }
        let v = t.entry(output.clone()).or_default();
        v.retain(|c| !c.is_clean());
        for c in add {
            if !v.iter().any(|o| Arc::ptr_eq(o, &c)) {
                v.push(c);
            }
        }
    }

    /// Forgets `buffer`'s taints (its tensor was freed; the next one to use it starts clean).
    pub(crate) fn forget(&self, buffer: &wgpu::Buffer) {
        let mut t = lock(&self.taints);
        if !t.is_empty() {
            t.remove(buffer);
        }
    }

    /// The checks a readback of `buffers` must resolve, or the error of one already found
    /// failed (poisoned data fails every readback).
    pub(crate) fn covering<'a>(
        &self,
        buffers: impl Iterator<Item = &'a wgpu::Buffer>,
    ) -> Result<Vec<Arc<Check>>> {
        let mut t = lock(&self.taints);
        if t.is_empty() {
            return Ok(Vec::new());
        }
        let mut out: Vec<Arc<Check>> = Vec::new();
        for b in buffers {
            let Some(v) = t.get_mut(b) else { continue };
            v.retain(|c| !c.is_clean());
            for c in v.iter() {
                if let State::Failed { error, reported } = &mut *lock(&c.state) {
                    *reported = true;
                    return Err(error.clone());
                }
                if !out.iter().any(|o| Arc::ptr_eq(o, c)) {
                    out.push(c.clone());
                }
            }
            if v.is_empty() {
                t.remove(b);
            }
        }
        Ok(out)
    }

    /// The calling thread's checks that `synchronize` must resolve, or an error found since it
    /// last synchronized and not yet reported (each is reported once).
    pub(crate) fn of_thread(&self) -> Result<Vec<Arc<Check>>> {
        let me = std::thread::current().id();
        let mut o = lock(&self.outstanding);
        let mut out = Vec::new();
        let mut found = None;
        o.retain(|w| {
            let Some(c) = w.upgrade() else { return false };
            let mut s = lock(&c.state);
            match &mut *s {
                State::Clean | State::Failed { reported: true, .. } => false,
                State::Failed { error, reported } => {
                    if c.thread == me && found.is_none() {
                        *reported = true;
                        found = Some(error.clone());
                        return false;
                    }
                    true
                }
                State::Pending => {
                    if c.thread == me {
                        out.push(c.clone());
                    }
                    true
                }
            }
        });
        match found {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// `relevant` followed by every other check still pending, on any thread: each readback
    /// resolves them all (16 bytes each), so checks never pile up on data that is never read
    /// (an optimizer's parameters). Only `relevant`'s errors are reported to the caller; the
    /// others poison their data and wait for its readback or their thread's `synchronize`.
    pub(crate) fn with_outstanding(&self, mut relevant: Vec<Arc<Check>>) -> Vec<Arc<Check>> {
        let mut o = lock(&self.outstanding);
        o.retain(|w| {
            let Some(c) = w.upgrade() else { return false };
            // Edition 2024: the guard (a tail temporary) drops before `c`.
            match &*lock(&c.state) {
                State::Clean | State::Failed { reported: true, .. } => false,
                State::Failed { .. } => true,
                State::Pending => {
                    if !relevant.iter().any(|r| Arc::ptr_eq(r, &c)) {
                        relevant.push(c.clone());
                    }
                    true
                }
            }
        });
        relevant
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
