//! Comparisons: 0/1 masks in the operands' promoted dtype ([`DType::promote`], as every op on
//! several tensors: f32 with f64 compares in f64). They have no derivative.

use super::{binary_promote, scalar_like, zip_elems};
use crate::tensor::{record_nondiff, with_any_dtype, DType, Element, Tensor};

macro_rules! comparison {
    ($name:ident, $scalar:ident, $op:tt, $doc:literal) => {
        #[doc = concat!("1 where `self ", $doc, " other` (broadcast), else 0. Has no derivative.")]
        pub fn $name(&self, other: &Tensor) -> Tensor {
            let (a, b) = binary_promote(self, other);
            let name = stringify!($name);
            let out = with_any_dtype!(a.dtype(), T => {
                zip_elems::<T>(name, &a, &b, |x, y| if x $op y { T::ONE } else { T::ZERO })
            });
            record_nondiff(name, out, &[&a, &b])
        }

        #[doc = concat!("1 where `self ", $doc, " value`, else 0 (an integer tensor compares \
            exactly in f64 and keeps its dtype). Has no derivative.")]
        pub fn $scalar(&self, value: f64) -> Tensor {
            if self.dtype().is_float() {
                self.$name(&scalar_like(self, value))
            } else {
                let wide = self.to_dtype(DType::F64);
                wide.$name(&scalar_like(&wide, value)).to_dtype(self.dtype())
            }
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
