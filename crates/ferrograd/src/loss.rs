//! Losses: each returns a differentiable 0-d tensor, the mean over the batch (axis 0).

use crate::tensor::Tensor;

/// A loss of predictions against targets.
pub trait Loss: Send + Sync {
    fn loss(&self, pred: &Tensor, target: &Tensor) -> Tensor;
    fn name(&self) -> String;
}

fn check(op: &str, pred: &Tensor, target: &Tensor) {
    assert!(
        pred.shape() == target.shape(),
        "{op}: prediction shape {:?} differs from target shape {:?}",
        pred.shape(),
        target.shape()
    );
}

/// Mean over the batch of the per-sample sums over the remaining axes.
fn batch_mean(per_element: &Tensor) -> Tensor {
    if per_element.ndim() <= 1 {
        return per_element.mean();
    }
    let rest: Vec<usize> = (1..per_element.ndim()).collect();
    per_element.sum_axes(&rest, false).mean()
}

/// Cross-entropy of softmax(logits) against one-hot or soft targets `[N, C]`, computed through
/// log_softmax: finite for any logits. The gradient is (softmax − target) / N.
#[derive(Clone, Copy, Debug, Default)]
pub struct SoftmaxCrossEntropy;

impl SoftmaxCrossEntropy {
    pub fn new() -> Self {
        SoftmaxCrossEntropy
    }
}

impl Loss for SoftmaxCrossEntropy {
    fn loss(&self, logits: &Tensor, target: &Tensor) -> Tensor {
        check("SoftmaxCrossEntropy", logits, target);
        let last = logits.ndim() - 1;
        -batch_mean(&(&logits.log_softmax(last) * target))
    }

    fn name(&self) -> String {
        "SoftmaxCrossEntropy".into()
    }
}

/// Negative log-likelihood of log-probabilities against one-hot targets.
#[derive(Clone, Copy, Debug, Default)]
pub struct Nll;

impl Nll {
    pub fn new() -> Self {
        Nll
    }
}

impl Loss for Nll {
    fn loss(&self, log_probs: &Tensor, target: &Tensor) -> Tensor {
        check("Nll", log_probs, target);
        -batch_mean(&(log_probs * target))
    }

    fn name(&self) -> String {
        "Nll".into()
    }
}

/// Binary cross-entropy of sigmoid(logits) against targets in [0, 1], in the stable form
/// max(x, 0) − x·t + ln(1 + e^−|x|).
#[derive(Clone, Copy, Debug, Default)]
pub struct SigmoidCrossEntropy;

impl SigmoidCrossEntropy {
    pub fn new() -> Self {
        SigmoidCrossEntropy
    }
}

impl Loss for SigmoidCrossEntropy {
    fn loss(&self, logits: &Tensor, target: &Tensor) -> Tensor {
        check("SigmoidCrossEntropy", logits, target);
        // softplus(x) − x·t equals the stable form above.
        batch_mean(&(&logits.softplus() - &(logits * target)))
    }

    fn name(&self) -> String {
        "SigmoidCrossEntropy".into()
    }
}

/// Mean squared error over all elements (PyTorch's `MSELoss`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Mse;

impl Mse {
    pub fn new() -> Self {
        Mse
    }
}

impl Loss for Mse {
    fn loss(&self, pred: &Tensor, target: &Tensor) -> Tensor {
        check("Mse", pred, target);
        (pred - target).square().mean()
    }

    fn name(&self) -> String {
        "Mse".into()
    }
}

/// Mean absolute error over all elements.
#[derive(Clone, Copy, Debug, Default)]
pub struct Mae;

impl Mae {
    pub fn new() -> Self {
        Mae
    }
}

impl Loss for Mae {
    fn loss(&self, pred: &Tensor, target: &Tensor) -> Tensor {
        check("Mae", pred, target);
        (pred - target).abs().mean()
    }

    fn name(&self) -> String {
        "Mae".into()
    }
}

/// Huber loss over all elements: ½d² for |d| ≤ delta, delta·(|d| − ½delta) beyond.
#[derive(Clone, Copy, Debug)]
pub struct Huber {
    pub delta: f64,
}

impl Huber {
    pub fn new(delta: f64) -> Self {
        assert!(delta > 0.0, "Huber: delta {delta} must be positive");
        Huber { delta }
    }
}

impl Loss for Huber {
    fn loss(&self, pred: &Tensor, target: &Tensor) -> Tensor {
        check("Huber", pred, target);
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
