//! The wgpu backend. Every wgpu call in wgtensor lives under this module.
//!
//! # Layering
//!
//! Each file uses only the files of the layers below it (`use super::...` goes one way):
//!
//! 1. Leaves, each owning its own lock and taking `&wgpu::Device` / `&wgpu::Queue` as arguments:
//!    `sync` (the lock helper), `memory` (the caching allocator `Pool`, `MemStats`, buckets),
//!    `queue` (the pending `Batch` behind the `Queue` lock, the retired-buffer list),
//!    `staging` (readback `StagingPool`, `TransferCounters`), `codegen` (WGSL generation for
//!    elementwise programs; no lock but its process-wide kernel interner), `contract` (the
//!    constants host and shaders share, and their WGSL declarations), `kernels` (`Shader`,
//!    `Launch`, the `KernelCache` of modules, layouts, pipelines and bind groups,
//!    `KernelCounters`), `params`.
//! 2. `device`: `GpuDevice` composes the leaves; error capture, loss tracking, recording into
//!    and submitting the pending batch, waits with timeouts. `registry` opens devices
//!    (adapter discovery, `AdapterSummary`, which `crate::device` re-exports).
//! 3. Operations on a `GpuDevice`: `buffer` (allocation, `GpuBuffer`), `transfer` (uploads,
//!    readbacks), `launch` (`launch`, `launch_workgroups`).
//! 4. Op families recording dispatches: `elementwise` (runs generated programs: every
//!    elementwise op of every dtype, fused chains), `program_blocks` (a pending program past
//!    one binding, run in blocks of rows), `reduce`, `rows` (softmax, layer_norm,
//!    cross-entropy), `matmul`, `join`,
//!    `gather`.
//!
//! # Locks
//!
//! | lock | protects |
//! |---|---|
//! | `Queue::batch` (the batch lock) | the pending encoder and its open compute pass, the op count and names, the batch's params, the upload belt, the set of mapped buffers |
//! | `Queue::retired` | buffers freed while a batch was open |
//! | `Pool` | free tensor buffers by bucket |
//! | `StagingPool` | free readback buffers |
//! | `KernelCache` maps (one lock each) | modules, layouts, pipelines, bind groups |
//! | `Health` | the device-lost reason, errors that escaped every scope |
//! | `TransferCounters::last_read` | the churn fingerprint |
//! | `Profiler` | the open profile's query set and timed dispatches (taken inside the batch lock by a launch) |
//! | `Inner::poll_lock` | `device.poll` and `queue.submit` (which polls internally): wgpu-core 30 asserts when a wait races another thread's poll or submit |
//! | `sync::GlTurn` (GL only, one per process) | every wgpu call that touches a GL context: buffer creation and release, map, unmap, `write_buffer`, pipeline builds, submit, poll |
//!
//! Order: the batch lock may be held while taking `Queue::retired`, a `KernelCache` map,
//! `Health` or the poll lock (to submit); every other lock is taken alone and released before any other is taken. The GL
//! turn is taken just around the wgpu call it guards, after any other lock but the poll lock
//! (which it precedes) and the leaf maps a pipeline build or an id chunk fills; it is
//! re-entrant per thread. Nothing
//! takes the batch lock while holding another lock. `GpuBuffer::drop` never takes the batch lock
//! (it consults `Queue::open` and parks the buffer in `Queue::retired`), so a drop inside a
//! recording cannot deadlock.
//!
//! **No lock is held across a GPU wait** (except the poll lock, which only another poll takes, for
//! at most one 50 ms slice). A submit holds the batch lock (recording and
//! submitting are not waits); waits (`GpuDevice::wait`) and map callbacks are awaited with no
//! lock held. A direct readback registers the buffers it maps in `Batch::mapped` and releases
//! the lock; a submit while any buffer is mapped waits on a condition variable (which releases
//! the lock) until they are unmapped, because wgpu rejects a batch that uses a mapped buffer.
//! Waits poll in 50 ms slices until the device's deadline, and a panic from wgpu inside a poll
//! or a pipeline build (the GL layer's "Could not lock adapter context") becomes an error.
//!
//! **GL.** wgpu's GL backend guards each adapter's one GL context with a lock that panics after
//! a few seconds of waiting (6 s on EGL), and a call holds the context as long as the driver
//! does: on a software driver (llvmpipe) a submit runs its kernels before it returns, so long
//! work holds it for its whole length. wgtensor takes its own turn (`sync::GlTurn`, no deadline)
//! around every such call, so a second thread waits for the context in wgtensor, never in wgpu;
//! and a wait on GL polls the fence without blocking (zero timeout) and pauses outside the turn,
//! so a wait never holds the context while the device works.
//!
//! # Errors
//!
//! One set of error scopes per submitted batch (in `GpuDevice::submit_locked`) and around
//! buffer creation and pipeline builds; dispatches are recorded without scopes, and a
//! device-level error from one (reported synchronously to the uncaptured handler) is returned
//! by that launch before it is recorded. `WGTENSOR_VALIDATE=1` scopes every op, so an error
//! inside a batch names its op exactly.

pub(crate) mod attention;
pub(crate) mod attention_decode;
pub(crate) mod autotune;
pub(crate) mod backend;
pub(crate) mod bindings;
pub(crate) mod buffer;
pub(crate) mod codegen;
pub(crate) mod contract;
pub(crate) mod conv;
pub(crate) mod device;
pub(crate) mod elementwise;
pub(crate) mod gather;
pub(crate) mod ids;
pub(crate) mod join;
pub(crate) mod kernels;
pub(crate) mod launch;
pub(crate) mod matmul;
pub(crate) mod memory;
pub(crate) mod params;
pub(crate) mod profile;
pub(crate) mod program_blocks;
pub(crate) mod quant;
pub(crate) mod queue;
pub(crate) mod reduce;
pub(crate) mod registry;
pub(crate) mod rows;
pub(crate) mod scatter;
pub(crate) mod shader_table;
pub(crate) mod staging;
pub(crate) mod sync;
pub(crate) mod timing;
pub(crate) mod transfer;

pub(crate) use buffer::GpuBuffer;
pub(crate) use device::GpuDevice;

/// Wraps a device and queue that the application opened itself; `handler` receives the wgpu
/// errors of the application's own calls on it.
pub(crate) fn wrap(
    adapter: &wgpu::Adapter,
    device: wgpu::Device,
    queue: wgpu::Queue,
    handler: Option<device::AppErrorHandler>,
) -> GpuDevice {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let label = format!("wgpu:{}", NEXT.fetch_add(1, Ordering::Relaxed));
    GpuDevice::new(label, adapter.get_info(), device, queue, Some(handler))
}
