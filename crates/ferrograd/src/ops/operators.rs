//! `+ - * /` and unary `-` on tensors (owned or borrowed) and `f64` numbers on either side.

use std::ops::{Add, Div, Mul, Neg, Sub};

use crate::tensor::Tensor;

macro_rules! binary_operator {
    ($trait:ident, $method:ident) => {
        impl $trait<&Tensor> for &Tensor {
            type Output = Tensor;
            fn $method(self, rhs: &Tensor) -> Tensor {
                Tensor::$method(self, rhs)
            }
        }
        impl $trait<Tensor> for Tensor {
            type Output = Tensor;
            fn $method(self, rhs: Tensor) -> Tensor {
                Tensor::$method(&self, &rhs)
            }
        }
        impl $trait<&Tensor> for Tensor {
            type Output = Tensor;
            fn $method(self, rhs: &Tensor) -> Tensor {
                Tensor::$method(&self, rhs)
            }
        }
        impl $trait<Tensor> for &Tensor {
            type Output = Tensor;
            fn $method(self, rhs: Tensor) -> Tensor {
                Tensor::$method(self, &rhs)
            }
        }
    };
}

binary_operator!(Add, add);
binary_operator!(Sub, sub);
binary_operator!(Mul, mul);
binary_operator!(Div, div);

/// `tensor op f64` and `f64 op tensor` through the scalar primitives. Only f64: with a second
/// float type, unsuffixed literals (`&a * 2.0`) would be ambiguous. The number takes the
/// tensor's dtype.
macro_rules! scalar_operator {
    ($trait:ident, $method:ident, |$t:ident, $s:ident| $right:expr, $left:expr) => {
        impl $trait<f64> for &Tensor {
            type Output = Tensor;
            fn $method(self, $s: f64) -> Tensor {
                let $t = self;
                $right
            }
        }
        impl $trait<f64> for Tensor {
            type Output = Tensor;
            fn $method(self, $s: f64) -> Tensor {
                let $t = &self;
                $right
            }
        }
        impl $trait<&Tensor> for f64 {
            type Output = Tensor;
            fn $method(self, $t: &Tensor) -> Tensor {
                let $s = self;
                $left
            }
        }
        impl $trait<Tensor> for f64 {
            type Output = Tensor;
            fn $method(self, t: Tensor) -> Tensor {
                let ($s, $t) = (self, &t);
                $left
            }
        }
    };
}

scalar_operator!(Add, add, |t, s| t.add_scalar(s), t.add_scalar(s));
// x - s is exactly x + (-s) in IEEE arithmetic.
scalar_operator!(Sub, sub, |t, s| t.add_scalar(-s), t.rsub_scalar(s));
scalar_operator!(Mul, mul, |t, s| t.mul_scalar(s), t.mul_scalar(s));
scalar_operator!(Div, div, |t, s| t.div_scalar(s), t.rdiv_scalar(s));

impl Neg for &Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        Tensor::neg(self)
    }
}

impl Neg for Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        Tensor::neg(&self)
    }
}
