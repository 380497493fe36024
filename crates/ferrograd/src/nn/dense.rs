//! Fully connected layer: `x @ weightᵀ + bias`, PyTorch's `nn.Linear` (same names, same
//! `[out, in]` weight layout; the product reads the transposed view in place).

use super::module::tie_slot;
use super::{expect_input, Layer, Mode, Module};
use crate::autograd::Param;
use crate::error::{Error, Result};
use crate::init;
use crate::tensor::{with_default_rng, DType, Tensor};

/// A fully connected layer: `y = x @ weightᵀ + bias`, with `weight` `[out, in]` and `bias`
/// `[out]` (or none, PyTorch's `bias=False`), over the last axis of an input of any rank.
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
    bias: Option<Param>,
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

    /// `in_features → out_features` initialised as PyTorch's `nn.Linear` is: weight and bias
    /// both from U(±1/√in), f32, from the generator seeded by `manual_seed`. (`new` keeps
    /// tinynn's Xavier weights and zero bias, which the seed's MNIST figures come from.)
    ///
    /// ```
    /// use ferrograd::prelude::*;
    ///
    /// let layer = Dense::linear(400, 300);
    /// let bound = 1.0 / 400f32.sqrt();
    /// let b = layer.bias().unwrap().tensor().to_vec::<f32>();
    /// assert!(b.iter().all(|v| v.abs() <= bound) && b.iter().any(|&v| v != 0.0));
    /// ```
    pub fn linear(in_features: usize, out_features: usize) -> Dense {
        let bound = 1.0 / (in_features.max(1) as f64).sqrt();
        let (weight, bias) = with_default_rng(|rng| {
            let w = init::uniform(&[out_features, in_features], -bound, bound, DType::F32, rng);
            (
                w,
                init::uniform(&[out_features], -bound, bound, DType::F32, rng),
            )
        });
        Dense::from_tensors(weight, bias)
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
            bias: Some(Param::new(bias)),
        }
    }

    /// The same layer without its bias (PyTorch's `nn.Linear(.., bias=False)`).
    pub fn without_bias(self) -> Dense {
        Dense { bias: None, ..self }
    }

    /// A layer without bias whose weight is `weight` itself, `[out, in]`, shared with the
    /// module it came from (weight tying: a language model's output layer reads the token
    /// embedding's table). The parameter is one: `Net`, `Vec` and `#[derive(Module)]`
    /// containers list (and save) it once, under the name met first, and an optimizer steps it
    /// once with the sum of both uses' gradients (it steps a parameter listed twice once).
    ///
    /// ```
    /// use ferrograd::prelude::*;
    ///
    /// #[derive(Module)]
    /// struct Tied {
    ///     tok: Embedding,
    ///     head: Dense,
    /// }
    /// let tok = Embedding::new(10, 4);
    /// let head = Dense::tied(tok.weight());
    /// let m = Tied { tok, head };
    /// let names: Vec<String> = m.params().into_iter().map(|(n, _)| n).collect();
    /// assert_eq!(names, ["tok.weight"]);
    /// ```
    pub fn tied(weight: &Param) -> Dense {
        assert!(
            weight.shape().len() == 2,
            "Dense::tied: weight {:?} is not a matrix [out, in]",
            weight.shape()
        );
        Dense {
            weight: weight.clone(),
            bias: None,
        }
    }

    /// The weight, `[out, in]`.
    pub fn weight(&self) -> &Param {
        &self.weight
    }

    /// The bias, `[out]`, unless the layer has none.
    pub fn bias(&self) -> Option<&Param> {
        self.bias.as_ref()
    }
}

impl Module for Dense {
    fn params(&self) -> Vec<(String, Param)> {
        let mut out = vec![("weight".to_string(), self.weight.clone())];
        out.extend(self.bias.iter().map(|b| ("bias".to_string(), b.clone())));
        out
    }

    fn tie(&mut self, name: &str, to: &Param) -> Result<()> {
        let layer = self.name();
        let outputs = |w: &Param| w.shape()[0];
        match (name, &mut self.bias) {
            ("weight", Some(bias)) if bias.shape()[0] != outputs(to) => Err(Error::Shape(format!(
                "{layer}: a weight {:?} gives {} outputs, the bias has {}",
                to.shape(),
                outputs(to),
                bias.shape()[0]
            ))),
            ("weight", _) => tie_slot(&layer, name, &mut self.weight, to),
            ("bias", Some(_)) if to.shape() != [outputs(&self.weight)] => {
                Err(Error::Shape(format!(
                    "{layer}: a bias {:?} does not fit the weight {:?}",
                    to.shape(),
                    self.weight.shape()
                )))
            }
            ("bias", Some(bias)) => tie_slot(&layer, name, bias, to),
            _ => Err(Error::Shape(format!(
                "{layer}: no parameter {name:?} to share"
            ))),
        }
    }

    fn name(&self) -> String {
        let s = self.weight.shape();
        let bias = if self.bias.is_some() {
            ""
        } else {
            ", bias=False"
        };
        format!("Dense({}, {}{bias})", s[1], s[0])
    }
}

impl Layer for Dense {
    fn forward(&self, x: &Tensor, _: Mode) -> Tensor {
        let fan_in = self.weight.shape()[1];
        let fits = x.ndim() >= 1 && x.shape()[x.ndim() - 1] == fan_in;
        expect_input(&self.name(), fits, &format!("[..., {fan_in}]"), x);
        let bias = self.bias.as_ref().map(Param::tensor);
        x.linear(&self.weight.tensor(), bias.as_ref())
    }
}
