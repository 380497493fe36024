//! Each graph op's ONNX form, in one place: the match in [`emit`] names every `Op` variant, so
//! an op added to the graph's table does not compile until it is given a form here (or
//! `None`, which an export reports by name). Semantics follow ferrograd's op, which follows
//! PyTorch's: where ONNX differs (gate orders, a mask's meaning, a layer's weight layout), the
//! arm converts.

use super::emit::{float, int, ints, string, Emitter};
use crate::graph::{Binary, Op, Unary};
use crate::tensor::{DType, Tensor};

/// Expands the table below into [`emit`]: one arm per graph op, without a wildcard.
macro_rules! onnx_forms {
    ($e:ident, $i:ident, $op:ident, $x:ident; $($pat:pat => $form:expr,)*) => {
        /// The ONNX nodes of graph node `i`, whose op is `op` and whose inputs have the ONNX
        /// names `x`; the names of its outputs, or `None` when the op has no ONNX form.
        pub(super) fn emit(
            $e: &mut Emitter<'_>,
            $i: usize,
            $op: &Op,
            $x: &[&str],
        ) -> Option<Vec<String>> {
            match $op {
                $($pat => $form,)*
            }
        }
    };
}

/// One output.
fn one(name: String) -> Option<Vec<String>> {
    Some(vec![name])
}

onnx_forms! { e, i, op, x;
        Op::Placeholder { .. } | Op::Variable { .. } | Op::Constant(_) | Op::Output { .. } => {
            unreachable!("the emitter writes the leaves and outputs itself")
        },
        // Training ops and derivatives: a model exports its forward.
        Op::Grad
        | Op::Minimize(_)
        | Op::SlopeScaled { .. }
        | Op::GeluBackward {}
        | Op::LayerNormBackward { .. }
        | Op::AttentionBackward { .. }
        | Op::MaxPool2dBackward { .. } => None,
        Op::Unary(u) => one(unary(e, i, *u, x[0])?),
        Op::Binary(b) => {
            let ins = &e.nodes[i].inputs;
            let dtypes = [e.dtype(ins[0]), e.dtype(ins[1])];
            one(binary(e, i, *b, x, dtypes))
        },
        Op::CompareScalar { comparison, value } => {
            let d = e.dtype(e.nodes[i].inputs[0]);
            let c = e.scalar(*value, d);
            one(binary(e, i, *comparison, &[x[0], &c], [d, d]))
        },
        Op::Matmul {} => one(e.node("MatMul", x, vec![])),
        Op::Linear {} => one(linear(e, i, x)),
        Op::ScaledDotProductAttention {
            causal,
            scale,
            dropout,
        } => match dropout {
            Some(_) => None,
            None => one(attention(e, i, x, *causal, *scale)),
        },
        Op::Einsum { spec } => one(e.node("Einsum", x, vec![string("equation", spec)])),
        Op::Sum {} => one(reduce(e, "ReduceSum", x[0], None, false)),
        Op::Mean {} => one(reduce(e, "ReduceMean", x[0], None, false)),
        Op::Max {} => one(reduce(e, "ReduceMax", x[0], None, false)),
        Op::Min {} => one(reduce(e, "ReduceMin", x[0], None, false)),
        Op::SumAxes { axes, keepdim } => one(reduce(e, "ReduceSum", x[0], Some(axes), *keepdim)),
        Op::MeanAxes { axes, keepdim } => one(reduce(e, "ReduceMean", x[0], Some(axes), *keepdim)),
        Op::MaxAxes { axes, keepdim } => one(reduce(e, "ReduceMax", x[0], Some(axes), *keepdim)),
        Op::MinAxes { axes, keepdim } => one(reduce(e, "ReduceMin", x[0], Some(axes), *keepdim)),
        Op::Logsumexp { axes, keepdim } => {
            one(reduce(e, "ReduceLogSumExp", x[0], Some(axes), *keepdim))
        },
        Op::VarAxes {
            axes,
            correction,
            keepdim,
        } => one(variance(e, i, x[0], axes, *correction, *keepdim)),
        Op::StdAxes {
            axes,
            correction,
            keepdim,
        } => {
            let var = variance(e, i, x[0], axes, *correction, *keepdim);
            one(e.node("Sqrt", &[&var], vec![]))
        },
        Op::Cumsum { axis } => {
            let a = e.constant(&Tensor::scalar(*axis as i64));
            one(e.node("CumSum", &[x[0], &a], vec![]))
        },
        Op::Cumprod { .. } => None,
        Op::SumTo { shape } => one(sum_to(e, i, x[0], shape)),
        Op::Reshape { shape } => one(reshape(e, i, x[0], shape)),
        Op::Permute { perm } => one(transpose(e, x[0], perm)),
        Op::BroadcastTo { shape } => one(expand(e, i, x[0], shape)),
        Op::Softmax { axis } => one(e.node("Softmax", x, vec![int("axis", *axis as i64)])),
        Op::LogSoftmax { axis } => one(e.node("LogSoftmax", x, vec![int("axis", *axis as i64)])),
        Op::Conv2d { opts } => one(conv(e, "Conv", x, opts, opts.padding)),
        Op::ConvTranspose2d { opts } => one(conv(e, "ConvTranspose", x, opts, opts.padding)),
        Op::Conv2dSame { opts } => {
            let k = e.shape(e.nodes[i].inputs[1]);
            let half = |axis: usize| opts.dilation[axis] * (k[2 + axis] - 1) / 2;
            same_conv(e, x, opts, [half(0), half(1)], &k)
        },
        Op::Conv2dWeight { .. } => None,
        Op::MaxPool2d {
            kernel,
            stride,
            padding,
        } => max_pool(e, i, x[0], [*kernel, *stride, *padding]),
        Op::AvgPool2d {
            kernel,
            stride,
            padding,
        } => one(pool(e, "AveragePool", x[0], *kernel, *stride, *padding)),
        Op::AdaptiveAvgPool2d { h, w } => adaptive_avg_pool(e, i, x[0], [*h, *w]),
        Op::UpsampleNearest2d { h, w } => one(upsample(e, x[0], [*h, *w])),
        Op::Cat { axis } => {
            let parts = in_own_dtype(e, i, x);
            let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
            one(e.node("Concat", &parts, vec![int("axis", *axis as i64)]))
        },
        Op::Narrow { axis, start, len } => one(slice(
            e,
            x[0],
            *axis,
            *start as i64,
            (*start + *len) as i64,
            1,
        )),
        Op::FlattenFrom { start } => one(match start {
            1 => e.node("Flatten", x, vec![int("axis", 1)]),
            _ => {
                let shape: Vec<i64> = std::iter::repeat_n(0, *start).chain([-1]).collect();
                let s = e.ints(&shape);
                e.node("Reshape", &[x[0], &s], vec![])
            }
        }),
        Op::Squeeze { axis } => {
            let a = e.ints(&[*axis as i64]);
            one(e.node("Squeeze", &[x[0], &a], vec![]))
        },
        Op::Unsqueeze { axis } => {
            let a = e.ints(&[*axis as i64]);
            one(e.node("Unsqueeze", &[x[0], &a], vec![]))
        },
        Op::Pad { pads, value } => one(pad(e, i, x[0], pads, *value)),
        Op::IndexSelect { axis, indices } => {
            let ix: Vec<i64> = indices.iter().map(|&v| v as i64).collect();
            let ix = e.ints(&ix);
            one(e.node("Gather", &[x[0], &ix], vec![int("axis", *axis as i64)]))
        },
        Op::IndexSelectBy { axis } => one(e.node("Gather", x, vec![int("axis", *axis as i64)])),
        Op::IndexAdd { .. } => None,
        Op::Gather { axis } => {
            let index = as_dtype(e, e.nodes[i].inputs[1], x[1], DType::I64);
            one(e.node("GatherElements", &[x[0], &index], vec![int("axis", *axis as i64)]))
        },
        Op::ScatterAdd { axis } => {
            let index = as_dtype(e, e.nodes[i].inputs[1], x[1], DType::I64);
            let attrs = vec![int("axis", *axis as i64), string("reduction", "add")];
            one(e.node("ScatterElements", &[x[0], &index, x[2]], attrs))
        },
        Op::WhereCond {} => {
            let cond = to_bool(e, x[0]);
            let (d, ins) = (e.dtype(i), e.nodes[i].inputs.clone());
            let (t, f) = (as_dtype(e, ins[1], x[1], d), as_dtype(e, ins[2], x[2], d));
            one(e.node("Where", &[&cond, &t, &f], vec![]))
        },
        Op::MaskedFill { value } => {
            let cond = to_bool(e, x[1]);
            let v = e.scalar(*value, e.dtype(i));
            one(e.node("Where", &[&cond, &v, x[0]], vec![]))
        },
        Op::Tril { k } | Op::Triu { k } => {
            let kk = e.constant(&Tensor::scalar(*k as i64));
            let upper = i64::from(matches!(op, Op::Triu { .. }));
            one(e.node("Trilu", &[x[0], &kk], vec![int("upper", upper)]))
        },
        Op::GeluTanh {} => one(gelu_tanh(e, i, x[0])),
        Op::LayerNorm { eps } => one(e.node(
            "LayerNormalization",
            x,
            vec![int("axis", -1), float("epsilon", *eps)],
        )),
        Op::RmsNorm { eps } => one(rms_norm(e, i, x, *eps)),
        Op::Rope { .. } => None,
        Op::Flip { axes } => one(axes.iter().fold(x[0].to_string(), |acc, &a| {
            slice(e, &acc, a, -1, i64::MIN, -1)
        })),
        Op::Roll { shift, axis } => one(roll(e, i, x[0], *shift, *axis)),
        Op::Repeat { reps } => one(repeat(e, i, x[0], reps)),
        Op::GruCell {} | Op::LstmCell {} => None,
        Op::TopK { k, axis, largest } => {
            let kk = e.ints(&[*k as i64]);
            let attrs = vec![
                int("axis", *axis as i64),
                int("largest", i64::from(*largest)),
                int("sorted", 1),
            ];
            Some(e.node_n("TopK", &[x[0], &kk], attrs, 2))
        },
        Op::BatchNorm { .. } => None,
        Op::Lstm {} => Some(super::recurrent::lstm(e, i, x)),
        Op::Gru {} => Some(super::recurrent::gru(e, i, x)),
        Op::RnnTanh {} => Some(super::recurrent::rnn(e, i, x)),
        Op::StopGradient {} => one(e.node("Identity", x, vec![])),
        Op::ToDtype { dtype } => one(cast(e, x[0], *dtype)),
        Op::Argmax { axis } => one(e.node(
            "ArgMax",
            x,
            vec![int("axis", *axis as i64), int("keepdims", 0)],
        )),
        Op::Argmin { axis } => one(e.node(
            "ArgMin",
            x,
            vec![int("axis", *axis as i64), int("keepdims", 0)],
        )),
}

/// Value `x` of graph node `j` in `dtype`: itself, or cast.
fn as_dtype(e: &mut Emitter<'_>, j: usize, x: &str, dtype: DType) -> String {
    match e.dtype(j) == dtype {
        true => x.to_string(),
        false => cast(e, x, dtype),
    }
}

/// Every input of graph node `i` in the node's own dtype (ONNX joins only equal types).
fn in_own_dtype(e: &mut Emitter<'_>, i: usize, x: &[&str]) -> Vec<String> {
    let (d, ins) = (e.dtype(i), e.nodes[i].inputs.clone());
    ins.iter()
        .zip(x)
        .map(|(&j, v)| as_dtype(e, j, v, d))
        .collect()
}

/// A `Cast` to `dtype`.
fn cast(e: &mut Emitter<'_>, x: &str, dtype: DType) -> String {
    e.node(
        "Cast",
        &[x],
        vec![int("to", super::emit::elem_type(dtype) as i64)],
    )
}

/// Non-zero as true.
fn to_bool(e: &mut Emitter<'_>, x: &str) -> String {
    let bool_type = super::proto::tensor_proto::DataType::Bool as i64;
    e.node("Cast", &[x], vec![int("to", bool_type)])
}

/// An element-wise primitive of one input.
fn unary(e: &mut Emitter<'_>, i: usize, u: Unary, x: &str) -> Option<String> {
    let d = e.dtype(i);
    let with = |e: &mut Emitter<'_>, op: &str, c: f64, swap: bool| {
        let c = e.scalar(c, d);
        match swap {
            false => e.node(op, &[x, &c], vec![]),
            true => e.node(op, &[&c, x], vec![]),
        }
    };
    Some(match u {
        Unary::Neg => e.node("Neg", &[x], vec![]),
        Unary::Exp => e.node("Exp", &[x], vec![]),
        Unary::Expm1 => {
            let ex = e.node("Exp", &[x], vec![]);
            let one = e.scalar(1.0, d);
            e.node("Sub", &[&ex, &one], vec![])
        }
        Unary::Log => e.node("Log", &[x], vec![]),
        Unary::Log1p => {
            let p = with(e, "Add", 1.0, false);
            e.node("Log", &[&p], vec![])
        }
        Unary::Sqrt => e.node("Sqrt", &[x], vec![]),
        Unary::Powf(p) => with(e, "Pow", p, false),
        Unary::Square => e.node("Mul", &[x, x], vec![]),
        Unary::Abs => e.node("Abs", &[x], vec![]),
        Unary::Sign => e.node("Sign", &[x], vec![]),
        Unary::Floor => e.node("Floor", &[x], vec![]),
        Unary::Sin => e.node("Sin", &[x], vec![]),
        Unary::Cos => e.node("Cos", &[x], vec![]),
        Unary::Tanh => e.node("Tanh", &[x], vec![]),
        Unary::Sigmoid => e.node("Sigmoid", &[x], vec![]),
        Unary::Relu => e.node("Relu", &[x], vec![]),
        Unary::LeakyRelu(slope) => e.node("LeakyRelu", &[x], vec![float("alpha", slope)]),
        Unary::Softplus => e.node("Softplus", &[x], vec![]),
        Unary::Gelu => {
            // x · Φ(x) = x/2 · (1 + erf(x/√2)), PyTorch's exact GELU.
            let scaled = with(e, "Mul", std::f64::consts::FRAC_1_SQRT_2, false);
            let erf = e.node("Erf", &[&scaled], vec![]);
            let one = e.scalar(1.0, d);
            let plus = e.node("Add", &[&erf, &one], vec![]);
            let half = with(e, "Mul", 0.5, false);
            e.node("Mul", &[&half, &plus], vec![])
        }
        Unary::Erf => e.node("Erf", &[x], vec![]),
        Unary::Clamp(lo, hi) => {
            let (lo, hi) = (e.scalar(lo, d), e.scalar(hi, d));
            e.node("Clip", &[x, &lo, &hi], vec![])
        }
        Unary::AddScalar(s) => with(e, "Add", s, false),
        Unary::MulScalar(s) => with(e, "Mul", s, false),
        Unary::DivScalar(s) => with(e, "Div", s, false),
        Unary::RsubScalar(s) => with(e, "Sub", s, true),
        Unary::RdivScalar(s) => with(e, "Div", s, true),
    })
}

/// An element-wise primitive of two inputs, each first cast to the result's dtype as
/// ferrograd promotes them; comparisons give 0/1 in that dtype, as ferrograd's do.
fn binary(e: &mut Emitter<'_>, i: usize, b: Binary, x: &[&str], dtypes: [DType; 2]) -> String {
    let common = dtypes[0].promote(dtypes[1]);
    let operand = |e: &mut Emitter<'_>, k: usize| match dtypes[k] == common {
        true => x[k].to_string(),
        false => cast(e, x[k], common),
    };
    let (a, c) = (operand(e, 0), operand(e, 1));
    let arithmetic = |op: &str| Some(op.to_string());
    let op = match b {
        Binary::Add => arithmetic("Add"),
        Binary::Sub => arithmetic("Sub"),
        Binary::Mul => arithmetic("Mul"),
        Binary::Div => arithmetic("Div"),
        Binary::Maximum => arithmetic("Max"),
        Binary::Minimum => arithmetic("Min"),
        _ => None,
    };
    if let Some(op) = op {
        return e.node(&op, &[&a, &c], vec![]);
    }
    let test = match b {
        Binary::Ne => {
            let eq = e.node("Equal", &[&a, &c], vec![]);
            e.node("Not", &[&eq], vec![])
        }
        Binary::Eq => e.node("Equal", &[&a, &c], vec![]),
        Binary::Lt => e.node("Less", &[&a, &c], vec![]),
        Binary::Le => e.node("LessOrEqual", &[&a, &c], vec![]),
        Binary::Gt => e.node("Greater", &[&a, &c], vec![]),
        _ => e.node("GreaterOrEqual", &[&a, &c], vec![]),
    };
    cast(e, &test, e.dtype(i))
}

/// `x · wᵀ + b`: a `Gemm` for a matrix input, else a product with the transposed weight.
fn linear(e: &mut Emitter<'_>, i: usize, x: &[&str]) -> String {
    let rank = e.shape(e.nodes[i].inputs[0]).len();
    if rank == 2 {
        return e.node("Gemm", x, vec![int("transB", 1)]);
    }
    let wt = e.node("Transpose", &[x[1]], vec![ints("perm", &[1, 0])]);
    let y = e.node("MatMul", &[x[0], &wt], vec![]);
    match x.get(2) {
        Some(b) => e.node("Add", &[&y, b], vec![]),
        None => y,
    }
}

/// `softmax(q kᵀ · scale + mask) v`, with a causal mask as a constant of the traced sizes.
fn attention(
    e: &mut Emitter<'_>,
    i: usize,
    x: &[&str],
    causal: bool,
    scale: Option<f64>,
) -> String {
    let ins = e.nodes[i].inputs.clone();
    let (qs, ks) = (e.shape(ins[0]), e.shape(ins[1]));
    let d = e.dtype(i);
    let (l, s, dim) = (qs[qs.len() - 2], ks[ks.len() - 2], qs[qs.len() - 1]);
    let mut perm: Vec<usize> = (0..ks.len()).collect();
    perm.swap(ks.len() - 2, ks.len() - 1);
    let kt = transpose(e, x[1], &perm);
    let scores = e.node("MatMul", &[x[0], &kt], vec![]);
    let factor = scale.unwrap_or(if dim == 0 {
        1.0
    } else {
        1.0 / (dim as f64).sqrt()
    });
    let f = e.scalar(factor, d);
    let mut scores = e.node("Mul", &[&scores, &f], vec![]);
    if let Some(mask) = x.get(3) {
        scores = e.node("Add", &[&scores, mask], vec![]);
    }
    if causal {
        let hidden: Vec<f64> = (0..l * s)
            .map(|k| {
                if k % s > k / s {
                    f64::NEG_INFINITY
                } else {
                    0.0
                }
            })
            .collect();
        let m = e.constant(&Tensor::from_vec(hidden, &[l, s]).to_dtype(d));
        scores = e.node("Add", &[&scores, &m], vec![]);
    }
    let weights = e.node("Softmax", &[&scores], vec![int("axis", -1)]);
    e.node("MatMul", &[&weights, x[2]], vec![])
}

/// A reduction over `axes` (all when `None`), in the opset's form: axes are an input of
/// `ReduceSum` from opset 13 and of the others from 18, an attribute before.
fn reduce(
    e: &mut Emitter<'_>,
    op: &str,
    x: &str,
    axes: Option<&Vec<usize>>,
    keepdim: bool,
) -> String {
    if axes.is_some_and(|a| a.is_empty()) {
        return e.node("Identity", &[x], vec![]);
    }
    let keep = int("keepdims", i64::from(keepdim));
    let Some(axes) = axes else {
        return e.node(op, &[x], vec![keep]);
    };
    let axes: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
    if op == "ReduceSum" || e.opset >= 18 {
        let a = e.ints(&axes);
        e.node(op, &[x, &a], vec![keep])
    } else {
        e.node(op, &[x], vec![keep, ints("axes", &axes)])
    }
}

/// The variance over `axes` with `correction` (Bessel's for 1).
fn variance(
    e: &mut Emitter<'_>,
    i: usize,
    x: &str,
    axes: &Vec<usize>,
    correction: usize,
    keepdim: bool,
) -> String {
    let shape = e.shape(e.nodes[i].inputs[0]);
    let n: usize = axes.iter().map(|&a| shape[a]).product();
    let mean = reduce(e, "ReduceMean", x, Some(axes), true);
    let dev = e.node("Sub", &[x, &mean], vec![]);
    let sq = e.node("Mul", &[&dev, &dev], vec![]);
    let total = reduce(e, "ReduceSum", &sq, Some(axes), keepdim);
    let count = e.scalar(n.saturating_sub(correction) as f64, e.dtype(i));
    e.node("Div", &[&total, &count], vec![])
}

/// The sum of a broadcast value back to `shape`.
fn sum_to(e: &mut Emitter<'_>, i: usize, x: &str, shape: &[usize]) -> String {
    let from = e.shape(e.nodes[i].inputs[0]);
    let lead = from.len() - shape.len();
    let axes: Vec<usize> = (0..from.len())
        .filter(|&a| a < lead || (shape[a - lead] == 1 && from[a] != 1))
        .collect();
    let summed = reduce(e, "ReduceSum", x, Some(&axes), true);
    let s: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    let s = e.ints(&s);
    e.node("Reshape", &[&summed, &s], vec![])
}

/// A reshape that keeps a free batch axis free: an axis equal to the input's at the same
/// place is copied (0), and the first other axis, when the input's first axis is not carried
/// over, takes what is left (-1).
fn reshape(e: &mut Emitter<'_>, i: usize, x: &str, shape: &[usize]) -> String {
    let from = e.shape(e.nodes[i].inputs[0]);
    let mut out: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    let mut k = 0;
    while k < out.len() && k < from.len() && shape[k] == from[k] {
        out[k] = 0;
        k += 1;
    }
    if k == 0 && !out.is_empty() && !from.is_empty() && !out.contains(&0) {
        out[0] = -1;
    }
    let s = e.ints(&out);
    e.node("Reshape", &[x, &s], vec![])
}

/// A permutation of the axes.
fn transpose(e: &mut Emitter<'_>, x: &str, perm: &[usize]) -> String {
    let perm: Vec<i64> = perm.iter().map(|&p| p as i64).collect();
    e.node("Transpose", &[x], vec![ints("perm", &perm)])
}

/// A broadcast to `shape`, leaving (as 1) each axis the input already has, so a free batch
/// axis stays free.
fn expand(e: &mut Emitter<'_>, i: usize, x: &str, shape: &[usize]) -> String {
    let from = e.shape(e.nodes[i].inputs[0]);
    let lead = shape.len() - from.len();
    let s: Vec<i64> = shape
        .iter()
        .enumerate()
        .map(|(a, &d)| {
            if a >= lead && from[a - lead] == d {
                1
            } else {
                d as i64
            }
        })
        .collect();
    let s = e.ints(&s);
    e.node("Expand", &[x, &s], vec![])
}

/// A convolution (or transposed one) with symmetric padding `pad`.
fn conv(
    e: &mut Emitter<'_>,
    op: &str,
    x: &[&str],
    opts: &crate::ops::conv::ConvOpts,
    pad: [usize; 2],
) -> String {
    let two = |v: [usize; 2]| [v[0] as i64, v[1] as i64];
    let mut attrs = vec![
        ints("strides", &two(opts.stride)),
        ints(
            "pads",
            &[pad[0] as i64, pad[1] as i64, pad[0] as i64, pad[1] as i64],
        ),
        ints("dilations", &two(opts.dilation)),
        int("group", opts.groups as i64),
    ];
    if op == "ConvTranspose" {
        attrs.push(ints("output_padding", &two(opts.output_padding)));
    }
    e.node(op, x, attrs)
}

/// PyTorch's `padding='same'`: the total padding `d·(k−1)` split with the odd one after.
fn same_conv(
    e: &mut Emitter<'_>,
    x: &[&str],
    opts: &crate::ops::conv::ConvOpts,
    before: [usize; 2],
    k: &[usize],
) -> Option<Vec<String>> {
    let total = |axis: usize| opts.dilation[axis] * (k[2 + axis] - 1);
    let pads = [
        before[0],
        before[1],
        total(0) - before[0],
        total(1) - before[1],
    ]
    .map(|p| p as i64);
    let attrs = vec![
        ints("strides", &[opts.stride[0] as i64, opts.stride[1] as i64]),
        ints("pads", &pads),
        ints(
            "dilations",
            &[opts.dilation[0] as i64, opts.dilation[1] as i64],
        ),
        int("group", opts.groups as i64),
    ];
    Some(vec![e.node("Conv", x, attrs)])
}

/// Max or average pooling; the average counts the padding, as PyTorch's default.
fn pool(
    e: &mut Emitter<'_>,
    op: &str,
    x: &str,
    kernel: [usize; 2],
    stride: [usize; 2],
    pad: [usize; 2],
) -> String {
    let mut attrs = vec![
        ints("kernel_shape", &[kernel[0] as i64, kernel[1] as i64]),
        ints("strides", &[stride[0] as i64, stride[1] as i64]),
        ints(
            "pads",
            &[pad[0] as i64, pad[1] as i64, pad[0] as i64, pad[1] as i64],
        ),
    ];
    if op == "AveragePool" {
        attrs.push(int("count_include_pad", 1));
    }
    e.node(op, &[x], attrs)
}

/// Max pooling's values, and its positions where the graph reads them: ONNX's indices count
/// over the whole input (row-major), ferrograd's within each plane, so they are taken modulo
/// the plane's size.
fn max_pool(
    e: &mut Emitter<'_>,
    i: usize,
    x: &str,
    [kernel, stride, pad]: [[usize; 2]; 3],
) -> Option<Vec<String>> {
    let reads = |(k, n): (usize, &crate::graph::NodeData)| {
        e.needed[k] && matches!(n.op, Op::Output { .. }) && n.inputs[0] == i
    };
    if !e.nodes.iter().enumerate().any(reads) {
        let values = pool(e, "MaxPool", x, kernel, stride, pad);
        // Nothing the outputs need reads output 1: it needs no ONNX value.
        return Some(vec![values.clone(), values]);
    }
    let input = e.shape(e.nodes[i].inputs[0]);
    let plane = input
        .get(2..4)
        .map(|hw| (hw[0] * hw[1]) as i64)
        .filter(|&p| p > 0)?;
    let attrs = vec![
        ints("kernel_shape", &[kernel[0] as i64, kernel[1] as i64]),
        ints("strides", &[stride[0] as i64, stride[1] as i64]),
        ints(
            "pads",
            &[pad[0] as i64, pad[1] as i64, pad[0] as i64, pad[1] as i64],
        ),
    ];
    let out = e.node_n("MaxPool", &[x], attrs, 2);
    let plane = e.ints(&[plane]);
    let within = e.node("Mod", &[&out[1], &plane], vec![]);
    Some(vec![out[0].clone(), within])
}

/// Adaptive average pooling: global, or a plain pooling where the sizes divide.
fn adaptive_avg_pool(
    e: &mut Emitter<'_>,
    i: usize,
    x: &str,
    out: [usize; 2],
) -> Option<Vec<String>> {
    if out == [1, 1] {
        return Some(vec![e.node("GlobalAveragePool", &[x], vec![])]);
    }
    let s = e.shape(e.nodes[i].inputs[0]);
    let (h, w) = (s[s.len() - 2], s[s.len() - 1]);
    if out[0] == 0 || out[1] == 0 || h % out[0] != 0 || w % out[1] != 0 {
        return None;
    }
    let k = [h / out[0], w / out[1]];
    Some(vec![pool(e, "AveragePool", x, k, k, [0, 0])])
}

/// Nearest-neighbour upsampling by whole factors.
fn upsample(e: &mut Emitter<'_>, x: &str, scale: [usize; 2]) -> String {
    let scales = e.constant(&Tensor::from_vec(
        vec![1.0f32, 1.0, scale[0] as f32, scale[1] as f32],
        &[4],
    ));
    let attrs = vec![
        string("mode", "nearest"),
        string("coordinate_transformation_mode", "asymmetric"),
        string("nearest_mode", "floor"),
    ];
    e.node("Resize", &[x, "", &scales], attrs)
}

/// Entries `start..end` (by `step`) of one axis.
fn slice(e: &mut Emitter<'_>, x: &str, axis: usize, start: i64, end: i64, step: i64) -> String {
    let (s, en, a, st) = (
        e.ints(&[start]),
        e.ints(&[end]),
        e.ints(&[axis as i64]),
        e.ints(&[step]),
    );
    e.node("Slice", &[x, &s, &en, &a, &st], vec![])
}

/// Constant padding: ONNX lists every axis's "before" counts, then every "after".
fn pad(e: &mut Emitter<'_>, i: usize, x: &str, pads: &[(usize, usize)], value: f64) -> String {
    let counts: Vec<i64> = pads
        .iter()
        .map(|p| p.0 as i64)
        .chain(pads.iter().map(|p| p.1 as i64))
        .collect();
    let p = e.ints(&counts);
    let v = e.scalar(value, e.dtype(i));
    e.node("Pad", &[x, &p, &v], vec![string("mode", "constant")])
}

/// `0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))`.
fn gelu_tanh(e: &mut Emitter<'_>, i: usize, x: &str) -> String {
    let d = e.dtype(i);
    let c = |e: &mut Emitter<'_>, v: f64| e.scalar(v, d);
    let x3 = {
        let x2 = e.node("Mul", &[x, x], vec![]);
        e.node("Mul", &[&x2, x], vec![])
    };
    let k = c(e, 0.044715);
    let kx3 = e.node("Mul", &[&x3, &k], vec![]);
    let inner = e.node("Add", &[x, &kx3], vec![]);
    let r = c(e, (2.0 / std::f64::consts::PI).sqrt());
    let t = e.node("Mul", &[&inner, &r], vec![]);
    let t = e.node("Tanh", &[&t], vec![]);
    let one = c(e, 1.0);
    let t = e.node("Add", &[&t, &one], vec![]);
    let half = c(e, 0.5);
    let hx = e.node("Mul", &[x, &half], vec![]);
    e.node("Mul", &[&hx, &t], vec![])
}

/// `x / √(mean(x²) + eps) · w` over the last axis; `eps` by default the dtype's machine
/// epsilon, as PyTorch's.
fn rms_norm(e: &mut Emitter<'_>, i: usize, x: &[&str], eps: Option<f64>) -> String {
    let d = e.dtype(i);
    let eps = eps.unwrap_or(match d {
        DType::F64 => f64::EPSILON,
        _ => f64::from(f32::EPSILON),
    });
    let rank = e.shape(i).len();
    let sq = e.node("Mul", &[x[0], x[0]], vec![]);
    let mean = reduce(e, "ReduceMean", &sq, Some(&vec![rank - 1]), true);
    let eps = e.scalar(eps, d);
    let var = e.node("Add", &[&mean, &eps], vec![]);
    let rms = e.node("Sqrt", &[&var], vec![]);
    let y = e.node("Div", &[x[0], &rms], vec![]);
    match x.get(1) {
        Some(w) => e.node("Mul", &[&y, w], vec![]),
        None => y,
    }
}

/// A roll along one axis: the last `shift` entries moved to the front.
fn roll(e: &mut Emitter<'_>, i: usize, x: &str, shift: isize, axis: usize) -> String {
    let n = e.shape(i)[axis] as i64;
    if n == 0 {
        return e.node("Identity", &[x], vec![]);
    }
    let cut = n - (shift as i64).rem_euclid(n);
    let tail = slice(e, x, axis, cut, n, 1);
    let head = slice(e, x, axis, 0, cut, 1);
    e.node("Concat", &[&tail, &head], vec![int("axis", axis as i64)])
}

/// Tiling by `reps`, extra leading repetitions as new axes (as PyTorch's `repeat`).
fn repeat(e: &mut Emitter<'_>, i: usize, x: &str, reps: &[usize]) -> String {
    let from = e.shape(e.nodes[i].inputs[0]);
    let mut x = x.to_string();
    if reps.len() > from.len() {
        let shape: Vec<i64> = std::iter::repeat_n(1, reps.len() - from.len())
            .chain(from.iter().map(|&d| d as i64))
            .collect();
        let s = e.ints(&shape);
        x = e.node("Reshape", &[&x, &s], vec![]);
    }
    let r: Vec<i64> = reps.iter().map(|&r| r as i64).collect();
    let r = e.ints(&r);
    e.node("Tile", &[&x, &r], vec![])
}
