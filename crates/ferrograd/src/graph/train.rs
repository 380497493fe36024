//! Optimizers as graph ops: `minimize` adds a node that, when run, takes one step of an
//! optimizer of the training library on the variables that reach the loss. One adapter serves
//! every optimizer; `GradientDescentOptimizer` is simpleflow's name for it with plain SGD.

use std::sync::{Arc, Mutex, PoisonError};

use super::op::Op;
use super::Node;
use crate::optim::{Optimizer, Sgd};

/// The optimizer and the variables a `minimize` node updates.
#[derive(Clone)]
pub struct Minimizer {
    pub(crate) optimizer: Arc<Mutex<Box<dyn Optimizer>>>,
    /// Variable nodes, by index.
    pub(crate) vars: Vec<usize>,
}

impl Minimizer {
    /// The optimizer, locked (a step that panicked leaves it as usable as before).
    pub(crate) fn optimizer(&self) -> std::sync::MutexGuard<'_, Box<dyn Optimizer>> {
        self.optimizer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn describe(&self) -> String {
        let vars: Vec<String> = self.vars.iter().map(|v| format!("%{v}")).collect();
        format!("lr {:e} on {}", self.optimizer().lr(), vars.join(", "))
    }
}

/// Any optimizer of the training library (`Adam`, `Momentum`, ...), used from a graph.
pub struct GraphOptimizer {
    optimizer: Box<dyn Optimizer>,
}

impl GraphOptimizer {
    /// Wraps `optimizer`; its state lives in the node `minimize` adds.
    pub fn new(optimizer: impl Optimizer + 'static) -> GraphOptimizer {
        GraphOptimizer {
            optimizer: Box::new(optimizer),
        }
    }

    /// A node that, when run, takes one step on every variable the loss depends on; its value
    /// is the loss before the step.
    pub fn minimize(self, loss: &Node) -> Node {
        let nodes = loss.graph().nodes();
        let mut reaches = vec![false; loss.index() + 1];
        reaches[loss.index()] = true;
        let mut vars = Vec::new();
        for i in (0..=loss.index()).rev() {
            if !reaches[i] {
                continue;
            }
            if let Op::Variable { .. } = nodes[i].op {
                vars.push(i);
            }
            for &j in &nodes[i].inputs {
                reaches[j] = true;
            }
        }
        drop(nodes);
        vars.reverse();
        self.minimizer(loss, vars)
    }

    /// As [`GraphOptimizer::minimize`], updating only `vars` (variable nodes of the loss's
    /// graph).
    pub fn minimize_vars(self, loss: &Node, vars: &[&Node]) -> Node {
        for v in vars {
            assert!(
                v.graph().id() == loss.graph().id(),
                "minimize_vars: node %{} belongs to another graph",
                v.index()
            );
            assert!(
                matches!(v.op(), Op::Variable { .. }),
                "minimize_vars: node %{} is not a variable",
                v.index()
            );
        }
        self.minimizer(loss, vars.iter().map(|v| v.index()).collect())
    }

    fn minimizer(self, loss: &Node, vars: Vec<usize>) -> Node {
        assert!(
            !vars.is_empty(),
            "minimize: no variable reaches the loss %{}, so there is nothing to train",
            loss.index()
        );
        let m = Minimizer {
            optimizer: Arc::new(Mutex::new(self.optimizer)),
            vars,
        };
        loss.graph().add(Op::Minimize(m), &[loss])
    }
}

/// Plain gradient descent on a graph (simpleflow's and TensorFlow 1's name).
pub struct GradientDescentOptimizer {
    lr: f64,
}

impl GradientDescentOptimizer {
    /// Steps of `lr` times the gradient.
    pub fn new(lr: f64) -> GradientDescentOptimizer {
        GradientDescentOptimizer { lr }
    }

    /// A node that, when run, takes one descent step on every variable the loss depends on.
    pub fn minimize(&self, loss: &Node) -> Node {
        GraphOptimizer::new(Sgd::new(self.lr)).minimize(loss)
    }

    /// As [`GradientDescentOptimizer::minimize`], on `vars` only.
    pub fn minimize_vars(&self, loss: &Node, vars: &[&Node]) -> Node {
        GraphOptimizer::new(Sgd::new(self.lr)).minimize_vars(loss, vars)
    }
}
