//! Reverse-mode automatic differentiation on a dynamic graph: the backward engine, its result
//! (`Gradients`), custom gradients, gradient checking and anomaly detection.
//!
//! An op records a graph node only when one of its inputs is tracked and recording is enabled;
//! the node and the recording are the tensor's own (`tensor::record`), so this layer sits above
//! the ops it runs: the engine sums contributions with `+` and rules are tensor ops.

mod anomaly;
mod checkpoint;
mod custom;
mod engine;
pub mod gradcheck;
mod gradients;
pub(crate) mod ids;
mod param;

/// Recording scopes and graph statistics, defined with the tensor's record.
pub use crate::tensor::{enable_grad, is_grad_enabled, live_nodes, no_grad, set_grad_enabled};
pub(crate) use anomaly::anomaly_reported;
pub use anomaly::detect_anomaly;
pub use checkpoint::checkpoint;
pub use custom::{
    custom_gradient, custom_gradient_n, custom_gradient_named, custom_gradient_with_variables,
};
pub use engine::{grad, grad_with_graph, try_grad, try_grad_reached};
pub use gradcheck::{gradcheck, gradgradcheck, GradcheckOptions};
pub use gradients::{global_norm, Gradients};
pub use param::{with_substitutes, Param, Substitutes};
