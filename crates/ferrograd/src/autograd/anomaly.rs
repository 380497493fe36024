//! NaN/Inf anomaly detection: inside `detect_anomaly`, every op's forward result and every
//! gradient a rule produces is checked, and the first non-finite one is reported by op name.

use std::cell::RefCell;

use crate::error::{Error, Result};
use crate::tensor::{with_dtype, Tensor};

thread_local! {
    /// `None` when detection is off; `Some(first report)` while on.
    static STATE: RefCell<Option<Option<String>>> = const { RefCell::new(None) };
}

thread_local! {
    /// Set while a derivative rule runs: its ops are checked as that rule's result instead.
    static IN_RULE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

thread_local! {
    /// Whether detection is on: a plain flag, checked by every op.
    static ON: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn enabled() -> bool {
    ON.with(|on| on.get())
}

/// Whether detection is on and has already found a NaN/Inf in the current `detect_anomaly`:
/// optimizers then skip their update, so that the non-finite value never reaches the weights.
pub(crate) fn anomaly_reported() -> bool {
    enabled() && STATE.with(|s| matches!(&*s.borrow(), Some(Some(_))))
}

/// Runs a derivative rule; its internal ops are not reported one by one, its gradients are
/// (by `check_backward`, naming the op whose rule it is).
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

fn has_non_finite(t: &Tensor) -> bool {
    with_dtype!(t.dtype(), T => t.contiguous_data::<T>().iter().any(|v| !v.is_finite()))
}

fn shapes(ts: &[&Tensor]) -> String {
    ts.iter()
        .map(|t| format!("{:?}", t.shape()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn report(msg: impl FnOnce() -> String) {
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

pub(crate) fn check_backward(op: &str, grads: &[Option<Tensor>], inputs: &[Tensor]) {
    if !enabled() {
        return;
    }
    for (i, g) in grads.iter().enumerate() {
        if g.as_ref().is_some_and(has_non_finite) {
            let refs: Vec<&Tensor> = inputs.iter().collect();
            report(|| {
                format!(
                    "anomaly: backward of {op} produced NaN/Inf in the gradient of input {i} \
                     (input shapes: {})",
                    shapes(&refs)
                )
            });
        }
    }
}

/// Runs `f` checking every op's forward and backward for NaN/Inf. Returns `f`'s result, or an
/// error naming the first op that produced a non-finite value and its input shapes.
pub fn detect_anomaly<R>(f: impl FnOnce() -> R) -> Result<R> {
    let outer = STATE.with(|s| s.replace(Some(None)));
    let was_on = ON.with(|on| on.replace(true));
    struct Restore(Option<Option<String>>, bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            STATE.with(|s| *s.borrow_mut() = self.0.take());
            ON.with(|on| on.set(self.1));
        }
    }
    let restore = Restore(outer, was_on);
    let value = f();
    let found = STATE.with(|s| s.borrow_mut().take()).flatten();
    drop(restore);
    match found {
        Some(msg) => Err(Error::Anomaly(msg)),
        None => Ok(value),
    }
}
