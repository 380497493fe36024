//! Comparisons: 0/1 masks in the operands' dtype. They have no derivative.

use super::{scalar_like, zip_dispatch};
use crate::tensor::{record_nondiff, Tensor};
use num_traits::{One, Zero};

macro_rules! comparison {
    ($name:ident, $scalar:ident, $op:tt, $doc:literal) => {
        #[doc = concat!("1 where `self ", $doc, " other` (broadcast), else 0. Has no derivative.")]
        pub fn $name(&self, other: &Tensor) -> Tensor {
            let other = other.to_dtype(self.dtype());
            let out = zip_dispatch!(stringify!($name), self, &other, |x, y| if x $op y { T::one() } else { T::zero() });
            record_nondiff(stringify!($name), out, &[self, &other])
        }

        #[doc = concat!("1 where `self ", $doc, " value`, else 0. Has no derivative.")]
        pub fn $scalar(&self, value: f64) -> Tensor {
            self.$name(&scalar_like(self, value))
        }
    };
}

impl Tensor {
    comparison!(eq, eq_scalar, ==, "==");
    comparison!(ne, ne_scalar, !=, "!=");
    comparison!(lt, lt_scalar, <, "<");
    comparison!(le, le_scalar, <=, "<=");
    comparison!(gt, gt_scalar, >, ">");
    comparison!(ge, ge_scalar, >=, ">=");

    /// Whether every element is within `atol + rtol·|other|` of `other`'s (numpy's and
    /// PyTorch's `allclose`: the shapes broadcast, NaN equals nothing).
    pub fn allclose(&self, other: &Tensor, rtol: f64, atol: f64) -> bool {
        let shape = super::broadcast_shape_or_panic("allclose", self.shape(), other.shape());
        let (a, b) = (self.broadcast_to(&shape), other.broadcast_to(&shape));
        a.to_vec::<f64>()
            .iter()
            .zip(b.to_vec::<f64>())
            .all(|(x, y)| {
                // Infinities are close only to themselves (the tolerance would be infinite).
                if x.is_finite() && y.is_finite() {
                    (x - y).abs() <= atol + rtol * y.abs()
                } else {
                    *x == y
                }
            })
    }
}
