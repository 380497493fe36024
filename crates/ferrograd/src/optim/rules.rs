//! The update rules (PyTorch's formulations) and their constructors.

use super::{Optim, UpdateRule};
use crate::kernels::optim::{update, Prep};
use crate::kernels::Float;
use crate::tensor::{Element, Tensor};

/// The slots of a parameter as mutable slices.
fn slices<T: Element, const K: usize>(slots: &mut [Tensor]) -> [&mut [T]; K] {
    let mut it = slots.iter_mut();
    std::array::from_fn(|_| it.next().expect("slot count").data_mut::<T>())
}

/// w ← w − lr·g.
pub struct SgdRule;

impl UpdateRule for SgdRule {
    const SLOTS: usize = 0;
    fn slot_names(&self) -> &'static [&'static str] {
        &[]
    }
    fn apply<T: Element>(
        &self,
        w: &mut [T],
        g: &[T],
        prep: Prep<T>,
        _: &mut [Tensor],
        lr: f64,
        _: u64,
    ) {
        let lr = T::from_f64(lr);
        update(w, g, prep, [], |w, g, s| (w - lr * g, s));
    }
}

impl Optim<SgdRule> {
    pub fn new(lr: f64) -> Self {
        Optim::with_rule(SgdRule, lr)
    }
}

/// buf ← μ·buf + g; w ← w − lr·buf (Nesterov: w ← w − lr·(g + μ·buf)).
pub struct MomentumRule {
    pub momentum: f64,
    pub nesterov: bool,
}

impl UpdateRule for MomentumRule {
    const SLOTS: usize = 1;
    fn slot_names(&self) -> &'static [&'static str] {
        &["momentum"]
    }
    fn apply<T: Element>(
        &self,
        w: &mut [T],
        g: &[T],
        prep: Prep<T>,
        slots: &mut [Tensor],
        lr: f64,
        t: u64,
    ) {
        let (lr, mu) = (T::from_f64(lr), T::from_f64(self.momentum));
        let nesterov = self.nesterov;
        // PyTorch starts the buffer at the first gradient rather than at zero.
        let first = t == 1;
        update(w, g, prep, slices::<T, 1>(slots), |w, g, [b]| {
            let b = if first { g } else { mu * b + g };
            let d = if nesterov { g + mu * b } else { b };
            (w - lr * d, [b])
        });
    }
}

impl Optim<MomentumRule> {
    /// Momentum 0.9, classical (not Nesterov).
    pub fn new(lr: f64) -> Self {
        Optim::with_rule(
            MomentumRule {
                momentum: 0.9,
                nesterov: false,
            },
            lr,
        )
    }
    pub fn momentum(mut self, momentum: f64) -> Self {
        self.rule.momentum = momentum;
        self
    }
    pub fn nesterov(mut self, on: bool) -> Self {
        self.rule.nesterov = on;
        self
    }
}

/// s ← α·s + (1 − α)·g²; w ← w − lr·g / (√s + ε).
pub struct RmsPropRule {
    pub alpha: f64,
    pub eps: f64,
}

impl UpdateRule for RmsPropRule {
    const SLOTS: usize = 1;
    const SQUARES_GRADIENT: bool = true;
    fn slot_names(&self) -> &'static [&'static str] {
        &["square_avg"]
    }
    fn apply<T: Element>(
        &self,
        w: &mut [T],
        g: &[T],
        prep: Prep<T>,
        slots: &mut [Tensor],
        lr: f64,
        _: u64,
    ) {
        let (lr, a, eps) = (
            T::from_f64(lr),
            T::from_f64(self.alpha),
            T::from_f64(self.eps),
        );
        update(w, g, prep, slices::<T, 1>(slots), |w, g, [sq]| {
            let sq = a * sq + (T::one() - a) * g * g;
            (w - lr * g / (sq.sqrt() + eps), [sq])
        });
    }
}

impl Optim<RmsPropRule> {
    /// α = 0.99, ε = 1e-8.
    pub fn new(lr: f64) -> Self {
        Optim::with_rule(
            RmsPropRule {
                alpha: 0.99,
                eps: 1e-8,
            },
            lr,
        )
    }
    pub fn alpha(mut self, alpha: f64) -> Self {
        self.rule.alpha = alpha;
        self
    }
}

/// s ← s + g²; w ← w − lr·g / (√s + ε).
pub struct AdagradRule {
    pub eps: f64,
}

impl UpdateRule for AdagradRule {
    const SLOTS: usize = 1;
    const SQUARES_GRADIENT: bool = true;
    fn slot_names(&self) -> &'static [&'static str] {
        &["sum"]
    }
    fn apply<T: Element>(
        &self,
        w: &mut [T],
        g: &[T],
        prep: Prep<T>,
        slots: &mut [Tensor],
        lr: f64,
        _: u64,
    ) {
        let (lr, eps) = (T::from_f64(lr), T::from_f64(self.eps));
        update(w, g, prep, slices::<T, 1>(slots), |w, g, [sum]| {
            let sum = sum + g * g;
            (w - lr * g / (sum.sqrt() + eps), [sum])
        });
    }
}

impl Optim<AdagradRule> {
    /// ε = 1e-10.
    pub fn new(lr: f64) -> Self {
        Optim::with_rule(AdagradRule { eps: 1e-10 }, lr)
    }
}

/// Adam: m ← β₁m + (1−β₁)g, v ← β₂v + (1−β₂)g², w ← w − lr·m̂ / (√v̂ + ε) with the bias
/// corrections m̂ = m / (1 − β₁ᵗ), v̂ = v / (1 − β₂ᵗ). `AdamWRule` adds decoupled decay.
pub struct AdamRule {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
}

impl UpdateRule for AdamRule {
    const SLOTS: usize = 2;
    const SQUARES_GRADIENT: bool = true;
    fn slot_names(&self) -> &'static [&'static str] {
        &["exp_avg", "exp_avg_sq"]
    }
    fn apply<T: Element>(
        &self,
        w: &mut [T],
        g: &[T],
        prep: Prep<T>,
        slots: &mut [Tensor],
        lr: f64,
        t: u64,
    ) {
        let (b1, b2) = (self.beta1, self.beta2);
        let bc1 = 1.0 - b1.powi(t as i32);
        let bc2 = 1.0 - b2.powi(t as i32);
        // w − lr/bc1 · m / (√v / √bc2 + ε): the corrections folded into two constants.
        let step = T::from_f64(lr / bc1);
        let inv_sqrt_bc2 = T::from_f64(1.0 / bc2.sqrt());
        let (b1, b2, eps) = (T::from_f64(b1), T::from_f64(b2), T::from_f64(self.eps));
        update(w, g, prep, slices::<T, 2>(slots), |w, g, [m, v]| {
            let (m, v) = moments(m, v, g, b1, b2);
            (w - step * m / (v.sqrt() * inv_sqrt_bc2 + eps), [m, v])
        });
    }
}

impl Optim<AdamRule> {
    /// β = (0.9, 0.999), ε = 1e-8. With `weight_decay` this is Adam with L2 decay.
    pub fn new(lr: f64) -> Self {
        Optim::with_rule(
            AdamRule {
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
            },
            lr,
        )
    }

    pub fn betas(mut self, beta1: f64, beta2: f64) -> Self {
        self.rule.beta1 = beta1;
        self.rule.beta2 = beta2;
        self
    }

    pub fn eps(mut self, eps: f64) -> Self {
        self.rule.eps = eps;
        self
    }
}

/// AdamW: the Adam step after a decoupled decay w ← w·(1 − lr·wd).
pub struct AdamWRule(pub AdamRule);

impl UpdateRule for AdamWRule {
    const SLOTS: usize = 2;
    const SQUARES_GRADIENT: bool = true;
    fn slot_names(&self) -> &'static [&'static str] {
        self.0.slot_names()
    }
    fn decoupled(&self) -> bool {
        true
    }
    fn apply<T: Element>(
        &self,
        w: &mut [T],
        g: &[T],
        prep: Prep<T>,
        slots: &mut [Tensor],
        lr: f64,
        t: u64,
    ) {
        self.0.apply(w, g, prep, slots, lr, t)
    }
}

impl Optim<AdamWRule> {
    /// β = (0.9, 0.999), ε = 1e-8, decoupled weight decay 0.01 (PyTorch's defaults).
    pub fn new(lr: f64) -> Self {
        Optim::with_rule(
            AdamWRule(AdamRule {
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
            }),
            lr,
        )
        .weight_decay(0.01)
    }
}

/// RAdam: Adam whose adaptive step is switched on, and rectified, only once the variance of
/// the adaptive learning rate is tractable (ρₜ > 5); before that, momentum SGD with bias
/// correction.
pub struct RAdamRule {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
}

impl UpdateRule for RAdamRule {
    const SLOTS: usize = 2;
    const SQUARES_GRADIENT: bool = true;
    fn slot_names(&self) -> &'static [&'static str] {
        &["exp_avg", "exp_avg_sq"]
    }
    fn apply<T: Element>(
        &self,
        w: &mut [T],
        g: &[T],
        prep: Prep<T>,
        slots: &mut [Tensor],
        lr: f64,
        t: u64,
    ) {
        let (b1, b2) = (self.beta1, self.beta2);
        let bc1 = 1.0 - b1.powi(t as i32);
        let b2t = b2.powi(t as i32);
        let rho_inf = 2.0 / (1.0 - b2) - 1.0;
        let rho_t = rho_inf - 2.0 * t as f64 * b2t / (1.0 - b2t);
        let adaptive = rho_t > 5.0;
        let rect = if adaptive {
            ((rho_t - 4.0) * (rho_t - 2.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t))
                .sqrt()
        } else {
            0.0
        };
        let step = T::from_f64(lr / bc1);
        let (rect, sqrt_bc2) = (T::from_f64(rect), T::from_f64((1.0 - b2t).sqrt()));
        let (b1, b2, eps) = (T::from_f64(b1), T::from_f64(b2), T::from_f64(self.eps));
        update(w, g, prep, slices::<T, 2>(slots), |w, g, [m, v]| {
            let (m, v) = moments(m, v, g, b1, b2);
            let d = if adaptive {
                m * rect * sqrt_bc2 / (v.sqrt() + eps)
            } else {
                m
            };
            (w - step * d, [m, v])
        });
    }
}

impl Optim<RAdamRule> {
    /// β = (0.9, 0.999), ε = 1e-8.
    pub fn new(lr: f64) -> Self {
        Optim::with_rule(
            RAdamRule {
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
            },
            lr,
        )
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
