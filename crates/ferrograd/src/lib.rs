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

pub mod autograd;
pub mod error;
pub mod kernels;
mod ops;
pub mod tensor;

pub use error::{Error, Result};

/// The names most programs need.
pub mod prelude {
    pub use crate::autograd::{
        custom_gradient, custom_gradient_n, custom_gradient_named, grad_with_graph,
    };
    pub use crate::autograd::{
        detect_anomaly, enable_grad, grad, gradcheck, gradgradcheck, no_grad, GradcheckOptions,
        Gradients, Param,
    };
    pub use crate::tensor::{manual_seed, DType, Tensor};
    pub use crate::{Error, Result};
}
