//! ONNX import: a model file as a callable, trainable ferrograd model. Each run evaluates the
//! ONNX nodes in order with ferrograd's eager ops (`onnx/interpret.rs`), so every shape is
//! known when an op runs (a free batch axis, `Reshape`'s 0 and -1, `Shape` chains) and the
//! float initializers, held as parameters, train through the eager engine. A graph of one
//! input size comes from tracing a run ([`crate::graph::trace`]).

use std::collections::{BTreeSet, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use prost::Message;

use super::interpret::{evaluate, SUPPORTED};
use super::proto::{tensor_proto::DataType, ModelProto, NodeProto, TensorProto};
use crate::autograd::Param;
use crate::error::{Error, Result};
use crate::nn::{Layer, Mode, Module};
use crate::tensor::{checked_numel, Tensor};

/// An imported ONNX model: call [`OnnxModel::run`] (or use it as a [`Layer`]); its parameters
/// are the float initializers, under their names.
pub struct OnnxModel {
    nodes: Vec<NodeProto>,
    params: Vec<(String, Param)>,
    constants: HashMap<String, Tensor>,
    inputs: Vec<String>,
    outputs: Vec<String>,
    opset: i64,
}

/// Reads an ONNX model file. Every operator the model uses that ferrograd cannot run is
/// named, with its nodes, in one error.
pub fn load(path: impl AsRef<Path>) -> Result<OnnxModel> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    from_bytes(&bytes)
}

fn format_error(what: String) -> Error {
    Error::Graph(format!("onnx import: {what}"))
}

/// [`load`] from the file's bytes.
pub fn from_bytes(bytes: &[u8]) -> Result<OnnxModel> {
    let model =
        ModelProto::decode(bytes).map_err(|e| format_error(format!("not an ONNX model: {e}")))?;
    let opset = model
        .opset_import
        .iter()
        .find(|o| o.domain.as_deref().unwrap_or("").is_empty())
        .and_then(|o| o.version)
        .unwrap_or(1);
    let graph = model
        .graph
        .ok_or_else(|| format_error("the model has no graph".into()))?;
    let mut unsupported: BTreeSet<String> = BTreeSet::new();
    for n in &graph.node {
        let op = n.op_type.as_deref().unwrap_or("");
        if !n.domain.as_deref().unwrap_or("").is_empty() || !SUPPORTED.contains(&op) {
            unsupported.insert(format!("{op} (node {:?})", n.name.as_deref().unwrap_or("")));
        }
    }
    if !unsupported.is_empty() {
        let list: Vec<String> = unsupported.into_iter().collect();
        return Err(format_error(format!(
            "operators ferrograd cannot run: {}",
            list.join(", ")
        )));
    }
    // Batch norm's running statistics (its inputs 3 and 4) are state, not weights.
    let statistics: BTreeSet<&str> = graph
        .node
        .iter()
        .filter(|n| n.op_type() == "BatchNormalization")
        .flat_map(|n| n.input.iter().skip(3).take(2).map(String::as_str))
        .collect();
    let (mut params, mut constants) = (Vec::new(), HashMap::new());
    for t in &graph.initializer {
        let name = t.name.clone().unwrap_or_default();
        let value = tensor_of(t)?;
        // Named float values train, PyTorch's folded weights (`onnx::Conv_…`) among them;
        // its single numbers (`onnx::Div_…`), ferrograd's own constants (`/…`, masks) and
        // integer values (shapes, axes, indices) do not.
        let exporters = name.starts_with('/') || (name.starts_with("onnx::") && value.numel() <= 1);
        if value.dtype().is_float() && !exporters && !statistics.contains(name.as_str()) {
            params.push((name, Param::new(value)));
        } else {
            constants.insert(name, value);
        }
    }
    let known: BTreeSet<&String> = graph
        .initializer
        .iter()
        .filter_map(|t| t.name.as_ref())
        .collect();
    let inputs = graph
        .input
        .iter()
        .filter_map(|v| v.name.clone())
        .filter(|n| !known.contains(n))
        .collect();
    Ok(OnnxModel {
        outputs: graph.output.iter().filter_map(|v| v.name.clone()).collect(),
        nodes: graph.node,
        params,
        constants,
        inputs,
        opset,
    })
}

/// An initializer's values, checked against its dims.
pub(super) fn tensor_of(t: &TensorProto) -> Result<Tensor> {
    let name = t.name.as_deref().unwrap_or("");
    let dims: Vec<usize> = t
        .dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format_error(format!("{name}: dimension {d}"))))
        .collect::<Result<_>>()?;
    let n = checked_numel(&dims)
        .ok_or_else(|| format_error(format!("{name}: {dims:?} is too large")))?;
    let raw = t.raw_data.as_deref();
    let wrong = |got: usize| format_error(format!("{name}: {got} values for shape {dims:?}"));
    let from_raw = |width: usize| -> Result<Vec<[u8; 8]>> {
        let raw = raw.unwrap_or(&[]);
        if raw.len() != n.saturating_mul(width) {
            return Err(wrong(raw.len() / width.max(1)));
        }
        Ok(raw
            .chunks_exact(width)
            .map(|c| {
                let mut b = [0u8; 8];
                b[..width].copy_from_slice(c);
                b
            })
            .collect())
    };
    let code = t.data_type.unwrap_or(0);
    let value = match DataType::try_from(code) {
        Ok(DataType::Float) => match raw {
            Some(_) => Tensor::try_from_vec(
                from_raw(4)?
                    .iter()
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
                &dims,
            ),
            None => Tensor::try_from_vec(t.float_data.clone(), &dims),
        },
        Ok(DataType::Double) => match raw {
            Some(_) => Tensor::try_from_vec(
                from_raw(8)?
                    .iter()
                    .map(|b| f64::from_le_bytes(*b))
                    .collect(),
                &dims,
            ),
            None => Tensor::try_from_vec(t.double_data.clone(), &dims),
        },
        Ok(DataType::Int64) => match raw {
            Some(_) => Tensor::try_from_vec(
                from_raw(8)?
                    .iter()
                    .map(|b| i64::from_le_bytes(*b))
                    .collect(),
                &dims,
            ),
            None => Tensor::try_from_vec(t.int64_data.clone(), &dims),
        },
        Ok(DataType::Int32 | DataType::Bool) => match raw {
            Some(_) => {
                let width = if code == DataType::Bool as i32 { 1 } else { 4 };
                let values = from_raw(width)?
                    .iter()
                    .map(|b| i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])))
                    .collect();
                Tensor::try_from_vec::<i64>(values, &dims)
            }
            None => {
                Tensor::try_from_vec(t.int32_data.iter().map(|&v| i64::from(v)).collect(), &dims)
            }
        },
        _ => {
            return Err(format_error(format!(
                "{name}: data type {code} is not supported"
            )))
        }
    };
    value.map_err(|_| wrong(n))
}

impl OnnxModel {
    /// The names of the inputs [`OnnxModel::run`] takes, in order.
    pub fn input_names(&self) -> &[String] {
        &self.inputs
    }

    /// The names of the outputs it gives, in order.
    pub fn output_names(&self) -> &[String] {
        &self.outputs
    }

    /// The model's outputs for `inputs` (one per input name, in order). An op that refuses
    /// its inputs ends the run with an error naming its node.
    pub fn run(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        if inputs.len() != self.inputs.len() {
            return Err(format_error(format!(
                "the model takes {} inputs ({:?}), got {}",
                self.inputs.len(),
                self.inputs,
                inputs.len()
            )));
        }
        let mut values: HashMap<&str, Tensor> = self
            .constants
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        values.extend(self.params.iter().map(|(k, p)| (k.as_str(), p.tensor())));
        values.extend(
            self.inputs
                .iter()
                .map(String::as_str)
                .zip(inputs.iter().map(|&t| t.clone())),
        );
        for node in &self.nodes {
            let ins: Vec<Option<Tensor>> = node
                .input
                .iter()
                .map(|name| match name.as_str() {
                    "" => Ok(None),
                    name => values.get(name).cloned().map(Some).ok_or_else(|| {
                        format_error(format!(
                            "node {:?} reads {name:?}, which nothing computed",
                            node.name()
                        ))
                    }),
                })
                .collect::<Result<_>>()?;
            let outs = catch_unwind(AssertUnwindSafe(|| evaluate(node, &ins, self.opset)))
                .unwrap_or_else(|p| Err(format_error(panic_text(&p))))
                .map_err(|e| {
                    format_error(format!("node {:?} ({}): {e}", node.name(), node.op_type()))
                })?;
            for (name, value) in node.output.iter().zip(outs) {
                values.insert(name.as_str(), value);
            }
        }
        self.outputs
            .iter()
            .map(|o| {
                values
                    .get(o.as_str())
                    .cloned()
                    .ok_or_else(|| format_error(format!("no node computes the output {o:?}")))
            })
            .collect()
    }
}

/// A caught panic's message.
fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "the op failed".into())
}

impl Module for OnnxModel {
    fn params(&self) -> Vec<(String, Param)> {
        self.params.clone()
    }

    fn name(&self) -> String {
        format!("OnnxModel({} nodes)", self.nodes.len())
    }
}

impl Layer for OnnxModel {
    /// The first output for the one input. Panics where [`OnnxModel::run`] gives an error.
    fn forward(&self, x: &Tensor, _: Mode) -> Tensor {
        match self.run(&[x]) {
            Ok(mut outs) => outs.remove(0),
            Err(e) => panic!("{e}"),
        }
    }
}
