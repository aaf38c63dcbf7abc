//! Streaming (non-temporal) stores for row kernels whose output is far larger than the caches.
//!
//! Why: a norm (layer_norm, rms_norm) reads each input row once and writes each output row
//! once. An ordinary store first reads the output's cache line from memory ("read for
//! ownership") and later writes it back, so a 16 MiB output costs 32 MiB of memory traffic on
//! top of the 16 MiB input. A streaming store writes the line straight to memory: a third less
//! traffic for an output that would not stay cached anyway (layer_norm over 4096 x 1024:
//! 2.0-2.2 ms against 2.3-2.6, alternated). For outputs that fit the caches the next op wants
//! them cached, so the kernels stream only from [`STREAM_MIN_BYTES`] up. Softmax, which spends
//! more of its time in `exp`, measured slower with them (4.5 ms against 3.4) and keeps plain
//! stores.
//!
//! The values are the same either way (only the store instruction differs), so the bits do not
//! depend on the choice.

use std::mem::MaybeUninit;

/// Outputs of at least this many bytes are written with streaming stores: a quarter of a
/// typical desktop or server last-level cache (32 MiB), so an output this large would evict
/// most of what the next op reads, while a model's activations (a few MiB at most on a CPU)
/// stay in the cache for the op that consumes them.
pub(crate) const STREAM_MIN_BYTES: usize = 8 << 20;

/// Whether an output of `n` f32 takes streaming stores (x86-64 with AVX; elsewhere the
/// kernels write their outputs directly).
pub(crate) fn wanted(n: usize) -> bool {
    n.saturating_mul(4) >= STREAM_MIN_BYTES && avx()
}

/// Whether the CPU has AVX (asked once): the 8-lane streaming store is `vmovntps`, while the
/// SSE one is a legacy `movntps`, which costs a merge on CPUs that penalise mixing it with
/// AVX code.
fn avx() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static AVX: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *AVX.get_or_init(|| is_x86_feature_detected!("avx"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// `dst = src` (same length) with streaming stores where `dst` is aligned (with AVX), plain
/// stores for the unaligned head, the tail, and on other CPUs. Call [`fence`] once the task's stores are done.
#[inline(always)]
pub(crate) fn copy(dst: &mut [MaybeUninit<f32>], src: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx() {
        // SAFETY: the CPU has AVX (checked just above).
        return unsafe { copy_avx(dst, src) };
    }
    copy_plain(dst, src, 0);
}

/// `dst[from..] = src[from..]` with plain stores.
#[inline(always)]
fn copy_plain(dst: &mut [MaybeUninit<f32>], src: &[f32], from: usize) {
    for (d, &s) in dst.iter_mut().zip(src).skip(from) {
        d.write(s);
    }
}

/// [`copy`] with 8-lane streaming stores on 32-byte aligned `dst`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
fn copy_avx(dst: &mut [MaybeUninit<f32>], src: &[f32]) {
    use std::arch::x86_64::{_mm256_loadu_ps, _mm256_stream_ps};
    let n = dst.len().min(src.len());
    let head = dst.as_ptr().align_offset(32).min(n);
    copy_plain(&mut dst[..head], &src[..head], 0);
    let mut i = head;
    while i + 8 <= n {
        // SAFETY: `i + 8 <= n` keeps both 8-lane accesses in bounds; `dst + i` is 32-byte
        // aligned (the head brought it there, and 8 f32 keep it so); the CPU has AVX.
        unsafe {
            _mm256_stream_ps(
                dst.as_mut_ptr().add(i).cast::<f32>(),
                _mm256_loadu_ps(src.as_ptr().add(i)),
            )
        };
        i += 8;
    }
    copy_plain(&mut dst[..n], &src[..n], i);
}

/// Orders this thread's streaming stores before whatever it does next (a task's end, which
/// another thread then reads past): they are weakly ordered until an `sfence`.
#[inline(always)]
pub(crate) fn fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of the x86-64 baseline.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

/// `v` as uninitialised slots, for a kernel that writes a scratch row through the same
/// `&mut [MaybeUninit<f32>]` it writes outputs through.
///
/// # Safety
/// The caller stores only initialised `f32`s through the result (`MaybeUninit::write`), so
/// `v` stays initialised.
pub(crate) unsafe fn as_uninit(v: &mut [f32]) -> &mut [MaybeUninit<f32>] {
    // SAFETY: `MaybeUninit<f32>` has `f32`'s layout; the caller keeps the slots initialised.
    unsafe { &mut *(v as *mut [f32] as *mut [MaybeUninit<f32>]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_writes_every_element_at_every_alignment() {
        let src: Vec<f32> = (0..37).map(|i| i as f32 * 0.5 - 3.0).collect();
        for start in 0..5 {
            for n in [0, 1, 3, 4, 5, 8, 31, 32] {
                let mut dst = [f32::NAN; 48];
                // SAFETY: `copy` writes only initialised values.
                copy(unsafe { as_uninit(&mut dst[start..start + n]) }, &src[..n]);
                fence();
                assert_eq!(&dst[start..start + n], &src[..n], "start {start}, n {n}");
                assert!(dst[..start].iter().all(|v| v.is_nan()), "head untouched");
                assert!(
                    dst[start + n..].iter().all(|v| v.is_nan()),
                    "tail untouched"
                );
            }
        }
    }

    #[test]
    fn large_outputs_stream_and_small_ones_do_not() {
        assert!(!wanted(1024));
        assert_eq!(wanted(STREAM_MIN_BYTES / 4), avx());
    }
}
