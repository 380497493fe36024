//! Whether ops record a graph on this thread: `no_grad` / `enable_grad` scopes, nestable and
//! restored even when the scope panics.

use std::cell::Cell;

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
}

/// Whether ops on this thread currently record a graph (false inside [`no_grad`]).
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(|g| g.get())
}

/// Restores the previous mode when dropped, also during unwinding.
pub(crate) struct ModeGuard(bool);

impl ModeGuard {
    pub(crate) fn set(enabled: bool) -> ModeGuard {
        ModeGuard(GRAD_ENABLED.with(|g| g.replace(enabled)))
    }
}

impl Drop for ModeGuard {
    fn drop(&mut self) {
        GRAD_ENABLED.with(|g| g.set(self.0));
    }
}

/// Turns recording on this thread on or off until changed again, and returns the previous
/// setting: for bindings whose scopes are not closures (a Python `with` block), which restore
/// it on exit. Prefer [`no_grad`] / [`enable_grad`] in Rust.
pub fn set_grad_enabled(enabled: bool) -> bool {
    GRAD_ENABLED.with(|g| g.replace(enabled))
}

/// Runs `f` without recording: results of ops inside are untracked.
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    let _guard = ModeGuard::set(false);
    f()
}

/// Runs `f` with recording on, also inside a `no_grad` scope.
pub fn enable_grad<R>(f: impl FnOnce() -> R) -> R {
    let _guard = ModeGuard::set(true);
    f()
}
