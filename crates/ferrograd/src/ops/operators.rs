//! `+ - * /` and unary `-` on tensors (owned or borrowed) and `f64` numbers on either side.

use std::ops::{Add, Div, Mul, Neg, Sub};

use super::scalar_like;
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
        // Only f64: with a second float type, unsuffixed literals (`&a * 2.0`) would be
        // ambiguous. The scalar takes the tensor's dtype.
        binary_operator!(@scalar $trait, $method, f64);
    };
    (@scalar $trait:ident, $method:ident, $s:ty) => {
        impl $trait<$s> for &Tensor {
            type Output = Tensor;
            fn $method(self, rhs: $s) -> Tensor {
                Tensor::$method(self, &scalar_like(self, rhs))
            }
        }
        impl $trait<$s> for Tensor {
            type Output = Tensor;
            fn $method(self, rhs: $s) -> Tensor {
                Tensor::$method(&self, &scalar_like(&self, rhs))
            }
        }
        impl $trait<&Tensor> for $s {
            type Output = Tensor;
            fn $method(self, rhs: &Tensor) -> Tensor {
                Tensor::$method(&scalar_like(rhs, self), rhs)
            }
        }
        impl $trait<Tensor> for $s {
            type Output = Tensor;
            fn $method(self, rhs: Tensor) -> Tensor {
                Tensor::$method(&scalar_like(&rhs, self), &rhs)
            }
        }
    };
}

binary_operator!(Add, add);
binary_operator!(Sub, sub);
binary_operator!(Mul, mul);
binary_operator!(Div, div);

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
