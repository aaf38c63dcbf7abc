//! Keeping the pool's threads awake through a sequence of short parallel loops (a model's
//! decode step: ~50 matrix-vector products of a few hundred microseconds each, with small
//! serial ops between them).
//!
//! A rayon worker that finds no work soon sleeps, and the next parallel loop then waits for it
//! to wake (a futex round trip, tens of microseconds on a virtual machine) before it runs on
//! more than one core. [`run_hot`] runs a closure with the other workers polling for jobs
//! instead, as OpenMP-style runtimes do inside a parallel region: they steal each loop's
//! jobs the moment they are pushed. The cost is those cores spinning until the closure
//! returns, so it is for bursts of work, not for idle waits.
//!
//! Which thread runs which job never changes a result: every CPU kernel gives the same bits at
//! any thread count.

use std::sync::atomic::{AtomicBool, Ordering};

/// Runs `f` on a worker of the current rayon pool while the pool's other workers poll for its
/// jobs; returns `f`'s result. With one thread it is `f()` on that worker.
pub(crate) fn run_hot<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let done = AtomicBool::new(false);
    rayon::scope(|s| {
        let owner = rayon::current_thread_index();
        let done = &done;
        for _ in 1..rayon::current_num_threads() {
            s.spawn(move |_| {
                // The thread running `f` must not poll: `f` continues only once this returns.
                if rayon::current_thread_index() == owner {
                    return;
                }
                while !done.load(Ordering::Acquire) {
                    if rayon::yield_now() != Some(rayon::Yield::Executed) {
                        std::hint::spin_loop();
                    }
                }
            });
        }
        // Set on every way out of `f` (an error, a panic), or the scope would wait forever.
        struct Done<'a>(&'a AtomicBool);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Release);
            }
        }
        let _done = Done(done);
        f()
    })
}

#[cfg(test)]
mod tests {
    use super::run_hot;
    use rayon::prelude::*;

    #[test]
    fn returns_the_result_of_parallel_loops_at_any_thread_count() {
        let want: u64 = (0..100_000u64).map(|i| i * i % 7).sum();
        for threads in [1, 2, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let got = pool.install(|| {
                run_hot(|| {
                    // Several loops in a row, as a decode step runs them.
                    (0..5)
                        .map(|_| (0..100_000u64).into_par_iter().map(|i| i * i % 7).sum())
                        .collect::<Vec<u64>>()
                })
            });
            assert_eq!(got, vec![want; 5], "{threads} threads");
        }
    }

    #[test]
    fn an_error_or_a_panic_releases_the_polling_workers() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let r: Result<(), &str> = pool.install(|| run_hot(|| Err("failed")));
        assert_eq!(r, Err("failed"));
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.install(|| run_hot(|| panic!("boom")))
        }));
        assert!(caught.is_err());
        // The pool still runs work afterwards (nothing is left polling).
        assert_eq!(pool.install(|| run_hot(|| 7)), 7);
    }
}
