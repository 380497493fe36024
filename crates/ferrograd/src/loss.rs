//! Losses: each returns a differentiable 0-d tensor, the mean over the batch (axis 0).

use crate::data::one_hot;
use crate::ops::same_shape;
use crate::tensor::Tensor;

/// A loss of predictions against targets.
pub trait Loss: Send + Sync {
    /// The loss of `pred` against `target`: a 0-d tensor, differentiable with respect to
    /// `pred`. The losses of this module panic when the shapes do not fit.
    fn loss(&self, pred: &Tensor, target: &Tensor) -> Tensor;
    /// The loss's name for messages and summaries (its type's name unless it has settings).
    fn name(&self) -> String {
        let full = std::any::type_name::<Self>();
        full.rsplit("::").next().unwrap_or(full).to_string()
    }
}

/// Mean over the batch of the per-sample sums over the remaining axes.
fn batch_mean(per_element: &Tensor) -> Tensor {
    if per_element.ndim() <= 1 {
        return per_element.mean();
    }
    let rest: Vec<usize> = (1..per_element.ndim()).collect();
    per_element.sum_axes(&rest, false).mean()
}

/// The target as rows over the class axis (the last of `scores`): one-hot from `I64` class
/// indices shaped as `scores` without that axis (PyTorch's `cross_entropy` targets), or the
/// one-hot / soft rows themselves, which must match `scores`' shape.
fn class_rows(op: &str, scores: &Tensor, target: &Tensor) -> Tensor {
    if target.dtype().is_float() {
        same_shape(op, scores, target);
        return target.clone();
    }
    let (batch, classes) = scores.shape().split_at(scores.ndim().saturating_sub(1));
    assert!(
        target.shape() == batch,
        "{op}: class indices of shape {:?} do not fit scores of shape {:?} (expected {batch:?})",
        target.shape(),
        scores.shape()
    );
    let classes = classes.first().copied().unwrap_or(0);
    let labels = target.to_vec::<i64>();
    if let Some(c) = labels.iter().find(|&&c| !(0..classes as i64).contains(&c)) {
        panic!("{op}: class index {c} is not a class of 0..{classes}");
    }
    one_hot(&labels, classes)
        .reshape(scores.shape())
        .to_dtype(scores.dtype())
}

/// Losses without settings: a unit struct, `new()`, and the formula.
macro_rules! losses {
    ($($(#[$doc:meta])* $name:ident, |$op:ident, $pred:ident, $target:ident| $body:expr;)*) => {
        $(
            unit_struct!($(#[$doc])* $name);

            impl Loss for $name {
                fn loss(&self, $pred: &Tensor, $target: &Tensor) -> Tensor {
                    let $op = stringify!($name);
                    $body
                }
            }
        )*
    };
}

losses! {
    /// Cross-entropy of softmax(logits) over the last axis, against one-hot or soft targets
    /// of the logits' shape or `I64` class indices (`[N]` for logits `[N, C]`), computed
    /// through log_softmax: finite for any logits. The gradient is (softmax − target) / N.
    SoftmaxCrossEntropy, |op, logits, target| {
        let rows = class_rows(op, logits, target);
        -batch_mean(&(&logits.log_softmax(logits.ndim() - 1) * &rows))
    };
    /// Negative log-likelihood of log-probabilities (last axis) against one-hot targets or
    /// `I64` class indices.
    Nll, |op, log_probs, target| -batch_mean(&(log_probs * &class_rows(op, log_probs, target)));
    /// Binary cross-entropy of sigmoid(logits) against targets in [0, 1], in the stable form
    /// max(x, 0) − x·t + ln(1 + e^−|x|) (which softplus(x) − x·t equals).
    SigmoidCrossEntropy, |op, logits, target| {
        same_shape(op, logits, target);
        batch_mean(&(&logits.softplus() - &(logits * target)))
    };
    /// Mean squared error over all elements (PyTorch's `MSELoss`).
    Mse, |op, pred, target| {
        same_shape(op, pred, target);
        (pred - target).square().mean()
    };
    /// Mean absolute error over all elements.
    Mae, |op, pred, target| {
        same_shape(op, pred, target);
        (pred - target).abs().mean()
    };
}

/// Huber loss over all elements: ½d² for |d| ≤ delta, delta·(|d| − ½delta) beyond.
#[derive(Clone, Copy, Debug)]
pub struct Huber {
    /// Where the loss turns from quadratic to linear in the difference.
    pub delta: f64,
}

impl Huber {
    /// A Huber loss with threshold `delta`; panics unless `delta` is positive.
    pub fn new(delta: f64) -> Self {
        assert!(delta > 0.0, "Huber: delta {delta} must be positive");
        Huber { delta }
    }
}

impl Loss for Huber {
    fn loss(&self, pred: &Tensor, target: &Tensor) -> Tensor {
        same_shape("Huber", pred, target);
        let d = (pred - target).abs();
        // min(|d|, delta) is the quadratic part; the rest grows linearly.
        let quad = d.clamp(0.0, self.delta);
        let lin = &d - &quad;
        (&quad.square().mul_scalar(0.5) + &lin.mul_scalar(self.delta)).mean()
    }

    fn name(&self) -> String {
        format!("Huber({})", self.delta)
    }
}

// The names the Python binding gives these losses (PyTorch's, with Rust's capitalisation), so
// that either spelling works in either language.
/// [`SoftmaxCrossEntropy`] under the Python binding's name.
pub type SoftmaxCrossEntropyLoss = SoftmaxCrossEntropy;
/// [`SigmoidCrossEntropy`] under the Python binding's name.
pub type SigmoidCrossEntropyLoss = SigmoidCrossEntropy;
/// [`Mse`] under PyTorch's name.
pub type MseLoss = Mse;
/// [`Mae`] under the Python binding's name (PyTorch's `L1Loss`).
pub type MaeLoss = Mae;
/// [`Huber`] under PyTorch's name.
pub type HuberLoss = Huber;
/// [`Nll`] under PyTorch's name.
pub type NllLoss = Nll;
