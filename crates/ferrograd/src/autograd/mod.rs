//! Reverse-mode automatic differentiation on a dynamic graph.
//!
//! An op records a [`Node`] only when one of its inputs is tracked and recording is enabled.
//! The node keeps the op's inputs, its output's data and the op's derivative rule (a VJP written
//! with tensor ops, so that running it with recording on yields a differentiable gradient).

mod anomaly;
mod custom;
mod engine;
pub mod gradcheck;
mod gradients;
mod mode;
mod node;
mod param;

pub use anomaly::detect_anomaly;
pub use custom::{custom_gradient, custom_gradient_n, custom_gradient_named};
pub use engine::{grad, grad_with_graph};
pub use gradcheck::{gradcheck, gradgradcheck, GradcheckOptions};
pub use gradients::Gradients;
pub use mode::{enable_grad, is_grad_enabled, no_grad};
pub use node::live_nodes;
pub(crate) use node::{record, record_nondiff, record_with_out, BackwardCtx, Grads, Node};
pub use param::Param;
