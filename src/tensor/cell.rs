//! A tensor's data cell: materialised storage, or the pending fused program that produces it
//! (see `fuse.rs`, which builds those programs; a GPU runs one as a generated kernel, the host
//! as one blocked pass), and the registry of pending cells that
//! `Device::synchronize` runs. Apart from `fuse.rs` because `Tensor` holds a cell: this file
//! must not need the tensor type back.

use super::dispatch::fused;
use crate::ops::backend::ProgramCall;
use crate::ops::program::Program;
use crate::shape::Layout;
use crate::storage::Storage;
use crate::{DType, Device, Error, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// An elementwise program waiting to run: its inputs are materialised cells read through
/// layouts broadcast to the output shape.
pub(crate) struct Pending {
    pub(crate) name: &'static str,
    /// The device that runs it (`BackendDevice::run_fused`: a GPU as one generated kernel, the
    /// host in one blocked pass).
    pub(crate) device: Device,
    pub(crate) program: Program,
    pub(crate) inputs: Vec<(Arc<StorageCell>, Layout)>,
    pub(crate) scalars: Vec<u32>,
    pub(crate) n: usize,
    /// The output shape the program was built for (its strided inputs unravel over it).
    pub(crate) shape: Vec<usize>,
}

/// A tensor's data: materialised [`Storage`], or a pending program that produces it.
pub(crate) struct StorageCell {
    pub(crate) value: OnceLock<Storage>,
    pub(crate) pending: Mutex<Option<Arc<Pending>>>,
    /// The buffer was handed to the application (`wgpu_buffer`), which may write it with its
    /// own passes: ops reading it run and are submitted at once, never deferred past those.
    pub(crate) exported: AtomicBool,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The state is replaced whole under the lock; a poisoned lock holds a consistent value.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl StorageCell {
    pub(crate) fn ready(s: Storage) -> StorageCell {
        StorageCell {
            value: OnceLock::from(s),
            pending: Mutex::new(None),
            exported: AtomicBool::new(false),
        }
    }

    /// Marks the buffer as shared with the application (see `exported`).
    pub(crate) fn mark_exported(&self) {
        self.exported.store(true, Ordering::SeqCst);
    }

    /// The materialised storage for an in-place write; `None` while a program is pending.
    #[cfg_attr(not(feature = "models"), allow(dead_code))]
    pub(crate) fn get_mut(&mut self) -> Option<&mut Storage> {
        self.value.get_mut()
    }

    /// The storage, running the pending program first if there is one.
    pub(crate) fn get(&self) -> Result<&Storage> {
        if let Some(s) = self.value.get() {
            return Ok(s);
        }
        let mut pending = lock(&self.pending);
        if let Some(s) = self.value.get() {
            return Ok(s);
        }
        let Some(p) = pending.clone() else {
            return Err(Error::InvalidArgument {
                op: "materialize",
                message: "a tensor has neither data nor a pending program (a wgtensor bug)".into(),
            });
        };
        let mut views = Vec::with_capacity(p.inputs.len());
        for (cell, layout) in &p.inputs {
            let s = cell.value.get();
            views.push((
                s.ok_or_else(|| fused::not_ready(p.name, &p.device))?,
                layout,
            ));
        }
        let call = ProgramCall {
            name: p.name,
            program: &p.program,
            views: &views,
            scalars: &p.scalars,
            shape: &p.shape,
        };
        let out = fused::run(&p.device, &call)?;
        drop(views);
        let _ = self.value.set(out);
        // The inputs are released with the program.
        *pending = None;
        Ok(self.value.get().expect("set just above"))
    }

    /// Bytes of the GPU buffer (materialised, or the packed output a pending program will
    /// allocate); `None` for host data.
    pub(crate) fn gpu_bytes(&self, dtype: DType) -> Option<u64> {
        match self.value.get() {
            Some(s) => fused::buffer_bytes(s),
            None => {
                let pending = lock(&self.pending);
                let p = pending.as_ref()?;
                fused::pending_bytes(&p.device, p.n, dtype)
            }
        }
    }

    /// The pending program, if the cell is not materialised yet.
    pub(crate) fn pending(&self) -> Option<Arc<Pending>> {
        if self.value.get().is_some() {
            return None;
        }
        lock(&self.pending).clone()
    }
}

/// Pending cells not yet materialised, oldest first, so that `Device::synchronize` can run them
/// (a user who synchronises expects the queued elementwise work to be done). Weak: a pending
/// tensor that is dropped unread is never run.
static PENDING: Mutex<Vec<std::sync::Weak<StorageCell>>> = Mutex::new(Vec::new());

pub(crate) fn register(cell: &Arc<StorageCell>) {
    let mut list = lock(&PENDING);
    // Amortised pruning of cells that were dropped or materialised.
    if list.len() >= 64 && list.len().is_power_of_two() {
        list.retain(|w| w.upgrade().is_some_and(|c| c.value.get().is_none()));
    }
    list.push(Arc::downgrade(cell));
}

/// Materialises every pending fused tensor on `device` (part of `Device::synchronize`). A lost
/// device or errors that escaped wgpu's scopes are reported as `synchronize`'s first.
pub(crate) fn materialize_pending(device: &Device) -> Result<()> {
    fused::check("synchronize", device)?;
    if !fused::queues(device) {
        // Nothing is registered for the host: its pending programs run when they are read.
        return Ok(());
    }
    let cells: Vec<Arc<StorageCell>> = {
        let mut list = lock(&PENDING);
        let mut mine = Vec::new();
        list.retain(|w| match w.upgrade() {
            Some(c) if c.value.get().is_some() => false,
            Some(c) => {
                let same = lock(&c.pending)
                    .as_ref()
                    .is_some_and(|p| p.device == *device);
                if same {
                    mine.push(c);
                }
                !same
            }
            None => false,
        });
        mine
    };
    for c in cells {
        c.get()?;
    }
    Ok(())
}

// `Device::synchronize` lives here, in the tensor layer, because pending fused tensors are work
// queued on the device that only this module knows about (`src/device.rs` is below it).
impl Device {
    /// Waits for all work queued on this device; reports a lost device, captured wgpu errors, or
    /// an out-of-range id found by a kernel this thread launched and not yet reported
    /// ([`Error::IndexOutOfRange`](crate::Error::IndexOutOfRange); each once, and the data it
    /// wrote stays poisoned for every readback). (PyTorch's
    /// `torch.cuda.synchronize()`; a no-op on the CPU.)
    ///
    /// ```
    /// wgtensor::Device::cpu().synchronize()?;
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn synchronize(&self) -> Result<()> {
        // Pending fused elementwise work is queued work too.
        materialize_pending(self)?;
        fused::wait("synchronize", self)
    }

    /// Runs `f` with the kernels it launches on this device going to the GPU in one submit, at
    /// the first readback or [`Device::synchronize`] inside or after it, instead of one submit
    /// every 64 kernels: for a step of known length, such as one decoded token, which then
    /// costs the host one submit. Uploads past 64 MiB and a step past 2,048 kernels still
    /// submit on their way. Results are the same; only when work reaches the GPU changes (a
    /// no-op on the CPU).
    ///
    /// ```
    /// use wgtensor::{DType, Device, Tensor};
    /// let dev = Device::best();
    /// let x = Tensor::ones(&[64], DType::F32, &dev)?;
    /// dev.synchronize()?;
    /// wgtensor::reset_kernel_stats(&dev);
    /// let y = dev.one_submit(|| {
    ///     let mut y = x.clone();
    ///     for _ in 0..100 {
    ///         y = y.add_scalar(1.0)?; // 100 kernels
    ///     }
    ///     y.to_vec::<f32>()
    /// })?;
    /// assert_eq!(y[0], 101.0);
    /// if dev.is_gpu() {
    ///     assert_eq!(wgtensor::kernel_stats(&dev).submits, 1);
    /// }
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn one_submit<R>(&self, f: impl FnOnce() -> R) -> R {
        fused::one_submit(self, f)
    }
}
