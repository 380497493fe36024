//! ONNX operators run with ferrograd's eager ops, one function per family. Booleans are 0/1
//! tensors, as ferrograd's comparisons give them.

use super::proto::NodeProto;
use crate::error::{Error, Result};
use crate::ops::conv::ConvOpts;
use crate::tensor::{DType, Tensor};
use crate::RecurrentWeights;

/// Every operator [`evaluate`] runs.
#[rustfmt::skip]
pub(super) const SUPPORTED: &[&str] = &[
    // element-wise
    "Identity", "Dropout", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Abs", "Sign", "Floor",
    "Sin", "Cos", "Tanh", "Sigmoid", "Relu", "LeakyRelu", "Softplus", "Erf", "Gelu", "Clip",
    "Add", "Sub", "Mul", "Div", "Mod", "Pow", "Max", "Min", "Sum", "Equal", "Less",
    "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "Where", "Cast",
    // products, convolutions, pooling, normalisation
    "MatMul", "Gemm", "Einsum", "Conv", "ConvTranspose", "MaxPool", "AveragePool",
    "GlobalAveragePool", "BatchNormalization", "LayerNormalization", "Softmax", "LogSoftmax",
    // reductions and selections
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceLogSumExp", "ArgMax", "ArgMin",
    "TopK", "CumSum", "Trilu",
    // shapes
    "Shape", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Concat", "Slice",
    "Split", "Gather", "GatherElements", "ScatterElements", "Expand", "Tile", "Pad", "Resize", "ConstantOfShape",
    "Range", "Constant",
    // recurrent layers
    "LSTM", "GRU", "RNN",
];

/// The attributes of a node, read by name, and the model's opset.
struct Attrs<'a>(&'a NodeProto, i64);

impl Attrs<'_> {
    fn opset(&self) -> i64 {
        self.1
    }

    /// How many outputs the node names.
    fn outputs(&self) -> usize {
        self.0.output.len()
    }

    fn find(&self, name: &str) -> Option<&super::proto::AttributeProto> {
        self.0.attribute.iter().find(|a| a.name() == name)
    }

    fn int(&self, name: &str, default: i64) -> i64 {
        self.find(name).and_then(|a| a.i).unwrap_or(default)
    }

    fn float(&self, name: &str, default: f64) -> f64 {
        self.find(name).and_then(|a| a.f).map_or(default, f64::from)
    }

    fn ints(&self, name: &str) -> Option<Vec<i64>> {
        self.find(name).map(|a| a.ints.clone())
    }

    fn string(&self, name: &str, default: &str) -> String {
        self.find(name)
            .and_then(|a| a.s.as_ref())
            .map_or(default.to_string(), |s| {
                String::from_utf8_lossy(s).into_owned()
            })
    }
}

fn refuse(what: impl Into<String>) -> Error {
    Error::Graph(what.into())
}

/// Input `k`, which the operator needs.
fn need(ins: &[Option<Tensor>], k: usize) -> Result<&Tensor> {
    ins.get(k)
        .and_then(Option::as_ref)
        .ok_or_else(|| refuse(format!("input {k} is missing")))
}

/// A small integer tensor's values (axes, shapes, sizes).
fn int_values(t: &Tensor) -> Vec<i64> {
    t.to_vec::<f64>().iter().map(|&v| v as i64).collect()
}

/// An axis counted from the back when negative.
fn axis(a: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    let p = if a < 0 { a + r } else { a };
    usize::try_from(p)
        .ok()
        .filter(|&p| p < rank.max(1))
        .ok_or_else(|| refuse(format!("axis {a} for rank {rank}")))
}

/// The outputs of `node` for its inputs (`None` where an optional input is left out).
pub(super) fn evaluate(
    node: &NodeProto,
    ins: &[Option<Tensor>],
    opset: i64,
) -> Result<Vec<Tensor>> {
    let op = node.op_type();
    let a = Attrs(node, opset);
    if op == "Constant" {
        let value = a.find("value").and_then(|v| v.t.as_ref());
        let value = value.ok_or_else(|| refuse("Constant without a tensor value"))?;
        return Ok(vec![super::import::tensor_of(value)?]);
    }
    refuse_unread(op, &a, ins)?;
    if let Some(y) = elementwise(op, &a, ins)? {
        return Ok(vec![y]);
    }
    if let Some(y) = layers(op, &a, ins)? {
        return Ok(vec![y]);
    }
    if let Some(y) = reductions(op, &a, ins, opset)? {
        return Ok(y);
    }
    if let Some(y) = shapes(op, &a, ins)? {
        return Ok(y);
    }
    match op {
        "LSTM" | "GRU" | "RNN" => recurrent(op, &a, ins),
        _ => Err(refuse(format!("{op} is not supported"))),
    }
}

/// Refuses a node that sets an input or attribute the operators here do not read, rather than
/// run it differently.
fn refuse_unread(op: &str, a: &Attrs<'_>, ins: &[Option<Tensor>]) -> Result<()> {
    let set = |name: &str| a.find(name).is_some();
    let input = |k: usize| ins.get(k).is_some_and(Option::is_some);
    let unread = match op {
        "LSTM" if input(7) || set("clip") || a.int("input_forget", 0) != 0 => {
            "peepholes, clip or input_forget"
        }
        "GRU" | "RNN" if set("clip") => "clip",
        "ConvTranspose" if set("output_shape") => "output_shape",
        "ArgMax" | "ArgMin" if a.int("select_last_index", 0) != 0 => "select_last_index",
        "Reshape" if a.int("allowzero", 0) != 0 => "allowzero",
        "Pad" if input(3) => "axes",
        "Resize" if !resize_floors(a) => "coordinate_transformation_mode and nearest_mode",
        _ => return Ok(()),
    };
    Err(refuse(format!("{op}: {unread} is not supported")))
}

/// Whether `Resize`'s settings pick source pixel `floor(x / s)` for a whole factor `s`: the
/// asymmetric transform with `floor`, or the half-pixel ones with rounding (where
/// `(x + ½)/s − ½` is within ½ of it).
fn resize_floors(a: &Attrs<'_>) -> bool {
    let transform = a.string("coordinate_transformation_mode", "half_pixel");
    let rounding = a.string("nearest_mode", "round_prefer_floor");
    match transform.as_str() {
        "asymmetric" => rounding == "floor",
        "half_pixel" | "pytorch_half_pixel" => rounding.starts_with("round_prefer"),
        _ => false,
    }
}

/// Element-wise operators of one input.
fn elementwise(op: &str, a: &Attrs<'_>, ins: &[Option<Tensor>]) -> Result<Option<Tensor>> {
    let x = need(ins, 0)?;
    Ok(Some(match op {
        "Identity" | "Dropout" => x.clone(),
        "Neg" => x.neg(),
        "Exp" => x.exp(),
        "Log" => x.log(),
        "Sqrt" => x.sqrt(),
        "Reciprocal" => x.rdiv_scalar(1.0),
        "Abs" => x.abs(),
        "Sign" => x.sign(),
        "Floor" => x.floor(),
        "Sin" => x.sin(),
        "Cos" => x.cos(),
        "Tanh" => x.tanh(),
        "Sigmoid" => x.sigmoid(),
        "Relu" => x.relu(),
        "LeakyRelu" => x.leaky_relu(a.float("alpha", 0.01)),
        "Softplus" => x.softplus(),
        "Erf" => x.erf(),
        "Gelu" => match a.string("approximate", "none").as_str() {
            "tanh" => x.gelu_tanh(),
            _ => x.gelu(),
        },
        // Bounds are inputs from opset 11, attributes before.
        "Clip" if a.opset() < 11 => x.clamp(
            a.float("min", f64::NEG_INFINITY),
            a.float("max", f64::INFINITY),
        ),
        "Clip" => {
            let bound = |k: usize, d: f64| {
                ins.get(k)
                    .and_then(Option::as_ref)
                    .map_or(d, |t| t.to_vec::<f64>()[0])
            };
            x.clamp(bound(1, f64::NEG_INFINITY), bound(2, f64::INFINITY))
        }
        "Cast" => cast(x, a.int("to", 1))?,
        _ => return arithmetic(op, a, ins),
    }))
}

/// Element-wise operators of several inputs, with numpy broadcasting.
fn arithmetic(op: &str, a: &Attrs<'_>, ins: &[Option<Tensor>]) -> Result<Option<Tensor>> {
    let x = need(ins, 0)?;
    let int_pair = |f: fn(f64, f64) -> f64| -> Result<Tensor> {
        // Shape arithmetic on integers, exact for any size a tensor can have.
        let b = need(ins, 1)?;
        let y = f64_op(x, b, f);
        Ok(if x.dtype() == DType::I64 && b.dtype() == DType::I64 {
            y.to_dtype(DType::I64)
        } else {
            y
        })
    };
    Ok(Some(match op {
        "Add" | "Sub" | "Mul" | "Div" if x.dtype() == DType::I64 => int_pair(match op {
            "Add" => |p, q| p + q,
            "Sub" => |p, q| p - q,
            "Mul" => |p, q| p * q,
            _ => |p: f64, q: f64| (p / q).trunc(),
        })?,
        // The remainder of shape arithmetic: with the divisor's sign unless `fmod` (C's).
        "Mod" if a.int("fmod", 0) == 1 => int_pair(|p, q| p % q)?,
        "Mod" => int_pair(|p, q| p - q * (p / q).floor())?,
        "Add" => x + need(ins, 1)?,
        "Sub" => x - need(ins, 1)?,
        "Mul" => x * need(ins, 1)?,
        "Div" => x / need(ins, 1)?,
        "Pow" => {
            let p = need(ins, 1)?;
            match p.numel() {
                1 => x.powf(p.to_vec::<f64>()[0]),
                // Element by element, negative bases included (no derivative through it).
                _ => f64_op(x, p, f64::powf).to_dtype(x.dtype()),
            }
        }
        "Max" | "Min" | "Sum" => fold(op, ins)?,
        "Equal" => x.eq(need(ins, 1)?),
        "Less" => x.lt(need(ins, 1)?),
        "LessOrEqual" => x.le(need(ins, 1)?),
        "Greater" => x.gt(need(ins, 1)?),
        "GreaterOrEqual" => x.ge(need(ins, 1)?),
        "Not" => x.eq_scalar(0.0),
        "Where" => {
            let (t, f) = (need(ins, 1)?, need(ins, 2)?);
            // The condition in the branches' float type (f64 for integers), as a 0/1 mask.
            let float = if t.dtype().is_float() {
                t.dtype()
            } else {
                DType::F64
            };
            let x = &x.ne_scalar(0.0).to_dtype(float);
            match t.dtype() {
                // PyTorch's shape code selects integers: the selection is exact in f64.
                DType::I64 => {
                    let wide = |v: &Tensor| v.to_dtype(DType::F64);
                    x.where_cond(&wide(t), &wide(f)).to_dtype(DType::I64)
                }
                _ => x.where_cond(t, f),
            }
        }
        _ => return Ok(None),
    }))
}

/// `f` element by element in f64, broadcast.
fn f64_op(x: &Tensor, y: &Tensor, f: fn(f64, f64) -> f64) -> Tensor {
    let shape = crate::tensor::broadcast_shapes(x.shape(), y.shape())
        .map_or_else(|| x.shape().to_vec(), |s| s.to_vec());
    let (xs, ys) = (
        x.broadcast_to(&shape).to_vec::<f64>(),
        y.broadcast_to(&shape).to_vec::<f64>(),
    );
    Tensor::from_vec(xs.iter().zip(&ys).map(|(&p, &q)| f(p, q)).collect(), &shape)
}

/// The variadic `Max`, `Min` and `Sum`.
fn fold(op: &str, ins: &[Option<Tensor>]) -> Result<Tensor> {
    let mut acc = need(ins, 0)?.clone();
    for t in ins[1..].iter().flatten() {
        acc = match op {
            "Max" => acc.maximum(t),
            "Min" => acc.minimum(t),
            _ => &acc + t,
        };
    }
    Ok(acc)
}

/// `Cast` to an ONNX data type: floats as f32/f64, integers and booleans as i64.
fn cast(x: &Tensor, to: i64) -> Result<Tensor> {
    use super::proto::tensor_proto::DataType as D;
    Ok(match D::try_from(to as i32) {
        Ok(D::Float | D::Float16 | D::Bfloat16) => x.to_dtype(DType::F32),
        Ok(D::Double) => x.to_dtype(DType::F64),
        Ok(D::Bool) => x.ne_scalar(0.0).to_dtype(DType::I64),
        Ok(D::Int64 | D::Int32 | D::Int16 | D::Int8 | D::Uint8) => x.to_dtype(DType::I64),
        _ => return Err(refuse(format!("Cast to data type {to}"))),
    })
}

/// Products, convolutions, pooling and normalisation.
fn layers(op: &str, a: &Attrs<'_>, ins: &[Option<Tensor>]) -> Result<Option<Tensor>> {
    let x = need(ins, 0)?;
    let bias_of = |y: Tensor| match ins.get(2).and_then(Option::as_ref) {
        Some(b) => &y + &b.reshape(&[1, b.numel(), 1, 1]),
        None => y,
    };
    Ok(Some(match op {
        "MatMul" => x.try_matmul(need(ins, 1)?)?,
        "Gemm" => gemm(a, ins)?,
        "Einsum" => {
            let operands: Vec<&Tensor> = ins.iter().flatten().collect();
            Tensor::try_einsum(&a.string("equation", ""), &operands)?
        }
        "Conv" => bias_of(x.conv2d(need(ins, 1)?, &conv_opts(a, false)?)),
        "ConvTranspose" => bias_of(x.conv_transpose2d(need(ins, 1)?, &conv_opts(a, true)?)),
        "MaxPool" | "AveragePool" => pool(op, a, x)?,
        "GlobalAveragePool" => x.adaptive_avg_pool2d(1, 1),
        "BatchNormalization" => {
            let shape = |t: &Tensor| {
                t.reshape(&[&[1, t.numel()][..], &vec![1; x.ndim().saturating_sub(2)]].concat())
            };
            let (w, b, m, v) = (need(ins, 1)?, need(ins, 2)?, need(ins, 3)?, need(ins, 4)?);
            let xhat = &(x - &shape(m)) / &shape(v).add_scalar(a.float("epsilon", 1e-5)).sqrt();
            &(&xhat * &shape(w)) + &shape(b)
        }
        "LayerNormalization" => {
            if axis(a.int("axis", -1), x.ndim())? != x.ndim() - 1 {
                return Err(refuse("LayerNormalization over more than the last axis"));
            }
            let w = need(ins, 1)?;
            let zeros = Tensor::zeros(w.shape(), w.dtype());
            let b = ins.get(2).and_then(Option::as_ref).unwrap_or(&zeros);
            x.layer_norm(w, b, a.float("epsilon", 1e-5))
        }
        "Softmax" | "LogSoftmax" => softmax(op, a, x)?,
        _ => return Ok(None),
    }))
}

/// `Softmax` and `LogSoftmax`: over one axis from opset 13; before, over the input flattened to
/// two dimensions at `axis` (1 by default).
fn softmax(op: &str, a: &Attrs<'_>, x: &Tensor) -> Result<Tensor> {
    let f = |t: &Tensor, ax: usize| match op {
        "Softmax" => t.softmax(ax),
        _ => t.log_softmax(ax),
    };
    if a.opset() >= 13 {
        return Ok(f(x, axis(a.int("axis", -1), x.ndim())?));
    }
    let ax = axis(a.int("axis", 1), x.ndim())?;
    let rows: usize = x.shape()[..ax].iter().product();
    Ok(f(&x.reshape(&[rows, x.numel() / rows.max(1)]), 1).reshape(x.shape()))
}

/// `alpha · A' B' + beta · C`.
fn gemm(a: &Attrs<'_>, ins: &[Option<Tensor>]) -> Result<Tensor> {
    let (x, w) = (need(ins, 0)?, need(ins, 1)?);
    let x = if a.int("transA", 0) == 1 {
        x.t()
    } else {
        x.clone()
    };
    let c = ins.get(2).and_then(Option::as_ref);
    let (alpha, beta) = (a.float("alpha", 1.0), a.float("beta", 1.0));
    let y = match a.int("transB", 0) {
        1 if alpha == 1.0 && beta == 1.0 && c.is_none_or(|c| c.shape() == [w.shape()[0]]) => {
            x.try_linear(w, c)?
        }
        t => {
            let w = if t == 1 { w.t() } else { w.clone() };
            let y = x.try_matmul(&w)?.mul_scalar(alpha);
            match c {
                Some(c) => &y + &c.mul_scalar(beta),
                None => y,
            }
        }
    };
    Ok(y)
}

/// Two-axis pairs of an attribute (`[h, w]`), or `default`.
fn pair(a: &Attrs<'_>, name: &str, default: usize) -> Result<[usize; 2]> {
    match a.ints(name).as_deref() {
        None | Some([]) => Ok([default; 2]),
        Some(&[h, w]) if h >= 0 && w >= 0 => Ok([h as usize, w as usize]),
        Some(v) => Err(refuse(format!("{name} {v:?}: two-dimensional sizes only"))),
    }
}

/// The same padding at both ends of each axis: ferrograd's convolutions and pools pad so.
fn symmetric_pads(a: &Attrs<'_>) -> Result<[usize; 2]> {
    if a.string("auto_pad", "NOTSET") != "NOTSET" {
        return Err(refuse("auto_pad: explicit pads only"));
    }
    match a.ints("pads").as_deref() {
        None => Ok([0, 0]),
        Some(&[t, l, b, r]) if t == b && l == r && t >= 0 && l >= 0 => Ok([t as usize, l as usize]),
        Some(p) => Err(refuse(format!(
            "pads {p:?}: the same padding on both sides only"
        ))),
    }
}

fn conv_opts(a: &Attrs<'_>, transposed: bool) -> Result<ConvOpts> {
    let output_padding = if transposed {
        pair(a, "output_padding", 0)?
    } else {
        [0, 0]
    };
    Ok(ConvOpts {
        stride: pair(a, "strides", 1)?,
        padding: symmetric_pads(a)?,
        dilation: pair(a, "dilations", 1)?,
        groups: usize::try_from(a.int("group", 1)).map_err(|_| refuse("group"))?,
        output_padding,
    })
}

fn pool(op: &str, a: &Attrs<'_>, x: &Tensor) -> Result<Tensor> {
    let kernel = pair(a, "kernel_shape", 1)?;
    let stride = pair(a, "strides", 1)?;
    let pads = symmetric_pads(a)?;
    if a.int("ceil_mode", 0) != 0 || pair(a, "dilations", 1)? != [1, 1] {
        return Err(refuse("ceil_mode and dilated pooling are not supported"));
    }
    if op == "MaxPool" {
        return Ok(x.max_pool2d_hw(kernel, stride, pads));
    }
    if pads != [0, 0] && a.int("count_include_pad", 0) == 0 {
        return Err(refuse(
            "average pooling that leaves the padding out of the count",
        ));
    }
    Ok(x.avg_pool2d_hw(kernel, stride, pads))
}

/// The axes of a reduction: an attribute before opset 18 (13 for `ReduceSum`), an input since.
fn reduce_axes(
    op: &str,
    a: &Attrs<'_>,
    ins: &[Option<Tensor>],
    opset: i64,
    rank: usize,
) -> Result<Option<Vec<usize>>> {
    let listed = match (op == "ReduceSum" && opset >= 13) || opset >= 18 {
        true => ins.get(1).and_then(Option::as_ref).map(int_values),
        false => a.ints("axes"),
    };
    match listed {
        Some(v) if !v.is_empty() => Ok(Some(
            v.iter().map(|&d| axis(d, rank)).collect::<Result<_>>()?,
        )),
        _ if a.int("noop_with_empty_axes", 0) == 1 => Ok(Some(Vec::new())),
        _ => Ok(None),
    }
}

/// Reductions and selections.
fn reductions(
    op: &str,
    a: &Attrs<'_>,
    ins: &[Option<Tensor>],
    opset: i64,
) -> Result<Option<Vec<Tensor>>> {
    let x = need(ins, 0)?;
    let keep = a.int("keepdims", 1) == 1;
    let y = match op {
        "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceLogSumExp" => {
            let axes = reduce_axes(op, a, ins, opset, x.ndim())?
                .unwrap_or_else(|| (0..x.ndim()).collect());
            match op {
                _ if axes.is_empty() => x.clone(),
                "ReduceSum" => x.sum_axes(&axes, keep),
                "ReduceMean" => x.mean_axes(&axes, keep),
                "ReduceMax" => x.max_axes(&axes, keep),
                "ReduceMin" => x.min_axes(&axes, keep),
                _ => x.logsumexp(&axes, keep),
            }
        }
        "ArgMax" | "ArgMin" => {
            let ax = axis(a.int("axis", 0), x.ndim())?;
            let y = if op == "ArgMax" {
                x.argmax(ax)
            } else {
                x.argmin(ax)
            };
            if keep {
                y.unsqueeze(ax)
            } else {
                y
            }
        }
        "TopK" => {
            let k = int_values(need(ins, 1)?).first().copied().unwrap_or(0);
            let k = usize::try_from(k).map_err(|_| refuse(format!("K {k}")))?;
            let (v, i) = x.topk_along(
                k,
                axis(a.int("axis", -1), x.ndim())?,
                a.int("largest", 1) == 1,
            );
            return Ok(Some(vec![v, i]));
        }
        "CumSum" => {
            if a.int("exclusive", 0) != 0 || a.int("reverse", 0) != 0 {
                return Err(refuse("exclusive or reverse CumSum"));
            }
            x.cumsum(axis(
                int_values(need(ins, 1)?).first().copied().unwrap_or(0),
                x.ndim(),
            )?)
        }
        "Trilu" => {
            let k = ins
                .get(1)
                .and_then(Option::as_ref)
                .map_or(0, |k| int_values(k)[0]) as isize;
            if a.int("upper", 1) == 1 {
                x.triu(k)
            } else {
                x.tril(k)
            }
        }
        _ => return Ok(None),
    };
    Ok(Some(vec![y]))
}

/// Dims from an int64 tensor, `0` copying the input's and one `-1` taking the rest (ONNX's
/// `Reshape` with `allowzero` 0).
fn reshape_dims(x: &Tensor, spec: &[i64]) -> Result<Vec<usize>> {
    let mut dims = Vec::with_capacity(spec.len());
    let mut free = None;
    for (k, &d) in spec.iter().enumerate() {
        dims.push(match d {
            0 => *x
                .shape()
                .get(k)
                .ok_or_else(|| refuse("Reshape: 0 past the input's axes"))?,
            -1 if free.is_none() => {
                free = Some(k);
                1
            }
            d => usize::try_from(d).map_err(|_| refuse(format!("Reshape: dimension {d}")))?,
        });
    }
    if let Some(k) = free {
        let rest: usize = dims.iter().product();
        dims[k] = x.numel().checked_div(rest).unwrap_or(0);
    }
    Ok(dims)
}

/// Shape operators.
fn shapes(op: &str, a: &Attrs<'_>, ins: &[Option<Tensor>]) -> Result<Option<Vec<Tensor>>> {
    let x = need(ins, 0)?;
    let rank = x.ndim();
    let ints_in = |k: usize| need(ins, k).map(int_values);
    let y = match op {
        "Shape" => {
            // Opset 15's `start` and `end` select a range of the dims, as Python slices.
            let bound = |v: i64| (if v < 0 { v + rank as i64 } else { v }).clamp(0, rank as i64);
            let start = bound(a.int("start", 0)) as usize;
            let end = (bound(a.int("end", rank as i64)) as usize).max(start);
            let dims: Vec<i64> = x.shape()[start..end].iter().map(|&d| d as i64).collect();
            Tensor::from_vec(dims, &[end - start])
        }
        "Reshape" => x.try_reshape(&reshape_dims(x, &ints_in(1)?)?)?,
        "Flatten" => {
            let ax = if a.int("axis", 1) == rank as i64 {
                rank
            } else {
                axis(a.int("axis", 1), rank)?
            };
            let lead: usize = x.shape()[..ax].iter().product();
            x.reshape(&[lead, x.shape()[ax..].iter().product()])
        }
        "Transpose" => {
            let perm = match a.ints("perm") {
                Some(p) => p
                    .iter()
                    .map(|&d| axis(d, rank))
                    .collect::<Result<Vec<_>>>()?,
                None => (0..rank).rev().collect(),
            };
            x.permute(&perm)
        }
        "Squeeze" | "Unsqueeze" => squeeze(op, x, ins, a)?,
        "Concat" => {
            let parts: Vec<&Tensor> = ins.iter().flatten().collect();
            Tensor::try_cat(&parts, axis(a.int("axis", 0), rank)?)?
        }
        "Slice" => slice(x, ins)?,
        "Split" => return split(x, ins, a, a.outputs()).map(Some),
        "Gather" => gather(x, need(ins, 1)?, axis(a.int("axis", 0), rank)?)?,
        "ScatterElements" | "GatherElements" => by_elements(op, x, ins, a)?,
        "Expand" => {
            let want: Vec<usize> = ints_in(1)?.iter().map(|&d| d.max(0) as usize).collect();
            let shape = crate::tensor::broadcast_shapes(x.shape(), &want)
                .ok_or_else(|| refuse("Expand: shapes do not broadcast"))?
                .to_vec();
            x.try_broadcast_to(&shape)?
        }
        "Tile" => x.repeat(
            &ints_in(1)?
                .iter()
                .map(|&r| r.max(0) as usize)
                .collect::<Vec<_>>(),
        ),
        "Pad" => pad(x, ins, a)?,
        "Resize" => resize(x, ins, a)?,
        "ConstantOfShape" => {
            let dims: Vec<usize> = int_values(x).iter().map(|&d| d.max(0) as usize).collect();
            let fill = a
                .find("value")
                .and_then(|v| v.t.as_ref())
                .map(super::import::tensor_of)
                .transpose()?;
            let (v, d) = fill.map_or((0.0, DType::F32), |t| {
                (t.to_vec::<f64>().first().copied().unwrap_or(0.0), t.dtype())
            });
            Tensor::full(&dims, v, d)
        }
        "Range" => {
            let s = |k| need(ins, k).map(|t| t.to_vec::<f64>()[0]);
            Tensor::arange(s(0)?, s(1)?, s(2)?, x.dtype())
        }
        _ => return Ok(None),
    };
    Ok(Some(vec![y]))
}

/// `GatherElements`, and `ScatterElements` with `reduction="add"`: PyTorch's `gather` and
/// `scatter_add`.
fn by_elements(op: &str, x: &Tensor, ins: &[Option<Tensor>], a: &Attrs<'_>) -> Result<Tensor> {
    let ax = axis(a.int("axis", 0), x.ndim())?;
    let index = need(ins, 1)?.to_dtype(DType::I64);
    if op == "GatherElements" {
        return Ok(x.gather(ax, &index));
    }
    match a.string("reduction", "none").as_str() {
        "add" => Ok(x.scatter_add(ax, &index, need(ins, 2)?)),
        other => Err(refuse(format!("ScatterElements with reduction {other:?}"))),
    }
}

fn squeeze(op: &str, x: &Tensor, ins: &[Option<Tensor>], a: &Attrs<'_>) -> Result<Tensor> {
    let listed = ins
        .get(1)
        .and_then(Option::as_ref)
        .map(int_values)
        .or_else(|| a.ints("axes"));
    if op == "Squeeze" {
        let mut axes = match listed {
            Some(v) => v
                .iter()
                .map(|&d| axis(d, x.ndim()))
                .collect::<Result<Vec<_>>>()?,
            None => (0..x.ndim()).filter(|&d| x.shape()[d] == 1).collect(),
        };
        axes.sort_unstable();
        return Ok(axes.iter().rev().fold(x.clone(), |y, &d| y.squeeze(d)));
    }
    let listed = listed.ok_or_else(|| refuse("Unsqueeze without axes"))?;
    let rank = x.ndim() + listed.len();
    let mut axes = listed
        .iter()
        .map(|&d| axis(d, rank))
        .collect::<Result<Vec<_>>>()?;
    axes.sort_unstable();
    Ok(axes.iter().fold(x.clone(), |y, &d| y.unsqueeze(d)))
}

/// `Slice` with numpy's clamping; steps other than 1 gather their positions.
fn slice(x: &Tensor, ins: &[Option<Tensor>]) -> Result<Tensor> {
    let starts = int_values(need(ins, 1)?);
    let ends = int_values(need(ins, 2)?);
    let axes = ins
        .get(3)
        .and_then(Option::as_ref)
        .map_or_else(|| (0..starts.len() as i64).collect(), int_values);
    let steps = ins
        .get(4)
        .and_then(Option::as_ref)
        .map_or_else(|| vec![1; starts.len()], int_values);
    let mut y = x.clone();
    for (k, &start) in starts.iter().enumerate() {
        let ax = axis(
            *axes
                .get(k)
                .ok_or_else(|| refuse("Slice: fewer axes than starts"))?,
            x.ndim(),
        )?;
        let n = y.shape()[ax] as i64;
        let step = *steps.get(k).unwrap_or(&1);
        let clamp = |v: i64, lo: i64, hi: i64| (if v < 0 { v + n } else { v }).clamp(lo, hi);
        y = match step {
            0 => return Err(refuse("Slice: step 0")),
            1 => {
                let (s, e) = (clamp(start, 0, n), clamp(*ends.get(k).unwrap_or(&n), 0, n));
                y.narrow(ax, s as usize, (e - s).max(0) as usize)
            }
            _ => {
                // Backwards, ONNX clamps the start to [0, n-1] and the end to [-1, n-1].
                let (lo, hi) = if step > 0 { (0, n) } else { (-1, n - 1) };
                let (s, e) = (
                    clamp(start, lo.max(0), hi),
                    clamp(*ends.get(k).unwrap_or(&n), lo, hi),
                );
                let mut at = Vec::new();
                let mut p = s;
                while (step > 0 && p < e) || (step < 0 && p > e) {
                    at.push(p as usize);
                    p += step;
                }
                y.index_select(ax, &at)
            }
        };
    }
    Ok(y)
}

/// `Split` by the sizes given, or into `outputs` parts as equal as they can be.
fn split(x: &Tensor, ins: &[Option<Tensor>], a: &Attrs<'_>, outputs: usize) -> Result<Vec<Tensor>> {
    let ax = axis(a.int("axis", 0), x.ndim())?;
    let n = x.shape()[ax];
    let sizes: Vec<usize> = match ins
        .get(1)
        .and_then(Option::as_ref)
        .map(int_values)
        .or_else(|| a.ints("split"))
    {
        Some(v) => v.iter().map(|&s| s.max(0) as usize).collect(),
        None => {
            if a.find("num_outputs")
                .is_some_and(|v| v.i != Some(outputs as i64))
            {
                return Err(refuse("Split: num_outputs differs from the node's outputs"));
            }
            let each = n.div_ceil(outputs.max(1));
            (0..outputs)
                .map(|p| each.min(n.saturating_sub(p * each)))
                .collect()
        }
    };
    if sizes.iter().sum::<usize>() != n {
        return Err(refuse(format!(
            "Split: sizes {sizes:?} do not add up to {n}"
        )));
    }
    let mut start = 0;
    Ok(sizes
        .iter()
        .map(|&s| {
            let p = x.narrow(ax, start, s);
            start += s;
            p
        })
        .collect())
}

/// `Gather` of any index shape: the rows of the flattened indices, negative ones counted from
/// the back, in the indices' shape.
fn gather(x: &Tensor, idx: &Tensor, ax: usize) -> Result<Tensor> {
    let n = x.shape()[ax] as i64;
    let flat = idx.to_dtype(DType::I64).reshape(&[idx.numel()]);
    let flat = match int_values(&flat).iter().any(|&i| i < 0) {
        true => Tensor::from_vec(
            int_values(&flat)
                .iter()
                .map(|&i| if i < 0 { i + n } else { i })
                .collect::<Vec<i64>>(),
            &[idx.numel()],
        ),
        false => flat,
    };
    let rows = x.try_index_select(ax, &flat)?;
    let shape = [&x.shape()[..ax], idx.shape(), &x.shape()[ax + 1..]].concat();
    Ok(rows.reshape(&shape))
}

fn pad(x: &Tensor, ins: &[Option<Tensor>], a: &Attrs<'_>) -> Result<Tensor> {
    if a.string("mode", "constant") != "constant" {
        return Err(refuse("Pad: constant mode only"));
    }
    let p = int_values(need(ins, 1)?);
    let r = x.ndim();
    if p.len() != 2 * r || p.iter().any(|&v| v < 0) {
        return Err(refuse(format!("Pad: pads {p:?} for rank {r}")));
    }
    let value = ins
        .get(2)
        .and_then(Option::as_ref)
        .map_or(0.0, |v| v.to_vec::<f64>()[0]);
    let pads: Vec<(usize, usize)> = (0..r).map(|k| (p[k] as usize, p[k + r] as usize)).collect();
    Ok(x.pad(&pads, value))
}

/// Nearest-neighbour `Resize` by whole factors on the last two axes.
fn resize(x: &Tensor, ins: &[Option<Tensor>], a: &Attrs<'_>) -> Result<Tensor> {
    let s = x.shape();
    let factors: Vec<f64> = match (
        ins.get(2).and_then(Option::as_ref),
        ins.get(3).and_then(Option::as_ref),
    ) {
        (Some(sc), _) if sc.numel() > 0 => sc.to_vec::<f64>(),
        (_, Some(sz)) => int_values(sz)
            .iter()
            .zip(s)
            .map(|(&o, &i)| o as f64 / i.max(1) as f64)
            .collect(),
        _ => return Err(refuse("Resize without scales or sizes")),
    };
    let whole = |f: f64| (f >= 1.0 && f.fract() == 0.0).then_some(f as usize);
    match (a.string("mode", "nearest").as_str(), factors.as_slice()) {
        ("nearest", [1.0, 1.0, h, w]) => match (whole(*h), whole(*w)) {
            (Some(h), Some(w)) => Ok(x.upsample_nearest2d(h, w)),
            _ => Err(refuse("Resize: whole upscaling factors only")),
        },
        _ => Err(refuse("Resize: nearest mode on the last two axes only")),
    }
}

/// ONNX's `W`, `R` and `B` of one direction as PyTorch's `w_ih`, `w_hh`, `b_ih`, `b_hh`, the
/// gates put back in PyTorch's order: LSTM i o f c → i f g o, GRU z r h → r z n.
fn pytorch_weights(op: &str, ins: &[Option<Tensor>]) -> Result<[Tensor; 4]> {
    let (w, r) = (need(ins, 1)?.squeeze(0), need(ins, 2)?.squeeze(0));
    let hidden = r.shape()[1];
    let order: &[usize] = match op {
        "LSTM" => &[0, 2, 3, 1],
        "GRU" => &[1, 0, 2],
        _ => &[0],
    };
    let gates = order.len() * hidden;
    let back = |t: &Tensor| {
        let parts: Vec<Tensor> = order
            .iter()
            .map(|&k| t.narrow(0, k * hidden, hidden))
            .collect();
        Tensor::cat(&parts.iter().collect::<Vec<_>>(), 0)
    };
    let b = ins
        .get(3)
        .and_then(Option::as_ref)
        .map_or_else(|| Tensor::zeros(&[2 * gates], w.dtype()), |b| b.squeeze(0));
    Ok([
        back(&w),
        back(&r),
        back(&b.narrow(0, 0, gates)),
        back(&b.narrow(0, gates, gates)),
    ])
}

/// A recurrent layer: one direction, time-major (`layout` 0) or batch-first, PyTorch's gate
/// arithmetic (`GRU` with `linear_before_reset`).
fn recurrent(op: &str, a: &Attrs<'_>, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    if a.string("direction", "forward") != "forward"
        || a.find("activations").is_some()
        || ins.get(4).and_then(Option::as_ref).is_some()
    {
        return Err(refuse(format!(
            "{op}: one forward direction, default activations, no sequence_lens"
        )));
    }
    if op == "GRU" && a.int("linear_before_reset", 0) != 1 {
        return Err(refuse("GRU: linear_before_reset = 0 is not PyTorch's GRU"));
    }
    let batch_first = a.int("layout", 0) == 1;
    let x = need(ins, 0)?;
    let x = if batch_first {
        x.clone()
    } else {
        x.permute(&[1, 0, 2])
    };
    let [w_ih, w_hh, b_ih, b_hh] = pytorch_weights(op, ins)?;
    let hidden = w_hh.shape()[1];
    let weights = RecurrentWeights {
        w_ih: &w_ih,
        w_hh: &w_hh,
        b_ih: &b_ih,
        b_hh: &b_hh,
    };
    let n = x.shape()[0];
    let state = |k: usize| match ins.get(k).and_then(Option::as_ref) {
        Some(s) if batch_first => s.squeeze(1),
        Some(s) => s.squeeze(0),
        None => Tensor::zeros(&[n, hidden], x.dtype()),
    };
    let (out, states) = match op {
        "LSTM" => {
            let (o, h, c) = x.lstm(&state(5), &state(6), weights);
            (o, vec![h, c])
        }
        "GRU" => {
            let (o, h) = x.gru(&state(5), weights);
            (o, vec![h])
        }
        _ => {
            let (o, h) = x.rnn_tanh(&state(5), weights);
            (o, vec![h])
        }
    };
    let y = if batch_first {
        out.unsqueeze(2)
    } else {
        out.permute(&[1, 0, 2]).unsqueeze(1)
    };
    let states = states.iter().map(|s| {
        if batch_first {
            s.unsqueeze(1)
        } else {
            s.unsqueeze(0)
        }
    });
    Ok(std::iter::once(y).chain(states).collect())
}
