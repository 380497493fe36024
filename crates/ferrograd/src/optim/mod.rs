//! Optimizers and learning-rate schedules.
//!
//! Every optimizer is an `Optim<R>` for an update rule `R`: the shared part (learning rate,
//! L2 weight decay, gradient clipping, per-parameter state, the step count) lives in `Optim`,
//! the arithmetic in the rule, which runs as one fused in-place pass per parameter
//! (`kernels::optim::update`).

mod rules;
mod schedule;

use std::collections::HashMap;

pub use crate::kernels::optim::Prep;
pub use rules::{
    AdagradRule, AdamFamily, AdamRule, AdamWRule, AmsGrad, MomentumRule, RAdamRule, RmsPropRule,
    SgdRule, TakesAmsGrad,
};
pub use schedule::{
    ConstantLr, CosineAnnealing, ExponentialLr, LinearWarmup, MultiStepLr, Schedule, StepLr,
    WarmupThen,
};

use crate::autograd::{anomaly_reported, global_norm, Gradients, Param};
use crate::error::{Error, Result};
use crate::kernels::parallel::run_tasks;
use crate::kernels::PAR_THRESHOLD;
use crate::tensor::{with_dtype, FloatElement, Tensor};

/// Plain gradient descent.
///
/// ```
/// use ferrograd::prelude::*;
///
/// let w = Param::new(Tensor::from_vec(vec![1.0f32, 2.0], &[2]));
/// let loss = (&w.tensor() * &w.tensor()).sum(); // gradient 2w = [2, 4]
/// let grads = loss.backward();
/// let mut opt = Sgd::new(0.1);
/// opt.step(&[("w".to_string(), w.clone())], &grads);
/// let v = w.tensor().to_vec::<f32>();
/// assert!((v[0] - 0.8).abs() < 1e-5 && (v[1] - 1.6).abs() < 1e-5);
/// ```
pub type Sgd = Optim<SgdRule>;
/// [`Sgd`] under the Python binding's (PyTorch's) spelling.
pub type SGD = Sgd;
/// Gradient descent with (optionally Nesterov) momentum.
///
/// ```
/// use ferrograd::prelude::*;
///
/// let w = Param::new(Tensor::from_vec(vec![1.0f32, 2.0], &[2]));
/// let params = [("w".to_string(), w.clone())];
/// let mut opt = Momentum::new(0.1); // momentum 0.9
/// for _ in 0..2 {
///     let loss = (&w.tensor() * &w.tensor()).sum();
///     opt.step(&params, &loss.backward());
/// }
/// // The buffer starts at the first gradient [2, 4]; the second step moves by
/// // 0.1 · (0.9 · [2, 4] + [1.6, 3.2]), further than plain gradient descent would.
/// let v = w.tensor().to_vec::<f32>();
/// assert!((v[0] - 0.46).abs() < 1e-5 && (v[1] - 0.92).abs() < 1e-5);
/// ```
pub type Momentum = Optim<MomentumRule>;
/// RMSProp: each element's step is divided by the root of a running mean of its squared
/// gradient, so elements with large and small gradients move at similar speeds.
///
/// ```
/// use ferrograd::prelude::*;
///
/// let w = Param::new(Tensor::from_vec(vec![1.0f32, 2.0], &[2]));
/// let grads = (&w.tensor() * &w.tensor()).sum().backward(); // [2, 4]
/// let mut opt = RmsProp::new(0.01); // α = 0.99
/// opt.step(&[("w".to_string(), w.clone())], &grads);
/// // After one step the mean square is (1 − α)·g², so every element moves by lr / √(1 − α).
/// let v = w.tensor().to_vec::<f32>();
/// assert!((v[0] - 0.9).abs() < 1e-4 && (v[1] - 1.9).abs() < 1e-4);
/// ```
pub type RmsProp = Optim<RmsPropRule>;
/// [`RmsProp`] under PyTorch's spelling.
pub type RMSprop = RmsProp;
/// Adagrad: each element's step is divided by the root of the sum of all its squared
/// gradients so far, so steps shrink as gradients accumulate.
///
/// ```
/// use ferrograd::prelude::*;
///
/// let w = Param::new(Tensor::from_vec(vec![1.0f32, 2.0], &[2]));
/// let grads = (&w.tensor() * &w.tensor()).sum().backward(); // [2, 4]
/// let mut opt = Adagrad::new(0.1);
/// opt.step(&[("w".to_string(), w.clone())], &grads);
/// // The first step divides each gradient by its own magnitude: every element moves by lr.
/// let v = w.tensor().to_vec::<f32>();
/// assert!((v[0] - 0.9).abs() < 1e-4 && (v[1] - 1.9).abs() < 1e-4);
/// ```
pub type Adagrad = Optim<AdagradRule>;
/// Adam; with `weight_decay` the decay is L2 (added to the gradient).
///
/// ```
/// use ferrograd::prelude::*;
///
/// let w = Param::new(Tensor::from_vec(vec![1.0f32, 2.0], &[2]));
/// let grads = (&w.tensor() * &w.tensor()).sum().backward(); // [2, 4]
/// let mut opt = Adam::new(0.1);
/// opt.step(&[("w".to_string(), w.clone())], &grads);
/// // With the bias corrections, the first step moves every element by about lr.
/// let v = w.tensor().to_vec::<f32>();
/// assert!((v[0] - 0.9).abs() < 1e-4 && (v[1] - 1.9).abs() < 1e-4);
/// ```
pub type Adam = Optim<AdamRule>;
/// Adam with decoupled weight decay.
///
/// ```
/// use ferrograd::prelude::*;
///
/// let w = Param::new(Tensor::from_vec(vec![1.0f32, 2.0], &[2]));
/// let grads = (&w.tensor() * &w.tensor()).sum().backward(); // [2, 4]
/// let mut opt = AdamW::new(0.1); // weight decay 0.01
/// opt.step(&[("w".to_string(), w.clone())], &grads);
/// // w · (1 − 0.1 · 0.01), then Adam's first step of about lr.
/// let v = w.tensor().to_vec::<f32>();
/// assert!((v[0] - 0.899).abs() < 1e-4 && (v[1] - 1.898).abs() < 1e-4);
/// ```
pub type AdamW = Optim<AdamWRule>;
/// RAdam: Adam whose adaptive step is rectified, and used only once enough steps have been
/// taken for the second moment to be a usable estimate; before that, momentum SGD.
///
/// ```
/// use ferrograd::prelude::*;
///
/// let w = Param::new(Tensor::from_vec(vec![1.0f32, 2.0], &[2]));
/// let grads = (&w.tensor() * &w.tensor()).sum().backward(); // [2, 4]
/// let mut opt = RAdam::new(0.1);
/// opt.step(&[("w".to_string(), w.clone())], &grads);
/// // The first steps are bias-corrected momentum: here w − lr · g.
/// let v = w.tensor().to_vec::<f32>();
/// assert!((v[0] - 0.8).abs() < 1e-5 && (v[1] - 1.6).abs() < 1e-5);
/// ```
pub type RAdam = Optim<RAdamRule>;

/// What a model needs from an optimizer.
///
/// State (moments, step sizes) follows each parameter's identity, not its name, so one
/// optimizer can step several networks whose parameter names repeat. Names are used only to
/// save and load that state.
pub trait Optimizer: Send + Sync {
    /// One update of every parameter that has a gradient.
    fn step(&mut self, params: &[(String, Param)], grads: &Gradients);
    /// The current learning rate.
    fn lr(&self) -> f64;
    /// Sets the learning rate; panics unless it is finite and not negative.
    fn set_lr(&mut self, lr: f64);
    /// Number of steps taken.
    fn steps(&self) -> u64;
    /// The weight decay (L2, or decoupled for AdamW).
    fn weight_decay_rate(&self) -> f64;
    /// Sets the weight decay; panics unless it is finite and not negative. With the learning
    /// rate, what PyTorch's parameter groups set per group.
    fn set_weight_decay(&mut self, wd: f64);
    /// The momentum as PyTorch's parameter groups hold it (`momentum` for momentum SGD,
    /// `betas` for the Adam family), so that a schedule can cycle it (`OneCycleLR`);
    /// `None` for an optimizer without one.
    fn momentum_setting(&self) -> Option<MomentumSetting> {
        None
    }
    /// Sets the momentum; panics when the optimizer has none, when `m` is of the other kind
    /// (`Betas` for momentum SGD), or when a value is out of its range.
    fn set_momentum(&mut self, m: MomentumSetting) {
        panic!("set_momentum: this optimizer has no momentum to set (given {m:?})")
    }
    /// With clipping by norm: the gradients' global norm before clipping, at the last step
    /// (PyTorch's `clip_grad_norm_` return value); `None` otherwise.
    fn last_grad_norm(&self) -> Option<f64> {
        None
    }
    /// The state of `params` to save for an exact resume, as `"{name}.{slot}"` → tensor.
    /// Fails when two parameters share a name.
    fn state(&self, params: &[(String, Param)]) -> Result<(u64, Vec<(String, Tensor)>)>;
    /// Whether `state` (as [`Optimizer::state`] saves it) fits `params`: the error lists
    /// every unknown name or slot, shape and dtype mismatch.
    fn check_state(&self, params: &[(String, Param)], state: &[(String, Tensor)]) -> Result<()>;
    /// Restores state saved by [`Optimizer::state`] for `params`. Names, slots, shapes and
    /// dtypes are checked first; the error lists every mismatch, and then nothing changes.
    fn load_state(
        &mut self,
        params: &[(String, Param)],
        steps: u64,
        state: Vec<(String, Tensor)>,
    ) -> Result<()>;
}

/// The per-element arithmetic of an optimizer.
pub trait UpdateRule: Send + Sync {
    /// Names of the state slots, one value per parameter element each (the names are those
    /// of PyTorch's optimizer state, for checkpoints).
    const SLOTS: &'static [&'static str];
    /// The weight decay a new optimizer starts with (PyTorch's: 0.01 for AdamW, else 0).
    const DEFAULT_WEIGHT_DECAY: f64 = 0.0;
    /// Whether the rule keeps a running square of the gradient (whose tiny values the update
    /// flushes to zero rather than compute slowly as subnormals).
    const SQUARES_GRADIENT: bool = false;
    /// One update of one parameter, in place.
    fn apply<T: FloatElement>(&self, step: Step<'_, T>);
    /// Whether weight decay is decoupled (AdamW) rather than L2.
    fn decoupled(&self) -> bool {
        false
    }
    /// The rule's momentum, as [`Optimizer::momentum_setting`].
    fn momentum_setting(&self) -> Option<MomentumSetting> {
        None
    }
    /// Sets the rule's momentum, as [`Optimizer::set_momentum`].
    fn set_momentum(&mut self, m: MomentumSetting) {
        panic!("set_momentum: this optimizer has no momentum to set (given {m:?})")
    }
}

/// An optimizer's momentum in the two forms PyTorch's parameter groups hold it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MomentumSetting {
    /// The momentum factor μ of momentum SGD (`group["momentum"]`; 0 for plain SGD).
    Momentum(f64),
    /// The Adam family's decay rates (β₁, β₂) (`group["betas"]`); β₁ is the momentum.
    Betas(f64, f64),
}

/// What a rule updates one parameter from.
pub struct Step<'a, T> {
    /// The weights, updated in place.
    pub w: &'a mut [T],
    /// The gradient, to be clipped and decayed by `prep` in the same pass.
    pub g: &'a [T],
    /// Clipping and weight decay, to be applied to each gradient element (and, for decoupled
    /// decay, each weight) before the rule's arithmetic.
    pub prep: Prep<T>,
    /// The rule's state slots for this parameter (one per name in `UpdateRule::SLOTS`).
    pub slots: &'a mut [Tensor],
    /// The learning rate for this step.
    pub lr: f64,
    /// The step number, from 1.
    pub t: u64,
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
    /// The global gradient norm the last step saw, when it clips by norm.
    last_norm: Option<f64>,
    /// Per-parameter state, by parameter identity.
    state: HashMap<u64, Vec<Tensor>>,
}

/// Panics unless `wd` is a usable weight decay.
fn check_weight_decay(wd: f64) {
    assert!(
        wd.is_finite() && wd >= 0.0,
        "optimizer: weight decay {wd} must be finite and not negative"
    );
}

/// Panics unless `lr` is a usable learning rate.
fn check_lr(lr: f64) {
    assert!(
        lr.is_finite() && lr >= 0.0,
        "optimizer: learning rate {lr} must be finite and not negative"
    );
}

/// Panics unless the clipping bound `v` is finite and positive.
fn check_bound(op: &str, v: f64) {
    assert!(
        v.is_finite() && v > 0.0,
        "{op}: the bound {v} must be finite and positive"
    );
}

/// The parameters by name; fails on a repeated name, which would make saved state ambiguous.
fn by_name(params: &[(String, Param)]) -> Result<HashMap<&str, &Param>> {
    let mut out = HashMap::new();
    for (name, p) in params {
        if out.insert(name.as_str(), p).is_some() {
            return Err(Error::Shape(format!(
                "optimizer state: two parameters are named {name:?}; names must be unique to \
                 save or load state"
            )));
        }
    }
    Ok(out)
}

impl<R: UpdateRule + Default> Optim<R> {
    /// The rule's defaults (PyTorch's: Adam's β = (0.9, 0.999), ε = 1e-8; momentum 0.9;
    /// RMSProp's α = 0.99, ε = 1e-8; Adagrad's ε = 1e-10; AdamW's decoupled decay 0.01) at
    /// learning rate `lr`. With `weight_decay`, every rule but AdamW's decays by L2 (added to
    /// the gradient).
    pub fn new(lr: f64) -> Self {
        Optim::with_rule(R::default(), lr).weight_decay(R::DEFAULT_WEIGHT_DECAY)
    }
}

impl<R: UpdateRule> Optim<R> {
    fn with_rule(rule: R, lr: f64) -> Self {
        check_lr(lr);
        Optim {
            rule,
            lr,
            weight_decay: 0.0,
            clip: None,
            steps: 0,
            last_norm: None,
            state: HashMap::new(),
        }
    }

    /// The same settings under another rule (which keeps state of its own: only before the
    /// first step).
    fn map_rule<S: UpdateRule>(self, f: impl FnOnce(R) -> S) -> Optim<S> {
        assert!(
            self.state.is_empty(),
            "optimizer: the update rule can change only before the first step"
        );
        Optim {
            rule: f(self.rule),
            lr: self.lr,
            weight_decay: self.weight_decay,
            clip: self.clip,
            steps: self.steps,
            last_norm: self.last_norm,
            state: HashMap::new(),
        }
    }

    /// Weight decay: L2 (added to the gradient) for most rules, decoupled for AdamW.
    pub fn weight_decay(mut self, wd: f64) -> Self {
        check_weight_decay(wd);
        self.weight_decay = wd;
        self
    }

    /// Clip gradients by global norm before each update.
    pub fn clip_grad_norm(mut self, max_norm: f64) -> Self {
        check_bound("clip_grad_norm", max_norm);
        self.clip = Some(Clip::Norm(max_norm));
        self
    }

    /// Clip every gradient element to [−v, v] before each update.
    pub fn clip_grad_value(mut self, v: f64) -> Self {
        check_bound("clip_grad_value", v);
        self.clip = Some(Clip::Value(v));
        self
    }

    /// The update rule, with its hyper-parameters.
    pub fn rule(&self) -> &R {
        &self.rule
    }

    /// What every parameter's update this step shares: the rule's settings and the clipping.
    fn shared(&self, gscale: f64) -> Shared {
        Shared {
            lr: self.lr,
            wd: self.weight_decay,
            t: self.steps,
            clip_value: match self.clip {
                Some(Clip::Value(v)) => Some(v),
                _ => None,
            },
            gscale,
            decoupled: self.rule.decoupled(),
        }
    }
}

/// The settings of one step, the same for every parameter.
#[derive(Clone, Copy)]
struct Shared {
    lr: f64,
    wd: f64,
    t: u64,
    clip_value: Option<f64>,
    gscale: f64,
    decoupled: bool,
}

/// The state slots of `p` (zeros, shaped as its gradient `g`, at its first update).
fn slots_for<'a, R: UpdateRule>(
    state: &'a mut HashMap<u64, Vec<Tensor>>,
    p: &Param,
    g: &Tensor,
) -> &'a mut Vec<Tensor> {
    state.entry(p.id()).or_insert_with(|| {
        (0..R::SLOTS.len())
            .map(|_| Tensor::zeros(g.shape(), p.dtype()))
            .collect()
    })
}

/// One parameter's update: its gradient `g`, its state `slots`, in one pass.
fn update_one<T: FloatElement, R: UpdateRule>(
    rule: &R,
    s: Shared,
    p: &Param,
    g: &Tensor,
    slots: &mut [Tensor],
) {
    let g = g.to_dtype(T::DTYPE);
    let g = g.contiguous_data::<T>();
    // Clipping and weight decay happen inside the update's single pass.
    let prep = Prep {
        scale: T::from_f64(s.gscale),
        clamp: s.clip_value.map(T::from_f64),
        l2: T::from_f64(if s.decoupled { 0.0 } else { s.wd }),
        keep: T::from_f64(if s.decoupled { 1.0 - s.lr * s.wd } else { 1.0 }),
        squares: R::SQUARES_GRADIENT,
    };
    p.update::<T>(|w| {
        rule.apply(Step {
            w,
            g: &g,
            prep,
            slots,
            lr: s.lr,
            t: s.t,
        })
    });
}

/// [`update_one`] for each of `params` (with their gradients), the parameters shared out
/// whole between the threads, each with its own state.
fn update_together<R: UpdateRule>(
    rule: &R,
    state: &mut HashMap<u64, Vec<Tensor>>,
    shared: Shared,
    params: Vec<(&Param, Tensor)>,
) {
    for (p, g) in &params {
        slots_for::<R>(state, p, g);
    }
    let mut slots: HashMap<u64, &mut Vec<Tensor>> =
        state.iter_mut().map(|(&id, s)| (id, s)).collect();
    let jobs: Vec<_> = params
        .into_iter()
        .map(|(p, g)| {
            let s = slots
                .remove(&p.id())
                .expect("every parameter has its slots");
            (p, g, s)
        })
        .collect();
    run_tasks(jobs, |(p, g, slots)| {
        with_dtype!(p.dtype(), T => update_one::<T, R>(rule, shared, p, &g, slots));
    });
}

impl<R: UpdateRule> Optimizer for Optim<R> {
    fn step(&mut self, params: &[(String, Param)], grads: &Gradients) {
        if anomaly_reported() {
            // Inside `detect_anomaly`, after a NaN/Inf: the weights stay as they were and the
            // report names the op.
            return;
        }
        self.steps += 1;
        // A parameter listed twice is updated once.
        let mut seen = std::collections::HashSet::new();
        let found: Vec<(&Param, Tensor)> = params
            .iter()
            .filter(|(_, p)| !p.is_frozen() && seen.insert(p.id()))
            .filter_map(|(_, p)| grads.get_param(p).map(|g| (p, g)))
            .collect();
        let gscale = match self.clip {
            Some(Clip::Norm(max)) => {
                let norm = global_norm(found.iter().map(|(_, g)| g));
                self.last_norm = Some(norm);
                if norm > max {
                    max / (norm + 1e-6)
                } else {
                    1.0
                }
            }
            _ => 1.0,
        };
        let shared = self.shared(gscale);
        let Optim { rule, state, .. } = self;
        // A parameter large enough to split is updated on every thread by its own kernel. The
        // small ones, when together they are many, are shared out whole between the threads
        // (each update the same arithmetic wherever it runs) rather than taken one after
        // another on this thread. (Should an update panic, the parameters shared out may be
        // updated or not, as the threads got to them.)
        let (large, small): (Vec<_>, Vec<_>) = found
            .into_iter()
            .partition(|(_, g)| g.numel() >= PAR_THRESHOLD);
        let small_total: usize = small.iter().map(|(_, g)| g.numel()).sum();
        let (alone, together) = if small.len() >= 2 && small_total >= PAR_THRESHOLD {
            (large, small)
        } else {
            (large.into_iter().chain(small).collect(), Vec::new())
        };
        for (p, g) in alone {
            let slots = slots_for::<R>(state, p, &g);
            with_dtype!(p.dtype(), T => update_one::<T, R>(rule, shared, p, &g, slots));
        }
        if !together.is_empty() {
            update_together(rule, state, shared, together);
        }
    }

    fn lr(&self) -> f64 {
        self.lr
    }

    fn set_lr(&mut self, lr: f64) {
        check_lr(lr);
        self.lr = lr;
    }

    fn steps(&self) -> u64 {
        self.steps
    }

    fn weight_decay_rate(&self) -> f64 {
        self.weight_decay
    }

    fn set_weight_decay(&mut self, wd: f64) {
        check_weight_decay(wd);
        self.weight_decay = wd;
    }

    fn last_grad_norm(&self) -> Option<f64> {
        self.last_norm
    }

    fn momentum_setting(&self) -> Option<MomentumSetting> {
        self.rule.momentum_setting()
    }

    fn set_momentum(&mut self, m: MomentumSetting) {
        self.rule.set_momentum(m)
    }

    fn state(&self, params: &[(String, Param)]) -> Result<(u64, Vec<(String, Tensor)>)> {
        let mut out = Vec::new();
        for (name, p) in by_name(params)? {
            if let Some(slots) = self.state.get(&p.id()) {
                for (slot, t) in R::SLOTS.iter().zip(slots) {
                    out.push((format!("{name}.{slot}"), t.clone()));
                }
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok((self.steps, out))
    }

    fn check_state(&self, params: &[(String, Param)], state: &[(String, Tensor)]) -> Result<()> {
        self.validate(params, state).map(drop)
    }

    fn load_state(
        &mut self,
        params: &[(String, Param)],
        steps: u64,
        state: Vec<(String, Tensor)>,
    ) -> Result<()> {
        self.state = self.validate(params, &state)?;
        self.steps = steps;
        Ok(())
    }
}

impl<R: UpdateRule> Optim<R> {
    /// The state slots of `state` by parameter identity, or every reason it does not fit.
    fn validate(
        &self,
        params: &[(String, Param)],
        state: &[(String, Tensor)],
    ) -> Result<HashMap<u64, Vec<Tensor>>> {
        let params = by_name(params)?;
        let names = R::SLOTS;
        let mut problems = Vec::new();
        // Parameters with a reported problem: their missing slots go without saying.
        let mut faulty = std::collections::HashSet::new();
        let mut restored: HashMap<u64, Vec<Option<Tensor>>> = HashMap::new();
        for (key, t) in state {
            let key = key.as_str();
            let Some((param, slot)) = key.rsplit_once('.') else {
                problems.push(format!("{key}: no slot name"));
                continue;
            };
            let Some(k) = names.iter().position(|n| *n == slot) else {
                problems.push(format!("{key}: unknown slot {slot:?} (expected {names:?})"));
                continue;
            };
            let Some(p) = params.get(param) else {
                problems.push(format!("{key}: no parameter {param:?}"));
                continue;
            };
            if t.shape() != p.shape().as_slice() || t.dtype() != p.dtype() {
                faulty.insert(p.id());
                problems.push(format!(
                    "{key}: expected {:?} {}, found {:?} {}",
                    p.shape(),
                    p.dtype(),
                    t.shape(),
                    t.dtype()
                ));
                continue;
            }
            restored
                .entry(p.id())
                .or_insert_with(|| vec![None; names.len()])[k] = Some(t.detach());
        }
        let mut state = HashMap::new();
        for (id, slots) in restored {
            match slots.into_iter().collect::<Option<Vec<Tensor>>>() {
                Some(slots) => {
                    state.insert(id, slots);
                }
                None if faulty.contains(&id) => {}
                None => {
                    let name = params.iter().find(|(_, p)| p.id() == id).map(|(n, _)| *n);
                    problems.push(format!(
                        "{}: some of the slots {names:?} are missing",
                        name.unwrap_or("?")
                    ));
                }
            }
        }
        if !problems.is_empty() {
            problems.sort();
            return Err(Error::Shape(format!(
                "optimizer state does not fit the parameters: {}",
                problems.join("; ")
            )));
        }
        Ok(state)
    }
}
