//! A traced graph written as an ONNX graph: inputs, initializers, the nodes each op becomes
//! (`ops.rs`), and the outputs.

use std::collections::BTreeSet;

use super::proto::{
    self, tensor_shape_proto::dimension::Value as Dim, tensor_shape_proto::Dimension, type_proto,
    AttributeProto, GraphProto, NodeProto, TensorProto, TensorShapeProto, TypeProto,
    ValueInfoProto,
};
use super::ExportOptions;
use crate::error::{Error, Result};
use crate::graph::{NodeData, Op, Trace};
use crate::tensor::{DType, Tensor};

/// The graph being written: the nodes so far, and the ONNX value names of each graph node's
/// outputs.
pub(super) struct Emitter<'a> {
    pub(super) nodes: &'a [NodeData],
    /// Which nodes the outputs need (the others are not written).
    pub(super) needed: &'a [bool],
    pub(super) values: Vec<Vec<String>>,
    pub(super) onnx: Vec<NodeProto>,
    pub(super) initializers: Vec<TensorProto>,
    pub(super) opset: i64,
    fresh: usize,
}

impl Emitter<'_> {
    /// A value name not used before.
    pub(super) fn fresh(&mut self, hint: &str) -> String {
        self.fresh += 1;
        format!("/{hint}_{}", self.fresh)
    }

    /// One ONNX node of one output; its output's name.
    pub(super) fn node(
        &mut self,
        op_type: &str,
        inputs: &[&str],
        attrs: Vec<AttributeProto>,
    ) -> String {
        self.node_n(op_type, inputs, attrs, 1).remove(0)
    }

    /// One ONNX node of `n` outputs; their names.
    pub(super) fn node_n(
        &mut self,
        op_type: &str,
        inputs: &[&str],
        attrs: Vec<AttributeProto>,
        n: usize,
    ) -> Vec<String> {
        let outputs: Vec<String> = (0..n).map(|_| self.fresh(op_type)).collect();
        self.onnx.push(NodeProto {
            op_type: Some(op_type.into()),
            name: Some(format!("/{op_type}_{}", self.onnx.len())),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.clone(),
            attribute: attrs,
            ..Default::default()
        });
        outputs
    }

    /// A constant as an initializer; its name.
    pub(super) fn constant(&mut self, t: &Tensor) -> String {
        let name = self.fresh("const");
        self.initializers.push(tensor_proto(&name, t));
        name
    }

    /// A constant 1-d int64 tensor (axes, shapes, indices).
    pub(super) fn ints(&mut self, values: &[i64]) -> String {
        self.constant(&Tensor::from_vec(values.to_vec(), &[values.len()]))
    }

    /// A constant 0-d tensor of `dtype`.
    pub(super) fn scalar(&mut self, value: f64, dtype: DType) -> String {
        self.constant(&Tensor::scalar(value).to_dtype(dtype))
    }

    /// The known shape of graph node `i`'s output 0.
    pub(super) fn shape(&self, i: usize) -> Vec<usize> {
        self.nodes[i]
            .shape
            .as_ref()
            .map(|s| s.iter().map(|d| d.unwrap_or(0)).collect())
            .unwrap_or_default()
    }

    /// The dtype of graph node `i`'s output 0.
    pub(super) fn dtype(&self, i: usize) -> DType {
        self.nodes[i].dtype.unwrap_or(DType::F32)
    }
}

/// An integer attribute.
pub(super) fn int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(proto::attribute_proto::AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}

/// A list-of-integers attribute.
pub(super) fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(proto::attribute_proto::AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    }
}

/// A float attribute.
pub(super) fn float(name: &str, v: f64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(proto::attribute_proto::AttributeType::Float as i32),
        f: Some(v as f32),
        ..Default::default()
    }
}

/// A string attribute.
pub(super) fn string(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(proto::attribute_proto::AttributeType::String as i32),
        s: Some(v.as_bytes().to_vec()),
        ..Default::default()
    }
}

/// ONNX's code for a dtype.
pub(super) fn elem_type(d: DType) -> i32 {
    use proto::tensor_proto::DataType;
    (match d {
        DType::F32 => DataType::Float,
        DType::F64 => DataType::Double,
        DType::I64 => DataType::Int64,
    }) as i32
}

/// A tensor's values as an initializer, little-endian raw data.
fn tensor_proto(name: &str, t: &Tensor) -> TensorProto {
    let raw: Vec<u8> = match t.dtype() {
        DType::F64 => t
            .to_vec::<f64>()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::I64 => t
            .to_vec::<i64>()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::F32 => t
            .to_vec::<f32>()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
    };
    TensorProto {
        name: Some(name.into()),
        dims: t.shape().iter().map(|&d| d as i64).collect(),
        data_type: Some(elem_type(t.dtype())),
        raw_data: Some(raw),
        ..Default::default()
    }
}

/// An input's or output's declared type: its dtype and shape, axis 0 named `batch` when free.
fn value_info(name: &str, dtype: DType, shape: &[usize], dynamic_batch: bool) -> ValueInfoProto {
    let dim = |(axis, &d): (usize, &usize)| Dimension {
        value: Some(match axis == 0 && dynamic_batch {
            true => Dim::DimParam("batch".into()),
            false => Dim::DimValue(d as i64),
        }),
        ..Default::default()
    };
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem_type(dtype)),
                shape: Some(TensorShapeProto {
                    dim: shape.iter().enumerate().map(dim).collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The nodes that the outputs need.
fn needed(nodes: &[NodeData], outputs: &[usize]) -> Vec<bool> {
    let mut need = vec![false; nodes.len()];
    let mut stack = outputs.to_vec();
    while let Some(i) = stack.pop() {
        if !std::mem::replace(&mut need[i], true) {
            stack.extend(&nodes[i].inputs);
        }
    }
    need
}

/// The ONNX graph of a trace.
pub(super) fn graph_of(traced: &Trace, opts: &ExportOptions) -> Result<GraphProto> {
    let nodes = traced.graph.nodes().clone();
    let out_ix: Vec<usize> = traced.outputs.iter().map(|n| n.index()).collect();
    let need = needed(&nodes, &out_ix);
    let mut e = Emitter {
        nodes: &nodes,
        needed: &need,
        values: vec![Vec::new(); nodes.len()],
        onnx: Vec::new(),
        initializers: Vec::new(),
        opset: opts.opset,
        fresh: 0,
    };
    let mut inputs = Vec::new();
    let mut unsupported = BTreeSet::new();
    for (i, n) in nodes.iter().enumerate().filter(|(i, _)| need[*i]) {
        e.values[i] = match &n.op {
            Op::Placeholder { name, .. } => {
                inputs.push(value_info(
                    name,
                    e.dtype(i),
                    &e.shape(i),
                    opts.dynamic_batch,
                ));
                vec![name.clone()]
            }
            op => e.values_of(i, op).unwrap_or_else(|| {
                unsupported.insert(op.name());
                vec![String::new(); op.outputs()]
            }),
        };
    }
    if !unsupported.is_empty() {
        let names: Vec<String> = unsupported.into_iter().collect();
        return Err(Error::Graph(format!(
            "onnx export: these ops have no ONNX form: {}",
            names.join(", ")
        )));
    }
    let outputs = out_ix
        .iter()
        .enumerate()
        .map(|(k, &i)| {
            let name = opts
                .output_names
                .get(k)
                .cloned()
                .unwrap_or_else(|| match k {
                    0 => "output".to_string(),
                    _ => format!("output{k}"),
                });
            e.node_named("Identity", &[&e.values[i][0].clone()], &name);
            value_info(&name, e.dtype(i), &e.shape(i), opts.dynamic_batch)
        })
        .collect();
    // A constant that its op left out (a recurrent layer's zero state) is not written.
    let used: BTreeSet<&String> = e.onnx.iter().flat_map(|n| &n.input).collect();
    let initializer = e
        .initializers
        .iter()
        .filter(|t| t.name.as_ref().is_some_and(|n| used.contains(n)))
        .cloned()
        .collect();
    Ok(GraphProto {
        name: Some("ferrograd".into()),
        node: e.onnx,
        initializer,
        input: inputs,
        output: outputs,
        ..Default::default()
    })
}

impl Emitter<'_> {
    /// The ONNX names of graph node `i`'s outputs, writing what it needs; `None` when its op
    /// has no ONNX form.
    fn values_of(&mut self, i: usize, op: &Op) -> Option<Vec<String>> {
        let n = &self.nodes[i];
        Some(match op {
            Op::Variable { name, param } => {
                self.initializers.push(tensor_proto(name, &param.tensor()));
                vec![name.clone()]
            }
            Op::Constant(t) => vec![self.constant(t)],
            Op::Output { index } => vec![self.values[n.inputs[0]][*index].clone()],
            op => {
                let ins: Vec<String> = n
                    .inputs
                    .iter()
                    .map(|&j| self.values[j][0].clone())
                    .collect();
                let ins: Vec<&str> = ins.iter().map(String::as_str).collect();
                super::ops::emit(self, i, op, &ins)?
            }
        })
    }

    /// An `Identity` node whose output has a chosen name (a graph output's).
    fn node_named(&mut self, op_type: &str, inputs: &[&str], output: &str) {
        self.onnx.push(NodeProto {
            op_type: Some(op_type.into()),
            name: Some(format!("/{op_type}_{}", self.onnx.len())),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec![output.to_string()],
            ..Default::default()
        });
    }
}
