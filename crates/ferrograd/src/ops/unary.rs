//! Element-wise functions of one tensor.

use super::{map_dispatch, map_slices_dispatch, zip_dispatch};
use smallvec::smallvec;

use crate::kernels::Float;
use crate::tensor::{record, record_nondiff, Tensor};
use num_traits::{One, Zero};

/// `up` where `x` > 0, `up · slope` elsewhere (0 when `slope` is 0, as PyTorch's relu
/// backward, even for an infinite `up`): the derivative of relu and leaky relu in one pass.
/// It is linear in `up` along a routing that `x` fixes (its derivative in `x` is zero almost
/// everywhere), so its own rule is itself and `x` is no input of the graph.
fn slope_scaled(up: &Tensor, x: &Tensor, slope: f64) -> Tensor {
    let out = if slope == 0.0 {
        zip_dispatch!("relu backward", up, x, |u, v| if v > T::zero() {
            u
        } else {
            T::zero()
        })
    } else {
        zip_dispatch!("leaky_relu backward", up, x, |u, v| if v > T::zero() {
            u
        } else {
            u * T::from_f64(slope)
        })
    };
    let x = x.detach();
    record("slope_scaled", out, &[up], move |_, g| {
        smallvec![Some(slope_scaled(g, &x, slope))]
    })
}

/// The sign of each element as a constant (untracked) tensor.
fn sign_of(x: &Tensor) -> Tensor {
    map_dispatch!(x, |v| if v > T::zero() {
        T::one()
    } else if v < T::zero() {
        -T::one()
    } else {
        v
    })
}

/// 2 / √π, the scale of erf's derivative.
const TWO_OVER_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI;

impl Tensor {
    /// Element-wise `-x` (the unary `-` operator).
    pub fn neg(&self) -> Tensor {
        let out = map_dispatch!(self, |v| -v);
        record("neg", out, &[self], |_, up| smallvec![Some(-up)])
    }

    /// Element-wise `eˣ`.
    pub fn exp(&self) -> Tensor {
        let out = map_slices_dispatch!(self, exp_in_place);
        record("exp", out, &[self], |c, up| smallvec![Some(up * c.out())])
    }

    /// Natural logarithm.
    pub fn log(&self) -> Tensor {
        let out = map_dispatch!(self, |v| v.ln());
        record("log", out, &[self], |c, up| {
            smallvec![Some(up / c.input(0))]
        })
    }

    /// Element-wise square root (NaN for negative elements; the gradient is infinite at 0).
    pub fn sqrt(&self) -> Tensor {
        let out = map_dispatch!(self, |v| v.sqrt());
        record("sqrt", out, &[self], |c, up| {
            smallvec![Some(&(up * 0.5) / c.out())]
        })
    }

    /// Every element raised to the constant power `p`.
    pub fn powf(&self, p: f64) -> Tensor {
        let out = map_dispatch!(self, |v| v.powf(T::from_f64(p)));
        record("powf", out, &[self], move |c, up| {
            if p == 0.0 {
                // x⁰ is constant: its derivative is 0 everywhere, including x = 0 where
                // p·x^(p−1) would be 0·∞ (PyTorch gives 0 too).
                return smallvec![Some(up.zeros_like())];
            }
            smallvec![Some(&(up * p) * &c.input(0).powf(p - 1.0))]
        })
    }

    /// Element-wise `x²`.
    pub fn square(&self) -> Tensor {
        let out = map_dispatch!(self, |v| v * v);
        record("square", out, &[self], |c, up| {
            smallvec![Some(&(up * 2.0) * c.input(0))]
        })
    }

    /// Element-wise `|x|`; its gradient at 0 is 0.
    pub fn abs(&self) -> Tensor {
        let out = map_dispatch!(self, |v| v.abs());
        record("abs", out, &[self], |c, up| {
            smallvec![Some(up * &sign_of(c.input(0)))]
        })
    }

    /// −1, 0 or 1 by the sign of each element (0 at 0). Has no derivative.
    pub fn sign(&self) -> Tensor {
        record_nondiff("sign", sign_of(self), &[self])
    }

    /// Element-wise sine (radians).
    pub fn sin(&self) -> Tensor {
        let out = map_dispatch!(self, |v| v.sin());
        record("sin", out, &[self], |c, up| {
            smallvec![Some(up * &c.input(0).cos())]
        })
    }

    /// Element-wise cosine (radians).
    pub fn cos(&self) -> Tensor {
        let out = map_dispatch!(self, |v| v.cos());
        record("cos", out, &[self], |c, up| {
            smallvec![Some(-&(up * &c.input(0).sin()))]
        })
    }

    /// Element-wise hyperbolic tangent.
    pub fn tanh(&self) -> Tensor {
        let out = map_slices_dispatch!(self, tanh_in_place);
        record("tanh", out, &[self], |c, up| {
            smallvec![Some(up * &(1.0 - &c.out().square()))]
        })
    }

    /// Logistic sigmoid, evaluated without overflow for large |x|.
    pub fn sigmoid(&self) -> Tensor {
        let out = map_slices_dispatch!(self, sigmoid_in_place);
        record("sigmoid", out, &[self], |c, up| {
            smallvec![Some(&(up * c.out()) * &(1.0 - c.out()))]
        })
    }

    /// max(x, 0); the derivative at 0 is taken as 0.
    pub fn relu(&self) -> Tensor {
        let out = map_dispatch!(self, |v| if v > T::zero() { v } else { T::zero() });
        record("relu", out, &[self], |c, up| {
            smallvec![Some(slope_scaled(up, c.input(0), 0.0))]
        })
    }

    /// x for x > 0, `slope * x` otherwise.
    pub fn leaky_relu(&self, slope: f64) -> Tensor {
        let out = map_dispatch!(self, |v| if v > T::zero() {
            v
        } else {
            v * T::from_f64(slope)
        });
        record("leaky_relu", out, &[self], move |c, up| {
            smallvec![Some(slope_scaled(up, c.input(0), slope))]
        })
    }

    /// ln(1 + eˣ), computed as max(x, 0) + ln(1 + e^−|x|): exact for large |x| in both
    /// directions.
    pub fn softplus(&self) -> Tensor {
        let out = map_dispatch!(self, |v| v.max(T::zero()) + (-v.abs()).exp().ln_1p());
        record("softplus", out, &[self], |c, up| {
            smallvec![Some(up * &c.input(0).sigmoid())]
        })
    }

    /// The Gauss error function.
    pub fn erf(&self) -> Tensor {
        let out = map_dispatch!(self, |v| Float::erf(v));
        record("erf", out, &[self], |c, up| {
            let x = c.input(0);
            smallvec![Some(&(up * TWO_OVER_SQRT_PI) * &(-&x.square()).exp())]
        })
    }

    /// GELU with the exact normal CDF: x · Φ(x) = x · ½(1 + erf(x/√2)).
    pub fn gelu(&self) -> Tensor {
        let cdf = &(&(self * std::f64::consts::FRAC_1_SQRT_2).erf() + 1.0) * 0.5;
        self * &cdf
    }

    /// ELU: x for x > 0, `alpha · (eˣ − 1)` otherwise, written as
    /// relu(x) + alpha · (e^−relu(−x) − 1) so that the exponential never overflows.
    pub fn elu(&self, alpha: f64) -> Tensor {
        let negative_part = (-&(-self).relu()).exp().add_scalar(-1.0).mul_scalar(alpha);
        &self.relu() + &negative_part
    }
}
