//! Normalisation layers.

use super::{Layer, Mode, Module};
use crate::autograd::{anomaly_reported, no_grad, Param};
use crate::tensor::{DType, Tensor};

/// Batch normalisation over `[N, features]`: batch statistics in training (and an exponential
/// average of them kept for evaluation), running statistics in evaluation.
pub struct BatchNorm1d {
    weight: Param,
    bias: Param,
    running_mean: Param,
    running_var: Param,
    /// Training steps taken, as PyTorch counts them (f64: exact for any realistic count).
    num_batches_tracked: Param,
    momentum: f64,
    eps: f64,
}

impl BatchNorm1d {
    /// PyTorch's defaults: momentum 0.1, eps 1e-5.
    pub fn new(features: usize) -> BatchNorm1d {
        BatchNorm1d::with_options(features, 0.1, 1e-5)
    }

    pub fn with_options(features: usize, momentum: f64, eps: f64) -> BatchNorm1d {
        BatchNorm1d {
            weight: Param::new(Tensor::ones(&[features], DType::F32)),
            bias: Param::new(Tensor::zeros(&[features], DType::F32)),
            running_mean: Param::new(Tensor::zeros(&[features], DType::F32)),
            running_var: Param::new(Tensor::ones(&[features], DType::F32)),
            num_batches_tracked: Param::new(Tensor::zeros(&[], DType::F64)),
            momentum,
            eps,
        }
    }
}

impl Module for BatchNorm1d {
    fn params(&self) -> Vec<(String, Param)> {
        vec![
            ("weight".into(), self.weight.clone()),
            ("bias".into(), self.bias.clone()),
        ]
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

    fn name(&self) -> String {
        format!("BatchNorm1d({})", self.weight.numel())
    }
}

impl Layer for BatchNorm1d {
    fn forward(&self, x: &Tensor, mode: Mode) -> Tensor {
        let features = self.weight.numel();
        assert!(
            x.ndim() == 2 && x.shape()[1] == features,
            "{}: expected input [N, {features}], got {:?}",
            self.name(),
            x.shape()
        );
        // One sample has no spread to normalise by (its output would be all zeros); PyTorch
        // refuses it too.
        assert!(
            mode == Mode::Eval || x.shape()[0] > 1,
            "{}: training needs more than one sample per feature, got input {:?}",
            self.name(),
            x.shape()
        );
        let (mean, var) = match mode {
            Mode::Train => {
                let mean = x.mean_axes(&[0], false);
                let var = (x - &mean).square().mean_axes(&[0], false);
                // Running variance uses the unbiased estimate, as PyTorch.
                let n = x.shape()[0] as f64;
                // Inside `detect_anomaly`, a NaN already reported stays out of the statistics.
                let clean = !anomaly_reported();
                no_grad(|| {
                    let m = self.momentum;
                    let unbiased = if n > 1.0 {
                        var.mul_scalar(n / (n - 1.0))
                    } else {
                        var.clone()
                    };
                    let rm = &self.running_mean.tensor().mul_scalar(1.0 - m) + &mean.mul_scalar(m);
                    let rv =
                        &self.running_var.tensor().mul_scalar(1.0 - m) + &unbiased.mul_scalar(m);
                    if !clean {
                        return;
                    }
                    self.running_mean
                        .set(&rm.to_dtype(self.running_mean.dtype()));
                    self.running_var.set(&rv.to_dtype(self.running_var.dtype()));
                    let n = self.num_batches_tracked.tensor().add_scalar(1.0);
                    self.num_batches_tracked.set(&n);
                });
                (mean, var)
            }
            Mode::Eval => (
                self.running_mean.tensor().detach(),
                self.running_var.tensor().detach(),
            ),
        };
        let xhat = &(x - &mean) / &var.add_scalar(self.eps).sqrt();
        &(&xhat * &self.weight.tensor()) + &self.bias.tensor()
    }
}

/// Layer normalisation over the last axis, with a learned scale and shift.
pub struct LayerNorm {
    weight: Param,
    bias: Param,
    eps: f64,
}

impl LayerNorm {
    pub fn new(features: usize) -> LayerNorm {
        LayerNorm {
            weight: Param::new(Tensor::ones(&[features], DType::F32)),
            bias: Param::new(Tensor::zeros(&[features], DType::F32)),
            eps: 1e-5,
        }
    }
}

impl Module for LayerNorm {
    fn params(&self) -> Vec<(String, Param)> {
        vec![
            ("weight".into(), self.weight.clone()),
            ("bias".into(), self.bias.clone()),
        ]
    }

    fn name(&self) -> String {
        format!("LayerNorm({})", self.weight.numel())
    }
}

impl Layer for LayerNorm {
    fn forward(&self, x: &Tensor, _: Mode) -> Tensor {
        let features = self.weight.numel();
        assert!(
            x.ndim() >= 1 && x.shape()[x.ndim() - 1] == features,
            "{}: expected input [..., {features}], got {:?}",
            self.name(),
            x.shape()
        );
        let last = x.ndim() - 1;
        let mean = x.mean_axes(&[last], true);
        let centered = x - &mean;
        let var = centered.square().mean_axes(&[last], true);
        let xhat = &centered / &var.add_scalar(self.eps).sqrt();
        &(&xhat * &self.weight.tensor()) + &self.bias.tensor()
    }
}
