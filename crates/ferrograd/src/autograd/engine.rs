//! The backward engine: nodes newest first over the recorded graph, iterative (no recursion
//! however long the graph), summing the contributions of every consumer.

use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use super::anomaly;
use super::gradients::Gradients;
use super::mode::ModeGuard;
use smallvec::SmallVec;

use super::node::{BackwardCtx, Node, NodeKind};
use crate::tensor::Tensor;

/// Node ids are unique sequential integers: a multiplicative hash spreads them well and costs
/// a fraction of SipHash, which matters on graphs of scalar ops.
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

pub(crate) type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;
type IdSet = HashSet<u64, BuildHasherDefault<IdHasher>>;

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

/// Nodes reachable from `root` that lead to one of `ids` (the targets included).
fn leading_to(root: &Arc<Node>, ids: &IdSet) -> IdSet {
    // Every reachable node, then a pass in increasing id order: a node's inputs are always
    // older than the node, so each input is decided before its consumers.
    let mut all: Vec<Arc<Node>> = Vec::new();
    let mut seen = IdSet::default();
    let mut stack = vec![root.clone()];
    seen.insert(root.id);
    while let Some(node) = stack.pop() {
        for child in node
            .op()
            .into_iter()
            .flat_map(|r| r.inputs.iter())
            .filter_map(|t| t.0.node.as_ref())
        {
            if seen.insert(child.id) {
                stack.push(child.clone());
            }
        }
        all.push(node);
    }
    all.sort_unstable_by_key(|n| n.id);
    let mut leads = IdSet::default();
    for node in &all {
        let via_input = node.op().is_some_and(|r| {
            r.inputs
                .iter()
                .any(|t| t.0.node.as_ref().is_some_and(|c| leads.contains(&c.id)))
        });
        if ids.contains(&node.id) || via_input {
            leads.insert(node.id);
        }
    }
    leads
}

/// A node in the work queue, ordered by id: the newest node first. The id is kept inline so
/// that heap comparisons do not chase the node pointer (a cache miss on large graphs).
struct Newest(u64, Arc<Node>);

impl Newest {
    fn of(node: &Arc<Node>) -> Newest {
        Newest(node.id, node.clone())
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
/// to `root`) and returns the gradients of `targets`, keyed by node id.
///
/// Nodes are processed newest first. An op is always recorded after its inputs, so a node's
/// consumers are all newer than it: when a node comes off the queue, every contribution to its
/// gradient has arrived and is summed. No topological sort and no recursion are needed.
pub(crate) fn run_backward(
    root: &Tensor,
    seed: Tensor,
    targets: &Targets,
    create_graph: bool,
) -> IdMap<Tensor> {
    let mut results = IdMap::default();
    let Some(root_node) = &root.0.node else {
        return results;
    };
    let _mode = ModeGuard::set(create_graph);
    // With explicit targets, only nodes that lead to one are visited; every recorded node leads
    // to a tracked leaf by construction.
    let leads = match targets {
        Targets::Leaves => None,
        Targets::Nodes(ids) => Some(leading_to(root_node, ids)),
    };
    let wanted = |n: &Node| leads.as_ref().is_none_or(|l| l.contains(&n.id));
    if !wanted(root_node) {
        return results;
    }

    let mut pending: IdMap<Tensor> = IdMap::default();
    pending.insert(root_node.id, seed);
    let mut queue = BinaryHeap::from([Newest::of(root_node)]);
    while let Some(Newest(_, node)) = queue.pop() {
        // Taking the gradient frees it as soon as it has been passed on.
        let g = pending
            .remove(&node.id)
            .expect("queued nodes have a gradient");
        if targets.contains(&node) {
            results.insert(node.id, g.clone());
        }
        let Some(rec) = node.op() else { continue };
        let needs: SmallVec<[bool; 4]> = rec
            .inputs
            .iter()
            .map(|t| t.0.node.as_deref().is_some_and(wanted))
            .collect();
        let out = rec.out.as_ref().map(|(storage, layout)| {
            let out_node = if create_graph {
                Some(node.clone())
            } else {
                None
            };
            Tensor::from_parts(storage.clone(), layout.clone(), out_node)
        });
        let ctx = BackwardCtx {
            inputs: &rec.inputs,
            saved_out: out.as_ref(),
            needs: &needs,
        };
        let grads = anomaly::in_rule(|| (rec.rule)(&ctx, &g));
        assert_eq!(
            grads.len(),
            rec.inputs.len(),
            "backward of {}: rule returned {} gradients for {} inputs",
            rec.name,
            grads.len(),
            rec.inputs.len()
        );
        anomaly::check_backward(&rec.name, &grads, &rec.inputs);
        for ((input, gi), &need) in rec.inputs.iter().zip(grads).zip(&needs) {
            let (Some(gi), true) = (gi, need) else {
                continue;
            };
            assert!(
                gi.shape() == input.shape() && gi.dtype() == input.dtype(),
                "backward of {}: gradient of shape {:?} ({}) for an input of shape {:?} ({})",
                rec.name,
                gi.shape(),
                gi.dtype(),
                input.shape(),
                input.dtype()
            );
            let child = input.0.node.as_ref().expect("needed inputs are tracked");
            match pending.entry(child.id) {
                Entry::Occupied(mut acc) => {
                    let sum = acc.get() + &gi;
                    acc.insert(sum);
                }
                Entry::Vacant(slot) => {
                    slot.insert(gi);
                    queue.push(Newest::of(child));
                }
            }
        }
    }
    results
}

/// The seed gradient for `backward()`: one, for a one-element result.
fn unit_seed(root: &Tensor, op: &str) -> Tensor {
    assert!(
        root.numel() == 1,
        "{op}: the output has shape {:?}; backward needs a one-element result (reduce it with \
         sum() or mean(), or pass the upstream gradient to backward_with)",
        root.shape()
    );
    root.ones_like()
}

impl Tensor {
    /// Gradients of this one-element result with respect to every tracked leaf that reaches it.
    /// Each call returns a fresh `Gradients`; the graph can be walked again.
    pub fn backward(&self) -> Gradients {
        self.backward_impl(unit_seed(self, "backward"), false)
    }

    /// As [`Tensor::backward`], with gradients that are themselves differentiable (recorded as a
    /// graph), for higher-order derivatives.
    pub fn backward_with_graph(&self) -> Gradients {
        self.backward_impl(unit_seed(self, "backward_with_graph"), true)
    }

    /// Backward from a result of any shape, given the upstream gradient `seed` (same shape).
    pub fn backward_with(&self, seed: &Tensor, create_graph: bool) -> Gradients {
        assert_eq!(
            seed.shape(),
            self.shape(),
            "backward_with: seed shape {:?} differs from output shape {:?}",
            seed.shape(),
            self.shape()
        );
        self.backward_impl(seed.to_dtype(self.dtype()), create_graph)
    }

    fn backward_impl(&self, seed: Tensor, create_graph: bool) -> Gradients {
        assert!(
            self.is_tracked(),
            "backward: this tensor is not tracked (no input marked requires_grad() reaches it, \
             or it was computed under no_grad)"
        );
        Gradients::from_map(run_backward(self, seed, &Targets::Leaves, create_graph))
    }
}

/// Gradients of the one-element `y` with respect to each of `xs` (leaves or intermediate
/// results); zeros for an input that does not reach `y`.
pub fn grad(y: &Tensor, xs: &[&Tensor]) -> Vec<Tensor> {
    grad_impl(y, xs, false)
}

/// As [`grad`], with differentiable results (for higher-order derivatives).
pub fn grad_with_graph(y: &Tensor, xs: &[&Tensor]) -> Vec<Tensor> {
    grad_impl(y, xs, true)
}

fn grad_impl(y: &Tensor, xs: &[&Tensor], create_graph: bool) -> Vec<Tensor> {
    let seed = unit_seed(y, "grad");
    let ids: IdSet = xs
        .iter()
        .filter_map(|x| x.0.node.as_ref().map(|n| n.id))
        .collect();
    let found = run_backward(y, seed, &Targets::Nodes(ids), create_graph);
    xs.iter()
        .map(|x| {
            x.0.node
                .as_ref()
                .and_then(|n| found.get(&n.id).cloned())
                .unwrap_or_else(|| x.zeros_like())
        })
        .collect()
}
