//! Comparisons: 0/1 masks in the operands' promoted dtype ([`DType::promote`], as every op on
//! several tensors: f32 with f64 compares in f64). They have no derivative.

use super::scalar_like;
use crate::tensor::{DType, Tensor};

/// The `_scalar` form of a comparison of the table in `binary.rs`.
macro_rules! comparison_with_scalar {
    ($name:ident, $scalar:ident, $doc:literal) => {
        #[doc = concat!("1 where `self ", $doc, " value`, else 0 (an integer tensor compares \
            exactly in f64 and keeps its dtype). Has no derivative.")]
        pub fn $scalar(&self, value: f64) -> Tensor {
            if self.dtype().is_float() {
                self.$name(&scalar_like(self, value))
            } else {
                let wide = self.to_dtype(DType::F64);
                wide.$name(&scalar_like(&wide, value))
                    .to_dtype(self.dtype())
            }
        }
    };
}

impl Tensor {
    comparison_with_scalar!(eq, eq_scalar, "==");
    comparison_with_scalar!(ne, ne_scalar, "!=");
    comparison_with_scalar!(lt, lt_scalar, "<");
    comparison_with_scalar!(le, le_scalar, "<=");
    comparison_with_scalar!(gt, gt_scalar, ">");
    comparison_with_scalar!(ge, ge_scalar, ">=");

    /// Whether every element is within `atol + rtol·|other|` of `other`'s (numpy's and
    /// PyTorch's `allclose`: the shapes broadcast, NaN equals nothing).
    pub fn allclose(&self, other: &Tensor, rtol: f64, atol: f64) -> bool {
        let _profiled = crate::tensor::profile::scope("allclose");
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
