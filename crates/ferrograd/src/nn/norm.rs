//! Normalisation layers.

use super::{expect_input, named, Layer, Mode, Module};
use crate::autograd::{anomaly_reported, no_grad, Param};
use crate::tensor::{DType, Tensor};

/// The state and arithmetic shared by the batch norms: per-channel scale and shift, running
/// statistics kept as PyTorch keeps them (momentum, unbiased running variance, a count of
/// batches), batch statistics in training and running ones in evaluation.
struct BatchNorm {
    weight: Param,
    bias: Param,
    running_mean: Param,
    running_var: Param,
    /// Training steps taken, an i64 scalar as PyTorch keeps it.
    num_batches_tracked: Param,
    momentum: f64,
    eps: f64,
}

impl BatchNorm {
    fn new(features: usize, momentum: f64, eps: f64) -> BatchNorm {
        // PyTorch takes these unchecked; a NaN here would reach every output and statistic.
        assert!(
            (0.0..=1.0).contains(&momentum),
            "BatchNorm: momentum {momentum} must be in [0, 1]"
        );
        assert!(
            eps.is_finite() && eps > 0.0,
            "BatchNorm: eps {eps} must be finite and positive"
        );
        BatchNorm {
            weight: Param::new(Tensor::ones(&[features], DType::F32)),
            bias: Param::new(Tensor::zeros(&[features], DType::F32)),
            running_mean: Param::new(Tensor::zeros(&[features], DType::F32)),
            running_var: Param::new(Tensor::ones(&[features], DType::F32)),
            num_batches_tracked: Param::new(Tensor::zeros(&[], DType::I64)),
            momentum,
            eps,
        }
    }

    fn features(&self) -> usize {
        self.weight.numel()
    }

    /// Normalises `x` (channels on axis 1) over `axes` (every axis but the channels'), with
    /// per-channel values shaped `keep` to broadcast against it.
    fn forward(&self, name: &str, x: &Tensor, mode: Mode, axes: &[usize]) -> Tensor {
        let mut keep = vec![1; x.ndim()];
        keep[1] = self.features();
        let count: usize = axes.iter().map(|&a| x.shape()[a]).product();
        if x.numel() == 0 {
            // An empty batch: nothing to normalise, and no statistics to learn from.
            return x.clone();
        }
        // One value per channel has no spread to normalise by (the output would be all
        // zeros); PyTorch refuses it too.
        assert!(
            mode == Mode::Eval || count > 1,
            "{name}: training needs more than one value per channel, got input {:?}",
            x.shape()
        );
        match mode {
            Mode::Train => {
                // Parameters in another dtype than the input follow the input's.
                let [w, b] = [&self.weight, &self.bias].map(|p| p.tensor().to_dtype(x.dtype()));
                let (y, mean, var) = x.batch_norm(&w, &b, self.eps);
                self.track(&mean, &var, count);
                y
            }
            Mode::Eval => {
                let mean = self.running_mean.tensor().detach().reshape(&keep);
                let var = self.running_var.tensor().detach().reshape(&keep);
                let xhat = &(x - &mean) / &var.add_scalar(self.eps).sqrt();
                &(&xhat * &self.weight.tensor().reshape(&keep)) + &self.bias.tensor().reshape(&keep)
            }
        }
    }

    /// Moves the running statistics towards this batch's (the variance unbiased, as
    /// PyTorch), keeping their dtype.
    fn track(&self, mean: &Tensor, var: &Tensor, count: usize) {
        // Inside `detect_anomaly`, a NaN already reported stays out of the statistics.
        if anomaly_reported() {
            return;
        }
        no_grad(|| {
            let (m, n) = (self.momentum, count as f64);
            let shape = [self.features()];
            let unbiased = var.mul_scalar(n / (n - 1.0)).reshape(&shape);
            let rm = &self.running_mean.tensor().mul_scalar(1.0 - m)
                + &mean.reshape(&shape).mul_scalar(m);
            let rv = &self.running_var.tensor().mul_scalar(1.0 - m) + &unbiased.mul_scalar(m);
            self.running_mean
                .set(&rm.to_dtype(self.running_mean.dtype()));
            self.running_var.set(&rv.to_dtype(self.running_var.dtype()));
            let batches = self.num_batches_tracked.tensor().to_vec::<i64>()[0];
            self.num_batches_tracked
                .set(&Tensor::scalar(batches.saturating_add(1)));
        });
    }

    fn params(&self) -> Vec<(String, Param)> {
        named(&[("weight", &self.weight), ("bias", &self.bias)])
    }

    fn buffers(&self) -> Vec<(String, Param)> {
        vec![
            ("running_mean".into(), self.running_mean.clone()),
            ("running_var".into(), self.running_var.clone()),
            (
                "num_batches_tracked".into(),
                self.num_batches_tracked.clone(),
            ),
        ]
    }
}

/// Batch normalisation over `D` spatial axes (PyTorch's `BatchNorm1d`, `BatchNorm2d`):
/// statistics per channel (axis 1) over the batch and every spatial axis. Use it through the
/// aliases [`BatchNorm1d`] and [`BatchNorm2d`].
///
/// ```
/// use ferrograd::prelude::*;
///
/// let x = Tensor::zeros(&[4, 8, 5, 5], DType::F32);
/// assert_eq!(Layer::forward(&BatchNorm2d::new(8), &x, Mode::Eval).shape(), &[4, 8, 5, 5]);
///
/// // Training normalises by the batch's mean (2) and variance (1), and moves the running
/// // mean from 0 towards 2 by the momentum (0.1).
/// let bn = BatchNorm1d::new(1);
/// let y = Layer::forward(&bn, &Tensor::from_vec(vec![1.0f32, 3.0], &[2, 1]), Mode::Train);
/// let y = y.to_vec::<f32>();
/// assert!((y[0] + 1.0).abs() < 1e-4 && (y[1] - 1.0).abs() < 1e-4);
/// assert!((bn.buffers()[0].1.tensor().item() - 0.2).abs() < 1e-6); // running_mean
/// ```
pub struct BatchNormNd<const D: usize>(BatchNorm);

/// Batch normalisation over `[N, C]` or `[N, C, L]`.
pub type BatchNorm1d = BatchNormNd<1>;
/// Batch normalisation over `[N, C, H, W]`.
pub type BatchNorm2d = BatchNormNd<2>;

impl<const D: usize> BatchNormNd<D> {
    /// PyTorch's defaults: momentum 0.1, eps 1e-5.
    pub fn new(features: usize) -> Self {
        Self::with_options(features, 0.1, 1e-5)
    }

    /// `features` channels, with `momentum` (the weight of each new batch in the running
    /// statistics) and `eps` (added to the variance before its square root).
    pub fn with_options(features: usize, momentum: f64, eps: f64) -> Self {
        BatchNormNd(BatchNorm::new(features, momentum, eps))
    }

    /// The input shapes this layer takes, for messages, and whether `x` is one of them:
    /// `[N, C]` or `[N, C, L]` in 1-d, `[N, C, H, W]` in 2-d.
    fn accepts(&self, x: &Tensor) -> (String, bool) {
        let c = self.0.features();
        let fits = x.ndim() >= 2 && x.shape()[1] == c;
        if D == 1 {
            (format!("[N, {c}] or [N, {c}, L]"), fits && x.ndim() <= 3)
        } else {
            (format!("[N, {c}, H, W]"), fits && x.ndim() == D + 2)
        }
    }
}

impl<const D: usize> Module for BatchNormNd<D> {
    fn params(&self) -> Vec<(String, Param)> {
        self.0.params()
    }

    fn buffers(&self) -> Vec<(String, Param)> {
        self.0.buffers()
    }

    fn name(&self) -> String {
        format!("BatchNorm{D}d({})", self.0.features())
    }
}

impl<const D: usize> Layer for BatchNormNd<D> {
    fn forward(&self, x: &Tensor, mode: Mode) -> Tensor {
        let (expected, fits) = self.accepts(x);
        expect_input(&self.name(), fits, &expected, x);
        let axes: Vec<usize> = std::iter::once(0).chain(2..x.ndim()).collect();
        self.0.forward(&self.name(), x, mode, &axes)
    }
}

/// Layer normalisation over the last axis, with a learned scale and shift.
///
/// ```
/// use ferrograd::prelude::*;
///
/// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 5.0, 5.0, 5.0], &[2, 4]);
/// let y = Layer::forward(&LayerNorm::new(4), &x, Mode::Eval);
/// assert_eq!(y.shape(), &[2, 4]);
/// let y = y.to_vec::<f32>();
/// assert!(y[..4].iter().sum::<f32>().abs() < 1e-5); // mean 0 (and variance 1)
/// assert_eq!(&y[4..], &[0.0, 0.0, 0.0, 0.0]); // a constant row has no spread
/// ```
pub struct LayerNorm {
    weight: Param,
    bias: Option<Param>,
    eps: f64,
}

impl LayerNorm {
    /// Normalises a last axis of `features` entries; scale 1, shift 0 and eps 1e-5, as
    /// PyTorch's defaults.
    pub fn new(features: usize) -> LayerNorm {
        LayerNorm {
            weight: Param::new(Tensor::ones(&[features], DType::F32)),
            bias: Some(Param::new(Tensor::zeros(&[features], DType::F32))),
            eps: 1e-5,
        }
    }

    /// The same layer without its shift (PyTorch's `nn.LayerNorm(.., bias=False)`).
    pub fn without_bias(self) -> LayerNorm {
        LayerNorm { bias: None, ..self }
    }

    /// The same layer adding `eps` to the variance before its square root.
    pub fn eps(self, eps: f64) -> LayerNorm {
        LayerNorm { eps, ..self }
    }
}

impl Module for LayerNorm {
    fn params(&self) -> Vec<(String, Param)> {
        let mut out = named(&[("weight", &self.weight)]);
        out.extend(self.bias.iter().map(|b| ("bias".to_string(), b.clone())));
        out
    }

    fn name(&self) -> String {
        format!("LayerNorm({})", self.weight.numel())
    }
}

impl Layer for LayerNorm {
    fn forward(&self, x: &Tensor, _: Mode) -> Tensor {
        let features = self.weight.numel();
        let fits = x.ndim() >= 1 && x.shape()[x.ndim() - 1] == features;
        expect_input(&self.name(), fits, &format!("[..., {features}]"), x);
        // The parameters follow the input's float type (an f64 input is not refused).
        let w = self.weight.tensor().to_dtype(x.dtype());
        let b = match &self.bias {
            Some(b) => b.tensor().to_dtype(x.dtype()),
            None => Tensor::zeros(&[features], x.dtype()),
        };
        x.layer_norm(&w, &b, self.eps)
    }
}
