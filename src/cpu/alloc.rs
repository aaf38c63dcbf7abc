//! Host memory: the byte counters behind `memory_allocated(&Device::cpu())`, the fallible
//! allocation every CPU kernel takes its output from, and a cache of freed buffers. A leaf
//! of the CPU backend, so the kernels can count and fail cleanly without reaching up to the
//! statistics API (`src/memory.rs`).
//!
//! The cache: a fresh large allocation costs a page fault and a zeroed page per 4 KiB on its
//! first write (7-8% of a CPU transformer training step, measured with `perf`), and a training
//! loop frees and allocates the same sizes every step. So tensor buffers of 4-byte elements
//! (f32, i32, u32) of at least
//! [`POOL_MIN`] elements go to a pool keyed by their exact size when freed (at most
//! [`POOL_PER_SIZE`] per size and [`POOL_MAX_BYTES`] in all; the rest are freed), and outputs
//! of that size take one back. Pooled bytes count in `memory_reserved`, not in
//! `memory_allocated`; `empty_cache(&Device::cpu())` frees them.

use crate::{Error, Result};
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Buffers smaller than this (elements; 16 KiB of f32) are left to the allocator, which serves
/// them from its bins without page faults.
pub(crate) const POOL_MIN: usize = 4096;
/// Freed buffers kept per size.
pub(crate) const POOL_PER_SIZE: usize = 64;
/// Bytes kept in the pool at most.
pub(crate) const POOL_MAX_BYTES: u64 = 256 << 20;

/// Freed buffers by capacity, and their bytes in all.
type Pool = Option<(HashMap<usize, Vec<Vec<f32>>>, u64)>;

static POOL: Mutex<Pool> = Mutex::new(None);
/// Bytes in [`POOL`] (read without the lock by `memory_reserved`).
pub(crate) static CPU_POOLED: AtomicU64 = AtomicU64::new(0);

fn pool() -> std::sync::MutexGuard<'static, Pool> {
    POOL.lock().unwrap_or_else(|p| p.into_inner())
}

/// `v`'s allocation as an empty `Vec<U>` of the same capacity, when `T` and `U` have the same
/// size and alignment (4 bytes: f32, i32, u32), so the allocation's layout is the same.
fn retype<T, U>(v: Vec<T>) -> Option<Vec<U>> {
    use std::mem::{align_of, size_of, ManuallyDrop};
    if size_of::<T>() != size_of::<U>() || align_of::<T>() != align_of::<U>() || size_of::<T>() == 0
    {
        return None;
    }
    let mut v = ManuallyDrop::new(v);
    v.clear();
    // SAFETY: the allocation was made for `capacity` elements of `T`, which has `U`'s size and
    // alignment, so `Layout::array::<U>(capacity)` is the layout it was allocated with; the
    // vector is empty, so no value of `T` is read as a `U`; `ManuallyDrop` keeps the old vector
    // from freeing it.
    Some(unsafe { Vec::from_raw_parts(v.as_mut_ptr().cast::<U>(), 0, v.capacity()) })
}

/// Keeps a freed tensor buffer of 4-byte elements (f32, i32, u32) for reuse, or frees it
/// (small, other element sizes, pool full).
pub(crate) fn recycle<T>(v: Vec<T>) {
    let Some(v) = retype::<T, f32>(v) else {
        return;
    };
    let cap = v.capacity();
    if cap < POOL_MIN {
        return;
    }
    let bytes = (cap * 4) as u64;
    let mut g = pool();
    let (map, total) = g.get_or_insert_with(Default::default);
    let list = map.entry(cap).or_default();
    if list.len() < POOL_PER_SIZE && *total + bytes <= POOL_MAX_BYTES {
        list.push(v);
        *total += bytes;
        CPU_POOLED.store(*total, Ordering::Relaxed);
    }
}

/// A pooled buffer with capacity exactly `n`, empty (`len` 0), if one is free.
pub(crate) fn take_f32(n: usize) -> Option<Vec<f32>> {
    if n < POOL_MIN {
        return None;
    }
    let mut g = pool();
    let (map, total) = g.as_mut()?;
    let mut v = map.get_mut(&n)?.pop()?;
    *total -= (n * 4) as u64;
    CPU_POOLED.store(*total, Ordering::Relaxed);
    v.clear();
    Some(v)
}

/// Frees every pooled buffer.
pub(crate) fn empty_pool() {
    *pool() = None;
    CPU_POOLED.store(0, Ordering::Relaxed);
}

/// `n` zeros: a pooled buffer cleared (no page faults) or a fresh zeroed one (for kernels that
/// accumulate into their output, or write it through slices).
pub(crate) fn zeros_f32(n: usize) -> Vec<f32> {
    match take_f32(n) {
        Some(mut v) => {
            v.resize(n, 0.0);
            v
        }
        None => vec![0f32; n],
    }
}

/// `n` f32 in `v` (empty, capacity at least `n`: from [`try_vec`] or [`take_f32`]), written by
/// `f(i, chunk)` for the consecutive `chunk`-element pieces `i` of the output, in parallel when
/// `par`. Each piece is zeroed by the task that then writes it, while it is in that core's
/// cache: a kernel that writes its whole output pays no separate single-threaded zero-fill
/// pass over memory before it. The pieces are fixed by `chunk`, not by the thread count.
pub(crate) fn fill_chunks(
    v: Vec<f32>,
    n: usize,
    chunk: usize,
    par: bool,
    f: impl Fn(usize, &mut [f32]) + Sync,
) -> Vec<f32> {
    fill_chunks_uninit(v, n, chunk, par, |i, c| {
        for m in c.iter_mut() {
            m.write(0.0);
        }
        // SAFETY: every element of `c` was initialised just above, and `MaybeUninit<f32>` has
        // `f32`'s layout.
        f(i, unsafe {
            &mut *(c as *mut [MaybeUninit<f32>] as *mut [f32])
        })
    })
}

/// [`fill_chunks`] for a kernel that writes every element of its piece itself (no zeroing):
/// `f` must initialise all of `chunk` (the norms' forward writes each row whole).
pub(crate) fn fill_chunks_uninit(
    mut v: Vec<f32>,
    n: usize,
    chunk: usize,
    par: bool,
    f: impl Fn(usize, &mut [MaybeUninit<f32>]) + Sync,
) -> Vec<f32> {
    use rayon::prelude::*;
    v.clear();
    v.reserve_exact(n);
    let run = |(i, c): (usize, &mut [MaybeUninit<f32>])| f(i, c);
    let spare = &mut v.spare_capacity_mut()[..n];
    if par {
        spare.par_chunks_mut(chunk.max(1)).enumerate().for_each(run);
    } else {
        spare.chunks_mut(chunk.max(1)).enumerate().for_each(run);
    }
    // SAFETY: the pieces cover `0..n` and `f` initialised each whole (a panic in `f` unwinds
    // before this line, leaving `v` empty).
    unsafe { v.set_len(n) };
    v
}

/// Bytes held by live CPU tensors (the CPU device reports its tensor bytes too).
pub(crate) static CPU_ALLOCATED: AtomicU64 = AtomicU64::new(0);
/// The peak of [`CPU_ALLOCATED`] since start or the last reset.
pub(crate) static CPU_PEAK: AtomicU64 = AtomicU64::new(0);

/// Counts `bytes` of host data that became a tensor's.
pub(crate) fn cpu_alloc(bytes: u64) {
    let now = CPU_ALLOCATED.fetch_add(bytes, Ordering::Relaxed) + bytes;
    CPU_PEAK.fetch_max(now, Ordering::Relaxed);
}

/// Uncounts `bytes` of host data that a tensor released.
pub(crate) fn cpu_free(bytes: u64) {
    let _ = CPU_ALLOCATED.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        Some(v.saturating_sub(bytes))
    });
}

/// An empty `Vec` with room for `n` elements, or [`Error::OutOfMemory`].
pub(crate) fn try_vec<T>(op: &'static str, n: usize) -> Result<Vec<T>> {
    if let Some(v) = take_f32(n).and_then(retype::<f32, T>) {
        return Ok(v);
    }
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
        op,
        device: "cpu".into(),
        adapter: "host memory".into(),
        requested: (n as u64).saturating_mul(std::mem::size_of::<T>() as u64),
        allocated: CPU_ALLOCATED.load(Ordering::Relaxed),
        reserved: CPU_ALLOCATED.load(Ordering::Relaxed),
        limit: isize::MAX as u64,
    })?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_buffers_come_back_for_the_same_size_only() {
        // A size no other test allocates, so parallel tests do not take it.
        let n = POOL_MIN + 12_347;
        let mut v = try_vec::<f32>("test", n).expect("memory");
        v.resize(n, 7.0);
        let at = v.as_ptr();
        recycle(v);
        assert!(CPU_POOLED.load(Ordering::Relaxed) >= (n * 4) as u64);
        assert!(take_f32(n + 1).is_none());
        let z = zeros_f32(n);
        assert_eq!(z.as_ptr(), at, "the freed buffer is reused");
        assert!(z.len() == n && z.iter().all(|&x| x == 0.0));
        recycle(z);
        let w = try_vec::<f32>("test", n).expect("memory");
        assert_eq!((w.as_ptr(), w.len(), w.capacity()), (at, 0, n));
        // 4-byte integers share the pool; other sizes and small buffers never enter it.
        recycle(w);
        let u = try_vec::<u32>("test", n).expect("memory");
        assert_eq!((u.as_ptr().cast::<f32>(), u.capacity()), (at, n));
        recycle(vec![0u8; n * 4]);
        assert!(take_f32(n).is_none());
        recycle(vec![1.0f32; POOL_MIN - 1]);
        assert!(take_f32(POOL_MIN - 1).is_none());
    }
}
