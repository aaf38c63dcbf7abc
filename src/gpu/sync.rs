//! The one lock helper of `src/gpu` (a leaf: every other file may use it).

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, ignoring poisoning: every structure behind these locks is updated whole (entries
/// are inserted or taken in one step), so a panic elsewhere cannot leave it half-built.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
