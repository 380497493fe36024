//! Layers: the `Layer` trait, dense and normalisation layers, dropout, embeddings, shape
//! layers and activations. Layers get their gradients from autodiff.

mod activation;
mod dense;
mod dropout;
mod embedding;
mod norm;
mod shape;
mod stream;

pub use activation::{Elu, Gelu, LeakyReLU, ReLU, Sigmoid, Softmax, Softplus, Tanh};
pub use dense::Dense;
pub use dropout::Dropout;
pub use embedding::Embedding;
pub use norm::{BatchNorm1d, LayerNorm};
pub use shape::{Flatten, Reshape};
pub use stream::{RngStream, StreamState};

use crate::autograd::Param;
use crate::tensor::Tensor;

/// Training (dropout active, batch statistics) or evaluation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Train,
    Eval,
}

/// A building block of a network.
pub trait Layer: Send + Sync {
    /// The layer's output for `x` in `mode`.
    fn forward(&self, x: &Tensor, mode: Mode) -> Tensor;

    /// Trainable parameters by name (`"w"`, `"b"`, ...); optimizers update them in place.
    fn params(&self) -> Vec<(String, Param)> {
        Vec::new()
    }

    /// State that is saved but not trained (BatchNorm's running statistics).
    fn buffers(&self) -> Vec<(String, Param)> {
        Vec::new()
    }

    /// Random streams the layer draws from in training (Dropout's masks), by name, so that a
    /// checkpoint can resume them exactly.
    fn rng_streams(&self) -> Vec<(String, RngStream)> {
        Vec::new()
    }

    /// A short name for messages and summaries.
    fn name(&self) -> String;
}
