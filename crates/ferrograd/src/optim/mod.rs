//! Optimizers and learning-rate schedules.
//!
//! Every optimizer is an `Optim<R>` for an update rule `R`: the shared part (learning rate,
//! L2 weight decay, gradient clipping, per-parameter state, the step count) lives in `Optim`,
//! the arithmetic in the rule, which runs as one fused in-place pass per parameter
//! (`kernels::optim::update`).

mod rules;
mod schedule;

use std::collections::HashMap;

pub use rules::{AdagradRule, AdamRule, AdamWRule, MomentumRule, RAdamRule, RmsPropRule, SgdRule};
pub use schedule::{
    ConstantLr, CosineAnnealing, ExponentialLr, LinearWarmup, MultiStepLr, Schedule, StepLr,
    WarmupThen,
};

use crate::autograd::{Gradients, Param};
use crate::error::{Error, Result};
use crate::kernels::optim::{sum_squares, Prep};
use crate::tensor::{with_dtype, Element, Tensor};

/// Plain gradient descent.
pub type Sgd = Optim<SgdRule>;
/// Gradient descent with (optionally Nesterov) momentum.
pub type Momentum = Optim<MomentumRule>;
pub type RmsProp = Optim<RmsPropRule>;
pub type Adagrad = Optim<AdagradRule>;
/// Adam; with `weight_decay` the decay is L2 (added to the gradient).
pub type Adam = Optim<AdamRule>;
/// Adam with decoupled weight decay.
pub type AdamW = Optim<AdamWRule>;
pub type RAdam = Optim<RAdamRule>;

/// What a model needs from an optimizer.
pub trait Optimizer: Send {
    /// One update of every parameter that has a gradient.
    fn step(&mut self, params: &[(String, Param)], grads: &Gradients);
    fn lr(&self) -> f64;
    fn set_lr(&mut self, lr: f64);
    /// Number of steps taken.
    fn steps(&self) -> u64;
    /// The state to save for an exact resume: `"{param}.{slot}"` → tensor.
    fn state(&self) -> (u64, Vec<(String, Tensor)>);
    /// Restores a saved state.
    fn load_state(&mut self, steps: u64, state: Vec<(String, Tensor)>) -> Result<()>;
}

/// The per-element arithmetic of an optimizer.
pub trait UpdateRule: Send + Sync {
    /// State values per parameter element.
    const SLOTS: usize;
    /// Names of the state slots (for checkpoints).
    fn slot_names(&self) -> &'static [&'static str];
    /// Updates `w` in place from the gradient `g` (to be clipped and decayed by `prep` in the
    /// same pass) and the state `slots`, at step `t` (1-based) with learning rate `lr`.
    fn apply<T: Element>(
        &self,
        w: &mut [T],
        g: &[T],
        prep: Prep<T>,
        slots: &mut [Tensor],
        lr: f64,
        t: u64,
    );
    /// Whether weight decay is decoupled (AdamW) rather than L2.
    fn decoupled(&self) -> bool {
        false
    }
}

/// Gradient clipping applied before each update.
#[derive(Clone, Copy, Debug)]
pub enum Clip {
    /// Scale all gradients together so that their global L2 norm is at most this.
    Norm(f64),
    /// Clamp every gradient element to [−v, v].
    Value(f64),
}

/// An optimizer: the update rule plus what every optimizer shares.
pub struct Optim<R> {
    rule: R,
    lr: f64,
    weight_decay: f64,
    clip: Option<Clip>,
    steps: u64,
    /// Per-parameter state, by parameter name.
    state: HashMap<String, Vec<Tensor>>,
}

impl<R: UpdateRule> Optim<R> {
    fn with_rule(rule: R, lr: f64) -> Self {
        assert!(lr >= 0.0, "optimizer: learning rate {lr} is negative");
        Optim {
            rule,
            lr,
            weight_decay: 0.0,
            clip: None,
            steps: 0,
            state: HashMap::new(),
        }
    }

    /// Weight decay: L2 (added to the gradient) for most rules, decoupled for AdamW.
    pub fn weight_decay(mut self, wd: f64) -> Self {
        self.weight_decay = wd;
        self
    }

    /// Clip gradients by global norm before each update.
    pub fn clip_grad_norm(mut self, max_norm: f64) -> Self {
        self.clip = Some(Clip::Norm(max_norm));
        self
    }

    /// Clip every gradient element to [−v, v] before each update.
    pub fn clip_grad_value(mut self, v: f64) -> Self {
        self.clip = Some(Clip::Value(v));
        self
    }

    pub fn rule(&self) -> &R {
        &self.rule
    }

    fn update_one<T: Element>(&mut self, name: &str, p: &Param, g: &Tensor, gscale: f64) {
        let (lr, wd, t) = (self.lr, self.weight_decay, self.steps);
        let clip_value = match self.clip {
            Some(Clip::Value(v)) => Some(v),
            _ => None,
        };
        let slots = self.state.entry(name.to_string()).or_insert_with(|| {
            (0..R::SLOTS)
                .map(|_| Tensor::zeros(g.shape(), T::DTYPE))
                .collect()
        });
        let g = g.to_dtype(T::DTYPE);
        let g = g.contiguous_data::<T>();
        let decoupled = self.rule.decoupled();
        // Clipping and weight decay happen inside the update's single pass.
        let prep = Prep {
            scale: T::from_f64(gscale),
            clamp: clip_value.map(T::from_f64),
            l2: T::from_f64(if decoupled { 0.0 } else { wd }),
            keep: T::from_f64(if decoupled { 1.0 - lr * wd } else { 1.0 }),
        };
        p.update::<T>(|w| self.rule.apply(w, &g, prep, slots, lr, t));
    }
}

impl<R: UpdateRule> Optimizer for Optim<R> {
    fn step(&mut self, params: &[(String, Param)], grads: &Gradients) {
        self.steps += 1;
        let found: Vec<(&String, &Param, Tensor)> = params
            .iter()
            .filter_map(|(n, p)| grads.get_param(p).map(|g| (n, p, g)))
            .collect();
        let gscale = match self.clip {
            Some(Clip::Norm(max)) => {
                let total: f64 = found
                    .iter()
                    .map(|(_, _, g)| with_dtype!(g.dtype(), T => sum_squares(&g.contiguous_data::<T>())))
                    .sum();
                let norm = total.sqrt();
                if norm > max {
                    max / (norm + 1e-6)
                } else {
                    1.0
                }
            }
            _ => 1.0,
        };
        for (name, p, g) in found {
            with_dtype!(p.dtype(), T => self.update_one::<T>(name, p, &g, gscale));
        }
    }

    fn lr(&self) -> f64 {
        self.lr
    }

    fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }

    fn steps(&self) -> u64 {
        self.steps
    }

    fn state(&self) -> (u64, Vec<(String, Tensor)>) {
        let mut out = Vec::new();
        for (name, slots) in &self.state {
            for (slot, t) in self.rule.slot_names().iter().zip(slots) {
                out.push((format!("{name}.{slot}"), t.clone()));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        (self.steps, out)
    }

    fn load_state(&mut self, steps: u64, state: Vec<(String, Tensor)>) -> Result<()> {
        let names = self.rule.slot_names();
        let mut restored: HashMap<String, Vec<Option<Tensor>>> = HashMap::new();
        for (key, t) in state {
            let (param, slot) = key.rsplit_once('.').ok_or_else(|| {
                Error::Shape(format!("optimizer state: key {key:?} has no slot name"))
            })?;
            let k = names.iter().position(|n| *n == slot).ok_or_else(|| {
                Error::Shape(format!("optimizer state: unknown slot {slot:?} in {key:?}"))
            })?;
            restored
                .entry(param.to_string())
                .or_insert_with(|| vec![None; names.len()])[k] = Some(t);
        }
        let mut state = HashMap::new();
        for (param, slots) in restored {
            let slots: Option<Vec<Tensor>> = slots.into_iter().collect();
            let slots = slots
                .ok_or_else(|| Error::Shape(format!("optimizer state: {param} misses a slot")))?;
            state.insert(param, slots);
        }
        self.state = state;
        self.steps = steps;
        Ok(())
    }
}
