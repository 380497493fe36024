//! Static-graph mode (seed 001, simpleflow): build a graph of placeholders, variables,
//! constants and ops, then run any node in a [`Session`] with a [`Feed`] of values.
//!
//! A node is data: its [`Op`], its inputs, and the shape and dtype inferred when it was added,
//! so a graph whose shapes cannot fit is reported where it is built. A session evaluates only
//! the nodes its fetches need, each once per run, with the eager ops; [`Graph::gradients`] adds
//! gradient nodes that the session evaluates with the eager backward engine, so graph mode has
//! no table of derivatives of its own, and gradients of gradients work as in eager mode.
//!
//! ```
//! use ferrograd::graph::{Feed, GradientDescentOptimizer, Graph, Session};
//! use ferrograd::prelude::*;
//!
//! let g = Graph::new();
//! let x = g.placeholder_with("x", &[None, Some(1)], DType::F64);
//! let y = g.placeholder("y");
//! let w = g.variable("weight", Tensor::from_vec(vec![1.0f64], &[1, 1]));
//! let loss = (&x.matmul(&w) - &y).square().sum();
//! let train = GradientDescentOptimizer::new(0.1).minimize(&loss);
//! let mut sess = Session::new(&g);
//! let xs = Tensor::from_vec(vec![1.0f64, 2.0], &[2, 1]);
//! let feed = Feed::new().with(&x, xs.clone()).with(&y, &xs * 3.0);
//! for _ in 0..50 {
//!     sess.run(&train, &feed)?;
//! }
//! assert!((sess.run(&w, &feed)?.item() - 3.0).abs() < 1e-6);
//! # Ok::<(), ferrograd::Error>(())
//! ```

pub(crate) mod batch;
mod build;
mod composite;
mod executable;
mod fuse;
mod op;
mod optimize;
pub(crate) mod recording;
mod session;
mod table;
pub(crate) mod tangent;
mod trace;
mod train;

use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

pub use executable::Executable;
pub use op::{Binary, Fusion, Op, Shape, Unary};
pub use session::{Feed, Session};
pub use table::NodeIndices;
pub use trace::{trace, trace_named, Trace};
pub(crate) use trace::{trace_reading, Seen};
pub use train::{GradientDescentOptimizer, GraphOptimizer};

use crate::tensor::DType;

/// One node as the graph stores it.
#[derive(Clone, Debug)]
pub struct NodeData {
    /// What it computes.
    pub op: Op,
    /// The nodes it reads, by index in the graph.
    pub inputs: Vec<usize>,
    /// The shape inferred when it was added (`None` axes are free; `None` as a whole when it
    /// depends on a placeholder of unknown shape).
    pub shape: Option<Shape>,
    /// The dtype inferred when it was added, when known.
    pub dtype: Option<DType>,
    /// The shapes and dtypes inferred for the op's further outputs, which `Op::Output` nodes
    /// read (a `topk`'s positions); empty for an op of one output.
    pub rest: Vec<(Option<Shape>, Option<DType>)>,
}

struct GraphInner {
    id: u64,
    nodes: Vec<NodeData>,
    /// The names of the variables, so that adding one checks uniqueness in O(1).
    variable_names: std::collections::HashSet<String>,
}

/// A static computational graph. Cheap to clone: clones are handles to the same graph, and
/// may be sent to other threads (nodes are added under a lock; runs read the graph).
#[derive(Clone)]
pub struct Graph(Arc<RwLock<GraphInner>>);

/// The nodes of a graph, read while the guard lives.
pub(crate) struct NodesRef<'a>(RwLockReadGuard<'a, GraphInner>);

impl Deref for NodesRef<'_> {
    type Target = Vec<NodeData>;
    fn deref(&self) -> &Vec<NodeData> {
        &self.0.nodes
    }
}

/// A handle to a node of a graph. Takes the same operators and methods as `Tensor` for the ops
/// the graph knows.
#[derive(Clone)]
pub struct Node {
    graph: Graph,
    index: usize,
}

/// `f32`, or `?` when unknown.
fn dtype_name(d: Option<DType>) -> String {
    d.map_or("?".to_string(), |d| d.to_string())
}

static NEXT_GRAPH: AtomicU64 = AtomicU64::new(1);

impl Default for Graph {
    fn default() -> Self {
        Graph::new()
    }
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Graph {
        Graph(Arc::new(RwLock::new(GraphInner {
            id: NEXT_GRAPH.fetch_add(1, Ordering::Relaxed),
            nodes: Vec::new(),
            variable_names: Default::default(),
        })))
    }

    // A panic never leaves the graph half-changed (a node is pushed whole), so a lock
    // poisoned by a panicking thread still guards a consistent graph.
    fn read(&self) -> RwLockReadGuard<'_, GraphInner> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, GraphInner> {
        self.0.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// This graph's identity, unique in the process (the handles of one graph share it).
    pub fn id(&self) -> u64 {
        self.read().id
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.read().nodes.len()
    }

    /// Whether the graph has no node.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of node `index`'s data.
    pub fn node_data(&self, index: usize) -> NodeData {
        self.read().nodes[index].clone()
    }

    pub(crate) fn nodes(&self) -> NodesRef<'_> {
        NodesRef(self.read())
    }

    /// The node at `index`, as a handle.
    pub fn node(&self, index: usize) -> Node {
        assert!(index < self.len(), "graph: no node {index}");
        Node {
            graph: self.clone(),
            index,
        }
    }

    /// Adds a node after checking that its inputs' shapes fit the op.
    pub(crate) fn try_add(&self, op: Op, inputs: &[&Node]) -> crate::Result<Node> {
        for n in inputs {
            if n.graph.id() != self.id() {
                return Err(crate::Error::Graph(format!(
                    "{}: an input belongs to another graph",
                    op.name()
                )));
            }
        }
        let idx: Vec<usize> = inputs.iter().map(|n| n.index).collect();
        let shapes: Vec<(Option<Shape>, Option<DType>)> = {
            let nodes = self.nodes();
            idx.iter()
                .map(|&i| (nodes[i].shape.clone(), nodes[i].dtype))
                .collect()
        };
        let inferred = match op {
            Op::Output { index } => {
                let source = &self.nodes()[idx[0]];
                match index.checked_sub(1).and_then(|k| source.rest.get(k)) {
                    Some(out) => Ok(vec![out.clone()]),
                    None => Err(format!("%{} has no output {index}", idx[0])),
                }
            }
            _ => op.infer_partial(&shapes),
        };
        let mut outputs = inferred.map_err(|why| {
            let given: Vec<String> = shapes
                .iter()
                .map(|(s, d)| format!("{} {}", op::show_opt(s), dtype_name(*d)))
                .collect();
            crate::Error::Shape(format!(
                "{}: {why} (inputs {})",
                op.name(),
                given.join(", ")
            ))
        })?;
        let (shape, dtype) = outputs.remove(0);
        let mut g = self.write();
        g.nodes.push(NodeData {
            op,
            inputs: idx,
            shape,
            dtype,
            rest: outputs,
        });
        Ok(Node {
            graph: self.clone(),
            index: g.nodes.len() - 1,
        })
    }

    pub(crate) fn add(&self, op: Op, inputs: &[&Node]) -> Node {
        self.try_add(op, inputs).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The graph as Graphviz DOT text: one box per node (op, shape, dtype), an edge per input.
    pub fn to_dot(&self) -> String {
        let mut out =
            String::from("digraph ferrograd {\n  node [shape=box, fontname=\"monospace\"];\n");
        for (i, n) in self.nodes().iter().enumerate() {
            let label = format!(
                "%{i} {}\\n{} {}",
                n.op.name(),
                op::show_opt(&n.shape),
                dtype_name(n.dtype)
            );
            out += &format!("  n{i} [label=\"{}\"];\n", label.replace('"', "\\\""));
            for &j in &n.inputs {
                out += &format!("  n{j} -> n{i};\n");
            }
        }
        out + "}\n"
    }
}

impl fmt::Display for Graph {
    /// One line per node: `%3 = matmul(%0, %2)  [?, 1] f64`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, n) in self.nodes().iter().enumerate() {
            let inputs: Vec<String> = n.inputs.iter().map(|j| format!("%{j}")).collect();
            let call = if inputs.is_empty() {
                n.op.name()
            } else {
                format!("{}({})", n.op.name(), inputs.join(", "))
            };
            writeln!(
                f,
                "%{i} = {call:<40} {} {}",
                op::show_opt(&n.shape),
                dtype_name(n.dtype)
            )?;
        }
        Ok(())
    }
}

impl fmt::Debug for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Node {
    /// The node's index in its graph.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The graph the node belongs to.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The shape inferred for the node (`None` axes are free), or `None` when it depends on
    /// a placeholder of unknown shape.
    pub fn shape(&self) -> Option<Shape> {
        self.graph.nodes()[self.index].shape.clone()
    }

    /// The dtype inferred for the node, when known.
    pub fn dtype(&self) -> Option<DType> {
        self.graph.nodes()[self.index].dtype
    }

    /// The node's op.
    pub fn op(&self) -> Op {
        self.graph.nodes()[self.index].op.clone()
    }
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = &self.graph.nodes()[self.index];
        write!(
            f,
            "%{} = {} {} {}",
            self.index,
            n.op.name(),
            op::show_opt(&n.shape),
            dtype_name(n.dtype)
        )
    }
}
