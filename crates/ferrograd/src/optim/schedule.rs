//! Learning-rate schedules: the rate for epoch (or step) `t`, counted from 0.

use std::f64::consts::PI;

/// A learning rate as a function of the step count.
pub trait Schedule: Send + Sync {
    fn lr(&self, t: u64) -> f64;
}

/// The same rate throughout.
pub struct ConstantLr(pub f64);

impl Schedule for ConstantLr {
    fn lr(&self, _: u64) -> f64 {
        self.0
    }
}

/// `base · gamma^⌊t / step⌋`.
pub struct StepLr {
    pub base: f64,
    pub step: u64,
    pub gamma: f64,
}

impl Schedule for StepLr {
    fn lr(&self, t: u64) -> f64 {
        self.base * self.gamma.powi((t / self.step.max(1)) as i32)
    }
}

/// `base · gamma^(number of milestones ≤ t)`.
pub struct MultiStepLr {
    pub base: f64,
    pub milestones: Vec<u64>,
    pub gamma: f64,
}

impl Schedule for MultiStepLr {
    fn lr(&self, t: u64) -> f64 {
        let passed = self.milestones.iter().filter(|&&m| m <= t).count();
        self.base * self.gamma.powi(passed as i32)
    }
}

/// `base · gamma^t`.
pub struct ExponentialLr {
    pub base: f64,
    pub gamma: f64,
}

impl Schedule for ExponentialLr {
    fn lr(&self, t: u64) -> f64 {
        self.base * self.gamma.powi(t as i32)
    }
}

/// Cosine from `base` at t = 0 down to `min` at t = `period` (held there after).
pub struct CosineAnnealing {
    pub base: f64,
    pub min: f64,
    pub period: u64,
}

impl Schedule for CosineAnnealing {
    fn lr(&self, t: u64) -> f64 {
        let t = t.min(self.period) as f64;
        self.min + 0.5 * (self.base - self.min) * (1.0 + (PI * t / self.period.max(1) as f64).cos())
    }
}

/// Linear from `base / warmup` (t = 0) up to `base` (t = warmup − 1), then `base`.
pub struct LinearWarmup {
    pub base: f64,
    pub warmup: u64,
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
    pub warmup: LinearWarmup,
    pub after: S,
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
