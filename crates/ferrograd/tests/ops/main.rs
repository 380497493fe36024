//! Tensor ops and the kernels under them, on every instruction-set path: values against
//! references, gradients in f64 to second order, views, hostile shapes, convolution and
//! recurrent layers. CI also runs this binary with debug assertions on, and
//! `scripts/test-kernel-paths.sh` runs it once per kernel path.

#[path = "../common/mod.rs"]
mod common;

mod conv;
mod gradcheck_ops;
mod hostile_shapes;
mod kernel_path;
mod layers_conv_rnn;
mod prop_views;
mod tensor_ops;
