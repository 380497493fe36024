//! Files and hostile input: IDX and safetensors reading and writing, fuzzed formats, and the
//! hardening cases.

#[path = "../common/mod.rs"]
mod common;

mod data_io;
mod fuzz_formats;
mod hardening;
#[cfg(feature = "onnx")]
mod onnx;
