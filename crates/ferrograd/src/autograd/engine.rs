//! The backward engine: nodes newest first over the recorded graph, iterative (no recursion
//! however long the graph), summing the contributions of every consumer.

use std::collections::hash_map::Entry;
use std::collections::BinaryHeap;

use smallvec::SmallVec;

use super::anomaly;
use super::gradients::Gradients;
use super::ids::{IdMap, IdSet};
use crate::error::{Error, Result};
use crate::tensor::anomaly::{enabled as anomaly_enabled, in_rule};
use crate::tensor::record::OpRecord;
use crate::tensor::{BackwardCtx, InputGrads, ModeGuard, Node, NodeKind, Part, Tensor};

/// Which gradients a backward pass keeps.
pub(crate) enum Targets {
    /// Every tracked leaf (and parameter) that reaches the output.
    Leaves,
    /// Exactly these nodes, leaves or intermediate results.
    Nodes(IdSet),
}

impl Targets {
    fn contains(&self, node: &Node) -> bool {
        match self {
            Targets::Leaves => matches!(node.kind, NodeKind::Leaf),
            Targets::Nodes(ids) => ids.contains(&node.id),
        }
    }
}

/// The node of a tensor the engine reached (every queued tensor is tracked).
fn node_of(t: &Tensor) -> &Node {
    t.0.node
        .as_ref()
        .expect("the graph holds only tracked tensors")
}

/// The tracked inputs of `t`'s op (none for a leaf).
fn tracked_inputs(t: &Tensor) -> impl Iterator<Item = &Tensor> {
    node_of(t)
        .op()
        .into_iter()
        .flat_map(|r| r.inputs.iter())
        .filter(|i| i.is_tracked())
}

/// Every node reachable from the tracked `root` (itself included), each once, oldest first:
/// a node's inputs are always older than the node, so they come before it.
fn oldest_first(root: &Tensor) -> Vec<Tensor> {
    let mut all: Vec<Tensor> = Vec::new();
    let mut seen = IdSet::default();
    let mut stack = vec![root.clone()];
    seen.insert(node_of(root).id);
    while let Some(t) = stack.pop() {
        for child in tracked_inputs(&t) {
            if seen.insert(node_of(child).id) {
                stack.push(child.clone());
            }
        }
        all.push(t);
    }
    all.sort_unstable_by_key(|t| node_of(t).id);
    all
}

/// Ids of the nodes reachable from `root` that lead to one of `ids` (the targets included).
fn leading_to(root: &Tensor, ids: &IdSet) -> IdSet {
    // In increasing id order, each input is decided before its consumers.
    let mut leads = IdSet::default();
    for t in &oldest_first(root) {
        let via_input = tracked_inputs(t).any(|c| leads.contains(&node_of(c).id));
        if ids.contains(&node_of(t).id) || via_input {
            leads.insert(node_of(t).id);
        }
    }
    leads
}

/// For each tracked leaf reachable from `root`: how many inputs of the reachable ops it is
/// (one per use), so that the pass knows when its last contribution has arrived.
fn leaf_consumers(root: &Tensor) -> IdMap<usize> {
    let mut counts = IdMap::default();
    let mut seen = IdSet::default();
    let mut stack = vec![root.clone()];
    seen.insert(node_of(root).id);
    while let Some(t) = stack.pop() {
        for child in tracked_inputs(&t) {
            if child.is_leaf() {
                *counts.entry(node_of(child).id).or_insert(0) += 1;
            }
            if seen.insert(node_of(child).id) {
                stack.push(child.clone());
            }
        }
    }
    counts
}

/// A tracked tensor in the work queue, ordered by its node's id: the newest first. The id is
/// kept inline so that heap comparisons do not chase pointers (cache misses on large graphs).
struct Newest(u64, Tensor);

impl Newest {
    fn of(t: &Tensor) -> Newest {
        Newest(node_of(t).id, t.clone())
    }
}

impl PartialEq for Newest {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}
impl Eq for Newest {}
impl PartialOrd for Newest {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Newest {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.cmp(&other.0)
    }
}

/// Runs backward from `root` seeded with `seed` (the gradient of the final result with respect
/// to `root`) and returns the gradients of `targets`, keyed by node id; `on_result` sees each
/// of them the moment it is final, while the pass goes on with the rest.
///
/// Nodes are processed newest first. An op is always recorded after its inputs, so a node's
/// consumers are all newer than it: when a node comes off the queue, every contribution to its
/// gradient has arrived and is summed. No topological sort and no recursion are needed.
pub(crate) fn run_backward(
    root: &Tensor,
    seed: Tensor,
    targets: &Targets,
    create_graph: bool,
    early: bool,
    on_result: &mut dyn FnMut(u64, &Tensor),
) -> Result<IdMap<Tensor>> {
    let mut results = IdMap::default();
    if !root.is_tracked() {
        return Ok(results);
    }
    // While a trace runs (a transform records a function that takes a gradient), the rules
    // run as ops it can follow, not as the fused kernels of a pass without a graph.
    let create_graph = create_graph || crate::tensor::trace::is_tracing();
    let _mode = ModeGuard::set(create_graph);
    // With explicit targets, only nodes that lead to one are visited; every recorded node leads
    // to a tracked leaf by construction.
    let leads = match targets {
        Targets::Leaves => None,
        Targets::Nodes(ids) => Some(leading_to(root, ids)),
    };
    let wanted = |n: &Node| leads.as_ref().is_none_or(|l| l.contains(&n.id));
    if !wanted(node_of(root)) {
        return Ok(results);
    }

    let mut pending: IdMap<Tensor> = IdMap::default();
    pending.insert(node_of(root).id, seed);
    let mut queue = BinaryHeap::from([Newest::of(root)]);
    // A leaf (a parameter) is older than every op of the forward pass, so it comes off the
    // queue only at the very end; a caller that wants each gradient as soon as it is final
    // (`early`) is told when the leaf's last consumer has been processed instead.
    let mut consumers = if early {
        leaf_consumers(root)
    } else {
        IdMap::default()
    };
    let mut told = IdSet::default();
    while let Some(Newest(id, out)) = queue.pop() {
        // Taking the gradient frees it as soon as it has been passed on.
        let g = pending.remove(&id).expect("queued nodes have a gradient");
        let node = node_of(&out);
        if targets.contains(node) {
            if told.insert(id) {
                on_result(id, &g);
            }
            results.insert(id, g.clone());
        }
        let Some(rec) = node.op() else { continue };
        let needs: SmallVec<[bool; 4]> = rec
            .inputs
            .iter()
            .map(|t| t.0.node.as_ref().is_some_and(wanted))
            .collect();
        // Anomaly detection takes the rule's way: its sums are recorded, so checked.
        match rec.part.filter(|_| !create_graph && !anomaly_enabled()) {
            // A block of its input (see `Part`): its gradient goes into that block as it is.
            Some(part) if needs[0] => {
                let share = Share::Part(part, g);
                pass_on(&mut pending, &mut queue, &rec.inputs[0], share);
            }
            Some(_) => {}
            None => {
                let grads = apply_rule(rec, &out, &g, &needs)?;
                for ((input, gi), &need) in rec.inputs.iter().zip(grads).zip(&needs) {
                    if let (Some(gi), true) = (gi, need) {
                        check_gradient(rec, input, &gi);
                        pass_on(&mut pending, &mut queue, input, Share::Whole(gi));
                    }
                }
            }
        }
        if early {
            for input in rec.inputs.iter().filter(|t| t.is_leaf()) {
                let leaf = node_of(input);
                let Some(left) = consumers.get_mut(&leaf.id) else {
                    continue;
                };
                *left -= 1;
                let ready = *left == 0 && targets.contains(leaf);
                if let Some(g) = pending.get(&leaf.id).filter(|_| ready) {
                    told.insert(leaf.id);
                    on_result(leaf.id, g);
                }
            }
        }
    }
    Ok(results)
}

/// A contribution to an input's gradient: the whole of it, or the gradient of a block of the
/// input (a `narrow` of it, in a pass that builds no graph).
enum Share {
    Whole(Tensor),
    Part(Part, Tensor),
}

/// Adds `share` to `input`'s gradient: the first contribution queues the input, later ones
/// add to it.
fn pass_on(
    pending: &mut IdMap<Tensor>,
    queue: &mut BinaryHeap<Newest>,
    input: &Tensor,
    share: Share,
) {
    match (pending.entry(node_of(input).id), share) {
        (Entry::Occupied(mut acc), Share::Whole(g)) => {
            let sum = acc.get() + &g;
            acc.insert(sum);
        }
        (Entry::Occupied(mut acc), Share::Part(part, g)) => acc.get_mut().add_part(part, &g),
        (Entry::Vacant(slot), share) => {
            slot.insert(match share {
                Share::Whole(g) => g,
                Share::Part(part, g) => g.pad_part(part, input.shape()[part.axis]),
            });
            queue.push(Newest::of(input));
        }
    }
}

/// Runs `rec`'s derivative rule for the upstream gradient `g` of its output `out`: one
/// gradient per input (`None` where `needs` is false), checked for NaN/Inf when anomaly
/// detection is on. An op without a derivative is an error naming it.
fn apply_rule(rec: &OpRecord, out: &Tensor, g: &Tensor, needs: &[bool]) -> Result<InputGrads> {
    let _profiled = crate::tensor::profile::scope_with(|| format!("{} backward", rec.name));
    let Some(rule) = &rec.rule else {
        return Err(Error::Backward(format!(
            "{} has no derivative: a gradient reached it during backward; detach its input \
             (tensor.detach()) or compute it under no_grad",
            rec.name
        )));
    };
    // The output itself is tracked: a rule that reads it stays differentiable when the pass
    // builds a graph (and records nothing otherwise).
    let ctx = BackwardCtx {
        inputs: &rec.inputs,
        out,
        needs,
    };
    let grads = in_rule(|| rule(&ctx, g));
    assert_eq!(
        grads.len(),
        rec.inputs.len(),
        "backward of {}: rule returned {} gradients for {} inputs",
        rec.name,
        grads.len(),
        rec.inputs.len()
    );
    anomaly::check_backward(&rec.name, &grads, &rec.inputs);
    Ok(grads)
}

/// Panics naming the op when a rule's gradient does not match its input's shape and dtype.
fn check_gradient(rec: &OpRecord, input: &Tensor, gi: &Tensor) {
    assert!(
        gi.shape() == input.shape() && gi.dtype() == input.dtype(),
        "backward of {}: gradient of shape {:?} ({}) for an input of shape {:?} ({})",
        rec.name,
        gi.shape(),
        gi.dtype(),
        input.shape(),
        input.dtype()
    );
}

/// The seed gradient for `backward()`: one, for a one-element result.
fn unit_seed(root: &Tensor, op: &str) -> Result<Tensor> {
    if root.numel() != 1 {
        return Err(Error::Backward(format!(
            "{op}: the output has shape {:?}; backward needs a one-element result (reduce it \
             with sum() or mean(), or pass the upstream gradient to backward_with)",
            root.shape()
        )));
    }
    Ok(root.ones_like())
}

/// What [`Tensor::backward_with_hook`] calls with each leaf's final gradient.
type Hook<'a> = &'a mut dyn FnMut(u64, &Tensor);

/// Panics with the error's message: the panicking forms of the `try_` functions.
fn or_panic<T>(r: Result<T>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

impl Tensor {
    /// Gradients of this one-element result with respect to every tracked leaf that reaches it.
    /// Each call returns a fresh `Gradients`; the graph can be walked again. Panics where
    /// [`Tensor::try_backward`] returns an error.
    pub fn backward(&self) -> Gradients {
        or_panic(self.try_backward())
    }

    /// [`Tensor::backward`], with an error instead of a panic when this tensor is not a tracked
    /// one-element result, or when a gradient reaches an op without a derivative (`argmax`, a
    /// comparison, an integer cast).
    pub fn try_backward(&self) -> Result<Gradients> {
        self.backward_impl("backward", unit_seed(self, "backward")?, false, None)
    }

    /// As [`Tensor::backward`], with gradients that are themselves differentiable (recorded as a
    /// graph), for higher-order derivatives.
    pub fn backward_with_graph(&self) -> Gradients {
        let seed = or_panic(unit_seed(self, "backward_with_graph"));
        or_panic(self.backward_impl("backward_with_graph", seed, true, None))
    }

    /// Backward from a result of any shape, given the upstream gradient `seed` (same shape).
    pub fn backward_with(&self, seed: &Tensor, create_graph: bool) -> Gradients {
        or_panic(self.try_backward_with(seed, create_graph))
    }

    /// [`Tensor::backward_with`], with an error instead of a panic (a seed of another shape
    /// included).
    pub fn try_backward_with(&self, seed: &Tensor, create_graph: bool) -> Result<Gradients> {
        if seed.shape() != self.shape() {
            return Err(Error::Backward(format!(
                "backward_with: the seed gradient has shape {:?}, the output {:?}; they must be \
                 the same",
                seed.shape(),
                self.shape()
            )));
        }
        let seed = seed.to_dtype(self.dtype());
        self.backward_impl("backward_with", seed, create_graph, None)
    }

    /// Backward to every tracked leaf; `hook`, when given, sees each gradient once final.
    fn backward_impl(
        &self,
        op: &str,
        seed: Tensor,
        create_graph: bool,
        hook: Option<Hook<'_>>,
    ) -> Result<Gradients> {
        if !self.is_tracked() {
            return Err(Error::Backward(format!(
                "{op}: this tensor is not tracked (no input marked requires_grad() reaches it, \
                 or it was computed under no_grad)"
            )));
        }
        // Telling a hook early costs a count of every leaf's consumers: only with a hook.
        let early = hook.is_some();
        let mut quiet = |_: u64, _: &Tensor| {};
        let hook = hook.unwrap_or(&mut quiet);
        run_backward(self, seed, &Targets::Leaves, create_graph, early, hook)
            .map(Gradients::from_map)
    }

    /// The recorded graph that leads to this tensor, one node per line, inputs before the ops
    /// that read them: `%5 = mul(%3, %4)  [2, 3] f32`, leaves as `%3 = leaf  [2, 3] f32`.
    /// Empty for an untracked tensor. The walk is iterative: any depth prints.
    ///
    /// ```
    /// use ferrograd::prelude::*;
    ///
    /// let w = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).requires_grad();
    /// let listing = (&w * &w).sum().graph_listing();
    /// let ops: Vec<&str> = listing.lines().map(|l| l.split_whitespace().nth(2).unwrap()).collect();
    /// assert_eq!(ops, ["leaf", "mul(%0,", "sum_axes(%1)"]);
    /// ```
    pub fn graph_listing(&self) -> String {
        if !self.is_tracked() {
            return String::new();
        }
        let nodes = oldest_first(self);
        let line_of: IdMap<usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, t)| (node_of(t).id, i))
            .collect();
        let mut out = String::new();
        for (i, t) in nodes.iter().enumerate() {
            let call = match node_of(t).op() {
                None => "leaf".to_string(),
                Some(r) => {
                    let args: Vec<String> = r
                        .inputs
                        .iter()
                        .map(|x| {
                            x.id()
                                .map_or("const".into(), |id| format!("%{}", line_of[&id]))
                        })
                        .collect();
                    format!("{}({})", r.name, args.join(", "))
                }
            };
            out += &format!("%{i} = {call}  {:?} {}\n", t.shape(), t.dtype());
        }
        out
    }

    /// [`Tensor::backward`] that calls `hook(id, gradient)` for each tracked leaf as soon as its
    /// gradient is final, that is once every op that used it has passed its contribution back
    /// (`id` is the leaf's [`Tensor::id`], a parameter's
    /// [`Param::id`](crate::autograd::Param::id)), while the pass goes on with the others:
    /// data-parallel training starts sending a layer's gradients before the layers below have
    /// theirs. Backward runs from the last op to the first, so the last layer's parameters
    /// come first.
    ///
    /// ```
    /// use ferrograd::prelude::*;
    ///
    /// let w = Tensor::from_vec(vec![2.0f32], &[1]).requires_grad();
    /// let mut seen = Vec::new();
    /// let grads = (&w * &w).sum().backward_with_hook(|id, g| seen.push((id, g.item())));
    /// assert_eq!(seen, vec![(w.id().unwrap(), 4.0)]);
    /// assert_eq!(grads.get(&w).unwrap().item(), 4.0);
    /// ```
    pub fn backward_with_hook(&self, mut hook: impl FnMut(u64, &Tensor)) -> Gradients {
        let seed = or_panic(unit_seed(self, "backward_with_hook"));
        or_panic(self.backward_impl("backward_with_hook", seed, false, Some(&mut hook)))
    }
}

/// Gradients of the one-element `y` with respect to each of `xs` (leaves or intermediate
/// results); zeros for an input that does not reach `y`.
///
/// ```
/// use ferrograd::prelude::*;
///
/// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).requires_grad();
/// let w = Tensor::from_vec(vec![5.0f32], &[1]).requires_grad();
/// let y = (&x * &x).sum(); // Σ x², so dy/dx = 2x
/// let gs = grad(&y, &[&x, &w]);
/// assert_eq!(gs[0].to_vec::<f32>(), vec![2.0, 4.0, 6.0]);
/// assert_eq!(gs[1].to_vec::<f32>(), vec![0.0]); // w does not reach y
/// ```
pub fn grad(y: &Tensor, xs: &[&Tensor]) -> Vec<Tensor> {
    or_panic(try_grad(y, xs, false))
}

/// As [`grad`], with differentiable results (for higher-order derivatives).
///
/// ```
/// use ferrograd::prelude::*;
///
/// let x = Tensor::scalar(2.0f64).requires_grad();
/// let y = &(&x * &x) * &x; // x³
/// let dy = grad_with_graph(&y, &[&x]).remove(0); // 3x² = 12
/// assert_eq!(dy.item(), 12.0);
/// let d2y = grad(&dy, &[&x]).remove(0); // 6x = 12
/// assert_eq!(d2y.item(), 12.0);
/// ```
pub fn grad_with_graph(y: &Tensor, xs: &[&Tensor]) -> Vec<Tensor> {
    or_panic(try_grad(y, xs, true))
}

/// [`grad`] (or [`grad_with_graph`] when `create_graph`), with an error instead of a panic
/// when `y` is not a one-element result or a gradient reaches an op without a derivative.
///
/// ```
/// use ferrograd::prelude::*;
///
/// let x = Tensor::from_vec(vec![1.0f32, -2.0], &[2]).requires_grad();
/// let y = (&x * &x.gt(&x.zeros_like())).sum(); // through a comparison: no derivative
/// let err = try_grad(&y, &[&x], false).unwrap_err();
/// assert!(err.to_string().starts_with("gt has no derivative"));
/// ```
pub fn try_grad(y: &Tensor, xs: &[&Tensor], create_graph: bool) -> Result<Vec<Tensor>> {
    Ok(try_grad_reached(y, xs, create_graph)?
        .into_iter()
        .zip(xs)
        .map(|(g, x)| g.unwrap_or_else(|| x.zeros_like()))
        .collect())
}

/// [`try_grad`] that tells an input `y` does not depend on (`None`) from one whose gradient
/// is zero: what PyTorch's `autograd.grad(..., allow_unused=True)` returns.
///
/// ```
/// use ferrograd::prelude::*;
///
/// let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).requires_grad();
/// let w = Tensor::from_vec(vec![5.0f32], &[1]).requires_grad();
/// let gs = try_grad_reached(&(&x * 0.0).sum(), &[&x, &w], false).unwrap();
/// assert_eq!(gs[0].as_ref().unwrap().to_vec::<f32>(), vec![0.0, 0.0]);
/// assert!(gs[1].is_none());
/// ```
pub fn try_grad_reached(
    y: &Tensor,
    xs: &[&Tensor],
    create_graph: bool,
) -> Result<Vec<Option<Tensor>>> {
    let seed = unit_seed(y, "grad")?;
    let ids: IdSet = xs
        .iter()
        .filter_map(|x| x.0.node.as_ref().map(|n| n.id))
        .collect();
    let found = run_backward(
        y,
        seed,
        &Targets::Nodes(ids),
        create_graph,
        false,
        &mut |_, _| {},
    )?;
    Ok(xs
        .iter()
        .map(|x| x.0.node.as_ref().and_then(|n| found.get(&n.id).cloned()))
        .collect())
}
