//! The fused programs' dispatch: which backend runs a pending program
//! (`BackendDevice::run_fused`), and what the fuser (`fuse.rs`) and the cell's registry of
//! pending programs (`cell.rs`) ask of a device (does it queue work, submit it, wait for it,
//! how large a buffer is), so that those files build and hold programs without naming a backend.
//! Names no cell or tensor: `cell.rs` calls it, which could not be called back without an import
//! cycle.

use super::{backend, Backend};
use crate::cpu::backend::CpuDevice;
use crate::ops::backend::{BackendDevice, ProgramCall, View};
use crate::storage::Storage;
use crate::{DType, Device, Error, Result};

/// Runs the program `call`, whose inputs are materialised storage of `device`, on `device` into
/// new storage.
pub(crate) fn run(device: &Device, call: &ProgramCall<Storage>) -> Result<Storage> {
    match backend(device) {
        Backend::Cpu => run_on(&CpuDevice, device, call, |s| match s {
            Storage::Cpu(c) => Some(c),
            Storage::Gpu(_) => None,
        }),
        Backend::Gpu(g) => run_on(g, device, call, Storage::gpu),
    }
}

/// Runs `call` on `d` (the backend of `device`), its inputs' data picked out by `pick`.
fn run_on<'a, D: BackendDevice>(
    d: &D,
    device: &Device,
    call: &ProgramCall<'a, Storage>,
    pick: impl Fn(&'a Storage) -> Option<&'a D::Storage>,
) -> Result<Storage>
where
    D::Storage: Into<Storage> + 'a,
{
    let views = call
        .views
        .iter()
        .map(|&(s, l)| pick(s).map(|s| (s, l)))
        .collect::<Option<Vec<View<D::Storage>>>>()
        .ok_or_else(|| not_ready(call.name, device))?;
    let out = d.run_fused(&ProgramCall {
        name: call.name,
        program: call.program,
        views: &views,
        scalars: call.scalars,
        shape: call.shape,
    })?;
    Ok(out.into())
}

/// The error for a fused program `op` whose input is not materialised on `device`, where it
/// runs.
pub(crate) fn not_ready(op: &'static str, device: &Device) -> Error {
    let place = match backend(device) {
        Backend::Cpu => "on the host",
        Backend::Gpu(_) => "on the GPU",
    };
    Error::InvalidArgument {
        op,
        message: format!("a fused program's input is not materialised {place} (a wgtensor bug)"),
    }
}

/// Whether `device` queues work (a GPU): its elementwise ops always record programs, which wait
/// in the registry for `Device::synchronize` (or what reads them). The host runs an op at once
/// unless CPU fusion is on, and a pending host program runs when it is read.
pub(crate) fn queues(device: &Device) -> bool {
    matches!(backend(device), Backend::Gpu(_))
}

/// Reports a lost device, or errors that escaped wgpu's scopes, as `op`'s first (a GPU); the
/// host has neither.
pub(crate) fn check(op: &'static str, device: &Device) -> Result<()> {
    match backend(device) {
        Backend::Cpu => Ok(()),
        Backend::Gpu(g) => g.check(op),
    }
}

/// Submits the work queued on `device` now (the host queues none).
pub(crate) fn flush(op: &'static str, device: &Device) -> Result<()> {
    match backend(device) {
        Backend::Cpu => Ok(()),
        Backend::Gpu(g) => g.flush(op).map(|_| ()),
    }
}

/// Waits for all work submitted to `device`, then reports an id a kernel this thread launched
/// found out of range (a 16-byte read per kernel not yet known clean): `Device::synchronize`
/// once its pending programs are recorded. A no-op on the host.
pub(crate) fn wait(op: &'static str, device: &Device) -> Result<()> {
    match backend(device) {
        Backend::Cpu => Ok(()),
        Backend::Gpu(g) => {
            g.wait(op, None)?;
            g.read_many(op, &[], |_, _| ()).map(|_| ())
        }
    }
}

/// Runs `f` with the kernels it launches on `device` submitted together (see
/// `Device::one_submit`); the host runs `f` as it is.
pub(crate) fn one_submit<R>(device: &Device, f: impl FnOnce() -> R) -> R {
    match backend(device) {
        Backend::Cpu => f(),
        Backend::Gpu(g) => {
            let _deferred = g.defer_submits();
            f()
        }
    }
}

/// Bytes of the buffer behind `s`; `None` for host data.
pub(crate) fn buffer_bytes(s: &Storage) -> Option<u64> {
    s.gpu().map(|b| b.size)
}

/// Bytes of the packed buffer a pending program of `n` elements of `dtype` will allocate on
/// `device` (whole 4-byte words); `None` on the host, which allocates no buffer.
pub(crate) fn pending_bytes(device: &Device, n: usize, dtype: DType) -> Option<u64> {
    match backend(device) {
        Backend::Cpu => None,
        Backend::Gpu(_) => Some((n as u64 * dtype.size_in_bytes() as u64).div_ceil(4) * 4),
    }
}
