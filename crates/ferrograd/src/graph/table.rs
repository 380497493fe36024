//! Every op a graph node can hold beyond the leaves, gradients and element-wise tables, each
//! declared once: its attributes, its shape and dtype rule (the eager op's own rule functions,
//! so that both accept the same inputs), its evaluation (the eager `Tensor` method of the same
//! name, so that a graph gives eager's values and gradients to the bit) and the `Node` methods
//! that add it, with the eager method's name and signature (`Node` for `Tensor`).

use super::batch::{self, shifted, with_batch};
use super::composite::{self, Recurrence};
use super::op::{declare_ops, Binary};
use super::tangent::{
    extremum, kept, multilinear, total, variance_tangent, via_composite, via_transpose,
};
use super::Node;
use crate::error::Result;
use crate::ops::attention::{attention_backward_composite, Attention};
use crate::ops::concat::{cat_rule, pad_rule};
use crate::ops::conv::{conv_rule, conv_weight_rule, ConvOpts};
use crate::ops::dtype::{
    float_rule, floats_rule, joined_rule, positions_rule, promoted_float_rule, sum_rule,
};
use crate::ops::einsum::einsum_rule;
use crate::ops::index::{index_add_rule, index_select_rule};
use crate::ops::matmul::matmul_rule;
use crate::ops::norm::{layer_norm_composite, layer_norm_dtype, layer_norm_rule};
use crate::ops::pool::{pool_rule, resize_rule};
use crate::ops::reduce::{reduce_rule, sum_to_rule};
use crate::ops::shape::{broadcast, check_axis, same, show, Rule, Shape};
use crate::ops::unary::gelu_derivative_composite;
use crate::ops::view::{
    broadcast_to_rule, flatten_from_rule, narrow_rule, permute_rule, reshape_rule, squeeze_rule,
    unsqueeze_rule,
};
use crate::tensor::{DType, Tensor};
use crate::Axis;

/// A rule's answer.
type Inferred = super::op::Inferred;
/// A rule's answers, one per output.
type InferredOutputs = super::op::InferredOutputs;

/// The `Node` form of a comparison with a number, as `Tensor`'s.
macro_rules! compare_scalar {
    ($name:ident $Variant:ident $symbol:literal) => {
        #[doc = concat!("1 where `self ", $symbol, " value`, else 0, as [`Tensor::", stringify!($name), "`].")]
        pub fn $name(&self, value: f64) -> Node {
            let op = Op::CompareScalar {
                comparison: Binary::$Variant,
                value,
            };
            self.graph.add(op, &[self])
        }
    };
}

declare_ops! {
    /// The matrix product (batched, with broadcast batch axes).
    Matmul "matmul" {}
    infer(i) { Ok((matmul_rule(&i[0].0, &i[1].0)?, promoted_float_rule(i[0].1, i[1].1)?)) }
    eval(x) { x[0].matmul(&x[1]) }
    jvp(x, y, t) {
        multilinear(x, t, |a| a[0].matmul(&a[1]))
    }
    vmap(b) {
        batch::matmul(b)
    }
    node {
        /// The matrix product (2-D, or batched with broadcast batch axes).
        pub fn matmul(&self, other: &Node) -> Node {
            self.try_matmul(other).unwrap_or_else(|e| panic!("{e}"))
        }

        /// [`Node::matmul`] returning the shape error.
        pub fn try_matmul(&self, other: &Node) -> Result<Node> {
            self.graph.try_add(Op::Matmul {}, &[self, other])
        }
    }

    /// `x · wᵀ (+ b)`, PyTorch's `F.linear`.
    Linear "linear" {}
    infer(i) { linear_rule(i) }
    eval(x) { x[0].linear(&x[1], x.get(2)) }
    jvp(x, y, t) {
        total([
            t.map(0, |tx| tx.linear(&x[1], None)),
            t.map(1, |tw| x[0].linear(tw, None)),
            t.map(2, |tb| tb.broadcast_to(y[0].shape())),
        ])
    }
    vmap(b) {
        match b.only_first(1) {
            true => b.x(0).linear(b.x(1), b.get(2)),
            false => b.each().remove(0),
        }
    }
    node {
        /// `self · weightᵀ + bias`, PyTorch's `F.linear`: `self` `[.., in]`, `weight`
        /// `[out, in]`, `bias` `[out]` or none; as [`Tensor::linear`].
        pub fn linear(&self, weight: &Node, bias: Option<&Node>) -> Node {
            self.try_linear(weight, bias).unwrap_or_else(|e| panic!("{e}"))
        }

        /// [`Node::linear`] returning the shape error.
        pub fn try_linear(&self, weight: &Node, bias: Option<&Node>) -> Result<Node> {
            let mut inputs = vec![self, weight];
            inputs.extend(bias);
            self.graph.try_add(Op::Linear {}, &inputs)
        }
    }

    /// `softmax(q kᵀ · scale + mask) v`, PyTorch's `F.scaled_dot_product_attention`; the mask,
    /// when there is one, is input 3.
    ScaledDotProductAttention "scaled_dot_product_attention" {
        causal: bool,
        scale: Option<f64>,
        dropout: Option<(f64, u64)>,
    }
    infer(i) { attention_rule(i) }
    eval(x) {
        let opts = attention_opts(*causal, *scale, *dropout, x.get(3));
        x[0].scaled_dot_product_attention(&x[1], &x[2], &opts)
    }
    jvp(x, y, t) {
        match dropout {
            // The same key drops the same weights: the op's own rule, transposed.
            Some(_) => via_transpose(x, t, |a| vec![Op::ScaledDotProductAttention {
                causal: *causal,
                scale: *scale,
                dropout: *dropout,
            }
            .declared_eval(a)
            .expect("declared")
            .remove(0)]),
            None => via_composite(x, t, |a| vec![composite::attention(a, *causal, *scale)]),
        }
    }
    vmap(b) {
        match dropout {
            None => b.aligned_eval().remove(0),
            // One key for every example would drop the same weights in each.
            Some(_) => b.each().remove(0),
        }
    }
    node {
        /// Attention of these queries over `k` and `v`, as
        /// [`Tensor::scaled_dot_product_attention`]; a mask in `opts` joins the graph as a
        /// constant.
        pub fn scaled_dot_product_attention(&self, k: &Node, v: &Node, opts: &Attention) -> Node {
            let op = Op::ScaledDotProductAttention {
                causal: opts.is_causal(),
                scale: opts.scale_given(),
                dropout: opts.dropout_of(),
            };
            let mask = opts.mask_tensor().map(|m| {
                let m = match m.ndim() {
                    // A 1-d mask, [S], applies to every row, as the eager op reads it.
                    0 | 1 => m.reshape(&[&[1][..], m.shape()].concat()),
                    _ => m.clone(),
                };
                self.graph.constant(m)
            });
            let mut inputs = vec![self, k, v];
            inputs.extend(mask.as_ref());
            self.graph.add(op, &inputs)
        }
    }

    /// Einstein summation over the inputs, PyTorch's `einsum`.
    Einsum "einsum" { spec: String }
    infer(i) {
        let shapes: Vec<Shape> = i.iter().map(|(s, _)| s.clone()).collect();
        let names: Vec<(&str, DType)> = i.iter().map(|(_, d)| ("operand", *d)).collect();
        Ok((einsum_rule(spec, &shapes)?, floats_rule(&names)?))
    }
    eval(x) { Tensor::einsum(spec, &x.iter().collect::<Vec<_>>()) }
    jvp(x, y, t) {
        multilinear(x, t, |a| Tensor::einsum(spec, &a.iter().collect::<Vec<_>>()))
    }
    vmap(b) {
        batch::einsum(b, spec)
    }
    node {
        /// Einstein summation, as [`Tensor::einsum`].
        pub fn einsum(spec: &str, operands: &[&Node]) -> Node {
            Node::try_einsum(spec, operands).unwrap_or_else(|e| panic!("{e}"))
        }

        /// [`Node::einsum`] returning a malformed equation or lengths that do not fit.
        pub fn try_einsum(spec: &str, operands: &[&Node]) -> Result<Node> {
            let first = operands.first().ok_or_else(|| {
                crate::Error::Shape(format!("einsum {spec:?}: no operands"))
            })?;
            let op = Op::Einsum { spec: spec.to_string() };
            first.graph.try_add(op, operands)
        }
    }

    /// Σ of all elements (0-d).
    Sum "sum" {}
    infer(i) { Ok((Vec::new(), sum_rule(i[0].1)?)) }
    eval(x) { x[0].sum() }
    jvp(x, y, t) {
        t.map(0, Tensor::sum)
    }
    vmap(b) {
        b.x(0).sum_axes(&b.example_axes(), false)
    }
    node {
        /// Sum of all elements (0-d).
        pub fn sum(&self) -> Node {
            self.graph.add(Op::Sum {}, &[self])
        }
    }

    /// The mean of all elements (0-d).
    Mean "mean" {}
    infer(i) { Ok((Vec::new(), float_rule(i[0].1)?)) }
    eval(x) { x[0].mean() }
    jvp(x, y, t) {
        t.map(0, Tensor::mean)
    }
    vmap(b) {
        b.x(0).mean_axes(&b.example_axes(), false)
    }
    node {
        /// Mean of all elements (0-d).
        pub fn mean(&self) -> Node {
            self.graph.add(Op::Mean {}, &[self])
        }
    }

    /// The largest element (0-d).
    Max "max" {}
    infer(i) { Ok((Vec::new(), float_rule(i[0].1)?)) }
    eval(x) { x[0].max() }
    jvp(x, y, t) {
        t.map(0, |t| extremum(&x[0], &y[0], t, &every_axis(&x[0]), false))
    }
    vmap(b) {
        b.x(0).max_axes(&b.example_axes(), false)
    }
    node {
        /// Maximum of all elements (0-d).
        pub fn max(&self) -> Node {
            self.graph.add(Op::Max {}, &[self])
        }
    }

    /// The smallest element (0-d).
    Min "min" {}
    infer(i) { Ok((Vec::new(), float_rule(i[0].1)?)) }
    eval(x) { x[0].min() }
    jvp(x, y, t) {
        t.map(0, |t| extremum(&x[0], &y[0], t, &every_axis(&x[0]), false))
    }
    vmap(b) {
        b.x(0).min_axes(&b.example_axes(), false)
    }
    node {
        /// Minimum of all elements (0-d).
        pub fn min(&self) -> Node {
            self.graph.add(Op::Min {}, &[self])
        }
    }

    /// Σ over axes.
    SumAxes "sum_axes" { axes: Vec<usize>, keepdim: bool }
    infer(i) { Ok((reduce_rule(&i[0].0, axes, *keepdim)?, sum_rule(i[0].1)?)) }
    eval(x) { x[0].sum_axes(axes, *keepdim) }
    jvp(x, y, t) {
        t.map(0, |t| t.sum_axes(axes, *keepdim))
    }
    vmap(b) {
        b.x(0).sum_axes(&shifted(axes), *keepdim)
    }
    node {
        /// Sum over `axes`; with `keepdim` they stay as size-1 axes.
        pub fn sum_axes<A: Axis>(&self, axes: &[A], keepdim: bool) -> Node {
            let axes = self.axes("sum_axes", axes);
            self.graph.add(Op::SumAxes { axes, keepdim }, &[self])
        }
    }

    /// The mean over axes.
    MeanAxes "mean_axes" { axes: Vec<usize>, keepdim: bool }
    infer(i) { float_reduction(i, axes, *keepdim) }
    eval(x) { x[0].mean_axes(axes, *keepdim) }
    jvp(x, y, t) {
        t.map(0, |t| t.mean_axes(axes, *keepdim))
    }
    vmap(b) {
        b.x(0).mean_axes(&shifted(axes), *keepdim)
    }
    node {
        /// Mean over `axes`.
        pub fn mean_axes<A: Axis>(&self, axes: &[A], keepdim: bool) -> Node {
            let axes = self.axes("mean_axes", axes);
            self.graph.add(Op::MeanAxes { axes, keepdim }, &[self])
        }
    }

    /// The largest element over axes.
    MaxAxes "max_axes" { axes: Vec<usize>, keepdim: bool }
    infer(i) { float_reduction(i, axes, *keepdim) }
    eval(x) { x[0].max_axes(axes, *keepdim) }
    jvp(x, y, t) {
        t.map(0, |t| extremum(&x[0], &y[0], t, axes, *keepdim))
    }
    vmap(b) {
        b.x(0).max_axes(&shifted(axes), *keepdim)
    }
    node {
        /// Maximum over `axes`.
        pub fn max_axes<A: Axis>(&self, axes: &[A], keepdim: bool) -> Node {
            let axes = self.axes("max_axes", axes);
            self.graph.add(Op::MaxAxes { axes, keepdim }, &[self])
        }
    }

    /// The smallest element over axes.
    MinAxes "min_axes" { axes: Vec<usize>, keepdim: bool }
    infer(i) { float_reduction(i, axes, *keepdim) }
    eval(x) { x[0].min_axes(axes, *keepdim) }
    jvp(x, y, t) {
        t.map(0, |t| extremum(&x[0], &y[0], t, axes, *keepdim))
    }
    vmap(b) {
        b.x(0).min_axes(&shifted(axes), *keepdim)
    }
    node {
        /// Minimum over `axes`.
        pub fn min_axes<A: Axis>(&self, axes: &[A], keepdim: bool) -> Node {
            let axes = self.axes("min_axes", axes);
            self.graph.add(Op::MinAxes { axes, keepdim }, &[self])
        }
    }

    /// `log Σ exp` over axes, PyTorch's `logsumexp`.
    Logsumexp "logsumexp" { axes: Vec<usize>, keepdim: bool }
    infer(i) { float_reduction(i, axes, *keepdim) }
    eval(x) { x[0].logsumexp(axes, *keepdim) }
    jvp(x, y, t) {
        t.map(0, |t| {
            let weights = (&x[0] - &kept(&y[0], axes, *keepdim)).exp();
            (&weights * t).sum_axes(axes, *keepdim)
        })
    }
    vmap(b) {
        b.x(0).logsumexp(&shifted(axes), *keepdim)
    }
    node {
        /// `log Σ exp` over `axes`, as [`Tensor::logsumexp`].
        pub fn logsumexp<A: Axis>(&self, axes: &[A], keepdim: bool) -> Node {
            let axes = self.axes("logsumexp", axes);
            self.graph.add(Op::Logsumexp { axes, keepdim }, &[self])
        }
    }

    /// The variance over axes with a divisor of the count less `correction`.
    VarAxes "var_axes" { axes: Vec<usize>, correction: usize, keepdim: bool }
    infer(i) { float_reduction(i, axes, *keepdim) }
    eval(x) { x[0].var_axes(axes, *correction, *keepdim) }
    jvp(x, y, t) {
        t.map(0, |t| variance_tangent(&x[0], t, axes, *correction, *keepdim))
    }
    vmap(b) {
        b.x(0).var_axes(&shifted(axes), *correction, *keepdim)
    }
    node {
        /// The variance over `axes`, as [`Tensor::var_axes`].
        pub fn var_axes<A: Axis>(&self, axes: &[A], correction: usize, keepdim: bool) -> Node {
            let axes = self.axes("var_axes", axes);
            self.graph.add(Op::VarAxes { axes, correction, keepdim }, &[self])
        }
    }

    /// The standard deviation over axes.
    StdAxes "std_axes" { axes: Vec<usize>, correction: usize, keepdim: bool }
    infer(i) { float_reduction(i, axes, *keepdim) }
    eval(x) { x[0].std_axes(axes, *correction, *keepdim) }
    jvp(x, y, t) {
        t.map(0, |t| {
            // d√v = dv / 2√v, and 0 where the deviation is 0, as the gradient is.
            let dv = variance_tangent(&x[0], t, axes, *correction, *keepdim);
            (&dv / &(&y[0] * 2.0)).masked_fill(&y[0].detach().eq_scalar(0.0), 0.0)
        })
    }
    vmap(b) {
        b.x(0).std_axes(&shifted(axes), *correction, *keepdim)
    }
    node {
        /// The standard deviation over `axes`, as [`Tensor::std_axes`].
        pub fn std_axes<A: Axis>(&self, axes: &[A], correction: usize, keepdim: bool) -> Node {
            let axes = self.axes("std_axes", axes);
            self.graph.add(Op::StdAxes { axes, correction, keepdim }, &[self])
        }
    }

    /// The running sums along an axis.
    Cumsum "cumsum" { axis: usize }
    infer(i) { scan_rule(i, *axis) }
    eval(x) { x[0].cumsum(*axis) }
    jvp(x, y, t) {
        t.map(0, |t| t.cumsum(*axis))
    }
    vmap(b) {
        b.x(0).cumsum(axis + 1)
    }
    node {
        /// The running sums along `axis`, as [`Tensor::cumsum`].
        pub fn cumsum<A: Axis>(&self, axis: A) -> Node {
            let axis = self.axis("cumsum", axis, 0);
            self.graph.add(Op::Cumsum { axis }, &[self])
        }
    }

    /// The running products along an axis.
    Cumprod "cumprod" { axis: usize }
    infer(i) { scan_rule(i, *axis) }
    eval(x) { x[0].cumprod(*axis) }
    jvp(x, y, t) {
        via_transpose(x, t, |a| vec![a[0].cumprod(*axis)])
    }
    vmap(b) {
        b.x(0).cumprod(axis + 1)
    }
    node {
        /// The running products along `axis`, as [`Tensor::cumprod`].
        pub fn cumprod<A: Axis>(&self, axis: A) -> Node {
            let axis = self.axis("cumprod", axis, 0);
            self.graph.add(Op::Cumprod { axis }, &[self])
        }
    }

    /// A broadcast result summed back down to a shape.
    SumTo "sum_to" { shape: Vec<usize> }
    infer(i) { Ok((sum_to_rule(&i[0].0, shape)?, float_rule(i[0].1)?)) }
    eval(x) { x[0].sum_to(shape) }
    jvp(x, y, t) {
        t.map(0, |t| t.sum_to(shape))
    }
    vmap(b) {
        // Summed to [n, 1.., shape] over the example's broadcast axes, then to [n, shape].
        let x = b.x(0);
        let ones = vec![1; x.ndim() - 1 - shape.len()];
        let to = [&[b.n][..], &ones, shape].concat();
        x.sum_to(&to).reshape(&with_batch(b.n, shape))

    }
    node {
        /// Sums a broadcast result back down to `shape` (the gradient of a broadcast operand).
        pub fn sum_to(&self, shape: &[usize]) -> Node {
            self.graph.add(Op::SumTo { shape: shape.to_vec() }, &[self])
        }
    }

    /// The same elements in another shape.
    Reshape "reshape" { shape: Vec<usize> }
    infer(i) { same_dtype(i, |s| reshape_rule(s, shape)) }
    eval(x) { x[0].reshape(shape) }
    jvp(x, y, t) {
        t.map(0, |t| t.reshape(shape))
    }
    vmap(b) {
        b.x(0).reshape(&with_batch(b.n, shape))
    }
    node {
        /// The same elements in `shape`.
        pub fn reshape(&self, shape: &[usize]) -> Node {
            self.try_reshape(shape).unwrap_or_else(|e| panic!("{e}"))
        }

        /// [`Node::reshape`] returning the shape error.
        pub fn try_reshape(&self, shape: &[usize]) -> Result<Node> {
            self.graph.try_add(Op::Reshape { shape: shape.to_vec() }, &[self])
        }
    }

    /// Axes reordered.
    Permute "permute" { perm: Vec<usize> }
    infer(i) { same_dtype(i, |s| permute_rule(s, perm)) }
    eval(x) { x[0].permute(perm) }
    jvp(x, y, t) {
        t.map(0, |t| t.permute(perm))
    }
    vmap(b) {
        b.x(0).permute(&[&[0][..], &shifted(perm)].concat())
    }
    node {
        /// Axes reordered: axis `i` of the result is axis `perm[i]`.
        pub fn permute(&self, perm: &[usize]) -> Node {
            self.graph.add(Op::Permute { perm: perm.to_vec() }, &[self])
        }
    }

    /// Repeated to a larger shape.
    BroadcastTo "broadcast_to" { shape: Vec<usize> }
    infer(i) { same_dtype(i, |s| broadcast_to_rule(s, shape)) }
    eval(x) { x[0].broadcast_to(shape) }
    jvp(x, y, t) {
        t.map(0, |t| t.broadcast_to(shape))
    }
    vmap(b) {
        let x = b.x(0);
        let ones = vec![1; shape.len() + 1 - x.ndim()];
        let x = x.reshape(&[&[b.n][..], &ones, &x.shape()[1..]].concat());
        x.broadcast_to(&with_batch(b.n, shape))

    }
    node {
        /// Repeated along new leading and size-1 axes to `shape`.
        pub fn broadcast_to(&self, shape: &[usize]) -> Node {
            self.try_broadcast_to(shape).unwrap_or_else(|e| panic!("{e}"))
        }

        /// [`Node::broadcast_to`] returning the shape error.
        pub fn try_broadcast_to(&self, shape: &[usize]) -> Result<Node> {
            self.graph.try_add(Op::BroadcastTo { shape: shape.to_vec() }, &[self])
        }
    }

    /// Softmax along an axis.
    Softmax "softmax" { axis: usize }
    infer(i) { along_float(i, *axis) }
    eval(x) { x[0].softmax(*axis) }
    jvp(x, y, t) {
        t.map(0, |t| &y[0] * &(t - &(&y[0] * t).sum_axes(&[*axis], true)))
    }
    vmap(b) {
        b.x(0).softmax(axis + 1)
    }
    node {
        /// exp(x) / Σ exp(x) along `axis`.
        pub fn softmax<A: Axis>(&self, axis: A) -> Node {
            let axis = self.axis("softmax", axis, 0);
            self.graph.add(Op::Softmax { axis }, &[self])
        }
    }

    /// Log-softmax along an axis.
    LogSoftmax "log_softmax" { axis: usize }
    infer(i) { along_float(i, *axis) }
    eval(x) { x[0].log_softmax(*axis) }
    jvp(x, y, t) {
        t.map(0, |t| t - &(&y[0].exp() * t).sum_axes(&[*axis], true))
    }
    vmap(b) {
        b.x(0).log_softmax(axis + 1)
    }
    node {
        /// x − log Σ exp(x) along `axis`.
        pub fn log_softmax<A: Axis>(&self, axis: A) -> Node {
            let axis = self.axis("log_softmax", axis, 0);
            self.graph.add(Op::LogSoftmax { axis }, &[self])
        }
    }

    /// 2-D convolution of input 0 (`[N, C, H, W]`) by the weight input 1.
    Conv2d "conv2d" { opts: ConvOpts }
    infer(i) { conv_infer(i, opts, false) }
    eval(x) { x[0].conv2d(&x[1], opts) }
    jvp(x, y, t) {
        multilinear(x, t, |a| a[0].conv2d(&a[1], opts))
    }
    vmap(b) {
        match b.only_first(1) {
            true => b.unfolded(&b.folded(0).conv2d(b.x(1), opts)),
            false => b.each().remove(0),
        }
    }
    node {
        /// 2-D convolution (PyTorch's `conv2d`): `self` `[N, C, H, W]`, `w`
        /// `[O, C/groups, kh, kw]`.
        pub fn conv2d(&self, w: &Node, opts: &ConvOpts) -> Node {
            self.graph.add(Op::Conv2d { opts: *opts }, &[self, w])
        }
    }

    /// The transposed 2-D convolution of input 0 by the weight input 1.
    ConvTranspose2d "conv_transpose2d" { opts: ConvOpts }
    infer(i) { conv_infer(i, opts, true) }
    eval(x) { x[0].conv_transpose2d(&x[1], opts) }
    jvp(x, y, t) {
        multilinear(x, t, |a| a[0].conv_transpose2d(&a[1], opts))
    }
    vmap(b) {
        match b.only_first(1) {
            true => b.unfolded(&b.folded(0).conv_transpose2d(b.x(1), opts)),
            false => b.each().remove(0),
        }
    }
    node {
        /// The transposed convolution (PyTorch's `conv_transpose2d`): `w` `[Cin, Cout/groups,
        /// kh, kw]`.
        pub fn conv_transpose2d(&self, w: &Node, opts: &ConvOpts) -> Node {
            self.graph.add(Op::ConvTranspose2d { opts: *opts }, &[self, w])
        }
    }

    /// 2-D convolution keeping the height and width (PyTorch's `padding="same"`).
    Conv2dSame "conv2d_same" { opts: ConvOpts }
    infer(i) {
        let ((x, _), (w, _)) = (&i[0], &i[1]);
        if opts.stride != [1, 1] || x.len() != 4 || w.len() != 4 {
            return Err(format!(
                "padding \"same\" needs stride 1, input [N, C, H, W] and weight [O, C/groups, \
                 kh, kw], got stride {:?}, {} and {}",
                opts.stride,
                show(x),
                show(w)
            ));
        }
        let mut padded = x.clone();
        for a in 0..2 {
            let total = w[2 + a].map(|k| opts.dilation[a] * k.saturating_sub(1));
            padded[2 + a] = x[2 + a].zip(total).map(|(n, t)| n + t);
        }
        let mut o = conv_infer(&[(padded, i[0].1), i[1].clone()], &opts.padding(0), false)?;
        o.0[2..].copy_from_slice(&x[2..]);
        Ok(o)
    }
    eval(x) { x[0].conv2d_same(&x[1], opts) }
    jvp(x, y, t) {
        multilinear(x, t, |a| a[0].conv2d_same(&a[1], opts))
    }
    vmap(b) {
        match b.only_first(1) {
            true => b.unfolded(&b.folded(0).conv2d_same(b.x(1), opts)),
            false => b.each().remove(0),
        }
    }
    node {
        /// 2-D convolution with PyTorch's `padding="same"`, as [`Tensor::conv2d_same`].
        pub fn conv2d_same(&self, w: &Node, opts: &ConvOpts) -> Node {
            self.graph.add(Op::Conv2dSame { opts: *opts }, &[self, w])
        }
    }

    /// The weight gradient of a convolution of input 0 for the output gradient input 1.
    Conv2dWeight "conv2d_weight" { kernel: (usize, usize), opts: ConvOpts }
    infer(i) {
        let ((x, dx), (dy, ddy)) = (&i[0], &i[1]);
        let d = floats_rule(&[("input", *dx), ("output gradient", *ddy)])?;
        Ok((conv_weight_rule(x, dy, *kernel, opts)?, d))
    }
    eval(x) { x[0].conv2d_weight(&x[1], *kernel, opts) }
    jvp(x, y, t) {
        multilinear(x, t, |a| a[0].conv2d_weight(&a[1], *kernel, opts))
    }
    vmap(b) {
        b.each().remove(0)
    }
    node {
        /// The weight gradient of `conv2d(self, w)` for an upstream gradient `dy`.
        pub fn conv2d_weight(&self, dy: &Node, kernel: (usize, usize), opts: &ConvOpts) -> Node {
            self.graph.add(Op::Conv2dWeight { kernel, opts: *opts }, &[self, dy])
        }
    }

    /// Max pooling over `[height, width]` windows.
    MaxPool2d "max_pool2d" { kernel: [usize; 2], stride: [usize; 2], padding: [usize; 2] }
    outputs(2)
    infer(i) {
        let (s, d) = pool_infer(i, *kernel, *stride, *padding)?;
        Ok(vec![(s.clone(), d), (s, DType::I64)])
    }
    eval(x) { x[0].max_pool2d_with_indices(*kernel, *stride, *padding) }
    jvp(x, y, t) {
        let mut tangents =
            via_transpose(x, t, |a| vec![a[0].max_pool2d_hw(*kernel, *stride, *padding)]);
        tangents.push(None);
        tangents
    }
    vmap(b) {
        let (v, p) = b.folded(0).max_pool2d_with_indices(*kernel, *stride, *padding);
        vec![b.unfolded(&v), b.unfolded(&p)]
    }
    node {
        /// Max pooling over square windows, as [`Tensor::max_pool2d`].
        pub fn max_pool2d(&self, kernel: usize, stride: usize, padding: usize) -> Node {
            self.max_pool2d_hw([kernel; 2], [stride; 2], [padding; 2])
        }

        /// Max pooling with sizes `[height, width]`, as [`Tensor::max_pool2d_hw`].
        pub fn max_pool2d_hw(&self, kernel: [usize; 2], stride: [usize; 2], padding: [usize; 2]) -> Node {
            self.graph.add(Op::MaxPool2d { kernel, stride, padding }, &[self])
        }

        /// Max pooling's values and positions, as [`Tensor::max_pool2d_with_indices`].
        pub fn max_pool2d_with_indices(
            &self,
            kernel: [usize; 2],
            stride: [usize; 2],
            padding: [usize; 2],
        ) -> (Node, Node) {
            let values = self.max_pool2d_hw(kernel, stride, padding);
            let positions = values.output(1);
            (values, positions)
        }
    }

    /// Input 0, a gradient of max pooling, routed back to planes of `size` by the positions
    /// in input 1.
    MaxPool2dBackward "max_pool2d_backward" { size: [usize; 2] }
    infer(i) {
        let ((g, d), (p, dp)) = (&i[0], &i[1]);
        if g.len() != 4 || p.len() != 4 || !g.iter().zip(p).all(|(a, b)| same(*a, *b)) {
            return Err(format!("gradient {} and positions {} differ", show(g), show(p)));
        }
        if *dp != DType::I64 {
            return Err(format!("positions are {dp}, not i64"));
        }
        Ok((vec![g[0], g[1], Some(size[0]), Some(size[1])], float_rule(*d)?))
    }
    eval(x) { x[0].max_pool2d_backward(&x[1], (size[0], size[1])) }
    jvp(x, y, t) {
        // Linear in the gradient along the positions.
        t.at(0).map(|t0| t0.max_pool2d_backward(&x[1], (size[0], size[1])))
    }
    vmap(b) {
        let (up, at) = (b.folded(0), b.folded(1));
        b.unfolded(&up.max_pool2d_backward(&at, (size[0], size[1])))
    }
    node {
        /// This gradient of max pooling routed back by `positions`, as
        /// [`Tensor::max_pool2d_backward`].
        pub fn max_pool2d_backward(&self, positions: &Node, size: (usize, usize)) -> Node {
            let op = Op::MaxPool2dBackward { size: [size.0, size.1] };
            self.graph.add(op, &[self, positions])
        }
    }

    /// Average pooling over `[height, width]` windows (the padding counts).
    AvgPool2d "avg_pool2d" { kernel: [usize; 2], stride: [usize; 2], padding: [usize; 2] }
    infer(i) { pool_infer(i, *kernel, *stride, *padding) }
    eval(x) { x[0].avg_pool2d_hw(*kernel, *stride, *padding) }
    jvp(x, y, t) {
        t.map(0, |t| t.avg_pool2d_hw(*kernel, *stride, *padding))
    }
    vmap(b) {
        b.unfolded(&b.folded(0).avg_pool2d_hw(*kernel, *stride, *padding))
    }
    node {
        /// Average pooling over square windows (the padding counts), as [`Tensor::avg_pool2d`].
        pub fn avg_pool2d(&self, kernel: usize, stride: usize, padding: usize) -> Node {
            self.avg_pool2d_hw([kernel; 2], [stride; 2], [padding; 2])
        }

        /// Average pooling with sizes `[height, width]`, as [`Tensor::avg_pool2d_hw`].
        pub fn avg_pool2d_hw(&self, kernel: [usize; 2], stride: [usize; 2], padding: [usize; 2]) -> Node {
            self.graph.add(Op::AvgPool2d { kernel, stride, padding }, &[self])
        }
    }

    /// Average pooling to an output size.
    AdaptiveAvgPool2d "adaptive_avg_pool2d" { h: usize, w: usize }
    infer(i) { Ok((resize_rule(&i[0].0, (*h, *w), true)?, float_rule(i[0].1)?)) }
    eval(x) { x[0].adaptive_avg_pool2d(*h, *w) }
    jvp(x, y, t) {
        t.map(0, |t| t.adaptive_avg_pool2d(*h, *w))
    }
    vmap(b) {
        b.unfolded(&b.folded(0).adaptive_avg_pool2d(*h, *w))
    }
    node {
        /// Average pooling to an `out_h × out_w` output.
        pub fn adaptive_avg_pool2d(&self, out_h: usize, out_w: usize) -> Node {
            self.graph.add(Op::AdaptiveAvgPool2d { h: out_h, w: out_w }, &[self])
        }
    }

    /// Nearest-neighbour upsampling by integer factors.
    UpsampleNearest2d "upsample_nearest2d" { h: usize, w: usize }
    // Built from views: it moves elements, integers included.
    infer(i) { same_dtype(i, |s| resize_rule(s, (*h, *w), false)) }
    eval(x) { x[0].upsample_nearest2d(*h, *w) }
    jvp(x, y, t) {
        t.map(0, |t| t.upsample_nearest2d(*h, *w))
    }
    vmap(b) {
        b.unfolded(&b.folded(0).upsample_nearest2d(*h, *w))
    }
    node {
        /// Nearest-neighbour upsampling by integer factors.
        pub fn upsample_nearest2d(&self, scale_h: usize, scale_w: usize) -> Node {
            self.graph.add(Op::UpsampleNearest2d { h: scale_h, w: scale_w }, &[self])
        }
    }

    /// The inputs joined along an axis.
    Cat "cat" { axis: usize }
    infer(i) {
        let shapes: Vec<Shape> = i.iter().map(|(s, _)| s.clone()).collect();
        Ok((cat_rule(&shapes, *axis)?, joined_rule(i.iter().map(|(_, d)| *d))))
    }
    eval(x) { Tensor::cat(&x.iter().collect::<Vec<_>>(), *axis) }
    jvp(x, y, t) {
        let parts: Vec<Tensor> = x.iter().enumerate().map(|(i, x)| t.or_zeros(i, x)).collect();
        Tensor::cat(&parts.iter().collect::<Vec<_>>(), *axis)

    }
    vmap(b) {
        b.lifted_eval(Op::Cat { axis: axis + 1 }).remove(0)
    }
    node {
        /// Nodes joined along `axis`; all other axes must agree.
        pub fn cat<A: Axis>(nodes: &[&Node], axis: A) -> Node {
            Node::try_cat(nodes, axis).unwrap_or_else(|e| panic!("{e}"))
        }

        /// [`Node::cat`] returning the shape error.
        pub fn try_cat<A: Axis>(nodes: &[&Node], axis: A) -> Result<Node> {
            let first = nodes
                .first()
                .ok_or_else(|| crate::Error::Shape("cat: no nodes given".into()))?;
            let axis = first.axis("cat", axis, 0);
            first.graph.try_add(Op::Cat { axis }, nodes)
        }
    }

    /// Elements `start..start + len` along an axis.
    Narrow "narrow" { axis: usize, start: usize, len: usize }
    infer(i) { same_dtype(i, |s| narrow_rule(s, *axis, *start, *len)) }
    eval(x) { x[0].narrow(*axis, *start, *len) }
    jvp(x, y, t) {
        t.map(0, |t| t.narrow(*axis, *start, *len))
    }
    vmap(b) {
        b.x(0).narrow(axis + 1, *start, *len)
    }
    node {
        /// Elements `start..start + len` along `axis`.
        pub fn narrow<A: Axis>(&self, axis: A, start: usize, len: usize) -> Node {
            let axis = self.axis("narrow", axis, 0);
            self.graph.add(Op::Narrow { axis, start, len }, &[self])
        }
    }

    /// Axes from one on merged into one.
    FlattenFrom "flatten_from" { start: usize }
    infer(i) { same_dtype(i, |s| flatten_from_rule(s, *start)) }
    eval(x) { x[0].flatten_from(*start) }
    jvp(x, y, t) {
        t.map(0, |t| t.flatten_from(*start))
    }
    vmap(b) {
        b.x(0).flatten_from(start + 1)
    }
    node {
        /// Axes from `start` on merged into one.
        pub fn flatten_from(&self, start: usize) -> Node {
            self.graph.add(Op::FlattenFrom { start }, &[self])
        }
    }

    /// A size-1 axis removed.
    Squeeze "squeeze" { axis: usize }
    infer(i) { same_dtype(i, |s| squeeze_rule(s, *axis)) }
    eval(x) { x[0].squeeze(*axis) }
    jvp(x, y, t) {
        t.map(0, |t| t.squeeze(*axis))
    }
    vmap(b) {
        b.x(0).squeeze(axis + 1)
    }
    node {
        /// Removes axis `axis`, which must have size 1.
        pub fn squeeze<A: Axis>(&self, axis: A) -> Node {
            let axis = self.axis("squeeze", axis, 0);
            self.graph.add(Op::Squeeze { axis }, &[self])
        }
    }

    /// A size-1 axis inserted.
    Unsqueeze "unsqueeze" { axis: usize }
    infer(i) { same_dtype(i, |s| unsqueeze_rule(s, *axis)) }
    eval(x) { x[0].unsqueeze(*axis) }
    jvp(x, y, t) {
        t.map(0, |t| t.unsqueeze(*axis))
    }
    vmap(b) {
        b.x(0).unsqueeze(axis + 1)
    }
    node {
        /// Inserts a size-1 axis at `axis` (0..=rank).
        pub fn unsqueeze<A: Axis>(&self, axis: A) -> Node {
            let axis = self.axis("unsqueeze", axis, 1);
            self.graph.add(Op::Unsqueeze { axis }, &[self])
        }
    }

    /// Padded with a constant: `(before, after)` per axis.
    Pad "pad" { pads: Vec<(usize, usize)>, value: f64 }
    infer(i) { same_dtype(i, |s| pad_rule(s, pads)) }
    eval(x) { x[0].pad(pads, *value) }
    jvp(x, y, t) {
        t.map(0, |t| t.pad(pads, 0.0))
    }
    vmap(b) {
        b.x(0).pad(&[&[(0, 0)][..], pads].concat(), *value)
    }
    node {
        /// Padded with `value`: `pads[i] = (before, after)` elements along axis `i`.
        pub fn pad(&self, pads: &[(usize, usize)], value: f64) -> Node {
            self.graph.add(Op::Pad { pads: pads.to_vec(), value }, &[self])
        }
    }

    /// The entries at fixed positions along an axis.
    IndexSelect "index_select" { axis: usize, indices: Vec<usize> }
    infer(i) { same_dtype(i, |s| index_select_rule(s, *axis, indices)) }
    eval(x) { x[0].index_select(*axis, indices) }
    jvp(x, y, t) {
        t.map(0, |t| t.index_select(*axis, indices))
    }
    vmap(b) {
        b.x(0).index_select(axis + 1, indices)
    }
    node {
        /// The entries `indices` along `axis`, in that order: positions known when the graph
        /// is built (`&[usize]`) or a node of 1-d `I64` positions, as [`Tensor::index_select`]
        /// takes either.
        pub fn index_select<A: Axis, I: NodeIndices + ?Sized>(&self, axis: A, indices: &I) -> Node {
            self.try_index_select(axis, indices).unwrap_or_else(|e| panic!("{e}"))
        }

        /// [`Node::index_select`] returning the error.
        pub fn try_index_select<A: Axis, I: NodeIndices + ?Sized>(
            &self,
            axis: A,
            indices: &I,
        ) -> Result<Node> {
            let axis = self.axis("index_select", axis, 0);
            match indices.operand() {
                Ok(indices) => self.graph.try_add(Op::IndexSelect { axis, indices }, &[self]),
                Err(node) => self.graph.try_add(Op::IndexSelectBy { axis }, &[self, node]),
            }
        }
    }

    /// The entries at the positions input 1 holds (1-d `I64`) along an axis.
    IndexSelectBy "index_select" { axis: usize }
    infer(i) {
        let ((s, d), (ix, dx)) = (&i[0], &i[1]);
        if ix.len() != 1 || *dx != DType::I64 {
            return Err(format!("indices must be a 1-d i64 tensor, got {} {dx}", show(ix)));
        }
        check_axis(*axis, s)?;
        let mut out = s.clone();
        out[*axis] = ix[0];
        Ok((out, *d))
    }
    eval(x) { x[0].index_select(*axis, &x[1]) }
    jvp(x, y, t) { t.map(0, |t| t.index_select(*axis, &x[1])) }
    vmap(b) {
        match b.on(1) {
            false => b.x(0).index_select(axis + 1, b.x(1)),
            true => b.each().remove(0),
        }
    }
    node {}

    /// Input 0 with input 1's entries added at positions along an axis.
    IndexAdd "index_add" { axis: usize, indices: Vec<usize> }
    infer(i) {
        let ((s, d), (src, _)) = (&i[0], &i[1]);
        Ok((index_add_rule(s, src, *axis, indices)?, float_rule(*d)?))
    }
    eval(x) { x[0].index_add(*axis, indices, &x[1]) }
    jvp(x, y, t) {
        t.or_zeros(0, &x[0]).index_add(*axis, indices, &t.or_zeros(1, &x[1]))
    }
    vmap(b) {
        let op = Op::IndexAdd { axis: axis + 1, indices: indices.clone() };
        b.lifted_eval(op).remove(0)

    }
    node {
        /// This node with `source`'s entries along `axis` added at `indices` (repeats add up).
        pub fn index_add<A: Axis>(&self, axis: A, indices: &[usize], source: &Node) -> Node {
            let axis = self.axis("index_add", axis, 0);
            let op = Op::IndexAdd { axis, indices: indices.to_vec() };
            self.graph.add(op, &[self, source])
        }
    }

    /// PyTorch's `gather` along an axis, positions in input 1.
    Gather "gather" { axis: usize }
    infer(i) {
        let ((s, d), (ix, _)) = (&i[0], &i[1]);
        check_axis(*axis, s)?;
        if !index_fits(ix, s, *axis) {
            return Err(format!(
                "index {} does not fit {} along axis {axis}",
                show(ix),
                show(s)
            ));
        }
        Ok((ix.clone(), *d))
    }
    eval(x) { x[0].gather(*axis, &x[1]) }
    jvp(x, y, t) {
        t.map(0, |t| t.gather(*axis, &x[1]))
    }
    vmap(b) {
        b.lifted_eval(Op::Gather { axis: axis + 1 }).remove(0)
    }
    node {
        /// PyTorch's `gather` along `axis`, as [`Tensor::gather`].
        pub fn gather<A: Axis>(&self, axis: A, index: &Node) -> Node {
            let axis = self.axis("gather", axis, 0);
            self.graph.add(Op::Gather { axis }, &[self, index])
        }
    }

    /// Input 0 with input 2's elements added at the positions input 1 names along an axis,
    /// PyTorch's `scatter_add`.
    ScatterAdd "scatter_add" { axis: usize }
    infer(i) {
        let ((s, d), (ix, _), (src, _)) = (&i[0], &i[1], &i[2]);
        check_axis(*axis, s)?;
        if ix != src || !index_fits(ix, s, *axis) {
            return Err(format!(
                "index {} and src {} do not fit {} along axis {axis}",
                show(ix),
                show(src),
                show(s)
            ));
        }
        Ok((s.clone(), *d))
    }
    eval(x) { x[0].scatter_add(*axis, &x[1], &x[2]) }
    jvp(x, y, t) {
        match (t.at(0), t.at(2)) {
            (None, None) => None,
            _ => Some(t.or_zeros(0, &x[0]).scatter_add(*axis, &x[1], &t.or_zeros(2, &x[2]))),
        }
    }
    vmap(b) {
        b.lifted_eval(Op::ScatterAdd { axis: axis + 1 }).remove(0)
    }
    node {
        /// PyTorch's `scatter_add` along `axis`, as [`Tensor::scatter_add`].
        pub fn scatter_add<A: Axis>(&self, axis: A, index: &Node, src: &Node) -> Node {
            let axis = self.axis("scatter_add", axis, 0);
            self.graph.add(Op::ScatterAdd { axis }, &[self, index, src])
        }
    }

    /// Input 1 where input 0 is non-zero, input 2 elsewhere (broadcast).
    WhereCond "where_cond" {}
    fusion(Elementwise)
    infer(i) {
        let ((c, _), (a, da), (b, db)) = (&i[0], &i[1], &i[2]);
        let d = promoted_float_rule(*da, *db)?;
        Ok((broadcast(&broadcast(c, a)?, b)?, d))
    }
    eval(x) { x[0].where_cond(&x[1], &x[2]) }
    jvp(x, y, t) {
        match (t.at(1), t.at(2)) {
            // The condition only chooses: its tangent is not read.
            (None, None) => None,
            _ => Some(x[0].where_cond(&t.or_zeros(1, &x[1]), &t.or_zeros(2, &x[2]))),
        }
    }
    vmap(b) {
        // Broadcast together; the values lifted so that the result has the batch axis even
        // when only the condition is batched.
        let a = b.aligned();
        let (on_true, on_false) = (&a[1] + &a[2].zeros_like(), &a[2] + &a[1].zeros_like());
        a[0].where_cond(&on_true, &on_false)

    }
    node {
        /// `on_true` where this mask is non-zero, `on_false` elsewhere (all three broadcast).
        pub fn where_cond(&self, on_true: &Node, on_false: &Node) -> Node {
            self.graph.add(Op::WhereCond {}, &[self, on_true, on_false])
        }
    }

    /// A value where input 1 (broadcast) is non-zero, input 0 elsewhere.
    MaskedFill "masked_fill" { value: f64 }
    infer(i) {
        let ((s, d), (m, _)) = (&i[0], &i[1]);
        match broadcast(s, m) {
            Ok(b) if b.len() == s.len() && b.iter().zip(s).all(|(x, y)| same(*x, *y)) => {
                Ok((s.clone(), *d))
            }
            _ => Err(format!("mask {} does not broadcast to {}", show(m), show(s))),
        }
    }
    eval(x) { x[0].masked_fill(&x[1], *value) }
    jvp(x, y, t) {
        t.map(0, |t| t.masked_fill(&x[1], 0.0))
    }
    vmap(b) {
        let mask = &b.aligned()[1];
        let x = b.lifted(0);
        x.masked_fill(mask, *value)

    }
    node {
        /// `value` where `mask` is non-zero, as [`Tensor::masked_fill`].
        pub fn masked_fill(&self, mask: &Node, value: f64) -> Node {
            self.graph.add(Op::MaskedFill { value }, &[self, mask])
        }
    }

    /// The elements on and below a diagonal of the last two axes.
    Tril "tril" { k: isize }
    infer(i) { matrices(i) }
    eval(x) { x[0].tril(*k) }
    jvp(x, y, t) {
        t.map(0, |t| t.tril(*k))
    }
    vmap(b) {
        b.x(0).tril(*k)
    }
    node {
        /// Zeros above diagonal `k` of the last two axes, as [`Tensor::tril`].
        pub fn tril(&self, k: isize) -> Node {
            self.graph.add(Op::Tril { k }, &[self])
        }
    }

    /// The elements on and above a diagonal of the last two axes.
    Triu "triu" { k: isize }
    infer(i) { matrices(i) }
    eval(x) { x[0].triu(*k) }
    jvp(x, y, t) {
        t.map(0, |t| t.triu(*k))
    }
    vmap(b) {
        b.x(0).triu(*k)
    }
    node {
        /// Zeros below diagonal `k` of the last two axes, as [`Tensor::triu`].
        pub fn triu(&self, k: isize) -> Node {
            self.graph.add(Op::Triu { k }, &[self])
        }
    }

    /// GELU with the tanh approximation.
    GeluTanh "gelu_tanh" {}
    fusion(Elementwise)
    infer(i) { Ok((i[0].0.clone(), float_rule(i[0].1)?)) }
    eval(x) { x[0].gelu_tanh() }
    jvp(x, y, t) {
        via_composite(x, t, |a| vec![a[0].gelu_tanh_untraced()])
    }
    vmap(b) {
        b.x(0).gelu_tanh()
    }
    node {
        /// GELU with the tanh approximation, as [`Tensor::gelu_tanh`].
        pub fn gelu_tanh(&self) -> Node {
            self.graph.add(Op::GeluTanh {}, &[self])
        }
    }

    /// The gradients of attention of inputs 1, 2 and 3 (q, k, v; its result input 4, its
    /// mask input 5 when there is one) given input 0, the gradient of that result: q's and, as
    /// outputs 1 and 2, k's and v's.
    AttentionBackward "scaled_dot_product_attention_backward" {
        causal: bool,
        scale: Option<f64>,
        dropout: Option<(f64, u64)>,
    }
    outputs(3)
    infer(i) {
        let attention: Vec<(Shape, DType)> = i[1..4].iter().chain(i.get(5)).cloned().collect();
        let (y, _) = attention_rule(&attention)?;
        for (what, s) in [("gradient", &i[0].0), ("result", &i[4].0)] {
            if s.len() != y.len() || !s.iter().zip(&y).all(|(a, b)| same(*a, *b)) {
                return Err(format!("the {what} {} is not the result's {}", show(s), show(&y)));
            }
        }
        Ok(vec![i[1].clone(), i[2].clone(), i[3].clone()])
    }
    eval(x) {
        let opts = attention_opts(*causal, *scale, *dropout, x.get(5));
        x[0].scaled_dot_product_attention_backward(&x[1], &x[2], &x[3], &x[4], &opts)
    }
    jvp(x, y, t) {
        let opts = attention_opts(*causal, *scale, *dropout, x.get(5));
        via_composite(x, t, |a| attention_backward_composite(a, &opts))
    }
    vmap(b) {
        match (dropout, b.get(5)) {
            // Every input with the batch axis: more heads, each with its own gradients.
            (None, None) => {
                let xs: Vec<Tensor> = (0..5).map(|i| b.lifted(i)).collect();
                let opts = attention_opts(*causal, *scale, None, None);
                let (dq, dk, dv) =
                    xs[0].scaled_dot_product_attention_backward(&xs[1], &xs[2], &xs[3], &xs[4], &opts);
                vec![dq, dk, dv]
            }
            // A mask's axes do not line up with the heads'; one key for every example would
            // drop the same weights in each.
            _ => b.each(),
        }
    }
    node {
        /// The gradients of attention given this one, as
        /// [`Tensor::scaled_dot_product_attention_backward`]: `(dq, dk, dv)`.
        pub fn scaled_dot_product_attention_backward(
            &self,
            [q, k, v]: [&Node; 3],
            out: &Node,
            opts: &Attention,
        ) -> (Node, Node, Node) {
            let op = Op::AttentionBackward {
                causal: opts.is_causal(),
                scale: opts.scale_given(),
                dropout: opts.dropout_of(),
            };
            let mask = opts.mask_tensor().map(|m| self.graph.constant(m.clone()));
            let mut inputs = vec![self, q, k, v, out];
            inputs.extend(mask.as_ref());
            let dq = self.graph.add(op, &inputs);
            let (dk, dv) = (dq.output(1), dq.output(2));
            (dq, dk, dv)
        }
    }

    /// The gradients of layer normalisation (`eps`) of input 1 with weight input 2, given
    /// input 0, the gradient of its output: the input's and, as outputs 1 and 2, the weight's
    /// and the bias's.
    LayerNormBackward "layer_norm_backward" { eps: f64 }
    outputs(3)
    infer(i) {
        let shapes = [1, 2, 2].map(|k| i[k].0.clone());
        let dtypes = [1, 2, 2].map(|k| i[k].1);
        layer_norm_rule(&shapes)?;
        let (g, x) = (&i[0].0, &i[1].0);
        if g.len() != x.len() || !g.iter().zip(x).all(|(a, b)| same(*a, *b)) {
            return Err(format!("gradient {} differs from input {}", show(g), show(x)));
        }
        let x = (x.clone(), layer_norm_dtype(dtypes)?);
        Ok(vec![x, i[2].clone(), i[2].clone()])
    }
    eval(x) { x[0].layer_norm_backward(&x[1], &x[2], *eps) }
    jvp(x, y, t) {
        via_composite(x, t, |a| layer_norm_composite(&a[0], &a[1], &a[2], *eps).to_vec())
    }
    vmap(b) {
        match b.only_first(2) {
            // A shared weight: the batch is more rows, but the weight's and bias's gradients
            // are sums over each example's rows alone.
            true => {
                let (up, x, w) = (b.lifted(0), b.lifted(1), b.x(2));
                let (dx, _, _) = up.layer_norm_backward(&x, w, *eps);
                let (ones, zeros) = (w.ones_like(), w.zeros_like());
                let xhat = x.layer_norm(&ones, &zeros, *eps);
                let rows: Vec<usize> = (1..x.ndim() - 1).collect();
                vec![dx, (&up * &xhat).sum_axes(&rows, false), up.sum_axes(&rows, false)]
            }
            false => b.each(),
        }
    }
    node {
        /// The gradients of layer normalisation given this one, as
        /// [`Tensor::layer_norm_backward`]: `(dx, dweight, dbias)`.
        pub fn layer_norm_backward(&self, x: &Node, weight: &Node, eps: f64) -> (Node, Node, Node) {
            let dx = self.graph.add(Op::LayerNormBackward { eps }, &[self, x, weight]);
            let (dw, db) = (dx.output(1), dx.output(2));
            (dx, dw, db)
        }
    }

    /// Input 0 (a gradient) where input 1 is positive, times `slope` elsewhere: relu's and
    /// leaky relu's derivative applied to it.
    SlopeScaled "leaky_relu_backward" { slope: f64 }
    fusion(Elementwise)
    infer(i) { Ok((broadcast(&i[0].0, &i[1].0)?, promoted_float_rule(i[0].1, i[1].1)?)) }
    eval(x) { x[0].leaky_relu_backward(&x[1], *slope) }
    jvp(x, y, t) {
        // Linear in the gradient along a routing that input 1 fixes.
        t.at(0).map(|t0| t0.leaky_relu_backward(&x[1], *slope))
    }
    vmap(b) {
        let a = b.aligned();
        a[0].leaky_relu_backward(&a[1], *slope)
    }
    node {
        /// This gradient through leaky relu at `x`, as [`Tensor::leaky_relu_backward`].
        pub fn leaky_relu_backward(&self, x: &Node, slope: f64) -> Node {
            self.graph.add(Op::SlopeScaled { slope }, &[self, x])
        }
    }

    /// Input 0 (a gradient) times GELU′ at input 1.
    GeluBackward "gelu_backward" {}
    fusion(Elementwise)
    infer(i) { Ok((broadcast(&i[0].0, &i[1].0)?, promoted_float_rule(i[0].1, i[1].1)?)) }
    eval(x) { x[0].gelu_backward(&x[1]) }
    jvp(x, y, t) {
        via_composite(x, t, |a| vec![gelu_derivative_composite(&a[1], &a[0])])
    }
    vmap(b) {
        // Both operands at the batched shape (the fused pass reads them element by element).
        let a = b.aligned();
        let (up, x) = (&a[0] + &a[1].zeros_like(), &a[1] + &a[0].zeros_like());
        up.gelu_backward(&x)
    }
    node {
        /// This gradient times GELU′ at `x`, as [`Tensor::gelu_backward`].
        pub fn gelu_backward(&self, x: &Node) -> Node {
            self.graph.add(Op::GeluBackward {}, &[self, x])
        }
    }

    /// Normalised over the last axis with `eps`, scaled by input 1 and shifted by input 2.
    LayerNorm "layer_norm" { eps: f64 }
    infer(i) {
        let shapes = [0, 1, 2].map(|k| i[k].0.clone());
        let dtypes = [0, 1, 2].map(|k| i[k].1);
        Ok((layer_norm_rule(&shapes)?, layer_norm_dtype(dtypes)?))
    }
    eval(x) { x[0].layer_norm(&x[1], &x[2], *eps) }
    jvp(x, y, t) {
        via_composite(x, t, |a| vec![composite::layer_norm(a, *eps)])
    }
    vmap(b) {
        match b.only_first(1) {
            true => b.x(0).layer_norm(b.x(1), b.x(2), *eps),
            false => b.each().remove(0),
        }
    }
    node {
        /// Layer normalisation over the last axis, scaled by `weight` and shifted by `bias`
        /// (`[D]` each): `Tensor::layer_norm`, PyTorch's `F.layer_norm`.
        pub fn layer_norm(&self, weight: &Node, bias: &Node, eps: f64) -> Node {
            self.graph.add(Op::LayerNorm { eps }, &[self, weight, bias])
        }
    }

    /// RMS normalisation over the last axis, times input 1 when there is one.
    RmsNorm "rms_norm" { eps: Option<f64> }
    infer(i) {
        let (s, d) = &i[0];
        if s.is_empty() {
            return Err("needs at least one axis, got a 0-d tensor".into());
        }
        match i.get(1) {
            None => Ok((s.clone(), float_rule(*d)?)),
            Some((w, dw)) => {
                let out = broadcast(s, w)?;
                if out.len() != s.len() {
                    return Err(format!("weight {} does not fit {}", show(w), show(s)));
                }
                Ok((out, promoted_float_rule(*d, *dw)?))
            }
        }
    }
    eval(x) { x[0].rms_norm(x.get(1), *eps) }
    jvp(x, y, t) {
        via_composite(x, t, |a| vec![a[0].rms_norm_untraced(a.get(1), *eps)])
    }
    vmap(b) {
        match b.only_first(1) {
            true => b.x(0).rms_norm(b.get(1), *eps),
            false => b.each().remove(0),
        }
    }
    node {
        /// RMS normalisation over the last axis, as [`Tensor::rms_norm`].
        pub fn rms_norm(&self, weight: Option<&Node>, eps: Option<f64>) -> Node {
            let mut inputs = vec![self];
            inputs.extend(weight);
            self.graph.add(Op::RmsNorm { eps }, &inputs)
        }
    }

    /// Rotary position embedding of positions `start..` with this base.
    Rope "rope" { start: usize, base: f64 }
    infer(i) {
        let (s, d) = &i[0];
        let even = s.last().is_some_and(|n| n.is_none_or(|n| n % 2 == 0));
        if s.len() < 2 || !even {
            return Err(format!("expected [.., T, D] with D even, got {}", show(s)));
        }
        Ok((s.clone(), float_rule(*d)?))
    }
    eval(x) { x[0].rope(*start, *base) }
    jvp(x, y, t) {
        t.map(0, |t| t.rope(*start, *base))
    }
    vmap(b) {
        b.x(0).rope(*start, *base)
    }
    node {
        /// Rotary position embedding, as [`Tensor::rope`].
        pub fn rope(&self, start: usize, base: f64) -> Node {
            self.graph.add(Op::Rope { start, base }, &[self])
        }
    }

    /// The elements in reverse order along axes.
    Flip "flip" { axes: Vec<usize> }
    infer(i) { Ok(i[0].clone()) }
    eval(x) { x[0].flip(axes) }
    jvp(x, y, t) {
        t.map(0, |t| t.flip(axes))
    }
    vmap(b) {
        b.x(0).flip(&shifted(axes))
    }
    node {
        /// Reversed along each of `axes`, as [`Tensor::flip`].
        pub fn flip<A: Axis>(&self, axes: &[A]) -> Node {
            let axes = self.axes("flip", axes);
            self.graph.add(Op::Flip { axes }, &[self])
        }
    }

    /// The elements shifted cyclically along an axis.
    Roll "roll" { shift: isize, axis: usize }
    infer(i) { Ok(i[0].clone()) }
    eval(x) { x[0].roll(*shift, *axis) }
    jvp(x, y, t) {
        t.map(0, |t| t.roll(*shift, *axis))
    }
    vmap(b) {
        b.x(0).roll(*shift, axis + 1)
    }
    node {
        /// Shifted cyclically by `shift` along `axis`, as [`Tensor::roll`].
        pub fn roll<A: Axis>(&self, shift: isize, axis: A) -> Node {
            let axis = self.axis("roll", axis, 0);
            self.graph.add(Op::Roll { shift, axis }, &[self])
        }
    }

    /// Tiled `reps` times along each axis.
    Repeat "repeat" { reps: Vec<usize> }
    infer(i) {
        let (s, d) = &i[0];
        if reps.len() < s.len() {
            return Err(format!("{} repeats for {}", reps.len(), show(s)));
        }
        let padded = std::iter::repeat_n(Some(1), reps.len() - s.len()).chain(s.iter().copied());
        Ok((padded.zip(reps).map(|(n, r)| n.map(|n| n * r)).collect(), *d))
    }
    eval(x) { x[0].repeat(reps) }
    jvp(x, y, t) {
        t.map(0, |t| t.repeat(reps))
    }
    vmap(b) {
        let x = b.x(0);
        let ones = vec![1; (reps.len() + 1).saturating_sub(x.ndim())];
        let x = x.reshape(&[&[b.n][..], &ones, &x.shape()[1..]].concat());
        x.repeat(&[&[1][..], reps].concat())

    }
    node {
        /// Tiled `reps[i]` times along axis `i`, as [`Tensor::repeat`].
        pub fn repeat(&self, reps: &[usize]) -> Node {
            self.graph.add(Op::Repeat { reps: reps.to_vec() }, &[self])
        }
    }

    /// One GRU step from its gate pre-activations (inputs 0 and 1) and state (input 2).
    GruCell "gru_cell" {}
    infer(i) { cell_rule(i, 3) }
    eval(x) { Tensor::gru_cell(&x[0], &x[1], &x[2]) }
    jvp(x, y, t) {
        via_composite(x, t, |a| vec![composite::gru_cell(a)])
    }
    vmap(b) {
        b.unfolded(&Tensor::gru_cell(&b.folded(0), &b.folded(1), &b.folded(2)))
    }
    node {
        /// One GRU step, as [`Tensor::gru_cell`].
        pub fn gru_cell(gi: &Node, gh: &Node, h: &Node) -> Node {
            gi.graph.add(Op::GruCell {}, &[gi, gh, h])
        }
    }

    /// One LSTM step from its gate pre-activations (inputs 0 and 1) and cell (input 2): the
    /// new state and, as output 1, the new cell.
    LstmCell "lstm_cell" {}
    outputs(2)
    infer(i) {
        let h = cell_rule(i, 4)?;
        Ok(vec![h.clone(), h])
    }
    eval(x) { Tensor::lstm_cell(&x[0], &x[1], &x[2]) }
    jvp(x, y, t) {
        via_composite(x, t, |a| {
            let (h, c) = composite::lstm_cell(a);
            vec![h, c]
        })
    }
    vmap(b) {
        let (h, c) = Tensor::lstm_cell(&b.folded(0), &b.folded(1), &b.folded(2));
        vec![b.unfolded(&h), b.unfolded(&c)]

    }
    node {
        /// One LSTM step, `(h', c')`, as [`Tensor::lstm_cell`].
        pub fn lstm_cell(gi: &Node, gh: &Node, c: &Node) -> (Node, Node) {
            let h = gi.graph.add(Op::LstmCell {}, &[gi, gh, c]);
            let c = h.output(1);
            (h, c)
        }
    }

    /// The `k` largest (or smallest) entries along an axis and, as output 1, their positions.
    TopK "topk" { k: usize, axis: usize, largest: bool }
    outputs(2)
    infer(i) {
        let (s, d) = &i[0];
        check_axis(*axis, s)?;
        if s[*axis].is_some_and(|n| *k > n) {
            return Err(format!("k {k} is more than the entries of axis {axis} of {}", show(s)));
        }
        let mut out = s.clone();
        out[*axis] = Some(*k);
        Ok(vec![(out.clone(), *d), (out, DType::I64)])
    }
    eval(x) { x[0].topk_along(*k, *axis, *largest) }
    jvp(x, y, t) {
        vec![t.map(0, |t| t.gather(*axis, &y[1])), None]
    }
    vmap(b) {
        let (values, positions) = b.x(0).topk_along(*k, axis + 1, *largest);
        vec![values, positions]

    }
    node {
        /// The `k` largest entries along the last axis and their positions, as
        /// [`Tensor::topk`].
        pub fn topk(&self, k: usize) -> (Node, Node) {
            self.topk_along(k, -1, true)
        }

        /// [`Node::topk`] along `axis`, of the largest or the smallest entries, as
        /// [`Tensor::topk_along`].
        pub fn topk_along<A: Axis>(&self, k: usize, axis: A, largest: bool) -> (Node, Node) {
            let axis = self.axis("topk", axis, 0);
            let values = self.graph.add(Op::TopK { k, axis, largest }, &[self]);
            let positions = values.output(1);
            (values, positions)
        }
    }

    /// Batch normalisation with the batch's statistics, scaled by input 1 and shifted by
    /// input 2; outputs 1 and 2 are the per-channel mean and (biased) variance.
    BatchNorm "batch_norm" { eps: f64 }
    outputs(3)
    infer(i) {
        let ((x, dx), (w, dw), (b, db)) = (&i[0], &i[1], &i[2]);
        let fits = x.len() >= 2 && [w, b].iter().all(|p| p.len() == 1 && same(p[0], x[1]));
        if !fits || dw != dx || db != dx {
            return Err(format!(
                "expected input [N, C, ...] with weight and bias [C] of its dtype, got {} {dx}, \
                 {} {dw} and {} {db}",
                show(x),
                show(w),
                show(b)
            ));
        }
        let d = float_rule(*dx)?;
        Ok(vec![(x.clone(), d), (vec![x[1]], d), (vec![x[1]], d)])
    }
    eval(x) { x[0].batch_norm(&x[1], &x[2], *eps) }
    jvp(x, y, t) {
        // The batch's statistics are returned untracked, as values: no tangent.
        let mut ts = via_composite(x, t, |a| vec![composite::batch_norm(a, *eps)]);
        ts.extend([None, None]);
        ts

    }
    vmap(b) {
        b.each()
    }
    node {
        /// Batch normalisation with the batch's statistics, `(y, mean, var)`, as
        /// [`Tensor::batch_norm`].
        pub fn batch_norm(&self, weight: &Node, bias: &Node, eps: f64) -> (Node, Node, Node) {
            let y = self.graph.add(Op::BatchNorm { eps }, &[self, weight, bias]);
            let (mean, var) = (y.output(1), y.output(2));
            (y, mean, var)
        }
    }

    /// One LSTM layer over a batch-first sequence (input 0) from states `h0`, `c0` (inputs 1
    /// and 2) with weights `w_ih`, `w_hh`, `b_ih`, `b_hh` (inputs 3 to 6): the outputs, and
    /// the last state and cell as outputs 1 and 2.
    Lstm "lstm" {}
    outputs(3)
    infer(i) {
        let mut outputs = sequence_rule(i, 4, 2)?;
        outputs.push(outputs[1].clone());
        Ok(outputs)
    }
    eval(x) { x[0].lstm(&x[1], &x[2], weights_of(&x[3..])) }
    jvp(x, y, t) {
        via_composite(x, t, |a| composite::sequence(a, Recurrence::Lstm))
    }
    vmap(b) {
        batch::recurrent(b, 2, |x, s, w| {
            let (out, h, c) = x.lstm(&s[0], &s[1], w);
            vec![out, h, c]
        })
    }
    node {
        /// One LSTM layer, `(out, h_n, c_n)`, as [`Tensor::lstm`].
        pub fn lstm(
            &self,
            h0: &Node,
            c0: &Node,
            w: crate::RecurrentWeights<'_, Node>,
        ) -> (Node, Node, Node) {
            let mut inputs = vec![self, h0, c0];
            inputs.extend(w.all());
            let out = self.graph.add(Op::Lstm {}, &inputs);
            let (h, c) = (out.output(1), out.output(2));
            (out, h, c)
        }
    }

    /// One GRU layer over a batch-first sequence (input 0) from `h0` (input 1) with weights
    /// (inputs 2 to 5): the outputs, and the last state as output 1.
    Gru "gru" {}
    outputs(2)
    infer(i) {
        sequence_rule(i, 3, 1)
    }
    eval(x) { x[0].gru(&x[1], weights_of(&x[2..])) }
    jvp(x, y, t) {
        via_composite(x, t, |a| composite::sequence(a, Recurrence::Gru))
    }
    vmap(b) {
        batch::recurrent(b, 1, |x, s, w| {
            let (out, h) = x.gru(&s[0], w);
            vec![out, h]
        })
    }
    node {
        /// One GRU layer, `(out, h_n)`, as [`Tensor::gru`].
        pub fn gru(&self, h0: &Node, w: crate::RecurrentWeights<'_, Node>) -> (Node, Node) {
            let mut inputs = vec![self, h0];
            inputs.extend(w.all());
            let out = self.graph.add(Op::Gru {}, &inputs);
            let h = out.output(1);
            (out, h)
        }
    }

    /// One Elman RNN layer (tanh) over a batch-first sequence, as [`Op::Gru`] is laid out.
    RnnTanh "rnn_tanh" {}
    outputs(2)
    infer(i) {
        sequence_rule(i, 1, 1)
    }
    eval(x) { x[0].rnn_tanh(&x[1], weights_of(&x[2..])) }
    jvp(x, y, t) {
        via_composite(x, t, |a| composite::sequence(a, Recurrence::Tanh))
    }
    vmap(b) {
        batch::recurrent(b, 1, |x, s, w| {
            let (out, h) = x.rnn_tanh(&s[0], w);
            vec![out, h]
        })
    }
    node {
        /// One Elman RNN layer, `(out, h_n)`, as [`Tensor::rnn_tanh`].
        pub fn rnn_tanh(&self, h0: &Node, w: crate::RecurrentWeights<'_, Node>) -> (Node, Node) {
            let mut inputs = vec![self, h0];
            inputs.extend(w.all());
            let out = self.graph.add(Op::RnnTanh {}, &inputs);
            let h = out.output(1);
            (out, h)
        }
    }

    /// A comparison of each element with a number: 1 where it holds, else 0, in the input's
    /// dtype.
    CompareScalar "compare_scalar" { comparison: Binary, value: f64 }
    fusion(Elementwise)
    infer(i) { Ok(i[0].clone()) }
    eval(x) {
        let (t, v) = (&x[0], *value);
        match comparison {
            Binary::Eq => t.eq_scalar(v),
            Binary::Ne => t.ne_scalar(v),
            Binary::Lt => t.lt_scalar(v),
            Binary::Le => t.le_scalar(v),
            Binary::Gt => t.gt_scalar(v),
            Binary::Ge => t.ge_scalar(v),
            other => unreachable!("{other} is not a comparison"),
        }
    }
    jvp(x, y, t) {
        None
    }
    vmap(b) {
        b.each().remove(0)
    }
    node {
        compare_scalar!(eq_scalar Eq "==");
        compare_scalar!(ne_scalar Ne "!=");
        compare_scalar!(lt_scalar Lt "<");
        compare_scalar!(le_scalar Le "<=");
        compare_scalar!(gt_scalar Gt ">");
        compare_scalar!(ge_scalar Ge ">=");
    }

    /// The same values, cut from differentiation.
    StopGradient "stop_gradient" {}
    fusion(Elementwise)
    infer(i) { Ok(i[0].clone()) }
    eval(x) { x[0].detach() }
    jvp(x, y, t) {
        None
    }
    vmap(b) {
        b.x(0).detach()
    }
    node {
        /// The same values, cut from differentiation (`detach`, TensorFlow's `stop_gradient`).
        pub fn stop_gradient(&self) -> Node {
            self.graph.add(Op::StopGradient {}, &[self])
        }

        /// Alias of [`Node::stop_gradient`] under the eager name.
        pub fn detach(&self) -> Node {
            self.stop_gradient()
        }
    }

    /// The same values in another dtype.
    ToDtype "to_dtype" { dtype: DType }
    infer(i) { Ok((i[0].0.clone(), *dtype)) }
    eval(x) { x[0].to_dtype(*dtype) }
    jvp(x, y, t) {
        t.map(0, |t| t.to_dtype(*dtype)).filter(|_| dtype.is_float())
    }
    vmap(b) {
        b.x(0).to_dtype(*dtype)
    }
    node {
        /// The same values in `dtype` (into an integer: truncated, no derivative).
        pub fn to_dtype(&self, dtype: DType) -> Node {
            self.graph.add(Op::ToDtype { dtype }, &[self])
        }
    }

    /// The index of the largest element along an axis, as i64.
    Argmax "argmax" { axis: usize }
    infer(i) { positions(i, *axis) }
    eval(x) { x[0].argmax(*axis) }
    jvp(x, y, t) {
        None
    }
    vmap(b) {
        b.x(0).argmax(axis + 1)
    }
    node {
        /// Index of the largest element along `axis` (an i64 node). Has no derivative.
        pub fn argmax<A: Axis>(&self, axis: A) -> Node {
            let axis = self.axis("argmax", axis, 0);
            self.graph.add(Op::Argmax { axis }, &[self])
        }
    }

    /// The index of the smallest element along an axis, as i64.
    Argmin "argmin" { axis: usize }
    infer(i) { positions(i, *axis) }
    eval(x) { x[0].argmin(*axis) }
    jvp(x, y, t) {
        None
    }
    vmap(b) {
        b.x(0).argmin(axis + 1)
    }
    node {
        /// Index of the smallest element along `axis` (an i64 node). Has no derivative.
        pub fn argmin<A: Axis>(&self, axis: A) -> Node {
            let axis = self.axis("argmin", axis, 0);
            self.graph.add(Op::Argmin { axis }, &[self])
        }
    }
}

/// Positions a graph's `index_select` takes: fixed ones, or a node that holds them.
pub trait NodeIndices {
    /// The positions when fixed, else the node.
    fn operand(&self) -> std::result::Result<Vec<usize>, &Node>;
}

impl NodeIndices for [usize] {
    fn operand(&self) -> std::result::Result<Vec<usize>, &Node> {
        Ok(self.to_vec())
    }
}

impl<const N: usize> NodeIndices for [usize; N] {
    fn operand(&self) -> std::result::Result<Vec<usize>, &Node> {
        Ok(self.to_vec())
    }
}

impl NodeIndices for Vec<usize> {
    fn operand(&self) -> std::result::Result<Vec<usize>, &Node> {
        Ok(self.clone())
    }
}

impl NodeIndices for Node {
    fn operand(&self) -> std::result::Result<Vec<usize>, &Node> {
        Err(self)
    }
}

/// An op that keeps its input's dtype, with its shape rule.
fn same_dtype(i: &[(Shape, DType)], rule: impl FnOnce(&Shape) -> Rule) -> Inferred {
    Ok((rule(&i[0].0)?, i[0].1))
}

/// A float reduction over `axes`.
fn float_reduction(i: &[(Shape, DType)], axes: &[usize], keepdim: bool) -> Inferred {
    Ok((reduce_rule(&i[0].0, axes, keepdim)?, float_rule(i[0].1)?))
}

/// A float op along `axis` that keeps the shape.
fn along_float(i: &[(Shape, DType)], axis: usize) -> Inferred {
    check_axis(axis, &i[0].0)?;
    Ok((i[0].0.clone(), float_rule(i[0].1)?))
}

/// A running sum or product: exact on integers, else float.
fn scan_rule(i: &[(Shape, DType)], axis: usize) -> Inferred {
    let (s, d) = &i[0];
    check_axis(axis, s)?;
    let d = if *d == DType::I64 {
        *d
    } else {
        float_rule(*d)?
    };
    Ok((s.clone(), d))
}

/// An op on the last two axes that keeps shape and dtype.
fn matrices(i: &[(Shape, DType)]) -> Inferred {
    if i[0].0.len() < 2 {
        return Err(format!("needs at least 2 axes, got {}", show(&i[0].0)));
    }
    Ok(i[0].clone())
}

/// Positions along `axis` (the axis removed), as i64.
fn positions(i: &[(Shape, DType)], axis: usize) -> Inferred {
    let (s, d) = &i[0];
    let d = positions_rule(*d)?;
    check_axis(axis, s)?;
    Ok((
        (0..s.len()).filter(|&a| a != axis).map(|a| s[a]).collect(),
        d,
    ))
}

fn conv_infer(i: &[(Shape, DType)], opts: &ConvOpts, transposed: bool) -> Inferred {
    let ((x, dx), (w, dw)) = (&i[0], &i[1]);
    let d = floats_rule(&[("input", *dx), ("weight", *dw)])?;
    Ok((conv_rule(x, w, opts, transposed)?, d))
}

fn pool_infer(
    i: &[(Shape, DType)],
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
) -> Inferred {
    let out = pool_rule(&i[0].0, kernel, stride, padding)?;
    Ok((out, float_rule(i[0].1)?))
}

/// `x [.., in]`, `w [out, in]`, `b [out]` give `[.., out]`.
fn linear_rule(i: &[(Shape, DType)]) -> Inferred {
    let (x, w) = (&i[0].0, &i[1].0);
    let bias = i.get(2).map(|(b, _)| b);
    let fits = match (x.as_slice(), w.as_slice()) {
        ([.., k], [n, kw]) => same(*k, *kw) && bias.is_none_or(|b| b.len() == 1 && same(b[0], *n)),
        _ => false,
    };
    if !fits {
        let b = bias.map_or("no bias".to_string(), |b| format!("bias {}", show(b)));
        return Err(format!(
            "input {}, weight {} and {b} do not fit ([.., in], [out, in] and [out])",
            show(x),
            show(w)
        ));
    }
    let mut out = x[..x.len() - 1].to_vec();
    out.push(w[0]);
    let names = ["input", "weight", "bias"];
    let dtypes: Vec<(&str, DType)> = i.iter().zip(names).map(|((_, d), n)| (n, *d)).collect();
    Ok((out, floats_rule(&dtypes)?))
}

/// `q [.., L, E]`, `k [.., S, E]`, `v [.., S, Ev]` and a mask broadcast to `[.., L, S]` give
/// `[.., L, Ev]`, the leading axes broadcast.
fn attention_rule(i: &[(Shape, DType)]) -> Inferred {
    let (q, k, v) = (&i[0].0, &i[1].0, &i[2].0);
    let bad = || {
        let shapes: Vec<String> = i.iter().map(|(s, _)| show(s)).collect();
        format!("q, k, v (and mask) do not fit: {}", shapes.join(", "))
    };
    if q.len() < 2 || k.len() < 2 || v.len() < 2 {
        return Err(bad());
    }
    let split = |s: &Shape| (s[..s.len() - 2].to_vec(), s[s.len() - 2], s[s.len() - 1]);
    let ((bq, l, e), (bk, s, ek), (bv, sv, ev)) = (split(q), split(k), split(v));
    if !same(e, ek) || !same(s, sv) {
        return Err(bad());
    }
    let mut batch = broadcast(&broadcast(&bq, &bk)?, &bv)?;
    let mut dtype = promoted_float_rule(i[0].1, i[1].1)?;
    dtype = promoted_float_rule(dtype, i[2].1)?;
    if let Some((m, dm)) = i.get(3) {
        if !dm.is_float() {
            return Err(format!(
                "the mask is {dm}; it must be an additive float mask"
            ));
        }
        let tail = broadcast(&m[m.len().saturating_sub(2)..], &[l, s]).map_err(|_| bad())?;
        if !(same(tail[0], l) && same(tail[1], s)) || m.len() < 2 {
            return Err(bad());
        }
        batch = broadcast(&batch, &m[..m.len() - 2])?;
        dtype = promoted_float_rule(dtype, *dm)?;
    }
    batch.extend([l, ev]);
    Ok((batch, dtype))
}

/// A recurrent step's gates `[N, G·H]` (inputs 0 and 1) and state `[N, H]` (input 2) give a
/// state `[N, H]`.
fn cell_rule(i: &[(Shape, DType)], gates: usize) -> Inferred {
    let ((gi, a), (gh, b), (h, c)) = (&i[0], &i[1], &i[2]);
    let fits = h.len() == 2
        && [gi, gh]
            .iter()
            .all(|g| g.len() == 2 && same(g[0], h[0]) && same(g[1], h[1].map(|n| gates * n)));
    if !fits {
        return Err(format!(
            "expected gates [N, {gates}H] and state [N, H], got {}, {} and {}",
            show(gi),
            show(gh),
            show(h)
        ));
    }
    Ok((
        h.clone(),
        floats_rule(&[("gi", *a), ("gh", *b), ("state", *c)])?,
    ))
}

/// Weights in `RecurrentWeights`' order.
pub(super) fn weights_of(w: &[Tensor]) -> crate::RecurrentWeights<'_> {
    crate::RecurrentWeights {
        w_ih: &w[0],
        w_hh: &w[1],
        b_ih: &w[2],
        b_hh: &w[3],
    }
}

/// A recurrent layer of `gates` gates: the sequence `[N, T, in]` (input 0), `states` states
/// `[N, H]` and then `w_ih [G·H, in]`, `w_hh [G·H, H]`, `b_ih`, `b_hh [G·H]` give the outputs
/// `[N, T, H]` and a state `[N, H]`.
fn sequence_rule(i: &[(Shape, DType)], gates: usize, states: usize) -> InferredOutputs {
    let shape = |k: usize| &i[k].0;
    let (x, h) = (shape(0), shape(1));
    let w = &i[1 + states..];
    let g = h.get(1).copied().flatten().map(|n| gates * n);
    let fits = x.len() == 3
        && h.len() == 2
        && same(x[0], h[0])
        && i[1..=states].iter().all(|(s, _)| s == h)
        && w[0].0.len() == 2
        && same(w[0].0[0], g)
        && same(w[0].0[1], x[2])
        && w[1].0.len() == 2
        && same(w[1].0[0], g)
        && same(w[1].0[1], h[1])
        && w[2..].iter().all(|(b, _)| b.len() == 1 && same(b[0], g));
    if !fits {
        let shapes: Vec<String> = i.iter().map(|(s, _)| show(s)).collect();
        return Err(format!(
            "expected x [N, T, in], states [N, H], w_ih [{gates}H, in], w_hh [{gates}H, H] and \
             biases [{gates}H], got {}",
            shapes.join(", ")
        ));
    }
    let names = ["input", "state", "state", "w_ih", "w_hh", "b_ih", "b_hh"];
    let dtypes: Vec<(&str, DType)> = i
        .iter()
        .enumerate()
        .map(|(k, (_, d))| (names[if k > states { k + 2 - states } else { k }], *d))
        .collect();
    let d = floats_rule(&dtypes)?;
    Ok(vec![(vec![x[0], x[1], h[1]], d), (h.clone(), d)])
}

/// `0..ndim`: the axes a whole reduction reduces.
fn every_axis(x: &Tensor) -> Vec<usize> {
    (0..x.ndim()).collect()
}

/// Attention's options from a declaration's attributes and its mask input.
fn attention_opts(
    causal: bool,
    scale: Option<f64>,
    dropout: Option<(f64, u64)>,
    mask: Option<&Tensor>,
) -> Attention {
    let mut opts = Attention::new().causal(causal);
    if let Some(s) = scale {
        opts = opts.scale(s);
    }
    if let Some((p, key)) = dropout {
        opts = opts.dropout(p, key);
    }
    if let Some(m) = mask {
        opts = opts.mask(m);
    }
    opts
}

/// Whether an index of shape `ix` fits `s` for a gather or scatter along `axis`: the same
/// rank, and no longer than `s` on any other axis (where both are known).
fn index_fits(ix: &Shape, s: &Shape, axis: usize) -> bool {
    ix.len() == s.len()
        && ix
            .iter()
            .zip(s)
            .enumerate()
            .all(|(a, (n, m))| a == axis || !matches!((n, m), (Some(n), Some(m)) if n > m))
}
