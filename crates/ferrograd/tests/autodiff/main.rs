//! Automatic differentiation: the engine, the seeds' walkthroughs, custom gradients, the
//! element-wise table, einsum, attention and integer tensors.

#[path = "../common/mod.rs"]
mod common;

mod attention;
mod autograd_engine;
mod autograd_seed;
mod custom_gradient;
mod einsum;
mod forward;
mod func;
mod integer_dtype;
mod primitives;
mod profiler;
