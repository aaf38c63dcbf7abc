//! GPU time per kernel (`Device::profile`): while a profile is open, every dispatch is bracketed
//! by two timestamp writes inside its compute pass (`TIMESTAMP_QUERY_INSIDE_PASSES`); closing
//! the profile (`timing.rs`) resolves the queries into a buffer and reads it back once. A leaf
//! type: the device owns one.
//!
//! Lock order: the profiler's lock is taken inside the batch lock (by `launch`) and alone
//! (by `begin`/`finish`); it is never held while taking another lock.

use std::sync::Mutex;

/// Timestamps per query set: wgpu's limit (`QUERY_SET_MAX_QUERIES`), two per dispatch.
pub(crate) const QUERIES: u32 = 4096;

/// One kernel's share of a profile.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct KernelSpan {
    pub kernel: String,
    pub op: &'static str,
    pub calls: u64,
    pub nanos: f64,
}

/// The dispatches recorded so far in an open profile.
pub(crate) struct Session {
    pub set: wgpu::QuerySet,
    /// (kernel label, op, first query index) per timed dispatch.
    pub spans: Vec<(String, &'static str, u32)>,
    /// Dispatches seen, timed or not (past `QUERIES / 2` they are counted only).
    pub dispatches: u64,
}

/// The per-device profiler: `None` while no profile is open.
#[derive(Default)]
pub(crate) struct Profiler(Mutex<Option<Session>>);

impl Profiler {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Option<Session>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Called by `launch` with the batch lock held: brackets one dispatch when a profile is
    /// open (and has room).
    pub(crate) fn around(
        &self,
        pass: &mut wgpu::ComputePass<'static>,
        kernel: impl FnOnce() -> String,
        op: &'static str,
        dispatch: impl FnOnce(&mut wgpu::ComputePass<'static>),
    ) {
        let mut s = self.lock();
        let Some(s) = s.as_mut() else {
            drop(s);
            return dispatch(pass);
        };
        s.dispatches += 1;
        let at = s.spans.len() as u32 * 2;
        if at + 2 > QUERIES {
            return dispatch(pass);
        }
        pass.write_timestamp(&s.set, at);
        dispatch(pass);
        pass.write_timestamp(&s.set, at + 1);
        s.spans.push((kernel(), op, at));
    }
}
