//! The update rules (PyTorch's formulations) and their constructors.

use super::{MomentumSetting, Optim, Step, UpdateRule};
use crate::kernels::optim::update;
use crate::kernels::Float;
use crate::tensor::{FloatElement, Tensor};

/// The slots of a parameter as mutable slices.
fn slices<T: FloatElement, const K: usize>(slots: &mut [Tensor]) -> [&mut [T]; K] {
    let mut it = slots.iter_mut();
    std::array::from_fn(|_| it.next().expect("slot count").data_mut::<T>())
}

/// w ← w − lr·g.
#[derive(Clone, Copy, Debug, Default)]
pub struct SgdRule;

impl UpdateRule for SgdRule {
    const SLOTS: &'static [&'static str] = &[];
    fn apply<T: FloatElement>(&self, s: Step<'_, T>) {
        let lr = T::from_f64(s.lr);
        update(s.w, s.g, s.prep, [], |w, g, st| (w - lr * g, st));
    }
    /// Momentum 0, as PyTorch's `SGD(momentum=0)` shows in its parameter groups.
    fn momentum_setting(&self) -> Option<MomentumSetting> {
        Some(MomentumSetting::Momentum(0.0))
    }
    fn set_momentum(&mut self, m: MomentumSetting) {
        // Plain SGD keeps no buffer to carry a momentum with.
        assert!(
            m == MomentumSetting::Momentum(0.0),
            "set_momentum: plain SGD has no momentum buffer ({m:?} given): build momentum SGD \
             (Momentum::new, or SGD(momentum=...) in Python) to let a schedule set it"
        );
    }
}

/// buf ← μ·buf + g; w ← w − lr·buf (Nesterov: w ← w − lr·(g + μ·buf)).
#[derive(Clone, Copy, Debug)]
pub struct MomentumRule {
    /// The momentum factor μ, the share of the buffer kept from step to step.
    pub momentum: f64,
    /// Whether the step looks ahead along the buffer (Nesterov momentum).
    pub nesterov: bool,
}

impl Default for MomentumRule {
    /// Momentum 0.9, classical (not Nesterov).
    fn default() -> Self {
        MomentumRule {
            momentum: 0.9,
            nesterov: false,
        }
    }
}

impl UpdateRule for MomentumRule {
    const SLOTS: &'static [&'static str] = &["momentum"];
    fn apply<T: FloatElement>(&self, s: Step<'_, T>) {
        let (lr, mu) = (T::from_f64(s.lr), T::from_f64(self.momentum));
        let nesterov = self.nesterov;
        // PyTorch starts the buffer at the first gradient rather than at zero.
        let first = s.t == 1;
        update(s.w, s.g, s.prep, slices::<T, 1>(s.slots), |w, g, [b]| {
            let b = if first { g } else { mu * b + g };
            let d = if nesterov { g + mu * b } else { b };
            (w - lr * d, [b])
        });
    }
    fn momentum_setting(&self) -> Option<MomentumSetting> {
        Some(MomentumSetting::Momentum(self.momentum))
    }
    fn set_momentum(&mut self, m: MomentumSetting) {
        match m {
            MomentumSetting::Momentum(mu) => self.momentum = checked_momentum(mu),
            other => panic!("set_momentum: momentum SGD takes Momentum(μ), not {other:?}"),
        }
    }
}

/// `mu` when it is a usable momentum factor; panics otherwise.
fn checked_momentum(mu: f64) -> f64 {
    assert!(
        mu.is_finite() && mu >= 0.0,
        "momentum: {mu} must be finite and not negative"
    );
    mu
}

/// `(beta1, beta2)` when each is in [0, 1), as PyTorch requires (β = 1 leaves the bias
/// correction dividing by zero); panics otherwise.
fn checked_betas(beta1: f64, beta2: f64) -> (f64, f64) {
    for (name, b) in [("beta1", beta1), ("beta2", beta2)] {
        assert!(
            (0.0..1.0).contains(&b),
            "Adam: {name} {b} must be in [0, 1)"
        );
    }
    (beta1, beta2)
}

impl Optim<MomentumRule> {
    /// Sets the momentum factor μ (0.9 by default); panics unless finite and not negative.
    pub fn momentum(mut self, momentum: f64) -> Self {
        self.rule.momentum = checked_momentum(momentum);
        self
    }
    /// Switches Nesterov momentum on or off (off by default).
    pub fn nesterov(mut self, on: bool) -> Self {
        self.rule.nesterov = on;
        self
    }
}

/// s ← α·s + (1 − α)·g²; w ← w − lr·g / (√s + ε).
#[derive(Clone, Copy, Debug)]
pub struct RmsPropRule {
    /// The smoothing constant α, the share of the running mean square kept each step.
    pub alpha: f64,
    /// Added to the denominator so that it is never zero.
    pub eps: f64,
}

impl Default for RmsPropRule {
    /// α = 0.99, ε = 1e-8.
    fn default() -> Self {
        RmsPropRule {
            alpha: 0.99,
            eps: 1e-8,
        }
    }
}

impl UpdateRule for RmsPropRule {
    const SLOTS: &'static [&'static str] = &["square_avg"];
    const SQUARES_GRADIENT: bool = true;
    fn apply<T: FloatElement>(&self, s: Step<'_, T>) {
        let (lr, a, eps) = (
            T::from_f64(s.lr),
            T::from_f64(self.alpha),
            T::from_f64(self.eps),
        );
        update(s.w, s.g, s.prep, slices::<T, 1>(s.slots), |w, g, [sq]| {
            let sq = a * sq + (T::one() - a) * g * g;
            (w - lr * g / (sq.sqrt() + eps), [sq])
        });
    }
}

impl Optim<RmsPropRule> {
    /// Sets the smoothing constant α (0.99 by default); panics unless in [0, 1] (beyond, the
    /// running mean of squares can turn negative and its root NaN).
    pub fn alpha(mut self, alpha: f64) -> Self {
        assert!(
            (0.0..=1.0).contains(&alpha),
            "RMSProp: alpha {alpha} must be in [0, 1]"
        );
        self.rule.alpha = alpha;
        self
    }
}

/// s ← s + g²; w ← w − lr·g / (√s + ε).
#[derive(Clone, Copy, Debug)]
pub struct AdagradRule {
    /// Added to the denominator so that it is never zero.
    pub eps: f64,
}

impl Default for AdagradRule {
    /// ε = 1e-10.
    fn default() -> Self {
        AdagradRule { eps: 1e-10 }
    }
}

impl UpdateRule for AdagradRule {
    const SLOTS: &'static [&'static str] = &["sum"];
    const SQUARES_GRADIENT: bool = true;
    fn apply<T: FloatElement>(&self, s: Step<'_, T>) {
        let (lr, eps) = (T::from_f64(s.lr), T::from_f64(self.eps));
        update(s.w, s.g, s.prep, slices::<T, 1>(s.slots), |w, g, [sum]| {
            let sum = sum + g * g;
            (w - lr * g / (sum.sqrt() + eps), [sum])
        });
    }
}

/// Adam: m ← β₁m + (1−β₁)g, v ← β₂v + (1−β₂)g², w ← w − lr·m̂ / (√v̂ + ε) with the bias
/// corrections m̂ = m / (1 − β₁ᵗ), v̂ = v / (1 − β₂ᵗ). Its hyper-parameters are those of the
/// whole family: AdamW and RAdam wrap it.
#[derive(Clone, Copy, Debug)]
pub struct AdamRule {
    /// Decay rate β₁ of the running mean of the gradient.
    pub beta1: f64,
    /// Decay rate β₂ of the running mean of the squared gradient.
    pub beta2: f64,
    /// Added to the denominator so that it is never zero.
    pub eps: f64,
}

impl Default for AdamRule {
    /// β = (0.9, 0.999), ε = 1e-8 (PyTorch's defaults).
    fn default() -> Self {
        AdamRule {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        }
    }
}

const ADAM_SLOTS: &[&str] = &["exp_avg", "exp_avg_sq"];

impl AdamRule {
    /// The constants of step `t`: β₁, β₂, ε in `T`, 1 − β₁ᵗ and β₂ᵗ.
    fn at<T: Float>(&self, t: u64) -> ([T; 3], f64, f64) {
        let consts = [self.beta1, self.beta2, self.eps].map(T::from_f64);
        (
            consts,
            1.0 - self.beta1.powi(t as i32),
            self.beta2.powi(t as i32),
        )
    }
}

impl UpdateRule for AdamRule {
    const SLOTS: &'static [&'static str] = ADAM_SLOTS;
    const SQUARES_GRADIENT: bool = true;
    fn apply<T: FloatElement>(&self, s: Step<'_, T>) {
        let ([b1, b2, eps], bc1, b2t) = self.at::<T>(s.t);
        // w − lr/bc1 · m / (√v / √bc2 + ε): the corrections folded into two constants.
        let step = T::from_f64(s.lr / bc1);
        let inv_sqrt_bc2 = T::from_f64(1.0 / (1.0 - b2t).sqrt());
        update(s.w, s.g, s.prep, slices::<T, 2>(s.slots), |w, g, [m, v]| {
            let (m, v) = moments(m, v, g, b1, b2);
            (w - step * m / (v.sqrt() * inv_sqrt_bc2 + eps), [m, v])
        });
    }
    fn momentum_setting(&self) -> Option<MomentumSetting> {
        Some(MomentumSetting::Betas(self.beta1, self.beta2))
    }
    fn set_momentum(&mut self, m: MomentumSetting) {
        match m {
            MomentumSetting::Betas(b1, b2) => (self.beta1, self.beta2) = checked_betas(b1, b2),
            other => panic!("set_momentum: the Adam family takes Betas(β₁, β₂), not {other:?}"),
        }
    }
}

/// AdamW: the Adam step after a decoupled decay w ← w·(1 − lr·wd).
#[derive(Clone, Copy, Debug, Default)]
pub struct AdamWRule(pub AdamRule);

impl UpdateRule for AdamWRule {
    const SLOTS: &'static [&'static str] = ADAM_SLOTS;
    const DEFAULT_WEIGHT_DECAY: f64 = 0.01;
    const SQUARES_GRADIENT: bool = true;
    fn decoupled(&self) -> bool {
        true
    }
    fn apply<T: FloatElement>(&self, s: Step<'_, T>) {
        self.0.apply(s)
    }
    fn momentum_setting(&self) -> Option<MomentumSetting> {
        self.0.momentum_setting()
    }
    fn set_momentum(&mut self, m: MomentumSetting) {
        self.0.set_momentum(m)
    }
}

/// RAdam: Adam whose adaptive step is switched on, and rectified, only once the variance of
/// the adaptive learning rate is tractable (ρₜ > 5); before that, momentum SGD with bias
/// correction.
#[derive(Clone, Copy, Debug, Default)]
pub struct RAdamRule(pub AdamRule);

impl UpdateRule for RAdamRule {
    const SLOTS: &'static [&'static str] = ADAM_SLOTS;
    const SQUARES_GRADIENT: bool = true;
    fn apply<T: FloatElement>(&self, s: Step<'_, T>) {
        let ([b1, b2, eps], bc1, b2t) = self.0.at::<T>(s.t);
        let rho_inf = 2.0 / (1.0 - self.0.beta2) - 1.0;
        let rho_t = rho_inf - 2.0 * s.t as f64 * b2t / (1.0 - b2t);
        let adaptive = rho_t > 5.0;
        let rect = if adaptive {
            ((rho_t - 4.0) * (rho_t - 2.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t))
                .sqrt()
        } else {
            0.0
        };
        let step = T::from_f64(s.lr / bc1);
        let (rect, sqrt_bc2) = (T::from_f64(rect), T::from_f64((1.0 - b2t).sqrt()));
        update(s.w, s.g, s.prep, slices::<T, 2>(s.slots), |w, g, [m, v]| {
            let (m, v) = moments(m, v, g, b1, b2);
            let d = if adaptive {
                m * rect * sqrt_bc2 / (v.sqrt() + eps)
            } else {
                m
            };
            (w - step * d, [m, v])
        });
    }
    fn momentum_setting(&self) -> Option<MomentumSetting> {
        self.0.momentum_setting()
    }
    fn set_momentum(&mut self, m: MomentumSetting) {
        self.0.set_momentum(m)
    }
}

/// AMSGrad (PyTorch's `amsgrad=True`) on Adam or AdamW: each element's step divides by the
/// root of the largest second moment seen so far (`max_exp_avg_sq`) instead of the current
/// one, so a step never grows because a large squared gradient decayed. Built by
/// [`Optim::amsgrad`](super::Optim::amsgrad).
#[derive(Clone, Copy, Debug, Default)]
pub struct AmsGrad<R>(R);

impl<R: AdamFamily> UpdateRule for AmsGrad<R> {
    const SLOTS: &'static [&'static str] = &["exp_avg", "exp_avg_sq", "max_exp_avg_sq"];
    const DEFAULT_WEIGHT_DECAY: f64 = R::DEFAULT_WEIGHT_DECAY;
    const SQUARES_GRADIENT: bool = true;
    fn decoupled(&self) -> bool {
        self.0.decoupled()
    }
    fn apply<T: FloatElement>(&self, s: Step<'_, T>) {
        let ([b1, b2, eps], bc1, b2t) = self.0.adam().at::<T>(s.t);
        let step = T::from_f64(s.lr / bc1);
        let inv_sqrt_bc2 = T::from_f64(1.0 / (1.0 - b2t).sqrt());
        let slots = slices::<T, 3>(s.slots);
        update(s.w, s.g, s.prep, slots, |w, g, [m, v, most]| {
            let (m, v) = moments(m, v, g, b1, b2);
            let most = most.max(v);
            (
                w - step * m / (most.sqrt() * inv_sqrt_bc2 + eps),
                [m, v, most],
            )
        });
    }
    fn momentum_setting(&self) -> Option<MomentumSetting> {
        self.0.momentum_setting()
    }
    fn set_momentum(&mut self, m: MomentumSetting) {
        self.0.set_momentum(m)
    }
}

/// The rules of the Adam family, whose optimizers share the `betas` and `eps` setters.
pub trait AdamFamily: UpdateRule {
    /// The Adam hyper-parameters inside the rule.
    fn adam(&self) -> &AdamRule;
    /// The same, to set them.
    fn adam_mut(&mut self) -> &mut AdamRule;
}

impl AdamFamily for AdamRule {
    fn adam(&self) -> &AdamRule {
        self
    }
    fn adam_mut(&mut self) -> &mut AdamRule {
        self
    }
}

impl AdamFamily for AdamWRule {
    fn adam(&self) -> &AdamRule {
        &self.0
    }
    fn adam_mut(&mut self) -> &mut AdamRule {
        &mut self.0
    }
}

impl<R: AdamFamily> AdamFamily for AmsGrad<R> {
    fn adam(&self) -> &AdamRule {
        self.0.adam()
    }
    fn adam_mut(&mut self) -> &mut AdamRule {
        self.0.adam_mut()
    }
}

/// Adam and AdamW, the rules that take AMSGrad (as PyTorch's `amsgrad` flag: RAdam has none).
pub trait TakesAmsGrad: AdamFamily {}
impl TakesAmsGrad for AdamRule {}
impl TakesAmsGrad for AdamWRule {}

impl<R: TakesAmsGrad> Optim<R> {
    /// The same optimizer with AMSGrad (PyTorch's `amsgrad=True`): a third state slot,
    /// `max_exp_avg_sq`, the largest second moment of each element so far.
    ///
    /// ```
    /// use ferrograd::prelude::*;
    ///
    /// let after = |mut opt: Box<dyn Optimizer>| {
    ///     let w = Param::new(Tensor::from_vec(vec![1.0f64], &[1]));
    ///     for x in [3.0, 0.1] {
    ///         let grads = (&w.tensor() * x).sum().backward(); // gradient x
    ///         opt.step(&[("w".to_string(), w.clone())], &grads);
    ///     }
    ///     w.tensor().item()
    /// };
    /// // After a large gradient and a small one, the second step divides by the first's
    /// // second moment (β₂ = 0.5 has let the running one fall), so it is the shorter.
    /// let plain = after(Box::new(Adam::new(0.1).betas(0.9, 0.5)));
    /// let ams = after(Box::new(Adam::new(0.1).betas(0.9, 0.5).amsgrad()));
    /// assert!(ams > plain);
    /// ```
    pub fn amsgrad(self) -> Optim<AmsGrad<R>> {
        self.map_rule(AmsGrad)
    }
}

impl AdamFamily for RAdamRule {
    fn adam(&self) -> &AdamRule {
        &self.0
    }
    fn adam_mut(&mut self) -> &mut AdamRule {
        &mut self.0
    }
}

impl<R: AdamFamily> Optim<R> {
    /// Sets the decay rates β₁ of the gradient's mean and β₂ of its square's (0.9 and 0.999
    /// by default); panics unless each is in [0, 1), as PyTorch requires (β = 1 leaves the
    /// bias correction dividing by zero).
    pub fn betas(mut self, beta1: f64, beta2: f64) -> Self {
        self.rule.set_momentum(MomentumSetting::Betas(beta1, beta2));
        self
    }

    /// Sets ε, added to the denominator so that it is never zero (1e-8 by default); panics
    /// unless finite and not negative.
    pub fn eps(mut self, eps: f64) -> Self {
        assert!(
            eps.is_finite() && eps >= 0.0,
            "Adam: eps {eps} must be finite and not negative"
        );
        self.rule.adam_mut().eps = eps;
        self
    }
}

/// Adam's exponential averages of the gradient and of its square.
#[inline(always)]
fn moments<T: Float>(m: T, v: T, g: T, b1: T, b2: T) -> (T, T) {
    (
        b1 * m + (T::one() - b1) * g,
        b2 * v + (T::one() - b2) * g * g,
    )
}
