//! Building graphs: leaves, gradients, and on `Node` the tensor core's methods and operators.
//! Each adds a node after its shapes are checked; the plain forms panic naming the op and the
//! shapes, the `try_*` forms return the error.

use std::ops::{Add, Div, Mul, Neg, Sub};

use super::op::show_opt;
use super::op::{Binary, Op, Reduce, Unary};
use super::{Graph, Node};
use crate::autograd::Param;
use crate::error::Result;
use crate::ops::conv::ConvOpts;
use crate::tensor::{DType, Tensor};
use crate::Axis;

impl Graph {
    /// A value fed at run time, of any shape and dtype (simpleflow's `placeholder()`): nodes
    /// that read it learn their shapes at run time.
    pub fn placeholder(&self, name: &str) -> Node {
        let op = Op::Placeholder {
            name: name.to_string(),
            shape: None,
            dtype: None,
        };
        self.add(op, &[])
    }

    /// A value fed at run time with this shape (`None` axes are free, a batch say) and dtype:
    /// shapes are checked as the graph is built, and fed values are checked against both.
    pub fn placeholder_with(&self, name: &str, shape: &[Option<usize>], dtype: DType) -> Node {
        let op = Op::Placeholder {
            name: name.to_string(),
            shape: Some(shape.to_vec()),
            dtype: Some(dtype),
        };
        self.add(op, &[])
    }

    /// State that keeps its value across runs, starting at `initial` (its shape and dtype are
    /// the variable's). Names are unique in a graph: they name the values saved to files.
    pub fn variable(&self, name: &str, initial: Tensor) -> Node {
        let fresh = self.write().variable_names.insert(name.to_string());
        assert!(
            fresh,
            "variable: the graph already has a variable named {name:?}"
        );
        let op = Op::Variable {
            name: name.to_string(),
            param: Param::new(initial),
        };
        self.add(op, &[])
    }

    /// A value fixed when the graph is built.
    pub fn constant(&self, value: Tensor) -> Node {
        self.add(Op::Constant(value.detach()), &[])
    }

    /// Nodes holding the gradient of `y` (one element) with respect to each of `xs`: runnable,
    /// and differentiable again. A node that `y` does not depend on gets zeros.
    pub fn gradients(&self, y: &Node, xs: &[&Node]) -> Vec<Node> {
        xs.iter().map(|x| self.add(Op::Grad, &[y, x])).collect()
    }

    /// The variables of the graph, as (node, name, value).
    pub(crate) fn variables(&self) -> Vec<(usize, String, Param)> {
        self.nodes()
            .iter()
            .enumerate()
            .filter_map(|(i, n)| match &n.op {
                Op::Variable { name, param } => Some((i, name.clone(), param.clone())),
                _ => None,
            })
            .collect()
    }
}

/// Every element-wise primitive of the tensor core as a `Node` method, from the one table.
macro_rules! node_elementwise {
    ($(
        $(#[$doc:meta])*
        $name:ident $Variant:ident $(($($arg:ident: $ty:ty),+))? { $($entry:tt)* }
    )*) => {
        impl Node {
            $(
                $(#[$doc])*
                pub fn $name(&self $($(, $arg: $ty)+)?) -> Node {
                    self.unary(Unary::$Variant $(($($arg),+))?)
                }
            )*
        }
    };
}

crate::elementwise_primitives!(node_elementwise);

/// Every element-wise primitive of two tensors as a `Node` method, from the one table.
macro_rules! node_binary {
    ($(
        $(#[$doc:meta])*
        $name:ident $Variant:ident { $($entry:tt)* }
    )*) => {
        impl Node {
            $(
                $(#[$doc])*
                pub fn $name(&self, other: &Node) -> Node {
                    self.binary(Binary::$Variant, other)
                }
            )*
        }
    };
}

crate::binary_primitives!(node_binary);

impl Node {
    /// The element-wise primitive `op` applied to this node.
    pub fn unary(&self, op: Unary) -> Node {
        self.graph.add(Op::Unary(op), &[self])
    }

    /// The element-wise primitive `op` of this node and `other` (broadcast).
    pub fn binary(&self, op: Binary, other: &Node) -> Node {
        self.graph.add(Op::Binary(op), &[self, other])
    }

    /// x for x > 0, `alpha · (eˣ − 1)` otherwise, from the primitives as [`Tensor::elu`] is.
    pub fn elu(&self, alpha: f64) -> Node {
        let negative_part = (-&(-self).relu()).exp().add_scalar(-1.0).mul_scalar(alpha);
        &self.relu() + &negative_part
    }

    /// The same values in `dtype` (into an integer: truncated, no derivative).
    pub fn to_dtype(&self, dtype: DType) -> Node {
        self.graph.add(Op::ToDtype(dtype), &[self])
    }

    /// The last two axes swapped.
    pub fn t(&self) -> Node {
        let rank = self.shape().map(|s| s.len()).unwrap_or_else(|| {
            panic!(
                "t: the rank of %{} is not known when the graph is built",
                self.index
            )
        });
        assert!(
            rank >= 2,
            "t: needs at least 2 axes, %{} has {rank}",
            self.index
        );
        self.transpose(rank - 2, rank - 1)
    }

    /// `on_true` where this mask is non-zero, `on_false` elsewhere (all three broadcast).
    pub fn where_cond(&self, on_true: &Node, on_false: &Node) -> Node {
        self.graph.add(Op::WhereCond, &[self, on_true, on_false])
    }

    /// Layer normalisation over the last axis, scaled by `weight` and shifted by `bias`
    /// (`[D]` each): `Tensor::layer_norm`, PyTorch's `F.layer_norm`.
    pub fn layer_norm(&self, weight: &Node, bias: &Node, eps: f64) -> Node {
        self.graph.add(Op::LayerNorm(eps), &[self, weight, bias])
    }

    /// The same values, cut from differentiation (`detach`, TensorFlow's `stop_gradient`).
    pub fn stop_gradient(&self) -> Node {
        self.graph.add(Op::StopGradient, &[self])
    }

    /// Alias of [`Node::stop_gradient`] under the eager name.
    pub fn detach(&self) -> Node {
        self.stop_gradient()
    }

    /// Removes axis `axis`, which must have size 1.
    pub fn squeeze<A: Axis>(&self, axis: A) -> Node {
        let axis = self.axis("squeeze", axis, 0);
        self.graph.add(Op::Squeeze(axis), &[self])
    }

    /// Inserts a size-1 axis at `axis` (0..=rank).
    pub fn unsqueeze<A: Axis>(&self, axis: A) -> Node {
        let axis = self.axis("unsqueeze", axis, 1);
        self.graph.add(Op::Unsqueeze(axis), &[self])
    }

    /// Padded with `value`: `pads[i] = (before, after)` elements along axis `i`.
    pub fn pad(&self, pads: &[(usize, usize)], value: f64) -> Node {
        self.graph.add(Op::Pad(pads.to_vec(), value), &[self])
    }

    /// The entries `indices` along `axis`, in that order.
    pub fn index_select<A: Axis>(&self, axis: A, indices: &[usize]) -> Node {
        self.try_index_select(axis, indices)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Node::index_select`] returning the error.
    pub fn try_index_select<A: Axis>(&self, axis: A, indices: &[usize]) -> Result<Node> {
        let axis = self.axis("index_select", axis, 0);
        self.graph
            .try_add(Op::IndexSelect(axis, indices.to_vec()), &[self])
    }

    /// Nodes of one shape stacked along a new axis `axis`.
    pub fn stack<A: Axis>(nodes: &[&Node], axis: A) -> Node {
        let axis = nodes
            .first()
            .expect("stack: no nodes given")
            .axis("stack", axis, 1);
        let expanded: Vec<Node> = nodes.iter().map(|n| n.unsqueeze(axis)).collect();
        Node::cat(&expanded.iter().collect::<Vec<_>>(), axis)
    }

    /// Average pooling to an `out_h × out_w` output.
    pub fn adaptive_avg_pool2d(&self, out_h: usize, out_w: usize) -> Node {
        self.graph.add(Op::AdaptiveAvgPool2d(out_h, out_w), &[self])
    }

    /// Nearest-neighbour upsampling by integer factors.
    pub fn upsample_nearest2d(&self, scale_h: usize, scale_w: usize) -> Node {
        self.graph
            .add(Op::UpsampleNearest2d(scale_h, scale_w), &[self])
    }

    /// Maximum of all elements (0-d).
    pub fn max(&self) -> Node {
        self.reduce(Reduce::Max, None, false)
    }

    /// Minimum of all elements (0-d).
    pub fn min(&self) -> Node {
        self.reduce(Reduce::Min, None, false)
    }

    /// The matrix product (2-D, or batched with broadcast batch axes).
    pub fn matmul(&self, other: &Node) -> Node {
        self.try_matmul(other).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Node::matmul`] returning the shape error.
    pub fn try_matmul(&self, other: &Node) -> Result<Node> {
        self.graph.try_add(Op::Matmul, &[self, other])
    }

    fn reduce(&self, kind: Reduce, axes: Option<&[usize]>, keepdim: bool) -> Node {
        let op = Op::Reduce {
            kind,
            axes: axes.map(<[usize]>::to_vec),
            keepdim,
        };
        self.graph.add(op, &[self])
    }

    /// Sum of all elements (0-d).
    pub fn sum(&self) -> Node {
        self.reduce(Reduce::Sum, None, false)
    }

    /// Mean of all elements (0-d).
    pub fn mean(&self) -> Node {
        self.reduce(Reduce::Mean, None, false)
    }

    /// Sum over `axes`; with `keepdim` they stay as size-1 axes.
    pub fn sum_axes<A: Axis>(&self, axes: &[A], keepdim: bool) -> Node {
        self.reduce(Reduce::Sum, Some(&self.axes("sum_axes", axes)), keepdim)
    }

    /// Mean over `axes`.
    pub fn mean_axes<A: Axis>(&self, axes: &[A], keepdim: bool) -> Node {
        self.reduce(Reduce::Mean, Some(&self.axes("mean_axes", axes)), keepdim)
    }

    /// Maximum over `axes`.
    pub fn max_axes<A: Axis>(&self, axes: &[A], keepdim: bool) -> Node {
        self.reduce(Reduce::Max, Some(&self.axes("max_axes", axes)), keepdim)
    }

    /// Minimum over `axes`.
    pub fn min_axes<A: Axis>(&self, axes: &[A], keepdim: bool) -> Node {
        self.reduce(Reduce::Min, Some(&self.axes("min_axes", axes)), keepdim)
    }

    /// The same elements in `shape`.
    pub fn reshape(&self, shape: &[usize]) -> Node {
        self.try_reshape(shape).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Node::reshape`] returning the shape error.
    pub fn try_reshape(&self, shape: &[usize]) -> Result<Node> {
        self.graph.try_add(Op::Reshape(shape.to_vec()), &[self])
    }

    /// Axes reordered: axis `i` of the result is axis `perm[i]`.
    pub fn permute(&self, perm: &[usize]) -> Node {
        self.graph.add(Op::Permute(perm.to_vec()), &[self])
    }

    /// Axes `a` and `b` swapped.
    pub fn transpose<A: Axis, B: Axis>(&self, a: A, b: B) -> Node {
        let (a, b) = (self.axis("transpose", a, 0), self.axis("transpose", b, 0));
        let rank = self.shape().map(|s| s.len()).unwrap_or_else(|| {
            panic!(
                "transpose: the rank of %{} is not known when the graph is built",
                self.index
            )
        });
        let mut perm: Vec<usize> = (0..rank).collect();
        assert!(
            a < rank && b < rank,
            "transpose: axes {a} and {b} out of range for {}",
            super::op::show_opt(&self.shape())
        );
        perm.swap(a, b);
        self.permute(&perm)
    }

    /// Repeated along new leading and size-1 axes to `shape`.
    pub fn broadcast_to(&self, shape: &[usize]) -> Node {
        self.try_broadcast_to(shape)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Node::broadcast_to`] returning the shape error.
    pub fn try_broadcast_to(&self, shape: &[usize]) -> Result<Node> {
        self.graph.try_add(Op::BroadcastTo(shape.to_vec()), &[self])
    }

    /// exp(x) / Σ exp(x) along `axis`.
    pub fn softmax<A: Axis>(&self, axis: A) -> Node {
        let axis = self.axis("softmax", axis, 0);
        self.graph.add(Op::Softmax(axis), &[self])
    }

    /// x − log Σ exp(x) along `axis`.
    pub fn log_softmax<A: Axis>(&self, axis: A) -> Node {
        let axis = self.axis("log_softmax", axis, 0);
        self.graph.add(Op::LogSoftmax(axis), &[self])
    }

    /// 2-D convolution (PyTorch's `conv2d`): `self` `[N, C, H, W]`, `w`
    /// `[O, C/groups, kh, kw]`.
    pub fn conv2d(&self, w: &Node, opts: &ConvOpts) -> Node {
        self.graph.add(Op::Conv2d(*opts), &[self, w])
    }

    /// The transposed convolution (PyTorch's `conv_transpose2d`): `w` `[Cin, Cout/groups, kh,
    /// kw]`.
    pub fn conv_transpose2d(&self, w: &Node, opts: &ConvOpts) -> Node {
        self.graph.add(Op::ConvTranspose2d(*opts), &[self, w])
    }

    /// Max pooling over square windows (PyTorch's semantics).
    pub fn max_pool2d(&self, kernel: usize, stride: usize, padding: usize) -> Node {
        let op = Op::Pool {
            max: true,
            kernel,
            stride,
            padding,
        };
        self.graph.add(op, &[self])
    }

    /// Average pooling over square windows (the padding counts).
    pub fn avg_pool2d(&self, kernel: usize, stride: usize, padding: usize) -> Node {
        let op = Op::Pool {
            max: false,
            kernel,
            stride,
            padding,
        };
        self.graph.add(op, &[self])
    }

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
        first.graph.try_add(Op::Cat(axis), nodes)
    }

    /// Elements `start..start + len` along `axis`.
    pub fn narrow<A: Axis>(&self, axis: A, start: usize, len: usize) -> Node {
        let axis = self.axis("narrow", axis, 0);
        self.graph.add(Op::Narrow { axis, start, len }, &[self])
    }

    /// Axes from `start` on merged into one.
    pub fn flatten_from(&self, start: usize) -> Node {
        self.graph.add(Op::FlattenFrom(start), &[self])
    }

    /// Index of the largest element along `axis` (an i64 node). Has no derivative.
    pub fn argmax<A: Axis>(&self, axis: A) -> Node {
        let axis = self.axis("argmax", axis, 0);
        self.graph.add(Op::ArgExtremum { max: true, axis }, &[self])
    }

    /// Index of the smallest element along `axis` (an i64 node). Has no derivative.
    pub fn argmin<A: Axis>(&self, axis: A) -> Node {
        let axis = self.axis("argmin", axis, 0);
        self.graph
            .add(Op::ArgExtremum { max: false, axis }, &[self])
    }

    /// `a` as a position among this node's axes (plus `extra`, for ops that insert one); a
    /// negative axis needs the rank known when the graph is built.
    fn axis<A: Axis>(&self, op: &str, a: A, extra: usize) -> usize {
        match self.shape() {
            Some(s) => a.position(s.len() + extra).unwrap_or_else(|| {
                panic!(
                    "{op}: axis {a} out of range for {}",
                    show_opt(&self.shape())
                )
            }),
            None => {
                // Without a rank, only counting from the front is possible.
                const FAR: usize = 1 << 40;
                a.position(FAR).filter(|&p| p < FAR / 2).unwrap_or_else(|| {
                    panic!(
                        "{op}: the negative axis {a} needs the rank of %{}, unknown when the \
                         graph is built",
                        self.index
                    )
                })
            }
        }
    }

    fn axes<A: Axis>(&self, op: &str, axes: &[A]) -> Vec<usize> {
        axes.iter().map(|&a| self.axis(op, a, 0)).collect()
    }

    /// Sums a broadcast result back down to `shape` (the gradient of a broadcast operand).
    pub fn sum_to(&self, shape: &[usize]) -> Node {
        self.graph.add(Op::SumTo(shape.to_vec()), &[self])
    }

    /// This node with `source`'s entries along `axis` added at `indices` (repeats add up).
    pub fn index_add<A: Axis>(&self, axis: A, indices: &[usize], source: &Node) -> Node {
        let axis = self.axis("index_add", axis, 0);
        self.graph
            .add(Op::IndexAdd(axis, indices.to_vec()), &[self, source])
    }

    /// The weight gradient of `conv2d(self, w)` for an upstream gradient `dy`.
    pub fn conv2d_weight(&self, dy: &Node, kernel: (usize, usize), opts: &ConvOpts) -> Node {
        self.graph.add(Op::Conv2dWeight(kernel, *opts), &[self, dy])
    }

    /// The same values (graph values are always laid out for the ops that read them).
    pub fn contiguous(&self) -> Node {
        self.clone()
    }
}

/// `node op node` and `node op f64`, on references and values, as for tensors.
macro_rules! node_operators {
    ($trait:ident, $method:ident, $binary:expr, |$s:ident| $with_scalar:expr, |$t:ident| $scalar_with:expr) => {
        impl $trait<&Node> for &Node {
            type Output = Node;
            fn $method(self, rhs: &Node) -> Node {
                self.graph.add(Op::Binary($binary), &[self, rhs])
            }
        }
        impl $trait<Node> for Node {
            type Output = Node;
            fn $method(self, rhs: Node) -> Node {
                $trait::$method(&self, &rhs)
            }
        }
        impl $trait<&Node> for Node {
            type Output = Node;
            fn $method(self, rhs: &Node) -> Node {
                $trait::$method(&self, rhs)
            }
        }
        impl $trait<Node> for &Node {
            type Output = Node;
            fn $method(self, rhs: Node) -> Node {
                $trait::$method(self, &rhs)
            }
        }
        impl $trait<f64> for Node {
            type Output = Node;
            fn $method(self, rhs: f64) -> Node {
                $trait::$method(&self, rhs)
            }
        }
        impl $trait<f64> for &Node {
            type Output = Node;
            fn $method(self, $s: f64) -> Node {
                self.unary($with_scalar)
            }
        }
        impl $trait<&Node> for f64 {
            type Output = Node;
            fn $method(self, rhs: &Node) -> Node {
                let $t = self;
                rhs.unary($scalar_with)
            }
        }
    };
}

// (trait, method, the node op, `node op s`, `s op node`); `x − s` is exactly `x + (−s)`.
node_operators!(Add, add, Binary::Add, |s| Unary::AddScalar(s), |s| {
    Unary::AddScalar(s)
});
node_operators!(Sub, sub, Binary::Sub, |s| Unary::AddScalar(-s), |s| {
    Unary::RsubScalar(s)
});
node_operators!(Mul, mul, Binary::Mul, |s| Unary::MulScalar(s), |s| {
    Unary::MulScalar(s)
});
node_operators!(Div, div, Binary::Div, |s| Unary::DivScalar(s), |s| {
    Unary::RdivScalar(s)
});

impl Neg for &Node {
    type Output = Node;
    fn neg(self) -> Node {
        self.unary(Unary::Neg)
    }
}

impl Neg for Node {
    type Output = Node;
    fn neg(self) -> Node {
        Neg::neg(&self)
    }
}
