//! Gradient checkpointing (PyTorch's `torch.utils.checkpoint`): a function whose
//! intermediate results are not kept for backward but computed again when backward reaches
//! it, trading one more forward pass for the memory of its activations.

use std::borrow::Cow;
use std::sync::Arc;

use super::custom::{captured_leaves, stand_in};
use super::engine::try_grad;
use crate::tensor::record::record_impl;
use crate::tensor::{draws, enable_grad, is_grad_enabled, InputGrads, Tensor};

/// `f(inputs)`, keeping only the inputs and the tracked leaves `f` reads (its weights) for
/// backward, not the intermediate results: backward runs `f` again and differentiates that.
/// Gradients reach the inputs and the weights as without checkpointing, to every order (a
/// backward that builds a graph recomputes with a graph too).
///
/// Run again, `f` draws what it drew the first time (a layer's dropout masks, the default
/// generator's numbers), as PyTorch's `preserve_rng_state`, so its gradients are those of
/// the result it returned.
///
/// ```
/// use ferrograd::prelude::*;
///
/// let w = Param::new(Tensor::from_vec(vec![0.5f64, -1.0], &[2]));
/// let x = Tensor::from_vec(vec![1.0f64, 2.0], &[2]).requires_grad();
/// let weight = w.clone();
/// let y = checkpoint(move |xs: &[Tensor]| (&xs[0] * &weight.tensor()).tanh().sum(), &[&x]);
/// let plain = (&x * &w.tensor()).tanh().sum();
/// assert_eq!(y.item(), plain.item());
/// let (a, b) = (y.backward(), plain.backward());
/// assert_eq!(a.get(&x).unwrap().to_vec::<f64>(), b.get(&x).unwrap().to_vec::<f64>());
/// assert_eq!(a.get_param(&w).unwrap().to_vec::<f64>(), b.get_param(&w).unwrap().to_vec::<f64>());
/// ```
pub fn checkpoint<F>(f: F, inputs: &[&Tensor]) -> Tensor
where
    F: Fn(&[Tensor]) -> Tensor + Send + Sync + 'static,
{
    if !is_grad_enabled() {
        return f(&inputs.iter().map(|&t| t.clone()).collect::<Vec<_>>());
    }
    // One run with a graph, to learn which leaves `f` reads besides its inputs; the graph is
    // dropped with `y` at the end of this call, and only its value is kept.
    let leaves: Vec<Tensor> = inputs.iter().map(|t| leaf(t)).collect();
    let (y, drawn) = draws::recorded(|| f(&leaves));
    let weights = captured_leaves(&y, &leaves);
    let n = inputs.len();
    let all: Vec<&Tensor> = inputs.iter().copied().chain(&weights).collect();
    let f = Arc::new(f);
    record_impl(
        Cow::Borrowed("checkpoint"),
        y.detach(),
        &all,
        Some(Box::new(move |c, up| {
            draws::replayed(&drawn, || recompute(&*f, n, c.inputs, up))
        })),
    )
}

/// The derivative of a checkpointed `f`: `f` run again on the `n` inputs (the rest of
/// `recorded` are its weights), then the product with `up` differentiated. A backward that
/// builds a graph runs `f` on stand-ins tracked back to the inputs, so the result is
/// differentiable again; a plain one on fresh leaves, so that the walk stops there.
fn recompute(
    f: &(dyn Fn(&[Tensor]) -> Tensor + Send + Sync),
    n: usize,
    recorded: &[Tensor],
    up: &Tensor,
) -> InputGrads {
    let graph = is_grad_enabled();
    let xs: Vec<Tensor> = recorded[..n]
        .iter()
        .map(|x| {
            if graph && x.dtype().is_float() {
                stand_in(x)
            } else {
                leaf(x)
            }
        })
        .collect();
    let total = enable_grad(|| (&f(&xs) * up).sum());
    let targets: Vec<&Tensor> = xs.iter().chain(&recorded[n..]).collect();
    let grads = try_grad(&total, &targets, graph)
        .unwrap_or_else(|e| panic!("checkpoint: the recomputed function: {e}"));
    grads
        .into_iter()
        .zip(recorded)
        .map(|(g, x)| x.dtype().is_float().then(|| g.to_dtype(x.dtype())))
        .collect()
}

/// `x` cut from its graph, as a tracked leaf when it is a float (integer inputs, token ids
/// say, pass through untracked and get no gradient).
fn leaf(x: &Tensor) -> Tensor {
    if x.dtype().is_float() {
        x.detach().requires_grad()
    } else {
        x.detach()
    }
}
