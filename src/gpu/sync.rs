//! The one lock helper of `src/gpu` (a leaf: every other file may use it).

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, ignoring poisoning: every structure behind these locks is updated whole (entries
/// are inserted or taken in one step), so a panic elsewhere cannot leave it half-built.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The GL turn: wgpu's GL backend (wgpu-hal `gles`) makes every call that touches the GL
/// context (buffer creation, mapping, pipeline builds, `queue.submit`, `device.poll`) take one
/// lock per adapter context with `try_lock_for` (6 s on EGL, 1 s on WGL) and panics ("Could not
/// lock adapter context") when it waits longer. A call holds that lock as long as the driver
/// keeps it: on a software GL driver (llvmpipe), `glDispatchCompute` runs the kernel before it
/// returns, so a submit of long work holds the context for the whole work. wgtensor therefore
/// takes this turn, a plain lock without a deadline, around each of its wgpu calls that touch a
/// GL context: a thread that needs the context waits here, as long as the other thread's call
/// lasts, and enters wgpu only once the context is free. One turn serves every GL device of the
/// process (logical devices on one adapter share its context). Waits never hold it across a
/// wait: they poll without blocking and take the turn per poll.
static GL_TURN: Mutex<()> = Mutex::new(());

thread_local! {
    /// How many `GlTurn`s this thread holds (a call that takes the turn may reach another that
    /// takes it: the inner one is a no-op instead of a deadlock).
    static GL_DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// This thread's turn on the GL context (see `GL_TURN`); a no-op for other backends.
pub(crate) struct GlTurn {
    _guard: Option<MutexGuard<'static, ()>>,
    counted: bool,
}

impl GlTurn {
    /// Waits for the turn when `gl` (the device is on wgpu's GL backend).
    pub(crate) fn take(gl: bool) -> GlTurn {
        Self::enter(gl, true).expect("a blocking take always enters")
    }

    /// The turn if it is free (or already this thread's), else `None`.
    pub(crate) fn try_take(gl: bool) -> Option<GlTurn> {
        Self::enter(gl, false)
    }

    fn enter(gl: bool, block: bool) -> Option<GlTurn> {
        if !gl {
            return Some(GlTurn {
                _guard: None,
                counted: false,
            });
        }
        let guard = if GL_DEPTH.get() > 0 {
            None
        } else if block {
            Some(lock(&GL_TURN))
        } else {
            match GL_TURN.try_lock() {
                Ok(g) => Some(g),
                Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => return None,
            }
        };
        GL_DEPTH.set(GL_DEPTH.get() + 1);
        Some(GlTurn {
            _guard: guard,
            counted: true,
        })
    }
}

impl Drop for GlTurn {
    fn drop(&mut self) {
        if self.counted {
            GL_DEPTH.set(GL_DEPTH.get() - 1);
        }
    }
}
