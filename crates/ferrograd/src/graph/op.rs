//! The ops a graph node can hold: data that says what the node computes, with each op's shape
//! rule and its evaluation (a call of the eager `Tensor` op) side by side. Gradients need no
//! rule here: a session evaluates nodes with the eager ops, and the eager engine differentiates
//! them, so the project keeps one table of derivatives.

use std::fmt;

use super::infer::one_element;
use crate::autograd::Param;
pub use crate::ops::binary::Binary;
use crate::ops::conv::ConvOpts;
pub(crate) use crate::ops::shape::known;
pub(crate) use crate::ops::shape::show;
pub use crate::ops::unary::Unary;
use crate::tensor::{DType, Tensor};

pub use crate::ops::shape::Shape;

/// Reductions over axes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduce {
    /// Σ.
    Sum,
    /// Mean.
    Mean,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
}

/// What a node computes.
#[derive(Clone)]
pub enum Op {
    /// A value fed at run time, with an optional shape (`None` axes free) and dtype.
    Placeholder {
        /// The name errors and listings use.
        name: String,
        /// The shape fed values must have, when given.
        shape: Option<Shape>,
        /// The dtype fed values must have, when given.
        dtype: Option<DType>,
    },
    /// State that keeps its value across runs, updated by training ops.
    Variable {
        /// The name in listings and saved files.
        name: String,
        /// The value, a tracked leaf so that the eager engine differentiates it.
        param: Param,
    },
    /// A value fixed when the graph is built.
    Constant(Tensor),
    /// An element-wise function.
    Unary(Unary),
    /// An element-wise function of two inputs.
    Binary(Binary),
    /// The matrix product (batched, with broadcast batch axes).
    Matmul,
    /// A reduction over `axes` (`None`: all of them).
    Reduce {
        /// Which reduction.
        kind: Reduce,
        /// The reduced axes, or every axis.
        axes: Option<Vec<usize>>,
        /// Whether reduced axes stay as size 1.
        keepdim: bool,
    },
    /// The same elements in another shape.
    Reshape(Vec<usize>),
    /// Axes reordered.
    Permute(Vec<usize>),
    /// Repeated to a larger shape.
    BroadcastTo(Vec<usize>),
    /// Softmax along an axis.
    Softmax(usize),
    /// Log-softmax along an axis.
    LogSoftmax(usize),
    /// 2-D convolution of input 0 (`[N, C, H, W]`) by the weight input 1.
    Conv2d(ConvOpts),
    /// The transposed 2-D convolution of input 0 by the weight input 1.
    ConvTranspose2d(ConvOpts),
    /// Max (`max: true`) or average pooling over square windows.
    Pool {
        /// Max pooling, else average pooling.
        max: bool,
        /// Window size.
        kernel: usize,
        /// Step between windows.
        stride: usize,
        /// Padding on every side.
        padding: usize,
    },
    /// The inputs joined along an axis.
    Cat(usize),
    /// Elements `start..start + len` along `axis`.
    Narrow {
        /// The axis.
        axis: usize,
        /// The first element kept.
        start: usize,
        /// How many are kept.
        len: usize,
    },
    /// Axes from this one on merged into one.
    FlattenFrom(usize),
    /// A size-1 axis removed.
    Squeeze(usize),
    /// A size-1 axis inserted at this position.
    Unsqueeze(usize),
    /// Padded with a constant: `(before, after)` per axis.
    Pad(Vec<(usize, usize)>, f64),
    /// The entries at these positions along an axis.
    IndexSelect(usize, Vec<usize>),
    /// Input 1 where input 0 is non-zero, input 2 elsewhere (broadcast).
    WhereCond,
    /// Input 0 normalised over its last axis with this `eps`, scaled by input 1 and shifted
    /// by input 2 (both `[D]`): the fused `Tensor::layer_norm`.
    LayerNorm(f64),
    /// The same values, cut from differentiation.
    StopGradient,
    /// The same values in another dtype.
    ToDtype(DType),
    /// A broadcast result summed back down to this shape.
    SumTo(Vec<usize>),
    /// Input 0 with input 1's entries added at these positions along an axis.
    IndexAdd(usize, Vec<usize>),
    /// The weight gradient of a convolution of input 0 for the output gradient input 1,
    /// with this kernel size.
    Conv2dWeight((usize, usize), ConvOpts),
    /// Average pooling to this output size.
    AdaptiveAvgPool2d(usize, usize),
    /// Nearest-neighbour upsampling by these factors.
    UpsampleNearest2d(usize, usize),
    /// The index of the largest (`max: true`) or smallest element along an axis, as i64.
    ArgExtremum {
        /// Largest, else smallest.
        max: bool,
        /// The axis.
        axis: usize,
    },
    /// The gradient of input 0 (a one-element value) with respect to input 1.
    Grad,
    /// One step of an optimizer on `vars` against the loss (input 0); the loss is its value.
    Minimize(super::train::Minimizer),
}

impl Op {
    /// The op's name in listings.
    pub fn name(&self) -> String {
        match self {
            Op::Placeholder { name, .. } => format!("placeholder {name:?}"),
            Op::Variable { name, .. } => format!("variable {name:?}"),
            Op::Constant(t) => format!("constant {:?}", t.shape()),
            Op::Unary(u) => u.to_string(),
            Op::Binary(b) => b.to_string(),
            Op::Matmul => "matmul".into(),
            Op::Reduce {
                kind,
                axes,
                keepdim,
            } => match axes {
                None => format!("{kind:?}").to_lowercase(),
                Some(a) => format!(
                    "{}_axes({a:?}, keepdim={keepdim})",
                    format!("{kind:?}").to_lowercase()
                ),
            },
            Op::Reshape(s) => format!("reshape({s:?})"),
            Op::Permute(p) => format!("permute({p:?})"),
            Op::BroadcastTo(s) => format!("broadcast_to({s:?})"),
            Op::Softmax(a) => format!("softmax({a})"),
            Op::LogSoftmax(a) => format!("log_softmax({a})"),
            Op::Conv2d(o) => format!("conv2d({o:?})"),
            Op::ConvTranspose2d(o) => format!("conv_transpose2d({o:?})"),
            Op::Pool {
                max,
                kernel,
                stride,
                padding,
            } => format!(
                "{}_pool2d({kernel}, {stride}, {padding})",
                if *max { "max" } else { "avg" }
            ),
            Op::Cat(a) => format!("cat({a})"),
            Op::Narrow { axis, start, len } => format!("narrow({axis}, {start}, {len})"),
            Op::FlattenFrom(a) => format!("flatten_from({a})"),
            Op::Squeeze(a) => format!("squeeze({a})"),
            Op::Unsqueeze(a) => format!("unsqueeze({a})"),
            Op::Pad(p, v) => format!("pad({p:?}, {v})"),
            Op::IndexSelect(a, i) => format!("index_select({a}, {i:?})"),
            Op::WhereCond => "where_cond".into(),
            Op::LayerNorm(eps) => format!("layer_norm(eps={eps})"),
            Op::StopGradient => "stop_gradient".into(),
            Op::ToDtype(d) => format!("to_dtype({d})"),
            Op::SumTo(s) => format!("sum_to({s:?})"),
            Op::IndexAdd(a, i) => format!("index_add({a}, {i:?})"),
            Op::Conv2dWeight(k, o) => format!("conv2d_weight({k:?}, {o:?})"),
            Op::AdaptiveAvgPool2d(h, w) => format!("adaptive_avg_pool2d({h}, {w})"),
            Op::UpsampleNearest2d(h, w) => format!("upsample_nearest2d({h}, {w})"),
            Op::ArgExtremum { max, axis } => {
                format!("{}({axis})", if *max { "argmax" } else { "argmin" })
            }
            Op::Grad => "grad".into(),
            Op::Minimize(m) => format!("minimize({})", m.describe()),
        }
    }

    /// Whether the op computes from its inputs alone, so that equal ops on equal inputs may be
    /// merged and ops on constants folded.
    pub(crate) fn is_pure(&self) -> bool {
        !matches!(
            self,
            Op::Placeholder { .. } | Op::Variable { .. } | Op::Constant(_) | Op::Minimize(_)
        )
    }

    /// The result's shape and dtype where every input's is known; where one is not, what the
    /// op alone fixes (a reshape's shape, a gradient's), the rest unknown.
    pub(crate) fn infer_partial(
        &self,
        inputs: &[(Option<Shape>, Option<DType>)],
    ) -> Result<(Option<Shape>, Option<DType>), String> {
        if let Op::Placeholder { shape, dtype, .. } = self {
            return Ok((shape.clone(), *dtype));
        }
        let all: Option<Vec<(Shape, DType)>> = inputs
            .iter()
            .map(|(s, d)| Some((s.clone()?, (*d)?)))
            .collect();
        if let Some(all) = all {
            return self.infer(&all).map(|(s, d)| (Some(s), Some(d)));
        }
        Ok(match self {
            Op::Placeholder { shape, dtype, .. } => (shape.clone(), *dtype),
            Op::Reshape(to) | Op::BroadcastTo(to) => (Some(known(to)), inputs[0].1),
            Op::Grad => {
                if let Some(of) = &inputs[0].0 {
                    one_element(of, "gradients need a one-element value to differentiate")?;
                }
                inputs[1].clone()
            }
            Op::Minimize(_) => (Some(Vec::new()), inputs[0].1),
            Op::Reduce {
                axes: None,
                keepdim: false,
                ..
            } => (Some(Vec::new()), inputs[0].1),
            _ => (None, None),
        })
    }

    /// The op on evaluated inputs (leaves are evaluated by the session).
    pub(crate) fn eval(&self, x: &[Tensor]) -> Tensor {
        match self {
            Op::Unary(u) => u.apply(&x[0]),
            Op::Binary(b) => b.apply(&x[0], &x[1]),
            Op::Matmul => x[0].matmul(&x[1]),
            Op::Reduce {
                kind,
                axes,
                keepdim,
            } => {
                let all: Vec<usize> = (0..x[0].ndim()).collect();
                let axes = axes.as_deref().unwrap_or(&all);
                match kind {
                    Reduce::Sum => x[0].sum_axes(axes, *keepdim),
                    Reduce::Mean => x[0].mean_axes(axes, *keepdim),
                    Reduce::Max => x[0].max_axes(axes, *keepdim),
                    Reduce::Min => x[0].min_axes(axes, *keepdim),
                }
            }
            Op::Reshape(s) => x[0].reshape(s),
            Op::Permute(p) => x[0].permute(p),
            Op::BroadcastTo(s) => x[0].broadcast_to(s),
            Op::Softmax(a) => x[0].softmax(*a),
            Op::LogSoftmax(a) => x[0].log_softmax(*a),
            Op::Conv2d(o) => x[0].conv2d(&x[1], o),
            Op::ConvTranspose2d(o) => x[0].conv_transpose2d(&x[1], o),
            Op::Pool {
                max,
                kernel,
                stride,
                padding,
            } => {
                if *max {
                    x[0].max_pool2d(*kernel, *stride, *padding)
                } else {
                    x[0].avg_pool2d(*kernel, *stride, *padding)
                }
            }
            Op::Cat(axis) => Tensor::cat(&x.iter().collect::<Vec<_>>(), *axis),
            Op::Narrow { axis, start, len } => x[0].narrow(*axis, *start, *len),
            Op::FlattenFrom(a) => x[0].flatten_from(*a),
            Op::Squeeze(a) => x[0].squeeze(*a),
            Op::Unsqueeze(a) => x[0].unsqueeze(*a),
            Op::Pad(p, v) => x[0].pad(p, *v),
            Op::IndexSelect(a, i) => x[0].index_select(*a, i),
            Op::WhereCond => x[0].where_cond(&x[1], &x[2]),
            Op::LayerNorm(eps) => x[0].layer_norm(&x[1], &x[2], *eps),
            Op::StopGradient => x[0].detach(),
            Op::ToDtype(d) => x[0].to_dtype(*d),
            Op::SumTo(s) => x[0].sum_to(s),
            Op::IndexAdd(a, i) => x[0].index_add(*a, i, &x[1]),
            Op::Conv2dWeight(k, o) => x[0].conv2d_weight(&x[1], *k, o),
            Op::AdaptiveAvgPool2d(h, w) => x[0].adaptive_avg_pool2d(*h, *w),
            Op::UpsampleNearest2d(h, w) => x[0].upsample_nearest2d(*h, *w),
            Op::ArgExtremum { max: true, axis } => x[0].argmax(*axis),
            Op::ArgExtremum { max: false, axis } => x[0].argmin(*axis),
            Op::Constant(t) => t.clone(),
            Op::Placeholder { .. } | Op::Variable { .. } | Op::Grad | Op::Minimize(_) => {
                unreachable!("the session evaluates leaves, gradients and training ops")
            }
        }
    }

    /// A key equal for ops that compute the same function of the same inputs.
    pub(crate) fn key(&self) -> String {
        format!("{self:?}")
    }
}

impl fmt::Debug for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Unary(u) => write!(f, "{u}"),
            Op::Reduce {
                kind,
                axes,
                keepdim,
            } => write!(f, "Reduce({kind:?}, {axes:?}, {keepdim})"),
            _ => f.write_str(&self.name()),
        }
    }
}

/// `[?, 784]`, or `[..]` when not even the rank is known.
pub(crate) fn show_opt(s: &Option<Shape>) -> String {
    s.as_ref().map_or("[..]".to_string(), |s| show(s))
}
