//! Fully connected layer: `x @ weightᵀ + bias`, PyTorch's `nn.Linear` (same names, same
//! `[out, in]` weight layout; the product reads the transposed view in place).

use super::{expect_input, named, Layer, Mode, Module};
use crate::autograd::Param;
use crate::init;
use crate::tensor::{with_default_rng, DType, Tensor};

/// A fully connected layer: `y = x @ weightᵀ + bias`, with `weight` `[out, in]` and `bias`
/// `[out]`, over the last axis of an input of any rank.
///
/// ```
/// use ferrograd::prelude::*;
///
/// let layer = Dense::new(784, 400);
/// let y = Layer::forward(&layer, &Tensor::zeros(&[32, 784], DType::F32), Mode::Eval);
/// assert_eq!(y.shape(), &[32, 400]);
/// let names: Vec<String> = layer.params().into_iter().map(|(name, _)| name).collect();
/// assert_eq!(names, ["weight", "bias"]);
/// assert_eq!(layer.weight().shape(), vec![400, 784]);
/// ```
pub struct Dense {
    weight: Param,
    bias: Param,
}

impl Dense {
    /// `in_features → out_features` (PyTorch's `nn.Linear`), f32, Xavier-uniform weights and
    /// a zero bias (PyTorch draws both from U(±1/√in) instead), from the generator seeded by
    /// `manual_seed`.
    pub fn new(in_features: usize, out_features: usize) -> Dense {
        // Drawn in [in, out] order, then stored transposed: a seed gives the same weights as
        // it did when the layer kept that layout.
        let w = with_default_rng(|rng| {
            init::xavier_uniform(&[in_features, out_features], DType::F32, rng)
        });
        let weight = Tensor::from_vec(w.t().to_vec::<f32>(), &[out_features, in_features]);
        Dense::from_tensors(weight, Tensor::zeros(&[out_features], DType::F32))
    }

    /// A layer with the given weight `[out, in]` and bias `[out]` (PyTorch's layout).
    pub fn from_tensors(weight: Tensor, bias: Tensor) -> Dense {
        assert!(
            weight.ndim() == 2 && bias.shape() == [weight.shape()[0]],
            "Dense: weight {:?} and bias {:?} do not fit ([out, in] and [out])",
            weight.shape(),
            bias.shape()
        );
        Dense {
            weight: Param::new(weight),
            bias: Param::new(bias),
        }
    }

    /// The weight, `[out, in]`.
    pub fn weight(&self) -> &Param {
        &self.weight
    }

    /// The bias, `[out]`.
    pub fn bias(&self) -> &Param {
        &self.bias
    }
}

impl Module for Dense {
    fn params(&self) -> Vec<(String, Param)> {
        named(&[("weight", &self.weight), ("bias", &self.bias)])
    }

    fn name(&self) -> String {
        let s = self.weight.shape();
        format!("Dense({}, {})", s[1], s[0])
    }
}

impl Layer for Dense {
    fn forward(&self, x: &Tensor, _: Mode) -> Tensor {
        let fan_in = self.weight.shape()[1];
        let fits = x.ndim() >= 1 && x.shape()[x.ndim() - 1] == fan_in;
        expect_input(&self.name(), fits, &format!("[..., {fan_in}]"), x);
        &x.matmul(&self.weight.tensor().t()) + &self.bias.tensor()
    }
}
