//! The pass a session runs before evaluating: common sub-expressions merged (a pure op on the
//! same inputs as an earlier one is that node) and constant sub-graphs folded (a pure op whose
//! inputs are all constants is computed once, here).

use std::collections::{HashMap, HashSet};

use super::op::Op;
use super::Graph;
use crate::tensor::{no_grad, Tensor};

/// How a session evaluates each node.
pub(crate) struct Plan {
    /// The node that stands for each node: itself, or an earlier equal one.
    pub repr: Vec<usize>,
    /// Values computed ahead of the runs: constants and folded sub-graphs.
    pub folded: Vec<Option<Tensor>>,
}

impl Plan {
    /// Every node stands for itself and only constants are known: no optimisation.
    pub fn plain(g: &Graph) -> Plan {
        let nodes = g.nodes();
        Plan {
            repr: (0..nodes.len()).collect(),
            folded: nodes
                .iter()
                .map(|n| match &n.op {
                    Op::Constant(t) => Some(t.clone()),
                    _ => None,
                })
                .collect(),
        }
    }

    /// Merges common sub-expressions and folds constant sub-graphs, in one pass in node order
    /// (inputs always come before their consumers). A node that gradients are taken with
    /// respect to keeps its identity (it is never merged), and neither it nor what is computed
    /// from it is folded: the gradient must flow through them at run time.
    pub fn optimized(g: &Graph) -> Plan {
        let mut plan = Plan::plain(g);
        let nodes = g.nodes();
        let targets = gradient_targets(&nodes);
        let mut varies = vec![false; nodes.len()];
        let mut seen: HashMap<(String, Vec<usize>), usize> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            varies[i] = targets.contains(&i) || n.inputs.iter().any(|&j| varies[j]);
            if !n.op.is_pure() || targets.contains(&i) {
                continue;
            }
            let inputs: Vec<usize> = n.inputs.iter().map(|&j| plan.repr[j]).collect();
            let constant: Option<Vec<Tensor>> =
                inputs.iter().map(|&j| plan.folded[j].clone()).collect();
            match constant {
                // (An op of several outputs is merged, not folded: a fold keeps one value.)
                Some(values) if folds(&n.op) && !varies[i] => {
                    plan.folded[i] = Some(no_grad(|| n.op.eval(&values)).remove(0));
                }
                _ => match seen.get(&(n.op.key(), inputs.clone())) {
                    Some(&earlier) => plan.repr[i] = earlier,
                    None => {
                        seen.insert((n.op.key(), inputs), i);
                    }
                },
            }
        }
        plan
    }
}

/// The nodes some gradient node differentiates with respect to.
pub(crate) fn gradient_targets(nodes: &[super::NodeData]) -> HashSet<usize> {
    nodes
        .iter()
        .filter(|n| matches!(n.op, Op::Grad))
        .map(|n| n.inputs[1])
        .collect()
}

/// Whether a pure op on constants is computed ahead of the runs.
fn folds(op: &Op) -> bool {
    !matches!(op, Op::Grad | Op::Output { .. }) && op.outputs() == 1
}
