//! Learning-rate schedules: the rate for epoch (or step) `t`, counted from 0. Each is built by
//! `new`, which panics naming the schedule on a setting that would give a rate that is not
//! finite and not negative (or divide by a zero period), as the optimizers' constructors do.

use std::f64::consts::PI;

/// Panics unless `v` (the setting `what` of `schedule`) is finite and not negative.
fn rate(schedule: &str, what: &str, v: f64) -> f64 {
    assert!(
        v.is_finite() && v >= 0.0,
        "{schedule}: {what} {v} must be finite and not negative"
    );
    v
}

/// Panics unless the step count `v` (the setting `what` of `schedule`) is at least one.
fn steps(schedule: &str, what: &str, v: u64) -> u64 {
    assert!(v >= 1, "{schedule}: {what} must be at least 1, got {v}");
    v
}

/// `gamma^k`, for any count `k` (beyond `i32` the power has long reached 0 or infinity).
fn power(gamma: f64, k: u64) -> f64 {
    gamma.powi(i32::try_from(k).unwrap_or(i32::MAX))
}

/// A learning rate as a function of the step count.
pub trait Schedule: Send + Sync {
    /// The learning rate for step (or epoch) `t`, counted from 0.
    fn lr(&self, t: u64) -> f64;
}

/// The same rate throughout.
pub struct ConstantLr(f64);

impl ConstantLr {
    /// The rate `lr` at every step.
    pub fn new(lr: f64) -> ConstantLr {
        ConstantLr(rate("ConstantLr", "rate", lr))
    }
}

impl Schedule for ConstantLr {
    fn lr(&self, _: u64) -> f64 {
        self.0
    }
}

/// `base · gamma^⌊t / step⌋`.
pub struct StepLr {
    base: f64,
    step: u64,
    gamma: f64,
}

impl StepLr {
    /// From `base` at t = 0, multiplied by `gamma` every `step` steps (PyTorch's `StepLR`).
    pub fn new(base: f64, step: u64, gamma: f64) -> StepLr {
        StepLr {
            base: rate("StepLr", "base rate", base),
            step: steps("StepLr", "step", step),
            gamma: rate("StepLr", "gamma", gamma),
        }
    }
}

impl Schedule for StepLr {
    fn lr(&self, t: u64) -> f64 {
        self.base * power(self.gamma, t / self.step)
    }
}

/// `base · gamma^(number of milestones ≤ t)`.
pub struct MultiStepLr {
    base: f64,
    milestones: Vec<u64>,
    gamma: f64,
}

impl MultiStepLr {
    /// From `base`, multiplied by `gamma` at each of `milestones` (steps, in any order; a
    /// milestone given twice counts twice, as in PyTorch's `MultiStepLR`).
    pub fn new(base: f64, milestones: Vec<u64>, gamma: f64) -> MultiStepLr {
        MultiStepLr {
            base: rate("MultiStepLr", "base rate", base),
            milestones,
            gamma: rate("MultiStepLr", "gamma", gamma),
        }
    }
}

impl Schedule for MultiStepLr {
    fn lr(&self, t: u64) -> f64 {
        let passed = self.milestones.iter().filter(|&&m| m <= t).count();
        self.base * power(self.gamma, passed as u64)
    }
}

/// `base · gamma^t`.
pub struct ExponentialLr {
    base: f64,
    gamma: f64,
}

impl ExponentialLr {
    /// From `base`, multiplied by `gamma` at every step.
    pub fn new(base: f64, gamma: f64) -> ExponentialLr {
        ExponentialLr {
            base: rate("ExponentialLr", "base rate", base),
            gamma: rate("ExponentialLr", "gamma", gamma),
        }
    }
}

impl Schedule for ExponentialLr {
    fn lr(&self, t: u64) -> f64 {
        self.base * power(self.gamma, t)
    }
}

/// Cosine from `base` at t = 0 down to `min` at t = `period` (held there after).
pub struct CosineAnnealing {
    base: f64,
    min: f64,
    period: u64,
}

impl CosineAnnealing {
    /// From `base` at t = 0 down to `min` at t = `period` along a half cosine.
    pub fn new(base: f64, min: f64, period: u64) -> CosineAnnealing {
        CosineAnnealing {
            base: rate("CosineAnnealing", "base rate", base),
            min: rate("CosineAnnealing", "minimum rate", min),
            period: steps("CosineAnnealing", "period", period),
        }
    }
}

impl Schedule for CosineAnnealing {
    fn lr(&self, t: u64) -> f64 {
        let t = t.min(self.period) as f64;
        self.min + 0.5 * (self.base - self.min) * (1.0 + (PI * t / self.period as f64).cos())
    }
}

/// Linear from `base / warmup` (t = 0) up to `base` (t = warmup − 1), then `base`.
pub struct LinearWarmup {
    base: f64,
    warmup: u64,
}

impl LinearWarmup {
    /// Up to `base` over `warmup` steps (0: `base` from the start), then `base`.
    pub fn new(base: f64, warmup: u64) -> LinearWarmup {
        LinearWarmup {
            base: rate("LinearWarmup", "base rate", base),
            warmup,
        }
    }
}

impl Schedule for LinearWarmup {
    fn lr(&self, t: u64) -> f64 {
        if t >= self.warmup {
            self.base
        } else {
            self.base * (t + 1) as f64 / self.warmup as f64
        }
    }
}

/// Linear warmup for `warmup` steps, then `after` counted from the end of the warmup
/// (warmup then cosine, say).
pub struct WarmupThen<S> {
    warmup: LinearWarmup,
    after: S,
}

impl<S: Schedule> WarmupThen<S> {
    /// `warmup` for its steps, then `after`, whose step 0 is the first step after them.
    pub fn new(warmup: LinearWarmup, after: S) -> WarmupThen<S> {
        WarmupThen { warmup, after }
    }
}

impl<S: Schedule> Schedule for WarmupThen<S> {
    fn lr(&self, t: u64) -> f64 {
        if t < self.warmup.warmup {
            self.warmup.lr(t)
        } else {
            self.after.lr(t - self.warmup.warmup)
        }
    }
}
