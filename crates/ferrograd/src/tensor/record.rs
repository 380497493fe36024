//! The graph node a tracked tensor carries, and how ops record it.
//!
//! A tensor and its node are one layer: recording needs nothing but the tensor, so the ops sit
//! on it and the backward engine (`autograd`) reads the nodes from above. A node keeps its op's
//! inputs and derivative rule (a VJP written with tensor ops, so that running it with recording
//! on yields a differentiable gradient). Inputs never point back to their consumers, so the
//! graph has no cycles: it is freed with the last tensor that reaches it.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use smallvec::SmallVec;

use super::anomaly;
use super::mode::is_grad_enabled;
use super::Tensor;

/// A derivative rule: from the context and the upstream gradient (shape of the output) to one
/// gradient per input (`None` where the input needs none). Written with tensor ops.
pub(crate) type Rule = Box<dyn Fn(&BackwardCtx<'_>, &Tensor) -> InputGrads + Send + Sync>;

/// One gradient per input of a rule, `None` where none is needed.
pub(crate) type InputGrads = SmallVec<[Option<Tensor>; 2]>;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Number of graph nodes alive in the process: a leak check for training loops.
pub fn live_nodes() -> usize {
    LIVE.load(Ordering::Relaxed)
}

pub(crate) struct Node {
    /// Identity used by `Gradients`; parameters keep theirs across updates.
    pub(crate) id: u64,
    pub(crate) kind: NodeKind,
}

pub(crate) enum NodeKind {
    Leaf,
    Op(OpRecord),
}

pub(crate) struct OpRecord {
    /// The op's name for messages; owned only for user-named custom functions.
    pub(crate) name: Cow<'static, str>,
    /// `None` for an op without a derivative: a gradient reaching it ends the pass with an
    /// error naming the op.
    pub(crate) rule: Option<Rule>,
    pub(crate) inputs: SmallVec<[Tensor; 2]>,
    /// Set when the output is a block of the one input (`narrow`): see [`Part`].
    pub(crate) part: Option<Part>,
}

/// Where an op's output lies in its one input: the block from `start` along `axis`. A pass
/// that builds no graph adds the output's gradient into that block of the input's gradient
/// instead of running the rule, which pads it with zeros to the input's shape: the pieces a
/// tensor is split into (the queries, keys and values of one projection) then make up its
/// gradient without a padded copy each and a full-size sum per piece.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Part {
    pub(crate) axis: usize,
    pub(crate) start: usize,
}

impl Node {
    pub(crate) fn leaf() -> Node {
        Node::new(NodeKind::Leaf)
    }

    /// A leaf with a given identity: a parameter's, carried over to its new values.
    pub(crate) fn leaf_with_id(id: u64) -> Node {
        LIVE.fetch_add(1, Ordering::Relaxed);
        Node {
            id,
            kind: NodeKind::Leaf,
        }
    }

    /// The identity the next node will get: every node made after this call has one at least
    /// as large (a transform tells the nodes its function made from those it was given).
    pub(crate) fn next_id() -> u64 {
        NEXT_ID.load(Ordering::Relaxed)
    }

    /// A fresh identity (for parameters).
    pub(crate) fn fresh_id() -> u64 {
        NEXT_ID.fetch_add(1, Ordering::Relaxed)
    }

    fn new(kind: NodeKind) -> Node {
        LIVE.fetch_add(1, Ordering::Relaxed);
        Node {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            kind,
        }
    }

    pub(crate) fn op(&self) -> Option<&OpRecord> {
        match &self.kind {
            NodeKind::Op(r) => Some(r),
            NodeKind::Leaf => None,
        }
    }
}

impl Drop for Node {
    /// Drops the chain of inputs iteratively: the default recursive drop of a long graph
    /// (a 1,000,000-op chain) would overflow the stack.
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
        let NodeKind::Op(rec) = &mut self.kind else {
            return;
        };
        let mut stack: Vec<Tensor> = std::mem::take(&mut rec.inputs).into_vec();
        while let Some(t) = stack.pop() {
            // Only a tensor we hold the last reference to can release its node here; others
            // stay alive through their other owners.
            let Some(mut inner) = Arc::into_inner(t.0) else {
                continue;
            };
            if let Some(NodeKind::Op(r)) = inner.node.as_mut().map(|n| &mut n.kind) {
                stack.extend(r.inputs.drain(..));
            }
        }
    }
}

/// What a rule sees at backward time.
pub(crate) struct BackwardCtx<'a> {
    pub(crate) inputs: &'a [Tensor],
    /// The op's output (tracked: rules that read it stay differentiable).
    pub(crate) out: &'a Tensor,
    pub(crate) needs: &'a [bool],
}

impl BackwardCtx<'_> {
    pub(crate) fn input(&self, i: usize) -> &Tensor {
        &self.inputs[i]
    }

    /// The op's output.
    pub(crate) fn out(&self) -> &Tensor {
        self.out
    }

    /// Whether input `i` wants a gradient; rules skip the work for the others.
    pub(crate) fn needs(&self, i: usize) -> bool {
        self.needs[i]
    }
}

/// Wraps the untracked result `out` of op `name`: tracked, with `rule` as its derivative, when
/// recording is on and an input is tracked; returned as is otherwise.
pub(crate) fn record(
    name: &'static str,
    out: Tensor,
    inputs: &[&Tensor],
    rule: impl Fn(&BackwardCtx<'_>, &Tensor) -> InputGrads + Send + Sync + 'static,
) -> Tensor {
    record_impl(Cow::Borrowed(name), out, inputs, Some(Box::new(rule)))
}

pub(crate) fn record_impl(
    name: Cow<'static, str>,
    out: Tensor,
    inputs: &[&Tensor],
    rule: Option<Rule>,
) -> Tensor {
    attach(name, out, inputs, rule, None)
}

/// [`record`] for an op whose output is the block `part` of its one `input` (see [`Part`]);
/// `rule` serves the passes that build a graph.
pub(crate) fn record_part(
    name: &'static str,
    out: Tensor,
    input: &Tensor,
    part: Part,
    rule: impl Fn(&BackwardCtx<'_>, &Tensor) -> InputGrads + Send + Sync + 'static,
) -> Tensor {
    let rule: Rule = Box::new(rule);
    attach(Cow::Borrowed(name), out, &[input], Some(rule), Some(part))
}

fn attach(
    name: Cow<'static, str>,
    out: Tensor,
    inputs: &[&Tensor],
    rule: Option<Rule>,
    part: Option<Part>,
) -> Tensor {
    anomaly::check_forward(&name, &out, inputs);
    if !is_grad_enabled() || !inputs.iter().any(|t| t.is_tracked()) {
        return out;
    }
    let node = Node::new(NodeKind::Op(OpRecord {
        name,
        rule,
        inputs: inputs.iter().map(|&t| t.clone()).collect(),
        part,
    }));
    let mut out = out;
    match Arc::get_mut(&mut out.0) {
        // A fresh result (the usual case): the node goes into it, no allocation.
        Some(inner) => {
            inner.node = Some(node);
            out
        }
        None => Tensor::from_parts(out.storage().clone(), out.layout().clone(), Some(node)),
    }
}

/// Records an op that has no derivative: a backward pass that reaches it fails naming the op
/// (`backward` panics, the `try_` forms return the error), unless the input was detached or
/// the op ran under `no_grad` (then nothing is recorded).
pub(crate) fn record_nondiff(name: &'static str, out: Tensor, inputs: &[&Tensor]) -> Tensor {
    record_impl(Cow::Borrowed(name), out, inputs, None)
}

impl Tensor {
    /// A tracked leaf holding the same data: gradients flow back to it. Panics for an integer
    /// tensor: gradients exist for float dtypes only.
    pub fn requires_grad(&self) -> Tensor {
        assert!(
            self.dtype().is_float(),
            "requires_grad: only float tensors can require gradients, this one is {} (convert \
             with .to_dtype(DType::F32) first)",
            self.dtype()
        );
        Tensor::from_parts(
            self.storage().clone(),
            self.layout().clone(),
            Some(Node::leaf()),
        )
    }

    /// Whether this tensor takes part in a recorded graph.
    pub fn is_tracked(&self) -> bool {
        self.0.node.is_some()
    }

    /// The name of the op that computed this tensor, when it was recorded (PyTorch's
    /// `grad_fn`): `None` for a leaf and for an untracked tensor.
    ///
    /// ```
    /// use ferrograd::prelude::*;
    ///
    /// let w = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).requires_grad();
    /// let y = &w * &w;
    /// assert_eq!(y.grad_fn().as_deref(), Some("mul"));
    /// assert_eq!(w.grad_fn(), None);
    /// assert!(y.to_string().ends_with(", grad_fn=mul)"));
    /// assert!(w.to_string().ends_with(", requires_grad=true)"));
    /// ```
    pub fn grad_fn(&self) -> Option<String> {
        self.0.node.as_ref()?.op().map(|r| r.name.to_string())
    }

    /// The identity of this tensor's graph node (`None` when untracked): what `Gradients`
    /// are keyed by; a parameter's leaf keeps its parameter's ([`crate::autograd::Param::id`]).
    pub fn id(&self) -> Option<u64> {
        self.0.node.as_ref().map(|n| n.id)
    }

    /// True for a tensor made by `requires_grad()` (or a parameter's value).
    pub fn is_leaf(&self) -> bool {
        self.0
            .node
            .as_ref()
            .is_some_and(|n| matches!(n.kind, NodeKind::Leaf))
    }

    /// The same values cut from the graph: no gradient flows through the result.
    pub fn detach(&self) -> Tensor {
        super::trace::op("StopGradient", super::trace::attrs![], &[self], || {
            Tensor::from_parts(self.storage().clone(), self.layout().clone(), None)
        })
    }

    /// Alias of [`Tensor::detach`] under the name TensorFlow and JAX use.
    pub fn stop_gradient(&self) -> Tensor {
        self.detach()
    }
}
