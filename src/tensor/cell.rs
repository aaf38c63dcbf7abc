//! A tensor's data cell: materialised storage, or the pending fused program that produces it
//! (see `fuse.rs`, which builds those programs; a GPU runs one as a generated kernel, the host
//! as one blocked pass), and the registry of pending cells that
//! `Device::synchronize` runs. Apart from `fuse.rs` because `Tensor` holds a cell: this file
//! must not need the tensor type back.

use crate::cpu::storage::CpuStorage;
use crate::device::DeviceInner;
use crate::gpu::{GpuBuffer, GpuDevice};
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
    /// The GPU that runs it as one generated kernel; `None`: the host runs it in one blocked
    /// pass (`cpu/fused.rs`).
    pub(crate) device: Option<GpuDevice>,
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
        let Some(device) = &p.device else {
            let mut views: Vec<(&CpuStorage, &Layout)> = Vec::with_capacity(p.inputs.len());
            for (cell, layout) in &p.inputs {
                match cell.value.get() {
                    Some(Storage::Cpu(s)) => views.push((s, layout)),
                    _ => return Err(not_ready(p.name, "on the host")),
                }
            }
            let out = crate::cpu::fused::run(p.name, &p.program, &views, &p.scalars, &p.shape)?;
            drop(views);
            let _ = self.value.set(Storage::from(out));
            *pending = None;
            return Ok(self.value.get().expect("set just above"));
        };
        let mut views: Vec<(&GpuBuffer, &Layout)> = Vec::with_capacity(p.inputs.len());
        for (cell, layout) in &p.inputs {
            match cell.value.get().and_then(Storage::gpu) {
                Some(b) => views.push((b, layout)),
                _ => return Err(not_ready(p.name, "on the GPU")),
            }
        }
        // An output past one binding runs in blocks of rows (`gpu/program_blocks.rs`).
        let out = device.run_pending(p.name, &p.program, &views, &p.scalars, p.n, &p.shape)?;
        drop(views);
        let _ = self.value.set(Storage::from(out));
        // The inputs are released with the program.
        *pending = None;
        Ok(self.value.get().expect("set just above"))
    }

    /// Bytes of the GPU buffer (materialised, or the packed output a pending program will
    /// allocate); `None` for host data.
    pub(crate) fn gpu_bytes(&self, dtype: DType) -> Option<u64> {
        match self.value.get() {
            Some(s) => s.gpu().map(|b| b.size),
            None => {
                let pending = lock(&self.pending);
                let p = pending.as_ref()?;
                p.device.as_ref()?;
                Some((p.n as u64 * dtype.size_in_bytes() as u64).div_ceil(4) * 4)
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

/// The error for a fused program whose input is not materialised `where` it runs.
fn not_ready(op: &'static str, place: &str) -> Error {
    Error::InvalidArgument {
        op,
        message: format!("a fused program's input is not materialised {place} (a wgtensor bug)"),
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
pub(crate) fn materialize_pending(device: &GpuDevice) -> Result<()> {
    device.check("synchronize")?;
    let cells: Vec<Arc<StorageCell>> = {
        let mut list = lock(&PENDING);
        let mut mine = Vec::new();
        list.retain(|w| match w.upgrade() {
            Some(c) if c.value.get().is_some() => false,
            Some(c) => {
                let same = lock(&c.pending)
                    .as_ref()
                    .is_some_and(|p| p.device.as_ref() == Some(device));
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
        match &self.0 {
            DeviceInner::Cpu => Ok(()),
            DeviceInner::Gpu(g) => {
                // Pending fused elementwise work is queued work too.
                materialize_pending(g)?;
                g.wait("synchronize", None)?;
                // An id found out of range by a kernel this thread launched surfaces here (a
                // 16-byte read per kernel not yet known clean).
                g.read_many("synchronize", &[], |_, _| ()).map(|_| ())
            }
        }
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
        match &self.0 {
            DeviceInner::Cpu => f(),
            DeviceInner::Gpu(g) => {
                let _deferred = g.defer_submits();
                f()
            }
        }
    }
}
