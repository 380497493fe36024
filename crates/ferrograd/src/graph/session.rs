//! Running a graph: a `Feed` of placeholder values, and a `Session` that evaluates the nodes a
//! run needs, each once, with the eager ops and the eager backward engine.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use super::op::{show, Op};
use super::optimize::Plan;
use super::{Graph, Node};
use crate::autograd::{try_grad, Gradients, Param};
use crate::error::{Error, Result};
use crate::nn::Module;
use crate::tensor::{enable_grad, no_grad, Tensor};

/// Values for placeholders, for one or more runs.
#[derive(Clone, Default)]
pub struct Feed {
    values: HashMap<usize, (u64, Tensor)>,
}

/// The fed placeholders with their values' shapes and dtypes, in node order.
type FeedShapes = Vec<(usize, Vec<usize>, crate::tensor::DType)>;

impl Feed {
    fn shapes(&self) -> FeedShapes {
        let mut out: FeedShapes = self
            .values
            .iter()
            .map(|(&i, (_, t))| (i, t.shape().to_vec(), t.dtype()))
            .collect();
        out.sort_by_key(|(i, _, _)| *i);
        out
    }

    /// No values.
    pub fn new() -> Feed {
        Feed::default()
    }

    /// This feed with `value` for the placeholder `node`.
    pub fn with(mut self, node: &Node, value: Tensor) -> Feed {
        self.values.insert(node.index(), (node.graph().id(), value));
        self
    }
}

/// Evaluates nodes of one graph. Variables keep their values across runs (they live in the
/// graph); optimizer state lives in the `minimize` nodes.
pub struct Session {
    graph: Graph,
    optimize: bool,
    plan: Option<Plan>,
    /// What runs of each set of fetches need, worked out on their first run.
    needs: HashMap<Vec<usize>, Needs>,
    /// Fetches and fed shapes and dtypes that have run: shapes follow from them, so their
    /// runs need no shape checks again.
    checked: HashSet<(Vec<usize>, FeedShapes)>,
    evaluations: u64,
}

/// What one run works out before evaluating.
struct Needs {
    /// Nodes to evaluate, in order.
    order: Vec<usize>,
    /// Nodes whose value must be a tracked tensor: the targets of gradients.
    wrt: HashSet<usize>,
    /// Gradient nodes whose own gradient is needed (evaluated with a graph).
    nested: HashSet<usize>,
    /// Whether anything is differentiated (values are then recorded).
    differentiates: bool,
}

impl Session {
    /// A session on `g`; before its first run it merges common sub-expressions and folds
    /// constant sub-graphs.
    pub fn new(g: &Graph) -> Session {
        Session {
            graph: g.clone(),
            optimize: true,
            plan: None,
            needs: HashMap::new(),
            checked: HashSet::new(),
            evaluations: 0,
        }
    }

    /// A session that evaluates the graph as built, without the optimisation pass.
    pub fn unoptimized(g: &Graph) -> Session {
        Session {
            optimize: false,
            ..Session::new(g)
        }
    }

    /// Ops evaluated by this session's runs so far (leaves and folded values not counted).
    pub fn evaluations(&self) -> u64 {
        self.evaluations
    }

    /// The value of `fetch`.
    pub fn run(&mut self, fetch: &Node, feed: &Feed) -> Result<Tensor> {
        Ok(self.run_many(&[fetch], feed)?.remove(0))
    }

    /// The values of `fetches`, from one evaluation of the nodes they need (shared work is
    /// done once).
    pub fn run_many(&mut self, fetches: &[&Node], feed: &Feed) -> Result<Vec<Tensor>> {
        let id = self.graph.id();
        if fetches.iter().any(|n| n.graph().id() != id) {
            return Err(Error::Graph(
                "run: a fetched node belongs to another graph".into(),
            ));
        }
        if feed.values.values().any(|(g, _)| *g != id) {
            return Err(Error::Graph(
                "run: the feed holds a node of another graph".into(),
            ));
        }
        for &i in feed.values.keys() {
            let op = &self.graph.nodes()[i].op;
            if !matches!(op, Op::Placeholder { .. }) {
                return Err(Error::Graph(format!(
                    "run: the feed holds %{i} ({}), which is not a placeholder",
                    op.name()
                )));
            }
        }
        if self
            .plan
            .as_ref()
            .is_none_or(|p| p.repr.len() != self.graph.len())
        {
            // The graph grew: plan it again, and what runs need with it.
            self.plan = Some(if self.optimize {
                Plan::optimized(&self.graph)
            } else {
                Plan::plain(&self.graph)
            });
            self.needs.clear();
            self.checked.clear();
        }
        let plan = self.plan.as_ref().expect("planned above");
        let targets: Vec<usize> = fetches.iter().map(|n| plan.repr[n.index()]).collect();
        if !self.needs.contains_key(&targets) {
            let needs = needs(&self.graph, plan, &targets);
            self.needs.insert(targets.clone(), needs);
        }
        let needs = &self.needs[&targets];
        let key = (targets.clone(), feed.shapes());
        let check = !self.checked.contains(&key);
        let mut evaluations = 0;
        let run = || evaluate(&self.graph, plan, needs, feed, check, &mut evaluations);
        let result = if needs.differentiates {
            enable_grad(run)
        } else {
            no_grad(run)
        };
        self.evaluations += evaluations;
        let (values, steps) = result?;
        if check {
            self.checked.insert(key);
        }
        let out = targets
            .iter()
            .map(|&t| values[t].clone().expect("evaluated").detach())
            .collect();
        // The recorded graph goes before the optimizers step, as in `Model::train_step`, so
        // that they update the variables in place instead of copying buffers still shared.
        drop(values);
        let nodes = self.graph.nodes();
        for (m, grads) in steps {
            step(&nodes, &m, &grads);
        }
        Ok(out)
    }

    /// Writes every variable of the graph to a safetensors file, by name, atomically.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        self.variables().save_safetensors(path)
    }

    /// Sets every variable from a file written by [`Session::save`]. Every missing or
    /// unexpected name and every shape or dtype mismatch is listed in the error, and then
    /// nothing changes.
    pub fn restore(&mut self, path: impl AsRef<Path>) -> Result<()> {
        self.variables().load_safetensors(path)
    }

    fn variables(&self) -> Variables {
        let vars = self.graph.variables();
        Variables(vars.into_iter().map(|(_, name, p)| (name, p)).collect())
    }
}

/// A graph's variables as a module, which saving and loading come with.
struct Variables(Vec<(String, Param)>);

impl Module for Variables {
    fn params(&self) -> Vec<(String, Param)> {
        self.0.clone()
    }
}

/// Node `i`'s ancestors (itself included) through the plan's representatives.
fn ancestors(nodes: &[super::NodeData], plan: &Plan, i: usize) -> Vec<usize> {
    let mut seen = HashSet::new();
    let mut stack = vec![i];
    while let Some(k) = stack.pop() {
        if seen.insert(k) {
            stack.extend(nodes[k].inputs.iter().map(|&j| plan.repr[j]));
        }
    }
    seen.into_iter().collect()
}

/// Whether `v`'s shape is `shape` (any shape when unknown; free axes take any length).
fn fits(shape: Option<&super::Shape>, v: &Tensor) -> bool {
    shape.is_none_or(|s| {
        s.len() == v.ndim()
            && s.iter()
                .zip(v.shape())
                .all(|(d, &n)| d.is_none_or(|d| d == n))
    })
}

/// The value fed for placeholder `i`, checked against its declared shape and dtype.
fn fed(
    feed: &Feed,
    i: usize,
    name: &str,
    shape: Option<&super::Shape>,
    dtype: Option<crate::tensor::DType>,
) -> Result<Tensor> {
    let Some((_, v)) = feed.values.get(&i) else {
        return Err(Error::Graph(format!(
            "run: no value fed for placeholder {name:?}"
        )));
    };
    if !fits(shape, v) || dtype.is_some_and(|d| d != v.dtype()) {
        return Err(Error::Graph(format!(
            "run: placeholder {name:?} takes {} {}, fed {:?} {}",
            shape.map_or("any shape".to_string(), |s| show(s)),
            dtype.map_or("of any dtype".to_string(), |d| d.to_string()),
            v.shape(),
            v.dtype()
        )));
    }
    Ok(v.clone())
}

/// The nodes the targets need, in order, and which of them gradients involve.
fn needs(graph: &Graph, plan: &Plan, targets: &[usize]) -> Needs {
    let nodes = graph.nodes();
    let mut needed = vec![false; nodes.len()];
    let mut stack: Vec<usize> = targets.to_vec();
    while let Some(i) = stack.pop() {
        if std::mem::replace(&mut needed[i], true) || plan.folded[i].is_some() {
            continue;
        }
        stack.extend(nodes[i].inputs.iter().map(|&j| plan.repr[j]));
    }
    let order: Vec<usize> = (0..nodes.len()).filter(|&i| needed[i]).collect();
    let (mut wrt, mut nested) = (HashSet::new(), HashSet::new());
    let mut differentiates = false;
    for &i in &order {
        let inputs: Vec<usize> = nodes[i].inputs.iter().map(|&j| plan.repr[j]).collect();
        let differentiated = match nodes[i].op {
            Op::Grad => {
                wrt.insert(inputs[1]);
                inputs[0]
            }
            Op::Minimize(_) => inputs[0],
            _ => continue,
        };
        differentiates = true;
        // A gradient node on the way to a differentiated value needs its own graph.
        nested.extend(
            ancestors(&nodes, plan, differentiated)
                .into_iter()
                .filter(|&a| matches!(nodes[a].op, Op::Grad)),
        );
    }
    Needs {
        order,
        wrt,
        nested,
        differentiates,
    }
}

/// A training op's optimizer with the gradients to step it by.
type PendingStep = (super::train::Minimizer, Gradients);

/// Every needed node's value (and the folded ones), counting op evaluations, and the steps
/// training ops are to take once the values are released.
fn evaluate(
    graph: &Graph,
    plan: &Plan,
    needs: &Needs,
    feed: &Feed,
    check: bool,
    evaluations: &mut u64,
) -> Result<(Vec<Option<Tensor>>, Vec<PendingStep>)> {
    let nodes = graph.nodes();
    let mut values: Vec<Option<Tensor>> = plan.folded.clone();
    // The further outputs of ops that have several, by node.
    let mut parts: HashMap<usize, Vec<Tensor>> = HashMap::new();
    let mut steps = Vec::new();
    for &i in &needs.order {
        let v = match values[i].take() {
            // Constants and folded values; a gradient target among them becomes a leaf.
            Some(v) => v,
            None => {
                let n = &nodes[i];
                let inputs: Vec<Tensor> = n
                    .inputs
                    .iter()
                    .map(|&j| values[plan.repr[j]].clone().expect("inputs come first"))
                    .collect();
                match &n.op {
                    Op::Placeholder { name, shape, dtype } => {
                        fed(feed, i, name, shape.as_ref(), *dtype)?
                    }
                    Op::Variable { param, .. } => param.tensor(),
                    Op::Grad => {
                        *evaluations += 1;
                        gradients_of(&nodes, plan, needs, &mut values, i, &inputs)
                            .map_err(|e| Error::Graph(format!("run: %{i} gradients: {e}")))?
                    }
                    Op::Minimize(m) => {
                        *evaluations += 1;
                        let loss = &inputs[0];
                        // A loss that reaches no trainable variable leaves nothing to step.
                        if loss.is_tracked() {
                            let grads = loss
                                .try_backward()
                                .map_err(|e| Error::Graph(format!("run: %{i} minimize: {e}")))?;
                            steps.push((m.clone(), grads));
                        }
                        loss.detach()
                    }
                    Op::Output { index } => {
                        let source = plan.repr[n.inputs[0]];
                        parts[&source][*index - 1].clone()
                    }
                    op => {
                        *evaluations += 1;
                        let inferred = match check {
                            true => Some(check_run_shapes(i, op, &inputs)?),
                            false => None,
                        };
                        let mut v = op.eval(&inputs);
                        if let Some(inferred) = inferred {
                            agrees(i, op, &inferred, &v);
                        }
                        let first = v.remove(0);
                        if !v.is_empty() {
                            parts.insert(i, v);
                        }
                        first
                    }
                }
            }
        };
        values[i] = Some(if needs.wrt.contains(&i) && !v.is_tracked() {
            if !v.dtype().is_float() {
                return Err(Error::Graph(format!(
                    "run: gradients are taken with respect to %{i}, whose value is {}",
                    v.dtype()
                )));
            }
            v.requires_grad()
        } else {
            v
        });
    }
    Ok((values, steps))
}

/// The value of gradient node `i` (inputs `y`, `x`), computed in one backward pass together
/// with every later gradient node of the same `y` whose target is already evaluated; their
/// values are stored in `values`.
fn gradients_of(
    nodes: &[super::NodeData],
    plan: &Plan,
    needs: &Needs,
    values: &mut [Option<Tensor>],
    i: usize,
    inputs: &[Tensor],
) -> Result<Tensor> {
    let y = plan.repr[nodes[i].inputs[0]];
    let nested = needs.nested.contains(&i);
    let siblings: Vec<usize> = needs
        .order
        .iter()
        .copied()
        .filter(|&j| {
            j > i
                && matches!(nodes[j].op, Op::Grad)
                && values[j].is_none()
                && plan.repr[nodes[j].inputs[0]] == y
                && needs.nested.contains(&j) == nested
                && values[plan.repr[nodes[j].inputs[1]]].is_some()
        })
        .collect();
    let mut xs = vec![inputs[1].clone()];
    xs.extend(siblings.iter().map(|&j| {
        values[plan.repr[nodes[j].inputs[1]]]
            .clone()
            .expect("checked")
    }));
    let refs: Vec<&Tensor> = xs.iter().collect();
    let mut grads = try_grad(&inputs[0], &refs, nested)?;
    for (&j, g) in siblings.iter().zip(grads.drain(1..)) {
        values[j] = Some(g);
    }
    Ok(grads.remove(0))
}

/// The shape and dtype the graph inferred for each output of a node, as far as known.
type Inferred = Vec<super::op::Partial>;

/// The op's shape rule on the values' actual shapes (free axes and unshaped placeholders are
/// only known now): an error naming the node, not a panic inside the op.
fn check_run_shapes(i: usize, op: &Op, inputs: &[Tensor]) -> Result<Inferred> {
    let shapes: Vec<(Option<super::Shape>, Option<crate::tensor::DType>)> = inputs
        .iter()
        .map(|t| (Some(super::op::known(t.shape())), Some(t.dtype())))
        .collect();
    op.infer_partial(&shapes).map_err(|why| {
        let given: Vec<String> = inputs
            .iter()
            .map(|t| format!("{:?} {}", t.shape(), t.dtype()))
            .collect();
        Error::Shape(format!(
            "run: %{i} {}: {why} (inputs {})",
            op.name(),
            given.join(", ")
        ))
    })
}

/// Panics unless the eager op produced the shapes and dtypes the graph inferred for it: the
/// graph's shape rules and the eager ops' must never disagree (checked on each first run).
fn agrees(i: usize, op: &Op, inferred: &Inferred, values: &[Tensor]) {
    assert_eq!(
        inferred.len(),
        values.len(),
        "graph %{i} {}: outputs",
        op.name()
    );
    for ((shape, dtype), value) in inferred.iter().zip(values) {
        agrees_one(i, op, shape, *dtype, value);
    }
}

fn agrees_one(
    i: usize,
    op: &Op,
    shape: &Option<super::Shape>,
    dtype: Option<crate::tensor::DType>,
    value: &Tensor,
) {
    assert!(
        fits(shape.as_ref(), value) && dtype.is_none_or(|d| d == value.dtype()),
        "graph %{i} {}: inferred {} {}, but the op gave {:?} {}",
        op.name(),
        super::op::show_opt(shape),
        dtype.map_or("?".to_string(), |d| d.to_string()),
        value.shape(),
        value.dtype()
    );
}

/// One step of `m`'s optimizer on its variables.
fn step(nodes: &[super::NodeData], m: &super::train::Minimizer, grads: &Gradients) {
    let params: Vec<(String, Param)> = m
        .vars
        .iter()
        .filter_map(|&v| match &nodes[v].op {
            Op::Variable { name, param } => Some((name.clone(), param.clone())),
            _ => None,
        })
        .collect();
    m.optimizer().step(&params, grads);
}
