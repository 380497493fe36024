//! ONNX export (feature `onnx`): a model traced once ([`crate::graph::trace`]) and written as
//! an ONNX model that any ONNX runtime runs, with the parameters as initializers under their
//! `state_dict` names and the first axis of every input free (a dynamic batch size).
//!
//! Each graph op's ONNX form is in `onnx/ops.rs`, one arm per op in a match without a
//! wildcard: an op added to the graph's table does not compile until it has an ONNX form or is
//! declared to have none. An export that meets ops with none names them all at once and writes
//! nothing.
//!
//! ```
//! use ferrograd::prelude::*;
//!
//! use ferrograd::onnx::{to_bytes, ExportOptions};
//!
//! let net = Net::new(vec![
//!     Box::new(Dense::new(4, 8)),
//!     Box::new(ReLU::new()),
//!     Box::new(Dense::new(8, 2)),
//! ]);
//! let x = Tensor::zeros(&[1, 4], DType::F32);
//! let bytes = to_bytes(&net, &[("input", &x)], &ExportOptions::default())?;
//! assert!(bytes.len() > 4 * (4 * 8 + 8 + 8 * 2 + 2));
//! # Ok::<(), ferrograd::Error>(())
//! ```

mod emit;
mod import;
mod interpret;
mod ops;
mod recurrent;

use std::path::Path;

use prost::Message;

pub use import::{from_bytes, load, OnnxModel};

use crate::error::{Error, Result};
use crate::graph::{trace, Trace};
use crate::nn::{Layer, Mode};
use crate::tensor::Tensor;

/// The messages of the official `onnx.proto`, compiled by prost.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/onnx.rs"));
}

/// How to write the model.
#[derive(Clone, Debug)]
pub struct ExportOptions {
    /// The ONNX opset: 17 or 18 (the default, 17, is the first with `LayerNormalization`).
    pub opset: i64,
    /// Whether axis 0 of every input and output is free (named `batch`), as PyTorch's
    /// `dynamic_axes={name: {0: "batch"}}`.
    pub dynamic_batch: bool,
    /// The outputs' names (`output`, `output1`, … where not given).
    pub output_names: Vec<String>,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            opset: 17,
            dynamic_batch: true,
            output_names: Vec::new(),
        }
    }
}

/// Writes `model`, traced on `inputs` (named) in eval mode, as an ONNX model at `path`
/// (replaced whole: a failed export leaves an existing file as it was).
pub fn export(
    model: &dyn Layer,
    inputs: &[(&str, &Tensor)],
    path: impl AsRef<Path>,
    opts: &ExportOptions,
) -> Result<()> {
    let bytes = to_bytes(model, inputs, opts)?;
    crate::io::write_atomic(path.as_ref(), &bytes)
}

/// [`export`]'s model as bytes.
pub fn to_bytes(
    model: &dyn Layer,
    inputs: &[(&str, &Tensor)],
    opts: &ExportOptions,
) -> Result<Vec<u8>> {
    if inputs.len() != 1 {
        return Err(Error::Graph(format!(
            "onnx export: a layer takes one input, got {}",
            inputs.len()
        )));
    }
    let forward = |xs: &[Tensor]| vec![model.forward(&xs[0], Mode::Eval)];
    let traced = trace(inputs, &model.state_params(), forward)?;
    let bytes = bytes_of(&traced, opts)?;
    if opts.dynamic_batch {
        let values: Vec<&Tensor> = inputs.iter().map(|(_, t)| *t).collect();
        check_free_batch(&bytes, &values, forward)?;
    }
    Ok(bytes)
}

/// Checks that the model in `bytes`, run (by [`OnnxModel`]) on `inputs` with one more row,
/// gives what `run` gives eagerly: an exported model whose shapes were fixed to the traced
/// batch size (a broadcast to it, a reshape that names it) is refused instead of written with
/// a batch axis that only looks free.
pub fn check_free_batch(
    bytes: &[u8],
    inputs: &[&Tensor],
    run: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> Result<()> {
    let grown: Vec<Tensor> = inputs
        .iter()
        .map(|t| match t.shape().first() {
            Some(&n) if n > 0 => Tensor::cat(&[*t, &t.narrow(0, 0, 1)], 0),
            _ => (*t).clone(),
        })
        .collect();
    let fixed = |why: String| {
        Error::Graph(format!(
            "onnx export: the model's shapes depend on the batch size ({why}); export it \
             without a free batch axis (dynamic_batch false, or no dynamic_axes in Python)"
        ))
    };
    // A model that cannot take one more row fixes its batch size itself.
    let eager = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        crate::tensor::no_grad(|| run(&grown))
    }));
    let want = eager.map_err(|_| fixed("it refuses one more row".into()))?;
    let refs: Vec<&Tensor> = grown.iter().collect();
    let got = from_bytes(bytes)?
        .run(&refs)
        .map_err(|e| fixed(e.to_string()))?;
    if got.len() != want.len() {
        return Err(fixed(format!(
            "it gives {} outputs at one more row",
            want.len()
        )));
    }
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        if g.shape() != w.shape() || !g.allclose(w, 1e-4, 1e-4) {
            return Err(fixed(format!("output {k} differs at one more row")));
        }
    }
    Ok(())
}

/// A traced function as the bytes of an ONNX model.
pub fn bytes_of(traced: &Trace, opts: &ExportOptions) -> Result<Vec<u8>> {
    Ok(model_of(traced, opts)?.encode_to_vec())
}

/// A traced function as an ONNX model.
pub fn model_of(traced: &Trace, opts: &ExportOptions) -> Result<proto::ModelProto> {
    if !(17..=18).contains(&opts.opset) {
        return Err(Error::Graph(format!(
            "onnx export: opset {} is not supported (17 or 18)",
            opts.opset
        )));
    }
    let graph = emit::graph_of(traced, opts)?;
    Ok(proto::ModelProto {
        ir_version: Some(8),
        producer_name: Some("ferrograd".into()),
        producer_version: Some(env!("CARGO_PKG_VERSION").into()),
        opset_import: vec![proto::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(opts.opset),
        }],
        graph: Some(graph),
        ..Default::default()
    })
}
