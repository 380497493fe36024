//! Losses: each returns a differentiable 0-d tensor, a mean: over every position for the
//! cross-entropies (each row of classes), over the batch (axis 0) for the sigmoid
//! cross-entropy, over every element for the regression losses. Those that are a mean of
//! per-element values ([`PerElement`]) also give the values and their sum, PyTorch's other
//! reductions.

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

/// PyTorch's `reduction`: how a loss's values per element (per position for the class
/// losses) become its result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Reduction {
    /// Their mean (over the positions that count): what [`Loss::loss`] gives.
    #[default]
    Mean,
    /// Their sum.
    Sum,
    /// No reduction: one value per element (position).
    None,
}

/// A loss that is the mean of one value per element (per position, a row of classes, for the
/// class losses), so that PyTorch's other reductions exist too.
///
/// ```
/// use ferrograd::prelude::*;
///
/// let pred = Tensor::from_vec(vec![1.0f32, 2.0, 4.0], &[3]);
/// let target = Tensor::from_vec(vec![1.0f32, 1.0, 1.0], &[3]);
/// assert_eq!(Mse::new().per_element(&pred, &target).to_vec::<f32>(), vec![0.0, 1.0, 9.0]);
/// assert_eq!(Mse::new().reduced(&pred, &target, Reduction::Sum).item(), 10.0);
/// ```
pub trait PerElement: Loss {
    /// The loss of every element (position), unreduced; an ignored position gives 0.
    fn per_element(&self, pred: &Tensor, target: &Tensor) -> Tensor;
    /// The loss reduced as `reduction` says.
    fn reduced(&self, pred: &Tensor, target: &Tensor, reduction: Reduction) -> Tensor {
        match reduction {
            Reduction::Mean => self.loss(pred, target),
            Reduction::Sum => self.per_element(pred, target).sum(),
            Reduction::None => self.per_element(pred, target),
        }
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

/// The negative log-likelihood of `log_probs` (classes on the last axis) at the positions
/// (rows of classes) that count: against `target`, `I64` class indices shaped as `log_probs`
/// without that axis (PyTorch's `cross_entropy` targets), or one-hot / soft rows of
/// `log_probs`' shape; `smoothing` mixes each target with the uniform distribution. Positions
/// whose index is `ignore_index` are left out, never read (a −∞ or NaN there changes nothing,
/// as in PyTorch). Returns the values `[count]` and, when some positions were left out, the
/// positions of the values.
fn class_nll(
    op: &str,
    log_probs: &Tensor,
    target: &Tensor,
    ce: &CrossEntropy,
) -> (Tensor, Option<Vec<usize>>) {
    let last = log_probs.ndim().saturating_sub(1);
    let classes = log_probs.shape().get(last).copied().unwrap_or(0);
    let batch = &log_probs.shape()[..last];
    let positions: usize = batch.iter().product();
    let smoothed = |nll: Tensor, rows: Option<&[usize]>| {
        let e = ce.label_smoothing;
        if e == 0.0 {
            return nll;
        }
        let uniform = log_probs
            .sum_axes(&[last], false)
            .div_scalar(-(classes as f64))
            .reshape(&[positions]);
        let uniform = match rows {
            Some(r) => uniform.index_select(0, r),
            None => uniform,
        };
        &nll.mul_scalar(1.0 - e) + &uniform.mul_scalar(e)
    };
    if target.dtype().is_float() {
        same_shape(op, log_probs, target);
        let nll = -&(log_probs * target).sum_axes(&[last], false);
        return (smoothed(nll.reshape(&[positions]), None), None);
    }
    assert!(
        target.shape() == batch,
        "{op}: class indices of shape {:?} do not fit scores of shape {:?} (expected {batch:?})",
        target.shape(),
        log_probs.shape()
    );
    if crate::tensor::trace::is_replayed() {
        // `vmap` runs this again on other examples' targets: it must see them as a tensor, not
        // as the positions one example's values name. Read by `gather`, which checks them: a
        // target equal to `ignore_index` is refused there.
        let rows = log_probs.reshape(&[positions, classes]);
        let picked = rows.gather(1, &target.reshape(&[positions, 1]));
        return (smoothed(-&picked.reshape(&[positions]), None), None);
    }
    let mut rows = Vec::new();
    let mut picks = Vec::new();
    for (row, c) in target.to_vec::<i64>().into_iter().enumerate() {
        if Some(c) == ce.ignore_index {
            continue;
        }
        if !(0..classes as i64).contains(&c) {
            panic!("{op}: class index {c} is not a class of 0..{classes}");
        }
        rows.push(row);
        picks.push(row * classes + c as usize);
    }
    let kept = (rows.len() < positions).then_some(rows);
    // Picking each row's entry from the flat log-probabilities (index_select, whose derivative
    // scatters back) costs one read per row where a one-hot product would read all classes.
    let picked = log_probs
        .reshape(&[log_probs.numel()])
        .index_select(0, &picks);
    (smoothed(-&picked, kept.as_deref()), kept)
}

/// [`class_nll`] at every position, `[..]` as the scores without the classes; a position
/// left out gives 0.
fn class_nll_per_position(
    op: &str,
    log_probs: &Tensor,
    target: &Tensor,
    ce: &CrossEntropy,
) -> Tensor {
    let batch = &log_probs.shape()[..log_probs.ndim().saturating_sub(1)];
    let (values, rows) = class_nll(op, log_probs, target, ce);
    match rows {
        None => values.reshape(batch),
        Some(rows) => {
            let zeros = Tensor::zeros(&[batch.iter().product()], values.dtype());
            zeros.index_add(0, &rows, &values).reshape(batch)
        }
    }
}

/// [`class_nll`] averaged over the positions that count, as PyTorch's `reduction="mean"`.
/// With every position ignored the mean is 0/0 = NaN, as PyTorch's.
fn class_loss(op: &str, log_probs: &Tensor, target: &Tensor, ce: &CrossEntropy) -> Tensor {
    let (values, _) = class_nll(op, log_probs, target, ce);
    let count = values.numel() as f64;
    values.sum().div_scalar(count)
}

/// Cross-entropy of softmax(logits) over the last axis, PyTorch's `cross_entropy` with the
/// classes last: logits `[.., C]` against `I64` class indices `[..]` or class probabilities
/// `[.., C]`, averaged over every position; positions whose index is `ignore_index` are left
/// out of the sum and the count, and `label_smoothing` mixes each target with the uniform
/// distribution. Computed through log_softmax: finite for any logits.
///
/// ```
/// use ferrograd::prelude::*;
///
/// let logits = Tensor::zeros(&[2, 3, 5], DType::F32); // [N, T, V]
/// let targets = Tensor::from_vec(vec![1i64, 4, -100, 0, 2, 3], &[2, 3]);
/// let loss = CrossEntropy::new().ignore_index(-100).loss(&logits, &targets);
/// assert!((loss.item() - 5f64.ln()).abs() < 1e-6); // uniform over 5 classes, 5 counted
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct CrossEntropy {
    ignore_index: Option<i64>,
    label_smoothing: f64,
}

impl CrossEntropy {
    /// No ignored index, no smoothing.
    pub fn new() -> Self {
        CrossEntropy::default()
    }

    /// Positions whose target is `index` count for nothing (PyTorch's default is −100).
    pub fn ignore_index(self, index: i64) -> Self {
        CrossEntropy {
            ignore_index: Some(index),
            ..self
        }
    }

    /// Mixes every target with the uniform distribution: (1 − e)·target + e/C; panics
    /// unless `e` is in [0, 1].
    pub fn label_smoothing(self, e: f64) -> Self {
        assert!(
            (0.0..=1.0).contains(&e),
            "CrossEntropy: label_smoothing {e} is not in [0, 1]"
        );
        CrossEntropy {
            label_smoothing: e,
            ..self
        }
    }
}

impl Loss for CrossEntropy {
    fn loss(&self, logits: &Tensor, target: &Tensor) -> Tensor {
        let last = logits.ndim().saturating_sub(1);
        class_loss("CrossEntropy", &logits.log_softmax(last), target, self)
    }
}

impl PerElement for CrossEntropy {
    fn per_element(&self, logits: &Tensor, target: &Tensor) -> Tensor {
        let last = logits.ndim().saturating_sub(1);
        class_nll_per_position("CrossEntropy", &logits.log_softmax(last), target, self)
    }
}

impl CrossEntropy {
    /// The same loss on log-probabilities rather than logits: PyTorch's `nll_loss` with this
    /// ignored index (label smoothing, which `nll_loss` lacks, applies too); what [`Nll`] is
    /// without settings.
    pub fn nll(&self, log_probs: &Tensor, target: &Tensor) -> Tensor {
        class_loss("Nll", log_probs, target, self)
    }

    /// [`CrossEntropy::nll`] at every position, unreduced (an ignored position gives 0).
    pub fn nll_per_element(&self, log_probs: &Tensor, target: &Tensor) -> Tensor {
        class_nll_per_position("Nll", log_probs, target, self)
    }
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
    /// through log_softmax: finite for any logits. The gradient is (softmax − target) / M, M
    /// the number of positions (rows of classes).
    /// The mean over every position, as [`CrossEntropy`] without settings.
    SoftmaxCrossEntropy, |op, logits, target| {
        let last = logits.ndim().saturating_sub(1);
        class_loss(op, &logits.log_softmax(last), target, &CrossEntropy::new())
    };
    /// Negative log-likelihood of log-probabilities (last axis) against one-hot targets or
    /// `I64` class indices, averaged over every position ([`CrossEntropy::nll`] takes an
    /// ignored index and smoothing).
    Nll, |op, log_probs, target| class_loss(op, log_probs, target, &CrossEntropy::new());
    /// Binary cross-entropy of sigmoid(logits) against targets in [0, 1], in the stable form
    /// max(x, 0) − x·t + ln(1 + e^−|x|) (which softplus(x) − x·t equals).
    SigmoidCrossEntropy, |op, logits, target| {
        same_shape(op, logits, target);
        batch_mean(&(&logits.softplus() - &(logits * target)))
    };
}

/// Losses without settings that are a mean of per-element (per-position) values: a unit
/// struct, `new()`, and the values.
macro_rules! per_element_losses {
    ($($(#[$doc:meta])* $name:ident, |$op:ident, $pred:ident, $target:ident| $body:expr;)*) => {
        $(
            unit_struct!($(#[$doc])* $name);

            impl PerElement for $name {
                fn per_element(&self, $pred: &Tensor, $target: &Tensor) -> Tensor {
                    let $op = stringify!($name);
                    $body
                }
            }

            impl Loss for $name {
                fn loss(&self, pred: &Tensor, target: &Tensor) -> Tensor {
                    self.per_element(pred, target).mean()
                }
            }
        )*
    };
}

impl PerElement for SoftmaxCrossEntropy {
    fn per_element(&self, logits: &Tensor, target: &Tensor) -> Tensor {
        let last = logits.ndim().saturating_sub(1);
        class_nll_per_position(
            "SoftmaxCrossEntropy",
            &logits.log_softmax(last),
            target,
            &CrossEntropy::new(),
        )
    }
}

impl PerElement for Nll {
    fn per_element(&self, log_probs: &Tensor, target: &Tensor) -> Tensor {
        class_nll_per_position("Nll", log_probs, target, &CrossEntropy::new())
    }
}

per_element_losses! {
    /// Mean squared error over all elements (PyTorch's `MSELoss`).
    Mse, |op, pred, target| {
        same_shape(op, pred, target);
        (pred - target).square()
    };
    /// Mean absolute error over all elements.
    Mae, |op, pred, target| {
        same_shape(op, pred, target);
        (pred - target).abs()
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

impl PerElement for Huber {
    fn per_element(&self, pred: &Tensor, target: &Tensor) -> Tensor {
        same_shape("Huber", pred, target);
        let d = (pred - target).abs();
        // min(|d|, delta) is the quadratic part; the rest grows linearly.
        let quad = d.clamp(0.0, self.delta);
        let lin = &d - &quad;
        &quad.square().mul_scalar(0.5) + &lin.mul_scalar(self.delta)
    }
}

impl Loss for Huber {
    fn loss(&self, pred: &Tensor, target: &Tensor) -> Tensor {
        self.per_element(pred, target).mean()
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
/// [`CrossEntropy`] under PyTorch's name.
pub type CrossEntropyLoss = CrossEntropy;
/// [`Huber`] under PyTorch's name.
pub type HuberLoss = Huber;
/// [`Nll`] under PyTorch's name.
pub type NllLoss = Nll;
/// [`Mse`] under the Python binding's (PyTorch's) spelling.
pub type MSELoss = Mse;
/// [`Mae`] under the Python binding's spelling.
pub type MAELoss = Mae;
/// [`Nll`] under the Python binding's (PyTorch's) spelling.
pub type NLLLoss = Nll;
