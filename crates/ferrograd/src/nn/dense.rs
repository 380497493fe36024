//! Fully connected layer: `x @ w + b`.

use super::{Layer, Mode};
use crate::autograd::Param;
use crate::init;
use crate::tensor::{with_default_rng, DType, Tensor};

pub struct Dense {
    w: Param,
    b: Param,
}

impl Dense {
    /// `in_features → out_features`, f32, Xavier-uniform weights and zero bias (as tinynn),
    /// drawn from the generator seeded by `manual_seed`.
    pub fn new(in_features: usize, out_features: usize) -> Dense {
        let w = with_default_rng(|rng| {
            init::xavier_uniform(&[in_features, out_features], DType::F32, rng)
        });
        Dense::from_tensors(w, Tensor::zeros(&[out_features], DType::F32))
    }

    /// A layer with the given weight `[in, out]` and bias `[out]`.
    pub fn from_tensors(w: Tensor, b: Tensor) -> Dense {
        assert!(
            w.ndim() == 2 && b.shape() == [w.shape()[1]],
            "Dense: weight {:?} and bias {:?} do not fit ([in, out] and [out])",
            w.shape(),
            b.shape()
        );
        Dense {
            w: Param::new(w),
            b: Param::new(b),
        }
    }

    pub fn weight(&self) -> &Param {
        &self.w
    }

    pub fn bias(&self) -> &Param {
        &self.b
    }
}

impl Layer for Dense {
    fn forward(&self, x: &Tensor, _: Mode) -> Tensor {
        let fan_in = self.w.shape()[0];
        assert!(
            x.ndim() >= 1 && x.shape()[x.ndim() - 1] == fan_in,
            "{}: expected input [..., {fan_in}], got {:?}",
            self.name(),
            x.shape()
        );
        &x.matmul(&self.w.tensor()) + &self.b.tensor()
    }

    fn params(&self) -> Vec<(String, Param)> {
        vec![("w".into(), self.w.clone()), ("b".into(), self.b.clone())]
    }

    fn name(&self) -> String {
        let s = self.w.shape();
        format!("Dense({}, {})", s[0], s[1])
    }
}
