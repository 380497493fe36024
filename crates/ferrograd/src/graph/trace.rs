//! A function of tensors recorded as a graph by running it once, eagerly: each op it calls
//! becomes a node (through the same table that gives `Node` its methods), the inputs become
//! placeholders, the named parameters variables, and every other tensor it reads a constant.
//! What ONNX export writes, and what a compiled step will run.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use super::{Graph, Node, Op};
use crate::autograd::Param;
use crate::error::{Error, Result};
use crate::tensor::trace::{record_events, Event};
use crate::tensor::{enable_grad, Tensor};

/// A traced function: its graph, and which nodes are its inputs and outputs.
pub struct Trace {
    /// Placeholders for the inputs, variables for the parameters, constants for every other
    /// tensor the function read, and a node for each op it called.
    pub graph: Graph,
    /// The placeholder of each input, in order.
    pub inputs: Vec<Node>,
    /// The node of each output, in order.
    pub outputs: Vec<Node>,
}

/// Runs `f` once on `inputs` (named, for the placeholders) and records what it computes as a
/// graph. Parameters that `f` reads become variables under the names given in `params` (a
/// module's `named_parameters`); any other tensor becomes a constant.
///
/// Every op `f` calls must have a graph form; the error names each that has none. The values
/// `f` computed are the graph's at these inputs, so control flow that depends on values is
/// recorded as taken.
///
/// ```
/// use ferrograd::graph::{trace, Feed, Session};
/// use ferrograd::prelude::*;
///
/// let w = Param::new(Tensor::from_vec(vec![2.0f32, -1.0], &[1, 2]));
/// let x = Tensor::from_vec(vec![1.0f32, 3.0], &[1, 2]);
/// let t = trace(&[("x", &x)], &[("w".to_string(), w.clone())], |xs| {
///     vec![xs[0].linear(&w.tensor(), None).relu()]
/// })?;
/// assert_eq!(t.graph.to_string().lines().count(), 4); // x, w, linear, relu
/// let mut sess = Session::new(&t.graph);
/// let y = sess.run(&t.outputs[0], &Feed::new().with(&t.inputs[0], x))?;
/// assert_eq!(y.to_vec::<f32>(), vec![0.0]);
/// # Ok::<(), ferrograd::Error>(())
/// ```
pub fn trace(
    inputs: &[(&str, &Tensor)],
    params: &[(String, Param)],
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> Result<Trace> {
    let named: Vec<(String, Tensor)> = params
        .iter()
        .map(|(n, p)| (n.clone(), p.tensor()))
        .collect();
    trace_named(inputs, &named, f)
}

/// [`trace`] with the values to name given as tensors (a Python module's parameters and
/// buffers): a tracked leaf is known by its identity, which a parameter keeps across updates,
/// any other tensor by being the same tensor.
pub fn trace_named(
    inputs: &[(&str, &Tensor)],
    named: &[(String, Tensor)],
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> Result<Trace> {
    Ok(trace_reading(inputs, named, f)?.0)
}

/// What a trace saw beside the graph: what a graph cannot stand for.
pub(crate) struct Seen {
    /// Whether `f` read values (`item`, `to_vec`) of what it was given or computed: its
    /// control flow may then depend on them, which the graph records as taken.
    pub read: bool,
    /// The first constant that was a trainable leaf (a parameter not named): a graph keeps
    /// its traced value, where `f` would read the parameter's value at each call.
    pub trainable_constant: Option<usize>,
}

/// [`trace_named`], and what it saw.
pub(crate) fn trace_reading(
    inputs: &[(&str, &Tensor)],
    named: &[(String, Tensor)],
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> Result<(Trace, Seen)> {
    // Inputs of a float dtype are tracked, so that a tensor computed from them by an op with
    // no graph form is told from a constant.
    let fed: Vec<Tensor> = inputs
        .iter()
        .map(|(_, t)| match t.dtype().is_float() {
            true => t.detach().requires_grad(),
            false => t.detach(),
        })
        .collect();
    let (outputs, mut noted) = record_events(&fed, false, || enable_grad(|| f(&fed)));
    let events = std::mem::take(&mut noted.events);
    let mut b = Builder {
        graph: Graph::new(),
        known: HashMap::new(),
        by_id: named
            .iter()
            .filter(|(_, t)| t.is_leaf())
            .filter_map(|(n, t)| Some((t.id()?, n.as_str())))
            .collect(),
        by_value: named.iter().map(|(n, t)| (t, n.as_str())).collect(),
        untraced: BTreeSet::new(),
        trainable_constant: None,
    };
    let inputs: Vec<Node> = inputs
        .iter()
        .zip(&fed)
        .map(|((name, _), t)| {
            let shape: Vec<Option<usize>> = t.shape().iter().map(|&d| Some(d)).collect();
            let node = b.graph.placeholder_with(name, &shape, t.dtype());
            b.known.insert(key(t), node.clone());
            node
        })
        .collect();
    // The ops called inside ops are the outer ops' business.
    for event in events.into_iter().filter(|e| e.depth == 1) {
        b.add(event)?;
    }
    let outputs = outputs.iter().map(|t| b.node_of(t)).collect();
    if !b.untraced.is_empty() {
        let names: Vec<String> = b.untraced.into_iter().collect();
        return Err(Error::Graph(format!(
            "trace: these ops have no graph form, so the trace cannot record them: {}",
            names.join(", ")
        )));
    }
    let trace = Trace {
        graph: b.graph,
        inputs,
        outputs,
    };
    let seen = Seen {
        read: noted.read,
        trainable_constant: b.trainable_constant,
    };
    Ok((trace, seen))
}

/// A tensor's identity while the trace lives (the events keep every tensor alive, so no
/// address is reused).
fn key(t: &Tensor) -> usize {
    Arc::as_ptr(&t.0) as usize
}

struct Builder<'a> {
    graph: Graph,
    known: HashMap<usize, Node>,
    /// Names of parameters, by their leaves' identity.
    by_id: HashMap<u64, &'a str>,
    /// Names of other values (buffers, which may reach ops as detached copies): a tensor
    /// that views the same elements of the same buffer has the name.
    by_value: Vec<(&'a Tensor, &'a str)>,
    /// The ops whose results reached the trace without an event of their own.
    untraced: BTreeSet<String>,
    /// The first constant made from a trainable leaf.
    trainable_constant: Option<usize>,
}

impl Builder<'_> {
    /// The node of a tensor the trace has met, or a new variable or constant for one it
    /// has not.
    fn node_of(&mut self, t: &Tensor) -> Node {
        if let Some(n) = self.known.get(&key(t)) {
            return n.clone();
        }
        let param = t.is_leaf().then(|| t.id()).flatten();
        let name = param.and_then(|id| self.by_id.get(&id));
        let same = |(v, _): &&(&Tensor, &str)| v.shares_storage(t) && v.layout() == t.layout();
        let by_value = || self.by_value.iter().find(same).map(|(_, n)| n);
        let node = match name.or_else(by_value) {
            Some(name) => self.graph.variable(name, t.detach()),
            None => {
                if let Some(op) = t.grad_fn() {
                    self.untraced.insert(op);
                }
                let node = self.graph.constant(t.clone());
                if t.is_leaf() {
                    self.trainable_constant.get_or_insert(node.index());
                }
                node
            }
        };
        self.known.insert(key(t), node.clone());
        node
    }

    /// The nodes of one event: the op's, and an `Output` node for each further output.
    fn add(&mut self, event: Event) -> Result<()> {
        let op = Op::from_trace(event.variant, event.attrs).map_err(Error::Graph)?;
        let inputs: Vec<Node> = event.inputs.iter().map(|t| self.node_of(t)).collect();
        let refs: Vec<&Node> = inputs.iter().collect();
        let node = self.graph.try_add(op, &refs)?;
        for (index, out) in event.outputs.iter().enumerate() {
            let n = match index {
                0 => node.clone(),
                _ => self.graph.try_add(Op::Output { index }, &[&node])?,
            };
            self.known.insert(key(out), n);
        }
        Ok(())
    }
}
