//! The state of anomaly detection on this thread and the check every recorded op runs on its
//! result. The public scope (`detect_anomaly`) and the check of gradients live in `autograd`;
//! the state lives here because recording an op, which belongs to this layer, reads it.

use std::cell::{Cell, RefCell};

use super::{with_dtype, Tensor};

thread_local! {
    /// `None` when detection is off; `Some(first report)` while on.
    static STATE: RefCell<Option<Option<String>>> = const { RefCell::new(None) };
    /// Set while a derivative rule runs: its ops are checked as that rule's result instead.
    static IN_RULE: Cell<bool> = const { Cell::new(false) };
    /// Whether detection is on: a plain flag, checked by every op.
    static ON: Cell<bool> = const { Cell::new(false) };
}

pub(crate) fn enabled() -> bool {
    ON.with(|on| on.get())
}

/// Whether detection is on and has already found a NaN/Inf in the current scope.
pub(crate) fn reported() -> bool {
    enabled() && STATE.with(|s| matches!(&*s.borrow(), Some(Some(_))))
}

/// Turns detection on with no report yet; dropping the guard restores the enclosing scope's
/// state, also during unwinding.
pub(crate) struct Scope(Option<Option<String>>, bool);

impl Scope {
    pub(crate) fn enter() -> Scope {
        let outer = STATE.with(|s| s.replace(Some(None)));
        let was_on = ON.with(|on| on.replace(true));
        Scope(outer, was_on)
    }

    /// The first report made inside this scope, if any.
    pub(crate) fn finish(self) -> Option<String> {
        STATE.with(|s| s.borrow_mut().take()).flatten()
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        STATE.with(|s| *s.borrow_mut() = self.0.take());
        ON.with(|on| on.set(self.1));
    }
}

/// Runs a derivative rule; its internal ops are not reported one by one, its gradients are
/// (by the engine, naming the op whose rule it is).
pub(crate) fn in_rule<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            IN_RULE.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(IN_RULE.with(|c| c.replace(true)));
    f()
}

pub(crate) fn has_non_finite(t: &Tensor) -> bool {
    if !t.dtype().is_float() {
        return false;
    }
    with_dtype!(t.dtype(), T => t.contiguous_data::<T>().iter().any(|v| !v.is_finite()))
}

pub(crate) fn shapes(ts: &[&Tensor]) -> String {
    ts.iter()
        .map(|t| format!("{:?}", t.shape()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Keeps `msg` as the scope's report unless one was made before.
pub(crate) fn report(msg: impl FnOnce() -> String) {
    STATE.with(|s| {
        if let Some(first @ None) = &mut *s.borrow_mut() {
            *first = Some(msg());
        }
    });
}

pub(crate) fn check_forward(op: &str, out: &Tensor, inputs: &[&Tensor]) {
    if enabled() && !IN_RULE.with(|c| c.get()) && has_non_finite(out) {
        report(|| {
            format!(
                "anomaly: forward of {op} produced NaN/Inf (input shapes: {})",
                shapes(inputs)
            )
        });
    }
}
