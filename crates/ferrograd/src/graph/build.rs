//! Building graphs: leaves, gradients, and on `Node` the tensor core's methods and operators.
//! Each adds a node after its shapes are checked; the plain forms panic naming the op and the
//! shapes, the `try_*` forms return the error.

use std::ops::{Add, Div, Mul, Neg, Sub};

use super::op::show_opt;
use super::op::{Binary, Op, Unary};
use super::{Graph, Node};
use crate::autograd::Param;
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

    /// Nodes of one shape stacked along a new axis `axis`.
    pub fn stack<A: Axis>(nodes: &[&Node], axis: A) -> Node {
        let axis = nodes
            .first()
            .expect("stack: no nodes given")
            .axis("stack", axis, 1);
        let expanded: Vec<Node> = nodes.iter().map(|n| n.unsqueeze(axis)).collect();
        Node::cat(&expanded.iter().collect::<Vec<_>>(), axis)
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

    /// `a` as a position among this node's axes (plus `extra`, for ops that insert one); a
    /// negative axis needs the rank known when the graph is built.
    pub(super) fn axis<A: Axis>(&self, op: &str, a: A, extra: usize) -> usize {
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

    pub(super) fn axes<A: Axis>(&self, op: &str, axes: &[A]) -> Vec<usize> {
        axes.iter().map(|&a| self.axis(op, a, 0)).collect()
    }

    /// Output `index` of this node's op, which has several (output 0 is this node).
    pub(super) fn output(&self, index: usize) -> Node {
        self.graph.add(Op::Output { index }, &[self])
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
