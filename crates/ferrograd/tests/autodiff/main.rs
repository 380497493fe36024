//! Automatic differentiation: the engine, the seeds' walkthroughs, custom gradients, the
//! element-wise table, einsum, attention and integer tensors.

#[path = "../common/mod.rs"]
mod common;

mod autograd_engine;
mod autograd_seed;
mod custom_gradient;
mod primitives;
mod einsum;
mod attention;
mod integer_dtype;
