//! ferrograd: n-dimensional tensors on fast CPU kernels with reverse-mode automatic
//! differentiation (higher-order gradients, custom rules, gradient checking, anomaly detection).
//!
//! ```
//! use ferrograd::prelude::*;
//!
//! let w = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).requires_grad();
//! let loss = (&w * &w).sum();
//! let grads = loss.backward();
//! assert_eq!(grads.get(&w).unwrap().to_vec::<f32>(), vec![2.0, 4.0]);
//! ```

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]
// Functions stay short enough to read at once (the threshold is in clippy.toml).
#![deny(clippy::too_many_lines)]

/// A public unit struct with `new()` (layers and losses without settings).
macro_rules! unit_struct {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $name;

        impl $name {
            /// The only value: this type has no settings.
            pub fn new() -> Self {
                $name
            }
        }
    };
}

pub mod autograd;
pub mod compiled;
pub mod data;
#[cfg(feature = "mpi")]
pub mod distributed;
pub mod error;
pub mod func;
pub mod graph;
pub mod init;
pub mod io;
mod kernels;
pub mod loss;
pub mod metrics;
pub mod model;
pub mod nn;
#[cfg(feature = "onnx")]
pub mod onnx;
mod ops;
pub mod optim;
pub mod profiler;
pub mod tensor;

pub use compiled::compile;
pub use error::{Error, Result};
pub use kernels::Isa;
pub use ops::attention::Attention;
pub use ops::binary::{Binary, BinaryKind};
pub use ops::conv::ConvOpts;
pub use ops::recurrent::RecurrentWeights;
pub use ops::unary::{Unary, UnaryDomain};
pub use ops::{Axis, Indices};
/// The `rand` this crate is built with, so that generators passed to it need no second copy.
pub use rand;

/// Caps the threads that each op spreads its work over at `n` (at least 1), as PyTorch's
/// `torch.set_num_threads`, at any time; the thread pool's size (`RAYON_NUM_THREADS`, or the
/// cores) is the most there can be. Two kinds of work keep counts of their own: the f64
/// products and the f32 products of the portable path, which `matrixmultiply` runs on its
/// threads (`MATMUL_NUM_THREADS`, read once), and a kernel called from inside a pool
/// thread, which rayon spreads over the pool (with `n = 1`, it runs on one thread).
///
/// ```
/// ferrograd::set_num_threads(1);
/// assert_eq!(ferrograd::num_threads(), 1);
/// ```
pub fn set_num_threads(n: usize) {
    kernels::parallel::set_thread_limit(n);
}

/// The threads each op spreads its work over (PyTorch's `torch.get_num_threads`).
pub fn num_threads() -> usize {
    kernels::parallel::threads()
}

#[doc = include_str!("../docs/from_pytorch.md")]
pub mod from_pytorch {}

/// The README's Rust examples, compiled and run by `cargo test --doc`.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeExamples;

/// The Rust examples of the guides in `docs/`, compiled and run by `cargo test --doc`.
#[doc = include_str!("../../../docs/modules.md")]
#[doc = include_str!("../../../docs/examples.md")]
#[doc = include_str!("../../../docs/func.md")]
#[doc = include_str!("../../../docs/compile.md")]
#[cfg(doctest)]
pub struct GuideExamples;

/// The ONNX guide's Rust examples (feature `onnx`).
#[doc = include_str!("../../../docs/onnx.md")]
#[cfg(all(doctest, feature = "onnx"))]
pub struct OnnxGuideExamples;

/// The names most programs need.
pub mod prelude {
    pub use crate::autograd::{
        checkpoint, custom_gradient, custom_gradient_n, custom_gradient_named,
        custom_gradient_with_variables, grad_with_graph, try_grad, try_grad_reached,
    };
    pub use crate::autograd::{
        detect_anomaly, enable_grad, grad, gradcheck, gradgradcheck, no_grad, GradcheckOptions,
        Gradients, Param,
    };
    pub use crate::data::{one_hot, BatchIterator, Batches, Dataset, TensorDataset};
    pub use crate::graph::{Feed, GradientDescentOptimizer, Graph, GraphOptimizer, Node, Session};
    pub use crate::io::{load_checkpoint, save_checkpoint};
    pub use crate::loss::{
        CrossEntropy, CrossEntropyLoss, Huber, HuberLoss, Loss, MAELoss, MSELoss, Mae, MaeLoss,
        Mse, MseLoss, NLLLoss, Nll, NllLoss, PerElement, Reduction, SigmoidCrossEntropy,
        SigmoidCrossEntropyLoss, SoftmaxCrossEntropy, SoftmaxCrossEntropyLoss,
    };
    pub use crate::metrics::accuracy;
    pub use crate::model::{Model, Net};
    /// The contract's spellings of the same layers.
    pub use crate::nn::{
        AvgPool2D, Conv2D, ConvTranspose2D, LeakyReLU, MaxPool2D, ReLU, GRU, LSTM, RNN,
    };
    pub use crate::nn::{
        AvgPool2d, BatchNorm1d, BatchNorm2d, Conv2d, ConvTranspose2d, Dense, Dropout, Dropout2d,
        Elu, Embedding, Flatten, Gelu, GeluTanh, Gru, Identity, Layer, LayerNorm, LeakyRelu, Lstm,
        MaxPool2d, Mode, Module, MultiheadAttention, RMSNorm, Relu, Reshape, Rnn, Sigmoid, Silu,
        Softmax, Softplus, Tanh, TransformerEncoderLayer,
    };
    pub use crate::optim::{
        Adagrad, Adam, AdamW, ConstantLr, CosineAnnealing, ExponentialLr, LinearWarmup, Momentum,
        MomentumSetting, MultiStepLr, Optimizer, RAdam, RMSprop, RmsProp, Schedule, Sgd, StepLr,
        WarmupThen, SGD,
    };
    pub use crate::tensor::{manual_seed, with_default_rng, DType, Tensor};
    pub use crate::{Attention, ConvOpts};
    pub use crate::{Error, Result};
    /// `#[derive(Module)]` (the macro shares the trait's name, as serde's derives do).
    pub use ferrograd_derive::Module;
}
