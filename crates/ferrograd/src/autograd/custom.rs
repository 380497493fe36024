//! User-defined derivatives: `custom_gradient` (one output) and `custom_gradient_n` (several).
//!
//! The function runs on stand-ins for its inputs: each stand-in is tracked through an identity
//! op back to its input, so the tensors the gradient closure captures (the stand-ins
//! themselves, or intermediates such as `exp(x)`) stay differentiable with respect to the real
//! inputs. The output keeps only its value: its gradient comes from the closure alone. When a
//! backward pass builds a graph, the closure's ops are recorded like any others, so the custom
//! rule is differentiated in turn; a `custom_gradient` inside the closure sets the second
//! derivative.

use std::borrow::Cow;

use super::ids::IdSet;
use crate::tensor::record::record_impl;
use crate::tensor::{record, DType, InputGrads, NodeKind, Tensor};

/// The stand-in `f` receives for `input`: same value, tracked back to it through an identity.
pub(super) fn stand_in(input: &Tensor) -> Tensor {
    record(
        "custom_gradient input",
        input.detach(),
        &[input],
        |_, up| smallvec::smallvec![Some(up.clone())],
    )
}

/// Panics naming the function unless `grads` holds one gradient per input, each of the
/// input's shape; converts each to the input's dtype.
fn checked(name: &str, grads: Vec<Tensor>, inputs: &[Tensor]) -> InputGrads {
    assert!(
        grads.len() == inputs.len(),
        "{name}: the gradient function returned {} gradients for {} inputs",
        grads.len(),
        inputs.len()
    );
    grads
        .into_iter()
        .zip(inputs)
        .enumerate()
        .map(|(i, (g, x))| {
            assert!(
                g.shape() == x.shape(),
                "{name}: gradient {i} has shape {:?}, expected {:?} (the shape of input {i})",
                g.shape(),
                x.shape()
            );
            Some(g.to_dtype(x.dtype()))
        })
        .collect()
}

/// `f(inputs)` with the derivative that `f` returns: `f` gets stand-ins for the inputs and
/// returns the output and a closure from the upstream gradient (the output's shape) to one
/// gradient per input, in order.
///
/// ```
/// use ferrograd::prelude::*;
///
/// // log(1 + eˣ) with a gradient that stays finite for large x.
/// let x = Tensor::scalar(100.0f32).requires_grad();
/// let y = custom_gradient(&[&x], |xs| {
///     let e = xs[0].exp();
///     let y = (&e + 1.0).log();
///     (y, move |up: &Tensor| vec![up * &(1.0 - &(1.0 / &(&e + 1.0)))])
/// });
/// assert_eq!(grad(&y, &[&x])[0].item(), 1.0);
///
/// // A straight-through estimator: sign forward, identity backward.
/// let w = Tensor::from_vec(vec![-0.3f32, 0.8], &[2]).requires_grad();
/// let s = custom_gradient(&[&w], |ws| (ws[0].detach().sign(), |up: &Tensor| vec![up.clone()]));
/// assert_eq!(s.to_vec::<f32>(), vec![-1.0, 1.0]);
/// assert_eq!(s.sum().backward().get(&w).unwrap().to_vec::<f32>(), vec![1.0, 1.0]);
/// ```
pub fn custom_gradient<F, G>(inputs: &[&Tensor], f: F) -> Tensor
where
    F: FnOnce(&[Tensor]) -> (Tensor, G),
    G: Fn(&Tensor) -> Vec<Tensor> + Send + Sync + 'static,
{
    custom_gradient_named("custom_gradient", inputs, f)
}

/// [`custom_gradient`] with a name, used in error messages and anomaly reports.
pub fn custom_gradient_named<F, G>(name: &str, inputs: &[&Tensor], f: F) -> Tensor
where
    F: FnOnce(&[Tensor]) -> (Tensor, G),
    G: Fn(&Tensor) -> Vec<Tensor> + Send + Sync + 'static,
{
    let stand_ins: Vec<Tensor> = inputs.iter().map(|t| stand_in(t)).collect();
    let (y, rule) = f(&stand_ins);
    let label = name.to_string();
    record_impl(
        Cow::Owned(name.to_string()),
        y.detach(),
        inputs,
        Some(Box::new(move |c, up| checked(&label, rule(up), c.inputs))),
    )
}

/// [`custom_gradient_named`] for a function that also reads tracked leaves it was not given as
/// inputs (trainable weights it captures), as TensorFlow's `custom_gradient` with `variables`:
/// the rule gets the upstream gradient and those leaves (in the order first reached walking
/// back from the output) and returns the inputs' gradients and the variables' gradients
/// (`None` for a variable that gets none from this function).
///
/// ```
/// use ferrograd::prelude::*;
///
/// let w = Tensor::from_vec(vec![1.0f32, 1.0], &[2]).requires_grad();
/// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).requires_grad();
/// let poly = custom_gradient_with_variables("linear_poly", &[&x], |xs| {
///     let (w0, w1) = (w.narrow(0, 0, 1), w.narrow(0, 1, 1));
///     let x = xs[0].clone();
///     let y = &(&w1 * &x) + &w0;
///     (y, move |up: &Tensor, vars: &[Tensor]| {
///         let dw = Tensor::stack(&[&(up * &x).sum(), &up.sum()], 0);
///         (vec![up * &vars[0].narrow(0, 1, 1)], vec![Some(dw)])
///     })
/// });
/// let g = poly.sum().backward();
/// assert_eq!(g.get(&w).unwrap().to_vec::<f32>(), vec![6.0, 3.0]);
/// assert_eq!(g.get(&x).unwrap().to_vec::<f32>(), vec![1.0, 1.0, 1.0]);
/// ```
pub fn custom_gradient_with_variables<F, G>(name: &str, inputs: &[&Tensor], f: F) -> Tensor
where
    F: FnOnce(&[Tensor]) -> (Tensor, G),
    G: Fn(&Tensor, &[Tensor]) -> (Vec<Tensor>, Vec<Option<Tensor>>) + Send + Sync + 'static,
{
    let stand_ins: Vec<Tensor> = inputs.iter().map(|t| stand_in(t)).collect();
    let (y, rule) = f(&stand_ins);
    let variables = captured_leaves(&y, &stand_ins);
    let n = inputs.len();
    let all: Vec<&Tensor> = inputs.iter().copied().chain(&variables).collect();
    let label = name.to_string();
    record_impl(
        Cow::Owned(name.to_string()),
        y.detach(),
        &all,
        Some(Box::new(move |c, up| {
            let (gi, gv) = rule(up, &c.inputs[n..]);
            assert!(
                gv.len() == c.inputs.len() - n,
                "{label}: the gradient function returned {} variable gradients for {} variables",
                gv.len(),
                c.inputs.len() - n
            );
            assert!(
                gi.len() == n,
                "{label}: the gradient function returned {} gradients for {n} inputs",
                gi.len()
            );
            let mut grads = checked(&label, gi, &c.inputs[..n]);
            let vars = &c.inputs[n..];
            grads.extend(gv.into_iter().zip(vars).enumerate().map(|(k, (g, v))| {
                g.map(|g| {
                    assert!(
                        g.shape() == v.shape(),
                        "{label}: variable gradient {k} has shape {:?}, expected {:?} (the \
                         shape of variable {k})",
                        g.shape(),
                        v.shape()
                    );
                    g.to_dtype(v.dtype())
                })
            }));
            grads
        })),
    )
}

/// The tracked leaves `y` depends on other than through `stand_ins`, in the order first reached.
pub(super) fn captured_leaves(y: &Tensor, stand_ins: &[Tensor]) -> Vec<Tensor> {
    let mut seen: IdSet = stand_ins.iter().filter_map(Tensor::id).collect();
    let mut stack = vec![y.clone()];
    let mut leaves = Vec::new();
    while let Some(t) = stack.pop() {
        let Some(node) = t.0.node.as_ref() else {
            continue;
        };
        if !seen.insert(node.id) {
            continue;
        }
        match &node.kind {
            NodeKind::Leaf => leaves.push(t.clone()),
            NodeKind::Op(rec) => stack.extend(rec.inputs.iter().rev().cloned()),
        }
    }
    leaves
}

/// Several outputs with one derivative: `f` returns the outputs and a closure from one upstream
/// gradient per output (zeros for an output that does not reach the result) to one gradient
/// per input. All outputs share the first one's dtype.
pub fn custom_gradient_n<F, G>(name: &str, inputs: &[&Tensor], f: F) -> Vec<Tensor>
where
    F: FnOnce(&[Tensor]) -> (Vec<Tensor>, G),
    G: Fn(&[Tensor]) -> Vec<Tensor> + Send + Sync + 'static,
{
    let stand_ins: Vec<Tensor> = inputs.iter().map(|t| stand_in(t)).collect();
    let (ys, rule) = f(&stand_ins);
    assert!(!ys.is_empty(), "{name}: the function returned no outputs");
    let dtype: DType = ys[0].dtype();
    let shapes: Vec<Vec<usize>> = ys.iter().map(|y| y.shape().to_vec()).collect();
    // One node for all outputs: its value is the outputs flattened end to end, and each output
    // is a view of it, so the engine hands the rule the upstream of every output at once.
    let flat: Vec<Tensor> = ys
        .iter()
        .map(|y| y.detach().to_dtype(dtype).reshape(&[y.numel()]))
        .collect();
    let packed_value = Tensor::cat(&flat.iter().collect::<Vec<_>>(), 0);
    let label = name.to_string();
    let split_shapes = shapes.clone();
    let packed = record_impl(
        Cow::Owned(name.to_string()),
        packed_value,
        inputs,
        Some(Box::new(move |c, up| {
            checked(&label, rule(&split(up, &split_shapes)), c.inputs)
        })),
    );
    split(&packed, &shapes)
}

/// The pieces of a flat tensor, reshaped to `shapes`.
fn split(flat: &Tensor, shapes: &[Vec<usize>]) -> Vec<Tensor> {
    let mut start = 0;
    shapes
        .iter()
        .map(|s| {
            let n: usize = s.iter().product();
            let piece = flat.narrow(0, start, n).reshape(s);
            start += n;
            piece
        })
        .collect()
}
