//! NaN/Inf anomaly detection: inside `detect_anomaly`, every op's forward result and every
//! gradient a rule produces is checked, and the first non-finite one is reported by op name.
//! The per-thread state and the forward check sit with the recording, in `tensor::anomaly`.

use crate::error::{Error, Result};
use crate::tensor::anomaly::{enabled, has_non_finite, report, shapes, Scope};
use crate::tensor::Tensor;

/// Whether detection is on and has already found a NaN/Inf in the current `detect_anomaly`:
/// optimizers then skip their update, so that the non-finite value never reaches the weights.
pub(crate) use crate::tensor::anomaly::reported as anomaly_reported;

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
    let scope = Scope::enter();
    let value = f();
    match scope.finish() {
        Some(msg) => Err(Error::Anomaly(msg)),
        None => Ok(value),
    }
}
