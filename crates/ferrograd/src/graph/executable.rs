//! A traced graph planned once and run many times: common sub-expressions merged, constant
//! sub-graphs folded, element-wise chains fused (`graph::fuse`), and each value dropped right
//! after its last reader, so that a run holds only the values still to be read.

use std::collections::{BTreeSet, HashMap, HashSet};

use super::fuse::{regions, Region};
use super::op::Op;
use super::optimize::Plan;
use super::{Graph, Node, NodeData};
use crate::error::{Error, Result};
use crate::tensor::{no_grad, Tensor};

/// One step of a run: a node evaluated alone, or a fused region.
enum Unit {
    Node(usize),
    Fused(Region),
}

/// A graph planned to compute `outputs` from values fed to `inputs`.
pub struct Executable {
    nodes: Vec<NodeData>,
    plan: Plan,
    units: Vec<Unit>,
    /// The values each unit reads for the last time (dropped after it).
    last_reads: Vec<Vec<usize>>,
    inputs: Vec<usize>,
    outputs: Vec<usize>,
}

impl Executable {
    /// Plans `g` to compute `outputs` from `inputs` (placeholders), which every run feeds in
    /// this order.
    pub fn new(g: &Graph, inputs: &[Node], outputs: &[Node]) -> Result<Executable> {
        let nodes: Vec<NodeData> = g.nodes().to_vec();
        if let Some(n) = nodes
            .iter()
            .find(|n| matches!(n.op, Op::Grad | Op::Minimize(_)))
        {
            return Err(Error::Graph(format!(
                "compile: the graph holds a {} node, which only a Session runs",
                n.op.name()
            )));
        }
        let plan = Plan::optimized(g);
        let outputs: Vec<usize> = outputs.iter().map(|n| plan.repr[n.index()]).collect();
        let order = needed(&nodes, &plan, &outputs);
        let fetched: HashSet<usize> = outputs.iter().copied().collect();
        let units = schedule(
            &nodes,
            &plan,
            &order,
            regions(&nodes, &plan.repr, &order, &fetched),
        );
        let last_reads = last_reads(&nodes, &plan, &units, &fetched);
        Ok(Executable {
            inputs: inputs.iter().map(|n| n.index()).collect(),
            nodes,
            plan,
            units,
            last_reads,
            outputs,
        })
    }

    /// How many fused regions the plan runs, and how many nodes they hold.
    pub fn fused(&self) -> (usize, usize) {
        self.units.iter().fold((0, 0), |(r, n), u| match u {
            Unit::Fused(region) => (r + 1, n + region.nodes.len()),
            Unit::Node(_) => (r, n),
        })
    }

    /// The outputs for these input values (untracked: a run records nothing for backward).
    pub fn run(&self, feed: &[Tensor]) -> Vec<Tensor> {
        assert_eq!(feed.len(), self.inputs.len(), "Executable::run: inputs");
        no_grad(|| {
            let mut values: Vec<Option<Tensor>> = self.plan.folded.clone();
            for (&p, v) in self.inputs.iter().zip(feed) {
                values[p] = Some(v.clone());
            }
            let mut extra: HashMap<usize, Vec<Tensor>> = HashMap::new();
            for (unit, reads) in self.units.iter().zip(&self.last_reads) {
                self.step(unit, &mut values, &mut extra);
                for &v in reads {
                    values[v] = None;
                }
            }
            let value = |&o: &usize| values[o].clone().expect("an output is kept to the end");
            self.outputs.iter().map(value).collect()
        })
    }

    fn step(
        &self,
        unit: &Unit,
        values: &mut [Option<Tensor>],
        extra: &mut HashMap<usize, Vec<Tensor>>,
    ) {
        let read = |values: &[Option<Tensor>], j: usize| {
            values[self.plan.repr[j]]
                .clone()
                .expect("inputs come first")
        };
        match unit {
            Unit::Fused(region) => {
                let args: Vec<Tensor> = region.inputs.iter().map(|&j| read(values, j)).collect();
                for (&o, v) in region.outputs.iter().zip(region.run(&args)) {
                    values[o] = Some(v);
                }
            }
            Unit::Node(i) => {
                let n = &self.nodes[*i];
                let value = match &n.op {
                    Op::Placeholder { .. } => return,
                    Op::Variable { param, .. } => param.tensor().detach(),
                    Op::Output { index } => extra[&self.plan.repr[n.inputs[0]]][index - 1].clone(),
                    op => {
                        let args: Vec<Tensor> = n.inputs.iter().map(|&j| read(values, j)).collect();
                        let mut outs = op.eval(&args);
                        let first = outs.remove(0);
                        if !outs.is_empty() {
                            extra.insert(*i, outs);
                        }
                        first
                    }
                };
                values[*i] = Some(value);
            }
        }
    }
}

/// The nodes (each the one standing for its equals) that computing `outputs` evaluates, in
/// graph order; folded values are known and need nothing below them.
fn needed(nodes: &[NodeData], plan: &Plan, outputs: &[usize]) -> Vec<usize> {
    let mut seen: BTreeSet<usize> = BTreeSet::new();
    let mut stack: Vec<usize> = outputs.to_vec();
    while let Some(i) = stack.pop() {
        if !seen.insert(i) || plan.folded[i].is_some() {
            continue;
        }
        stack.extend(nodes[i].inputs.iter().map(|&j| plan.repr[j]));
    }
    seen.into_iter()
        .filter(|&i| plan.folded[i].is_none())
        .collect()
}

/// The units in an order that computes every value before it is read: each region as one
/// unit (it needs all its inputs first, and gives all its outputs at once), otherwise graph
/// order, earliest first.
fn schedule(nodes: &[NodeData], plan: &Plan, order: &[usize], fused: Vec<Region>) -> Vec<Unit> {
    let mut unit_of: HashMap<usize, usize> = HashMap::new();
    let mut units: Vec<Unit> = Vec::new();
    for region in fused {
        for &m in &region.nodes {
            unit_of.insert(m, units.len());
        }
        units.push(Unit::Fused(region));
    }
    for &i in order {
        unit_of.entry(i).or_insert_with(|| {
            units.push(Unit::Node(i));
            units.len() - 1
        });
    }
    // Each unit's earliest node ranks it; a unit is ready once the units it reads are done.
    let first = |u: &Unit| match u {
        Unit::Node(i) => *i,
        Unit::Fused(r) => r.nodes[0],
    };
    let mut waits: Vec<HashSet<usize>> = vec![HashSet::new(); units.len()];
    let mut then: Vec<Vec<usize>> = vec![Vec::new(); units.len()];
    for &i in order {
        let u = unit_of[&i];
        for &j in &nodes[i].inputs {
            if let Some(&v) = unit_of.get(&plan.repr[j]) {
                if v != u && waits[u].insert(v) {
                    then[v].push(u);
                }
            }
        }
    }
    let mut ready: BTreeSet<(usize, usize)> = (0..units.len())
        .filter(|&u| waits[u].is_empty())
        .map(|u| (first(&units[u]), u))
        .collect();
    let mut sorted = Vec::with_capacity(units.len());
    while let Some((_, u)) = ready.pop_first() {
        sorted.push(u);
        for &w in &then[u] {
            waits[w].remove(&u);
            if waits[w].is_empty() {
                ready.insert((first(&units[w]), w));
            }
        }
    }
    assert_eq!(sorted.len(), units.len(), "fused regions form no cycle");
    let mut slots: Vec<Option<Unit>> = units.into_iter().map(Some).collect();
    sorted
        .into_iter()
        .map(|u| slots[u].take().expect("each unit once"))
        .collect()
}

/// For each unit, the values it is the last to read (never a fetched one).
fn last_reads(
    nodes: &[NodeData],
    plan: &Plan,
    units: &[Unit],
    fetched: &HashSet<usize>,
) -> Vec<Vec<usize>> {
    let mut last: HashMap<usize, usize> = HashMap::new();
    for (p, unit) in units.iter().enumerate() {
        let reads: Vec<usize> = match unit {
            Unit::Node(i) => nodes[*i].inputs.iter().map(|&j| plan.repr[j]).collect(),
            Unit::Fused(r) => r.inputs.clone(),
        };
        for v in reads {
            last.insert(v, p);
        }
    }
    let mut out = vec![Vec::new(); units.len()];
    for (v, p) in last {
        if !fetched.contains(&v) {
            out[p].push(v);
        }
    }
    out
}
