//! The MPI process group and its collectives.
//!
//! Collectives go through MPI's non-blocking calls (`MPI_Iallreduce`, ...) with host buffers
//! owned by the pending [`Work`]; waiting polls `MPI_Test` until the request completes or the
//! timeout passes, so a peer that never joins becomes an error instead of a hang. A request
//! that timed out is abandoned together with its buffers (leaked on purpose: MPI may still write
//! into them), and the group should not be used for further collectives.

use super::buffers::{
    code_dtype, dtype_code, mpi_op, mpi_type, Call, HostBuf, Meta, SendBuf, META_DIMS, META_LEN,
};
use super::{timeout_from_env, ReduceOp};
use crate::{Error, Result, Tensor};
use mpi::ffi;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::AsRaw;
use std::os::raw::c_int;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Bytes given to `MPI_Error_string`: it may write `MPI_MAX_ERROR_STRING` of them, a constant
/// of the MPI library the bindings were generated from (256 in Open MPI, more in others).
const ERROR_STRING_LEN: usize = ffi::MPI_MAX_ERROR_STRING as usize;

/// The processes of one MPI job (PyTorch's default process group). Create it once per process
/// with [`ProcessGroup::init`]; MPI is finalized when it is dropped.
///
/// It is `Send + Sync`: MPI runs at `MPI_THREAD_SERIALIZED` and every MPI call made through the
/// group holds its lock, so several threads may share it.
pub struct ProcessGroup {
    world: SimpleCommunicator,
    rank: usize,
    world_size: usize,
    local_rank: usize,
    local_size: usize,
    timeout: Duration,
    lock: Mutex<()>,
    /// Dropped last: finalizes MPI.
    _universe: mpi::environment::Universe,
}

// SAFETY: MPI is initialized with at least MPI_THREAD_SERIALIZED (checked in `init`) and every
// call through the group's handles is made while holding `lock`, so calls never overlap.
unsafe impl Send for ProcessGroup {}
// SAFETY: as above.
unsafe impl Sync for ProcessGroup {}

impl std::fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessGroup")
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("local_rank", &self.local_rank)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// A collective in flight (PyTorch's `Work`): [`Work::wait`] gives its result. Dropping it
/// unfinished waits for it (up to the timeout), since MPI owns its buffers until then.
pub struct Work<'g, T> {
    group: &'g ProcessGroup,
    op: &'static str,
    pending: Option<Pending>,
    finish: Option<Finish<'g, T>>,
}

type Finish<'g, T> = Box<dyn FnOnce(Option<HostBuf>) -> Result<T> + Send + 'g>;

/// A started MPI request and the buffers it reads and writes (heap memory that must stay put
/// until the request completes; moving the `Vec`s does not move their contents).
struct Pending {
    request: ffi::MPI_Request,
    _send: SendBuf,
    recv: Option<HostBuf>,
    /// Count and displacement arrays handed to MPI, kept (never reallocated) until the
    /// request completes.
    _counts: Vec<Vec<c_int>>,
}

impl Pending {
    fn new(
        request: ffi::MPI_Request,
        send: SendBuf,
        recv: Option<HostBuf>,
        counts: Vec<Vec<c_int>>,
    ) -> Pending {
        Pending {
            request,
            _send: send,
            recv,
            _counts: counts,
        }
    }
}

// SAFETY: the request handle and buffers are only touched under the group's lock.
unsafe impl Send for Pending {}

/// Rows of each rank's chunk of `n` rows: sizes differ by at most one, the larger first.
fn chunk_rows(n: usize, world: usize) -> Vec<usize> {
    (0..world)
        .map(|r| n / world + usize::from(r < n % world))
        .collect()
}

impl ProcessGroup {
    /// Initializes MPI (at `MPI_THREAD_SERIALIZED`) and returns the group of all processes of
    /// the job: launched by `mpirun -n N program`, or a group of one when run directly. The
    /// timeout of every collective comes from `WGTENSOR_DIST_TIMEOUT` (seconds, default 300).
    ///
    /// # Errors
    /// [`Error::Distributed`] when MPI was already initialized in this process (create the
    /// group once and share it, e.g. in an `Arc`), or grants less than
    /// `MPI_THREAD_SERIALIZED`.
    pub fn init() -> Result<ProcessGroup> {
        let (universe, level) = mpi::initialize_with_threading(mpi::Threading::Serialized)
            .ok_or_else(|| Error::Distributed {
                op: "ProcessGroup::init",
                rank: 0,
                message: "MPI is already initialized in this process; create the \
                              ProcessGroup once and share it"
                    .into(),
            })?;
        // The group is Send + Sync and calls MPI from whichever thread holds its lock: that
        // needs MPI_THREAD_SERIALIZED. A library that grants less cannot run it safely.
        if level < mpi::Threading::Serialized {
            return Err(Error::Distributed {
                op: "ProcessGroup::init",
                rank: 0,
                message: format!(
                    "the MPI library grants thread level {level:?} only; wgtensor needs \
                     MPI_THREAD_SERIALIZED (build Open MPI or MPICH with thread support)"
                ),
            });
        }
        let world = universe.world();
        // SAFETY: a valid communicator and MPI's predefined error handler. Errors then come
        // back as return codes (turned into Error::Distributed) instead of aborting the job.
        unsafe {
            ffi::MPI_Comm_set_errhandler(world.as_raw(), ffi::RSMPI_ERRORS_RETURN);
        }
        let node = world.split_shared(world.rank());
        let group = ProcessGroup {
            rank: world.rank() as usize,
            world_size: world.size() as usize,
            local_rank: node.rank() as usize,
            local_size: node.size() as usize,
            world,
            timeout: timeout_from_env(),
            lock: Mutex::new(()),
            _universe: universe,
        };
        log::debug!("{group:?}");
        Ok(group)
    }

    /// This process's rank, `0..world_size()`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The MPI communicator underneath (rsmpi's), for an application's own MPI calls next to
    /// wgtensor's collectives (on the same threads: wgtensor holds no MPI call open between its
    /// own calls).
    ///
    /// ```no_run
    /// let g = wgtensor::distributed::ProcessGroup::init()?;
    /// use mpi::topology::Communicator;
    /// assert_eq!(g.communicator().size() as usize, g.world_size());
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    pub fn communicator(&self) -> &SimpleCommunicator {
        &self.world
    }

    /// The number of processes.
    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// The rank among the processes on this host: pick `gpu:{local_rank}` on a multi-GPU host.
    pub fn local_rank(&self) -> usize {
        self.local_rank
    }

    /// The number of processes on this host.
    pub fn local_size(&self) -> usize {
        self.local_size
    }

    /// How long a collective may wait for its peers.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Changes the timeout of later collectives.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Ends the whole job at once (`MPI_Abort`): what to do after an [`Error::Distributed`]
    /// when the peers must not wait for their own timeouts.
    pub fn abort(&self, code: i32) -> ! {
        self.world.abort(code)
    }

    fn err(&self, op: &'static str, message: String) -> Error {
        Error::Distributed {
            op,
            rank: self.rank,
            message,
        }
    }

    fn check(&self, op: &'static str, what: &str, rc: c_int) -> Result<()> {
        if rc == 0 {
            return Ok(());
        }
        let mut buf = vec![0u8; ERROR_STRING_LEN];
        let mut len: c_int = 0;
        // SAFETY: the buffer holds MPI_MAX_ERROR_STRING bytes (the size MPI may write).
        unsafe { ffi::MPI_Error_string(rc, buf.as_mut_ptr().cast(), &mut len) };
        buf.truncate(usize::try_from(len).unwrap_or(0).min(ERROR_STRING_LEN));
        Err(self.err(
            op,
            format!(
                "{what} returned MPI error {rc}: {}",
                String::from_utf8_lossy(&buf)
            ),
        ))
    }

    fn count(&self, op: &'static str, n: usize) -> Result<c_int> {
        c_int::try_from(n).map_err(|_| {
            self.err(
                op,
                format!(
                    "{n} elements exceed MPI's count limit {}; split the tensor",
                    c_int::MAX
                ),
            )
        })
    }

    /// Starts an MPI request under the lock; `empty` (no rank moves an element) completes at
    /// once without calling MPI, which may reject the dangling pointers of empty buffers.
    fn start(
        &self,
        op: &'static str,
        what: &str,
        empty: bool,
        call: impl FnOnce(*mut ffi::MPI_Request) -> c_int,
    ) -> Result<ffi::MPI_Request> {
        if empty {
            // SAFETY: reading MPI's predefined null request; MPI_Test completes it at once.
            return Ok(unsafe { ffi::RSMPI_REQUEST_NULL });
        }
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut request = std::mem::MaybeUninit::<ffi::MPI_Request>::uninit();
        let rc = call(request.as_mut_ptr());
        self.check(op, what, rc)?;
        // SAFETY: MPI wrote the request on success.
        Ok(unsafe { request.assume_init() })
    }

    /// One `MPI_Test`: whether the request completed.
    fn test(&self, op: &'static str, request: &mut ffi::MPI_Request) -> Result<bool> {
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut flag: c_int = 0;
        // SAFETY: an active request started by this group; status ignored.
        let rc = unsafe { ffi::MPI_Test(request, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
        self.check(op, "MPI_Test", rc)?;
        Ok(flag != 0)
    }

    /// Polls the request until it completes or the timeout passes.
    fn wait_request(&self, op: &'static str, request: &mut ffi::MPI_Request) -> Result<()> {
        let began = Instant::now();
        let deadline = began + self.timeout;
        let mut polls = 0u64;
        loop {
            if self.test(op, request)? {
                return Ok(());
            }
            polls += 1;
            // Busy polling drives MPI's progress engine (as MPI_Wait would): each test advances
            // the collective's schedule, so a large transfer needs them back to back. Only a
            // wait that has lasted a second (a peer late or gone) backs off to short sleeps.
            if polls.is_multiple_of(64) && began.elapsed() > Duration::from_secs(1) {
                std::thread::sleep(Duration::from_micros(200));
            } else {
                std::thread::yield_now();
            }
            if polls.is_multiple_of(64) && Instant::now() >= deadline {
                return Err(self.err(
                    op,
                    format!(
                        "the collective did not complete within {:?} (WGTENSOR_DIST_TIMEOUT): \
                         a peer rank exited, crashed or is not calling the same collective; \
                         this process group is unusable now, end the job (ProcessGroup::abort)",
                        self.timeout
                    ),
                ));
            }
        }
    }

    /// Exchanges what every rank is calling (collective, root, reduce op) and its operand's
    /// dtype and shape (blocking, with the timeout), so all ranks see the same list and reject
    /// a mismatch identically: a rank that calls another collective, or the same one with
    /// another root or op, makes the call fail with `Error::Distributed` on every rank.
    fn exchange_raw(&self, op: &'static str, call: Call, t: Option<&Tensor>) -> Result<Vec<i64>> {
        let mut mine = vec![-1i64; META_LEN];
        mine[..3].copy_from_slice(&call.encode());
        if let Some(t) = t.filter(|t| t.ndim() <= META_DIMS) {
            mine[3] = dtype_code(t.dtype());
            mine[4] = t.ndim() as i64;
            for (slot, &d) in mine[5..].iter_mut().zip(t.shape()) {
                *slot = d as i64;
            }
        }
        let mut all = vec![0i64; META_LEN * self.world_size];
        // SAFETY: both buffers outlive the request (we wait for it below, or leak them on error).
        let mut request = self.start(op, "MPI_Iallgather", false, |req| unsafe {
            ffi::MPI_Iallgather(
                mine.as_ptr().cast(),
                META_LEN as c_int,
                ffi::RSMPI_INT64_T,
                all.as_mut_ptr().cast(),
                META_LEN as c_int,
                ffi::RSMPI_INT64_T,
                self.world.as_raw(),
                req,
            )
        })?;
        if let Err(e) = self.wait_request(op, &mut request) {
            std::mem::forget(mine);
            std::mem::forget(all);
            return Err(e);
        }
        let calls: Vec<&[i64]> = all.chunks(META_LEN).map(|m| &m[..3]).collect();
        if let Some(r) = calls.iter().position(|c| *c != calls[0]) {
            return Err(self.err(
                op,
                format!(
                    "the ranks made different calls: rank 0 called {}, rank {r} called {}; every \
                     rank must call the same collectives, with the same root and op, in the \
                     same order",
                    Call::describe(calls[0]),
                    Call::describe(calls[r])
                ),
            ));
        }
        Ok(all)
    }

    /// [`ProcessGroup::exchange_raw`] for a collective on `t`: every rank's dtype and shape.
    fn exchange_meta(&self, op: &'static str, call: Call, t: &Tensor) -> Result<Vec<Meta>> {
        let all = self.exchange_raw(op, call, Some(t))?;
        all.chunks(META_LEN)
            .map(|m| &m[3..])
            .enumerate()
            .map(|(r, m)| {
                let dtype = code_dtype(m[0]).ok_or_else(|| {
                    self.err(
                        op,
                        format!(
                            "rank {r} passed a tensor of more than {META_DIMS} dims; reshape it"
                        ),
                    )
                })?;
                let ndim = usize::try_from(m[1]).unwrap_or(0);
                Ok(Meta {
                    dtype,
                    shape: m[2..2 + ndim].iter().map(|&d| d as usize).collect(),
                })
            })
            .collect()
    }

    /// Requires every rank to make `call` on an operand of `t`'s dtype and shape.
    fn same_everywhere(&self, op: &'static str, call: Call, t: &Tensor) -> Result<()> {
        let metas = self.exchange_meta(op, call, t)?;
        if let Some((r, m)) = metas.iter().enumerate().find(|(_, m)| **m != metas[0]) {
            return Err(self.err(
                op,
                format!(
                    "the ranks' tensors differ: rank 0 has {} {:?}, rank {r} has {} {:?}; every \
                     rank must pass the same dtype and shape",
                    metas[0].dtype, metas[0].shape, m.dtype, m.shape
                ),
            ));
        }
        Ok(())
    }

    fn work<'g, T>(
        &'g self,
        op: &'static str,
        pending: Pending,
        finish: Finish<'g, T>,
    ) -> Work<'g, T> {
        Work {
            group: self,
            op,
            pending: Some(pending),
            finish: Some(finish),
        }
    }

    /// Starts reducing `t` elementwise over all ranks with `op`; the result (on `t`'s device,
    /// in `t`'s dtype) is the same on every rank. f16 is reduced in f32.
    ///
    /// # Errors
    /// [`Error::Distributed`] when the ranks' tensors differ in dtype or shape, or a peer does
    /// not join within the timeout; [`Error::InvalidArgument`] for `Mean` on an integer dtype.
    pub fn all_reduce_async(&self, t: &Tensor, op: ReduceOp) -> Result<Work<'_, Tensor>> {
        let name = "all_reduce";
        let call = Call {
            kind: name,
            root: None,
            op: Some(op),
        };
        self.same_everywhere(name, call, t)?;
        if op == ReduceOp::Mean && !t.dtype().is_float() {
            return Err(Error::InvalidArgument {
                op: name,
                message: format!("mean needs a float tensor, got {}; use sum", t.dtype()),
            });
        }
        let n = t.numel();
        let count = self.count(name, n)?;
        let send = SendBuf::of(t)?;
        let mut recv = HostBuf::zeros(t.dtype(), n);
        let (sp, rp) = (send.ptr(), recv.ptr_mut());
        // SAFETY: the buffers move into the Pending below and live until the request completes.
        let request = self.start(name, "MPI_Iallreduce", n == 0, |req| unsafe {
            ffi::MPI_Iallreduce(
                sp,
                rp,
                count,
                mpi_type(t.dtype()),
                mpi_op(op),
                self.world.as_raw(),
                req,
            )
        })?;
        let pending = Pending::new(request, send, Some(recv), Vec::new());
        Ok(self.reduction(name, op, pending, t, t.shape().to_vec()))
    }

    /// The [`Work`] of a started reduction (`all_reduce`, `reduce_scatter`): the received
    /// buffer, divided by the world size for `Mean`, as a tensor of `shape` in `t`'s dtype on
    /// `t`'s device.
    fn reduction(
        &self,
        name: &'static str,
        op: ReduceOp,
        pending: Pending,
        t: &Tensor,
        shape: Vec<usize>,
    ) -> Work<'_, Tensor> {
        let (dtype, device, world) = (t.dtype(), t.device().clone(), self.world_size);
        let finish: Finish<'_, Tensor> = Box::new(move |h| {
            // A reduction's request always has a receive buffer.
            let mut h = h.expect("a reduction receives into its buffer");
            if op == ReduceOp::Mean {
                h.divide(world);
            }
            h.into_tensor(dtype, &shape, &device)
        });
        self.work(name, pending, finish)
    }

    /// [`ProcessGroup::all_reduce_async`], waited for.
    ///
    /// # Errors
    /// As [`ProcessGroup::all_reduce_async`] and [`Work::wait`].
    pub fn all_reduce(&self, t: &Tensor, op: ReduceOp) -> Result<Tensor> {
        self.all_reduce_async(t, op)?.wait()
    }

    /// Starts sending rank `root`'s `t` to every rank; the other ranks' `t` only gives the
    /// dtype and shape (which must match `root`'s). The result is on each rank's `t` device.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for `root >= world_size()`; [`Error::Distributed`] as for
    /// [`ProcessGroup::all_reduce_async`].
    pub fn broadcast_async(&self, t: &Tensor, root: usize) -> Result<Work<'_, Tensor>> {
        let name = "broadcast";
        if root >= self.world_size {
            return Err(Error::InvalidArgument {
                op: name,
                message: format!("root rank {root} is not in a world of {}", self.world_size),
            });
        }
        let call = Call {
            kind: name,
            root: Some(root),
            op: None,
        };
        self.same_everywhere(name, call, t)?;
        let count = self.count(name, t.numel())?;
        let (send, mut recv) = if self.rank == root {
            (SendBuf::of(t)?, None)
        } else {
            (SendBuf::None, Some(HostBuf::zeros(t.dtype(), t.numel())))
        };
        let buf = match &mut recv {
            Some(h) => h.ptr_mut(),
            // MPI only reads the root's buffer.
            None => send.ptr().cast_mut(),
        };
        // SAFETY: the buffers move into the Pending below and live until the request completes.
        let request = self.start(name, "MPI_Ibcast", t.numel() == 0, |req| unsafe {
            ffi::MPI_Ibcast(
                buf,
                count,
                mpi_type(t.dtype()),
                root as c_int,
                self.world.as_raw(),
                req,
            )
        })?;
        let (dtype, shape, device) = (t.dtype(), t.shape().to_vec(), t.device().clone());
        let own = t.detach();
        let pending = Pending::new(request, send, recv, Vec::new());
        Ok(self.work(
            name,
            pending,
            Box::new(move |h| match h {
                Some(h) => h.into_tensor(dtype, &shape, &device),
                None => Ok(own),
            }),
        ))
    }

    /// [`ProcessGroup::broadcast_async`], waited for.
    ///
    /// # Errors
    /// As [`ProcessGroup::broadcast_async`] and [`Work::wait`].
    pub fn broadcast(&self, t: &Tensor, root: usize) -> Result<Tensor> {
        self.broadcast_async(t, root)?.wait()
    }

    /// Starts gathering every rank's `t`: the result lists them in rank order, on this rank's
    /// device. The dtype and the dims after the first must agree; dim 0 may differ (uneven
    /// shards, empty ones included).
    ///
    /// # Errors
    /// [`Error::Distributed`] when the dtypes or trailing dims differ, or on timeout.
    pub fn all_gather_async(&self, t: &Tensor) -> Result<Work<'_, Vec<Tensor>>> {
        let name = "all_gather";
        let call = Call {
            kind: name,
            root: None,
            op: None,
        };
        let metas = self.exchange_meta(name, call, t)?;
        let first = &metas[0];
        for (r, m) in metas.iter().enumerate() {
            let ok = m.dtype == first.dtype
                && m.shape.len() == first.shape.len()
                && (m.shape.is_empty() || m.shape[1..] == first.shape[1..]);
            if !ok {
                return Err(self.err(
                    name,
                    format!(
                        "rank 0 has {} {:?} but rank {r} has {} {:?}; all_gather needs one dtype \
                         and equal dims after the first",
                        first.dtype, first.shape, m.dtype, m.shape
                    ),
                ));
            }
        }
        let counts = metas
            .iter()
            .map(|m| self.count(name, m.shape.iter().product()))
            .collect::<Result<Vec<c_int>>>()?;
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        self.count(name, total)?;
        let mut displs = Vec::with_capacity(counts.len());
        let mut at: c_int = 0;
        for &c in &counts {
            displs.push(at);
            at += c;
        }
        let send = SendBuf::of(t)?;
        let mut recv = HostBuf::zeros(t.dtype(), total);
        let (sp, rp, dt) = (send.ptr(), recv.ptr_mut(), mpi_type(t.dtype()));
        let my_count = counts[self.rank];
        // SAFETY: buffers, counts and displacements move into the Pending and outlive the request.
        let request = self.start(name, "MPI_Iallgatherv", total == 0, |req| unsafe {
            ffi::MPI_Iallgatherv(
                sp,
                my_count,
                dt,
                rp,
                counts.as_ptr(),
                displs.as_ptr(),
                dt,
                self.world.as_raw(),
                req,
            )
        })?;
        let (dtype, device) = (t.dtype(), t.device().clone());
        // Both arrays move (their heap blocks stay put) into the Pending, which lives until
        // the request completes: MPI may read them at any point before then.
        let pending = Pending::new(request, send, Some(recv), vec![counts, displs]);
        Ok(self.work(
            name,
            pending,
            Box::new(move |h| {
                let h = h.expect("all_gather receives");
                let mut start = 0;
                metas
                    .iter()
                    .map(|m| {
                        let n: usize = m.shape.iter().product();
                        let out = h.tensor(start..start + n, dtype, &m.shape, &device);
                        start += n;
                        out
                    })
                    .collect()
            }),
        ))
    }

    /// [`ProcessGroup::all_gather_async`], waited for.
    ///
    /// # Errors
    /// As [`ProcessGroup::all_gather_async`] and [`Work::wait`].
    pub fn all_gather(&self, t: &Tensor) -> Result<Vec<Tensor>> {
        self.all_gather_async(t)?.wait()
    }

    /// Starts reducing `t` over all ranks with `op` and giving rank `r` chunk `r` of the result
    /// along dim 0: the chunks' row counts differ by at most one, the larger first (rows
    /// `world_size()` cannot split evenly go to the low ranks; a chunk may be empty).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a 0-d `t` or `Mean` on integers; [`Error::Distributed`]
    /// as for [`ProcessGroup::all_reduce_async`].
    pub fn reduce_scatter_async(&self, t: &Tensor, op: ReduceOp) -> Result<Work<'_, Tensor>> {
        let name = "reduce_scatter";
        if t.ndim() == 0 || (op == ReduceOp::Mean && !t.dtype().is_float()) {
            return Err(Error::InvalidArgument {
                op: name,
                message: format!(
                    "needs a float tensor for mean and at least one dim to scatter; got {} {:?} \
                     with {op}",
                    t.dtype(),
                    t.shape()
                ),
            });
        }
        let call = Call {
            kind: name,
            root: None,
            op: Some(op),
        };
        self.same_everywhere(name, call, t)?;
        let row: usize = t.shape()[1..].iter().product();
        let rows = chunk_rows(t.shape()[0], self.world_size);
        let counts = rows
            .iter()
            .map(|&r| self.count(name, r * row))
            .collect::<Result<Vec<c_int>>>()?;
        self.count(name, t.numel())?;
        let send = SendBuf::of(t)?;
        let mut recv = HostBuf::zeros(t.dtype(), counts[self.rank] as usize);
        let (sp, rp) = (send.ptr(), recv.ptr_mut());
        // SAFETY: buffers and counts move into the Pending and outlive the request.
        let request = self.start(name, "MPI_Ireduce_scatter", t.numel() == 0, |req| unsafe {
            ffi::MPI_Ireduce_scatter(
                sp,
                rp,
                counts.as_ptr(),
                mpi_type(t.dtype()),
                mpi_op(op),
                self.world.as_raw(),
                req,
            )
        })?;
        let mut shape = t.shape().to_vec();
        shape[0] = rows[self.rank];
        let pending = Pending::new(request, send, Some(recv), vec![counts]);
        Ok(self.reduction(name, op, pending, t, shape))
    }

    /// [`ProcessGroup::reduce_scatter_async`], waited for.
    ///
    /// # Errors
    /// As [`ProcessGroup::reduce_scatter_async`] and [`Work::wait`].
    pub fn reduce_scatter(&self, t: &Tensor, op: ReduceOp) -> Result<Tensor> {
        self.reduce_scatter_async(t, op)?.wait()
    }

    /// Starts a barrier: completes once every rank has started one.
    ///
    /// # Errors
    /// [`Error::Distributed`] when MPI refuses.
    pub fn barrier_async(&self) -> Result<Work<'_, ()>> {
        let name = "barrier";
        let call = Call {
            kind: name,
            root: None,
            op: None,
        };
        // A rank in another collective is found here instead of hanging in MPI_Ibarrier.
        self.exchange_raw(name, call, None)?;
        // SAFETY: no buffers.
        let request = self.start(name, "MPI_Ibarrier", false, |req| unsafe {
            ffi::MPI_Ibarrier(self.world.as_raw(), req)
        })?;
        let pending = Pending::new(request, SendBuf::None, None, Vec::new());
        Ok(self.work(name, pending, Box::new(|_| Ok(()))))
    }

    /// Waits until every rank reaches the barrier (or the timeout passes).
    ///
    /// # Errors
    /// [`Error::Distributed`] on timeout.
    pub fn barrier(&self) -> Result<()> {
        self.barrier_async()?.wait()
    }
}

impl<T> Work<'_, T> {
    /// Waits for the collective (up to the group's timeout) and returns its result.
    ///
    /// # Errors
    /// [`Error::Distributed`] when it does not complete within the timeout or MPI reports an
    /// error; the errors of placing the result on its device.
    pub fn wait(mut self) -> Result<T> {
        let mut pending = self.pending.take().expect("a Work is waited for once");
        if let Err(e) = self.group.wait_request(self.op, &mut pending.request) {
            // MPI may still write into the buffers: never free them.
            std::mem::forget(pending);
            return Err(e);
        }
        let finish = self.finish.take().expect("a Work finishes once");
        finish(pending.recv.take())
    }

    /// Whether the collective has completed (one non-blocking test; also drives MPI's
    /// progress, so call it while overlapping other work).
    ///
    /// # Errors
    /// [`Error::Distributed`] when MPI reports an error.
    pub fn is_completed(&mut self) -> Result<bool> {
        match &mut self.pending {
            // MPI_Test on a completed request is fine: MPI set it to MPI_REQUEST_NULL.
            Some(p) => self.group.test(self.op, &mut p.request),
            None => Ok(true),
        }
    }
}

impl<T> Drop for Work<'_, T> {
    fn drop(&mut self) {
        if let Some(mut pending) = self.pending.take() {
            if let Err(e) = self.group.wait_request(self.op, &mut pending.request) {
                log::error!("an abandoned {} did not complete: {e}", self.op);
                std::mem::forget(pending);
            }
        }
    }
}
