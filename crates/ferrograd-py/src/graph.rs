//! `ferrograd.graph`: the static graph (seed 001, simpleflow's names) over the core's `graph`
//! module. Graphs, nodes and sessions may be used from any Python thread, as in Rust.

use ferrograd::graph::{Feed, GradientDescentOptimizer, Graph, Node, Session};
use ferrograd::prelude::{DType, Tensor};
use pyo3::exceptions::{PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyInt, PyList, PyTuple};

use crate::convert::{axes_arg, to_numpy};
use crate::guard;
use crate::guard::core_error;
use crate::nn::input;

/// A static computational graph: placeholders, variables and the ops between them, run by a
/// `Session`. `ferrograd.graph` keeps a default one; `with Graph().as_default():` replaces it
/// for a block.
#[pyclass(name = "Graph", module = "ferrograd.graph")]
pub struct PyGraph {
    pub graph: Graph,
}

/// A node of a graph: takes the operators and the methods of the ops the graph knows.
#[pyclass(name = "Node", module = "ferrograd.graph")]
#[derive(Clone)]
pub struct PyNode {
    pub node: Node,
}

fn node(n: Node) -> PyNode {
    PyNode { node: n }
}

#[pymethods]
impl PyGraph {
    #[new]
    fn new() -> PyGraph {
        PyGraph {
            graph: Graph::new(),
        }
    }

    /// A value fed at run time, by `name`.
    fn placeholder(&self, name: &str) -> PyResult<PyNode> {
        guard::run(|| node(self.graph.placeholder(name)))
    }

    /// A trainable value that lives in the graph, starting at `initial` (float32 for Python
    /// numbers and lists, numpy arrays keep their dtype).
    fn variable(&self, name: &str, initial: &Bound<'_, PyAny>) -> PyResult<PyNode> {
        let t = crate::convert::to_tensor(initial, None)?;
        let t = if t.dtype().is_float() {
            t
        } else {
            t.to_dtype(DType::F32)
        };
        guard::run(|| node(self.graph.variable(name, t.detach())))
    }

    /// A fixed value.
    fn constant(&self, value: &Bound<'_, PyAny>) -> PyResult<PyNode> {
        let t = crate::convert::to_tensor(value, None)?;
        guard::run(|| node(self.graph.constant(t.detach())))
    }

    /// Symbolic gradients of `y` with respect to each of `xs` (nodes that can be run or
    /// differentiated again).
    fn gradients(&self, y: PyRef<'_, PyNode>, xs: Vec<PyRef<'_, PyNode>>) -> PyResult<Vec<PyNode>> {
        let refs: Vec<&Node> = xs.iter().map(|x| &x.node).collect();
        guard::run(|| {
            self.graph
                .gradients(&y.node, &refs)
                .into_iter()
                .map(node)
                .collect()
        })
    }

    /// `with graph.as_default():` makes this the graph that `ferrograd.graph.placeholder`,
    /// `Variable` and `Session()` use inside the block.
    fn as_default(slf: Bound<'_, Self>) -> PyResult<Bound<'_, PyAny>> {
        slf.py()
            .import("ferrograd.graph")?
            .call_method1("_default_scope", (slf,))
    }

    /// Graphviz text of the whole graph.
    fn to_dot(&self) -> String {
        self.graph.to_dot()
    }

    fn __len__(&self) -> usize {
        self.graph.len()
    }
}

/// A node operand: another node of the graph, or a Python number.
enum Operand {
    Node(Node),
    Scalar(f64),
}

fn operand(o: &Bound<'_, PyAny>) -> PyResult<Operand> {
    if let Ok(n) = o.cast::<PyNode>() {
        return Ok(Operand::Node(n.borrow().node.clone()));
    }
    if o.is_instance_of::<PyFloat>() || o.is_instance_of::<PyInt>() {
        return Ok(Operand::Scalar(o.extract()?));
    }
    Err(PyTypeError::new_err(format!(
        "a graph node combines with nodes and numbers, not {}",
        o.get_type().name()?
    )))
}

impl PyNode {
    fn binary(
        &self,
        other: &Bound<'_, PyAny>,
        nodes: impl FnOnce(&Node, &Node) -> Node,
        scalar: impl FnOnce(&Node, f64) -> Node,
    ) -> PyResult<PyNode> {
        match operand(other)? {
            Operand::Node(n) => guard::run(|| node(nodes(&self.node, &n))),
            Operand::Scalar(s) => guard::run(|| node(scalar(&self.node, s))),
        }
    }

    /// `other` as a node of this one's graph: a node as it is, a Python number as a 0-d
    /// constant of this node's dtype (f32 while that is not known, which leaves an f64 input
    /// f64), so that it never changes the result's dtype, as a number does not in PyTorch.
    pub(crate) fn operand_node(&self, other: &Bound<'_, PyAny>) -> PyResult<Node> {
        match operand(other)? {
            Operand::Node(n) => Ok(n),
            Operand::Scalar(s) => {
                let dtype = self
                    .node
                    .dtype()
                    .filter(|d| d.is_float())
                    .unwrap_or(DType::F32);
                let value = Tensor::full(&[], s, dtype);
                Ok(self.node.graph().constant(value))
            }
        }
    }

    pub(crate) fn unary(&self, f: impl FnOnce(&Node) -> Node) -> PyResult<PyNode> {
        guard::run(|| node(f(&self.node)))
    }
}

#[pymethods]
impl PyNode {
    fn __add__(&self, other: &Bound<'_, PyAny>) -> PyResult<PyNode> {
        self.binary(other, |a, b| a + b, |a, s| a + s)
    }
    fn __radd__(&self, other: &Bound<'_, PyAny>) -> PyResult<PyNode> {
        self.binary(other, |a, b| b + a, |a, s| s + a)
    }
    fn __sub__(&self, other: &Bound<'_, PyAny>) -> PyResult<PyNode> {
        self.binary(other, |a, b| a - b, |a, s| a - s)
    }
    fn __rsub__(&self, other: &Bound<'_, PyAny>) -> PyResult<PyNode> {
        self.binary(other, |a, b| b - a, |a, s| s - a)
    }
    fn __mul__(&self, other: &Bound<'_, PyAny>) -> PyResult<PyNode> {
        self.binary(other, |a, b| a * b, |a, s| a * s)
    }
    fn __rmul__(&self, other: &Bound<'_, PyAny>) -> PyResult<PyNode> {
        self.binary(other, |a, b| b * a, |a, s| s * a)
    }
    fn __truediv__(&self, other: &Bound<'_, PyAny>) -> PyResult<PyNode> {
        self.binary(other, |a, b| a / b, |a, s| a / s)
    }
    fn __rtruediv__(&self, other: &Bound<'_, PyAny>) -> PyResult<PyNode> {
        self.binary(other, |a, b| b / a, |a, s| s / a)
    }
    fn __matmul__(&self, other: PyRef<'_, PyNode>) -> PyResult<PyNode> {
        self.unary(|a| a.matmul(&other.node))
    }
    fn __neg__(&self) -> PyResult<PyNode> {
        self.unary(|a| -a)
    }
    fn __pow__(&self, p: f64, modulo: &Bound<'_, PyAny>) -> PyResult<PyNode> {
        if !modulo.is_none() {
            return Err(PyTypeError::new_err(
                "pow with a modulo is not defined for nodes",
            ));
        }
        self.unary(|a| a.powf(p))
    }
    fn matmul(&self, other: PyRef<'_, PyNode>) -> PyResult<PyNode> {
        self.__matmul__(other)
    }
    /// The sum over `dim` (every element when None).
    #[pyo3(signature = (dim=None, keepdim=false))]
    fn sum(&self, dim: Option<&Bound<'_, PyAny>>, keepdim: bool) -> PyResult<PyNode> {
        match axes_arg(dim)? {
            None => self.unary(Node::sum),
            Some(axes) => self.unary(|a| a.sum_axes(&axes, keepdim)),
        }
    }
    #[pyo3(signature = (dim=None, keepdim=false))]
    fn mean(&self, dim: Option<&Bound<'_, PyAny>>, keepdim: bool) -> PyResult<PyNode> {
        match axes_arg(dim)? {
            None => self.unary(Node::mean),
            Some(axes) => self.unary(|a| a.mean_axes(&axes, keepdim)),
        }
    }
    fn reshape(&self, shape: Vec<usize>) -> PyResult<PyNode> {
        self.unary(|a| a.reshape(&shape))
    }
    fn transpose(&self, dim0: isize, dim1: isize) -> PyResult<PyNode> {
        self.unary(|a| a.transpose(dim0, dim1))
    }
    #[pyo3(signature = (dim=-1))]
    fn softmax(&self, dim: isize) -> PyResult<PyNode> {
        self.unary(|a| a.softmax(dim))
    }
    #[pyo3(signature = (dim=-1))]
    fn log_softmax(&self, dim: isize) -> PyResult<PyNode> {
        self.unary(|a| a.log_softmax(dim))
    }
    fn stop_gradient(&self) -> PyResult<PyNode> {
        self.unary(Node::stop_gradient)
    }
    /// Layer normalisation over the last axis, scaled by `weight` and shifted by `bias`
    /// (nodes of shape `[D]`), as `Tensor.layer_norm`.
    #[pyo3(signature = (weight, bias, eps=1e-5))]
    fn layer_norm(
        &self,
        weight: PyRef<'_, PyNode>,
        bias: PyRef<'_, PyNode>,
        eps: f64,
    ) -> PyResult<PyNode> {
        self.unary(|a| a.layer_norm(&weight.node, &bias.node, eps))
    }
    /// GELU with the exact normal CDF.
    fn gelu(&self) -> PyResult<PyNode> {
        self.unary(Node::gelu)
    }
    #[pyo3(signature = (negative_slope=0.01))]
    fn leaky_relu(&self, negative_slope: f64) -> PyResult<PyNode> {
        self.unary(|a| a.leaky_relu(negative_slope))
    }
    #[pyo3(signature = (alpha=1.0))]
    fn elu(&self, alpha: f64) -> PyResult<PyNode> {
        self.unary(|a| a.elu(alpha))
    }
    /// Values limited to `[min, max]`; a bound left out is infinite.
    #[pyo3(signature = (min=None, max=None))]
    fn clamp(&self, min: Option<f64>, max: Option<f64>) -> PyResult<PyNode> {
        let (lo, hi) = (
            min.unwrap_or(f64::NEG_INFINITY),
            max.unwrap_or(f64::INFINITY),
        );
        self.unary(|a| a.clamp(lo, hi))
    }
    /// `x ** p` for a number `p`.
    fn pow(&self, p: f64) -> PyResult<PyNode> {
        self.unary(|a| a.powf(p))
    }

    /// The graph this node belongs to.
    #[getter]
    fn graph(&self) -> PyGraph {
        PyGraph {
            graph: self.node.graph().clone(),
        }
    }

    /// The node's position in its graph.
    #[getter]
    fn index(&self) -> usize {
        self.node.index()
    }

    fn __repr__(&self) -> String {
        format!("{:?}", self.node)
    }

    /// Nodes hash by identity (`==` would build a comparison node in a tensor library; here it
    /// is identity, so nodes can key a `feed_dict`).
    fn __hash__(&self) -> u64 {
        self.node.graph().id().wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ self.node.index() as u64
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<PyNode>().is_ok_and(|o| {
            let o = &o.borrow().node;
            o.index() == self.node.index() && o.graph().id() == self.node.graph().id()
        })
    }
}

/// simpleflow's `GradientDescentOptimizer(learning_rate).minimize(loss)`: a node that, when
/// run, takes one gradient-descent step on every variable the loss depends on.
#[pyclass(name = "GradientDescentOptimizer", module = "ferrograd.graph")]
pub struct PyGradientDescent {
    optimizer: GradientDescentOptimizer,
}

#[pymethods]
impl PyGradientDescent {
    #[new]
    fn new(learning_rate: f64) -> PyGradientDescent {
        PyGradientDescent {
            optimizer: GradientDescentOptimizer::new(learning_rate),
        }
    }

    fn minimize(&self, loss: PyRef<'_, PyNode>) -> PyResult<PyNode> {
        guard::run(|| node(self.optimizer.minimize(&loss.node)))
    }
}

/// Runs nodes of one graph: `run(fetches, feed_dict=None)` returns numpy values (a list for a
/// list of fetches). Variables keep their values across runs.
#[pyclass(name = "Session", module = "ferrograd.graph")]
pub struct PySession {
    session: Session,
    graph: Graph,
}

fn feed(graph: &Graph, feed_dict: Option<&Bound<'_, PyDict>>) -> PyResult<Feed> {
    let mut feed = Feed::new();
    let Some(d) = feed_dict else {
        return Ok(feed);
    };
    for (k, v) in d.iter() {
        let n = k
            .cast::<PyNode>()
            .map_err(|_| PyKeyError::new_err("feed_dict keys must be placeholders"))?
            .borrow()
            .node
            .clone();
        if n.graph().id() != graph.id() {
            return Err(PyValueError::new_err(format!(
                "feed_dict: {n:?} belongs to another graph than the session's"
            )));
        }
        let t: Tensor = input(&v)?;
        feed = feed.with(&n, t);
    }
    Ok(feed)
}

#[pymethods]
impl PySession {
    #[new]
    fn new(graph: PyRef<'_, PyGraph>) -> PySession {
        PySession {
            session: Session::new(&graph.graph),
            graph: graph.graph.clone(),
        }
    }

    /// The values of `fetches` (a node, or a list of nodes computed in one pass), given the
    /// placeholders' values in `feed_dict` (numpy float64 arrays are fed as float32, the
    /// variables' dtype). A missing feed raises `ValueError` naming the placeholder.
    #[pyo3(signature = (fetches, feed_dict=None))]
    fn run<'py>(
        &mut self,
        py: Python<'py>,
        fetches: &Bound<'py, PyAny>,
        feed_dict: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let feed = feed(&self.graph, feed_dict)?;
        if let Ok(n) = fetches.cast::<PyNode>() {
            let n = n.borrow().node.clone();
            let t = guard::run(|| self.session.run(&n, &feed))?.map_err(core_error)?;
            return to_numpy(py, &t);
        }
        let nodes: Vec<PyRef<'py, PyNode>> = fetches.extract()?;
        let refs: Vec<&Node> = nodes.iter().map(|n| &n.node).collect();
        let ts = guard::run(|| self.session.run_many(&refs, &feed))?.map_err(core_error)?;
        let values: Vec<Bound<'py, PyAny>> = ts
            .iter()
            .map(|t| to_numpy(py, t))
            .collect::<PyResult<_>>()?;
        Ok(if fetches.is_instance_of::<PyTuple>() {
            PyTuple::new(py, values)?.into_any()
        } else {
            PyList::new(py, values)?.into_any()
        })
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __exit__(
        &self,
        _t: &Bound<'_, PyAny>,
        _v: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> bool {
        false
    }
}

/// Registers the static-graph classes on `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyGraph>()?;
    m.add_class::<PyNode>()?;
    m.add_class::<PyGradientDescent>()?;
    m.add_class::<PySession>()?;
    Ok(())
}
