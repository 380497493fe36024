//! Learning-rate schedules: the rate for epoch (or step) `t`, counted from 0.

use std::f64::consts::PI;

/// A learning rate as a function of the step count.
pub trait Schedule: Send + Sync {
    /// The learning rate for step (or epoch) `t`, counted from 0.
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
    /// The rate at t = 0.
    pub base: f64,
    /// Steps between decays (0 counts as 1).
    pub step: u64,
    /// The factor applied at each decay.
    pub gamma: f64,
}

impl Schedule for StepLr {
    fn lr(&self, t: u64) -> f64 {
        self.base * self.gamma.powi((t / self.step.max(1)) as i32)
    }
}

/// `base · gamma^(number of milestones ≤ t)`.
pub struct MultiStepLr {
    /// The rate before the first milestone.
    pub base: f64,
    /// The steps at which the rate is multiplied by `gamma`, in any order.
    pub milestones: Vec<u64>,
    /// The factor applied at each milestone.
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
    /// The rate at t = 0.
    pub base: f64,
    /// The factor applied at every step.
    pub gamma: f64,
}

impl Schedule for ExponentialLr {
    fn lr(&self, t: u64) -> f64 {
        self.base * self.gamma.powi(t as i32)
    }
}

/// Cosine from `base` at t = 0 down to `min` at t = `period` (held there after).
pub struct CosineAnnealing {
    /// The rate at t = 0.
    pub base: f64,
    /// The rate at t = `period` and after.
    pub min: f64,
    /// Steps from `base` down to `min`.
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
    /// The rate reached at the end of the warmup and kept after it.
    pub base: f64,
    /// Number of warmup steps.
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
    /// The warmup, for its first `warmup.warmup` steps.
    pub warmup: LinearWarmup,
    /// The schedule after the warmup, whose step 0 is the first step after it.
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
