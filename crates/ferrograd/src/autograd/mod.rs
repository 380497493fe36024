//! Reverse-mode automatic differentiation on a dynamic graph.
//!
//! An op records a graph node only when one of its inputs is tracked and recording is enabled.
//! The node lives inside the op's output tensor (no allocation of its own) and keeps the op's
//! inputs and derivative rule (a VJP written with tensor ops, so that running it with recording
//! on yields a differentiable gradient). Inputs never point back to their consumers, so the
//! graph has no cycles: it is freed with the last tensor that reaches it.

mod anomaly;
mod custom;
mod engine;
pub mod gradcheck;
mod gradients;
mod mode;
mod node;
mod param;

pub(crate) use anomaly::anomaly_reported;
pub use anomaly::detect_anomaly;
pub use custom::{custom_gradient, custom_gradient_n, custom_gradient_named};
pub use engine::{grad, grad_with_graph};
pub use gradcheck::{gradcheck, gradgradcheck, GradcheckOptions};
pub use gradients::Gradients;
pub use mode::{enable_grad, is_grad_enabled, no_grad};
pub use node::live_nodes;
pub(crate) use node::{record, record_nondiff, BackwardCtx, Grads, Node};
pub use param::Param;
