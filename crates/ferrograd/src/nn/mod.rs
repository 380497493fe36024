//! Layers: the `Layer` trait, dense and normalisation layers, dropout, embeddings, shape
//! layers and activations. Layers get their gradients from autodiff.
//!
//! Type names treat acronyms as words, as Rust's naming conventions ask (`Relu`, `Lstm`,
//! `Conv2d`, `Mse`, `Sgd`); the spellings of DESIGN.md's contract, which tinynn and PyTorch
//! users know (`ReLU`, `LSTM`, `Conv2D`, ...), are aliases of the same types.

mod activation;
mod attention;
mod conv;
mod dense;
mod dropout;
mod embedding;
mod module;
mod norm;
mod recurrent;
mod shape;
mod stream;

pub use activation::{
    Elu, Gelu, GeluTanh, Identity, LeakyRelu, Relu, Sigmoid, Silu, Softmax, Softplus, Tanh,
};
pub use attention::{MultiheadAttention, RMSNorm, TransformerEncoderLayer};
pub use conv::{AvgPool2d, Conv2d, ConvLayer, ConvTranspose2d, MaxPool2d};
pub use dense::Dense;
pub use dropout::{Dropout, Dropout2d, DropoutOf};
pub use embedding::Embedding;
pub(crate) use module::indexed;
pub use module::{distinct, functional_call, prefixed, LoadReport, Module};
pub use norm::{BatchNorm1d, BatchNorm2d, BatchNormNd, LayerNorm};
pub use recurrent::{Gru, Lstm, Rnn};
pub use shape::{Flatten, Reshape};
pub use stream::{RngStream, StreamState};

/// The contract's spellings (DESIGN.md), kept working: aliases of the types above.
#[allow(clippy::upper_case_acronyms)]
mod contract_names {
    /// Alias of [`super::Relu`].
    pub type ReLU = super::Relu;
    /// Alias of [`super::LeakyRelu`].
    pub type LeakyReLU = super::LeakyRelu;
    /// Alias of [`super::Conv2d`].
    pub type Conv2D = super::Conv2d;
    /// Alias of [`super::ConvTranspose2d`].
    pub type ConvTranspose2D = super::ConvTranspose2d;
    /// Alias of [`super::MaxPool2d`].
    pub type MaxPool2D = super::MaxPool2d;
    /// Alias of [`super::AvgPool2d`].
    pub type AvgPool2D = super::AvgPool2d;
    /// Alias of [`super::Rnn`].
    pub type RNN = super::Rnn;
    /// Alias of [`super::Lstm`].
    pub type LSTM = super::Lstm;
    /// Alias of [`super::Gru`].
    pub type GRU = super::Gru;
}
pub use contract_names::*;

use crate::autograd::Param;
use crate::tensor::Tensor;

/// Panics naming the layer unless `fits`: "{layer}: expected input {expected}, got {shape}"
/// (wrong input rank or size is a programmer error, as a slice index out of range).
pub(crate) fn expect_input(layer: &str, fits: bool, expected: &str, x: &Tensor) {
    assert!(
        fits,
        "{layer}: expected input {expected}, got {:?}",
        x.shape()
    );
}

/// Parameters named as given, for [`Module::params`].
pub(crate) fn named(params: &[(&str, &Param)]) -> Vec<(String, Param)> {
    params
        .iter()
        .map(|&(n, p)| (n.to_string(), p.clone()))
        .collect()
}

/// Training (dropout active, batch statistics) or evaluation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Training: dropout is active and batch normalisation uses and updates batch statistics.
    Train,
    /// Evaluation: dropout passes its input through and batch normalisation uses its running
    /// statistics.
    Eval,
}

/// A module with a forward pass: the building block of a network.
///
/// Implement [`Module`] (its parameters, buffers and name) and this trait's `forward`. The mode
/// reaches every inner layer: containers pass it on.
pub trait Layer: Module {
    /// The layer's output for `x` in `mode`.
    fn forward(&self, x: &Tensor, mode: Mode) -> Tensor;
}

impl<L: Layer + ?Sized> Layer for Box<L> {
    fn forward(&self, x: &Tensor, mode: Mode) -> Tensor {
        (**self).forward(x, mode)
    }
}
