//! Arithmetic with a plain number: each its own primitive, so `x * 2.0` costs one pass and no
//! broadcast operand.

use smallvec::smallvec;

use super::map_dispatch;
use crate::kernels::Float;
use crate::tensor::{record, Tensor};

impl Tensor {
    /// `self + s`.
    pub fn add_scalar(&self, s: f64) -> Tensor {
        let out = map_dispatch!(self, |v| v + T::from_f64(s));
        record("add_scalar", out, &[self], |_, up| {
            smallvec![Some(up.clone())]
        })
    }

    /// `self * s`.
    pub fn mul_scalar(&self, s: f64) -> Tensor {
        let out = map_dispatch!(self, |v| v * T::from_f64(s));
        record("mul_scalar", out, &[self], move |_, up| {
            smallvec![Some(up.mul_scalar(s))]
        })
    }

    /// `self / s`.
    pub fn div_scalar(&self, s: f64) -> Tensor {
        let out = map_dispatch!(self, |v| v / T::from_f64(s));
        record("div_scalar", out, &[self], move |_, up| {
            smallvec![Some(up.div_scalar(s))]
        })
    }

    /// `s - self`.
    pub fn rsub_scalar(&self, s: f64) -> Tensor {
        let out = map_dispatch!(self, |v| T::from_f64(s) - v);
        record("rsub_scalar", out, &[self], |_, up| smallvec![Some(-up)])
    }

    /// `s / self`.
    pub fn rdiv_scalar(&self, s: f64) -> Tensor {
        let out = map_dispatch!(self, |v| T::from_f64(s) / v);
        record("rdiv_scalar", out, &[self], |c, up| {
            // d(s/x)/dx = -s/x² = -(s/x)/x
            smallvec![Some(-&(&(up * c.out()) / c.input(0)))]
        })
    }
}
