//! A function recorded once for the transforms that replay its ops: forward mode pushes
//! tangents through them (`tangent`), `vmap` runs them again on batches (`batch`).

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use super::Op;
use crate::error::{Error, Result};
use crate::tensor::trace::{record_events, Event};
use crate::tensor::{enable_grad, Node as TensorNode, Tensor};

/// A tensor's identity while a recording lives (its steps keep every tensor alive).
pub(crate) fn key(t: &Tensor) -> usize {
    Arc::as_ptr(&t.0) as usize
}

/// Which events a recording replays: every op the function called, and the ops called inside
/// those whose results reached something else (a derivative rule reads an op's intermediate
/// values: a vector's product is a matrix product of its reshaped copy), found back to front.
fn needed(inputs: &[Tensor], events: &[Event], outputs: &[Tensor]) -> Vec<bool> {
    let outer: HashSet<usize> = events
        .iter()
        .filter(|e| e.depth == 1)
        .flat_map(|e| e.outputs.iter().map(key))
        .chain(inputs.iter().map(key))
        .collect();
    let mut keep: Vec<bool> = events.iter().map(|e| e.depth == 1).collect();
    let mut wanted: HashSet<usize> = HashSet::new();
    let want = |t: &Tensor, wanted: &mut HashSet<usize>| {
        if !outer.contains(&key(t)) {
            wanted.insert(key(t));
        }
    };
    outputs.iter().for_each(|t| want(t, &mut wanted));
    for (i, e) in events.iter().enumerate().rev() {
        if e.depth > 1 && e.outputs.iter().any(|t| wanted.contains(&key(t))) {
            keep[i] = true;
        }
        if keep[i] {
            e.inputs.iter().for_each(|t| want(t, &mut wanted));
        }
    }
    keep
}

/// One op as a recorded function called it.
pub(crate) struct Step {
    pub(crate) op: Op,
    pub(crate) inputs: Vec<Tensor>,
    pub(crate) outputs: Vec<Tensor>,
}

/// A function's ops in the order they ran, with the values they read and gave.
pub(crate) struct Recording {
    pub(crate) steps: Vec<Step>,
    /// The tensors the function was given, tracked where they are floats.
    pub(crate) inputs: Vec<Tensor>,
    pub(crate) outputs: Vec<Tensor>,
    /// Whether the function read values it computed (see `tensor::trace`).
    pub(crate) read: bool,
    /// Whether an outer differentiation follows the results: an input was tracked before
    /// (not copied), or the function read a tracked tensor made before it ran.
    pub(crate) outer: bool,
}

impl Recording {
    /// Runs `f` once on `inputs` and records its ops. A float input that is tracked reaches
    /// `f` as itself (an outer differentiation follows it through), another as a fresh tracked
    /// copy, so that a value `f` computes from it by an op with no graph form is known and
    /// refused: `transform` names the transform in that error. `replayed` says whether the
    /// recording will run again on other values (`vmap`).
    pub(crate) fn record(
        f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
        inputs: &[&Tensor],
        (transform, replayed): (&str, bool),
    ) -> Result<Recording> {
        let tracked_input = inputs.iter().any(|t| t.is_tracked());
        let inputs: Vec<Tensor> = inputs
            .iter()
            .map(|p| match (p.dtype().is_float(), p.is_tracked()) {
                (false, _) => (*p).clone(),
                // A copy in the outer graph: the function's other reads of the same tensor
                // (a parameter it also captures) are not the input, as in `torch.func`.
                (true, true) => p.add_scalar(0.0),
                (true, false) => p.detach().requires_grad(),
            })
            .collect();
        let start = TensorNode::next_id();
        let (outputs, noted) = record_events(&inputs, replayed, || enable_grad(|| f(&inputs)));
        let events = noted.events;
        let keep = needed(&inputs, &events, &outputs);
        let given: HashSet<usize> = inputs.iter().map(key).collect();
        // A tracked tensor from before the recording that is not an input (a parameter `f`
        // reads): the results belong to that outer differentiation too.
        let outer = tracked_input
            || events.iter().flat_map(|e| &e.inputs).any(|t| {
                t.is_tracked() && t.id().is_some_and(|id| id < start) && !given.contains(&key(t))
            });
        let mut made = given;
        let mut untraced = BTreeSet::new();
        let mut check = |t: &Tensor, made: &HashSet<usize>| {
            let fresh = t.id().is_some_and(|id| id >= start) && !t.is_leaf();
            if fresh && !made.contains(&key(t)) {
                untraced.insert(t.grad_fn().unwrap_or_default());
            }
        };
        let mut steps = Vec::with_capacity(events.len());
        for (event, _) in events.into_iter().zip(keep).filter(|(_, k)| *k) {
            let op = Op::from_trace(event.variant, event.attrs).map_err(Error::Graph)?;
            event.inputs.iter().for_each(|t| check(t, &made));
            made.extend(event.outputs.iter().map(key));
            steps.push(Step {
                op,
                inputs: event.inputs,
                outputs: event.outputs,
            });
        }
        outputs.iter().for_each(|t| check(t, &made));
        if !untraced.is_empty() {
            let names: Vec<String> = untraced.into_iter().collect();
            return Err(Error::Graph(format!(
                "{transform}: these ops have no rule for it, so it cannot pass them: {}",
                names.join(", ")
            )));
        }
        Ok(Recording {
            steps,
            inputs,
            outputs,
            read: noted.read,
            outer,
        })
    }
}
