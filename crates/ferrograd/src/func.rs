//! Function transforms with `torch.func`'s names, on reverse mode: the gradient of a closure,
//! its vector-Jacobian product, Hessian-vector products, and whole Jacobians and Hessians.
//!
//! Each transform calls the closure on fresh leaves that carry the primals' values. Where a
//! primal is itself tracked (the transform runs inside another differentiation), the leaves
//! are the primals themselves and the results are built with a graph, so transforms compose:
//! `grad` of `grad` is the second derivative.
//!
//! ```
//! use ferrograd::func;
//! use ferrograd::prelude::*;
//!
//! let x = Tensor::from_vec(vec![1.0f64, 2.0], &[2]);
//! let cube = |p: &[Tensor]| p[0].powf(3.0).sum();
//! assert_eq!(func::grad(cube, &[&x])[0].to_vec::<f64>(), [3.0, 12.0]); // 3x²
//! let h = func::hessian(|x: &Tensor| x.powf(3.0).sum(), &x);
//! assert_eq!(h.to_vec::<f64>(), [6.0, 0.0, 0.0, 12.0]); // diag(6x)
//! ```

use crate::autograd::try_grad;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// The primals as the closure sees them: tracked ones as they are (an outer differentiation
/// follows them through), the others as fresh leaves.
fn leaves(primals: &[&Tensor]) -> Vec<Tensor> {
    primals
        .iter()
        .map(|p| {
            if p.is_tracked() {
                (*p).clone()
            } else {
                p.detach().requires_grad()
            }
        })
        .collect()
}

/// Whether results must stay differentiable: some primal belongs to an outer differentiation.
fn nested(primals: &[&Tensor]) -> bool {
    primals.iter().any(|p| p.is_tracked())
}

/// The gradient of the one-element `f(primals)` with respect to each primal (`torch.func.grad`,
/// JAX's `grad`); zeros for a primal `f` does not read.
pub fn grad(f: impl FnOnce(&[Tensor]) -> Tensor, primals: &[&Tensor]) -> Vec<Tensor> {
    grad_and_value(f, primals).0
}

/// [`grad`] and the value `f(primals)` from one evaluation (`torch.func.grad_and_value`).
pub fn grad_and_value(
    f: impl FnOnce(&[Tensor]) -> Tensor,
    primals: &[&Tensor],
) -> (Vec<Tensor>, Tensor) {
    try_grad_and_value(f, primals).unwrap_or_else(|e| panic!("{e}"))
}

/// [`grad_and_value`] returning the error: `f`'s value not of one element, or a gradient that
/// reaches an op without a derivative.
pub fn try_grad_and_value(
    f: impl FnOnce(&[Tensor]) -> Tensor,
    primals: &[&Tensor],
) -> Result<(Vec<Tensor>, Tensor)> {
    let xs = leaves(primals);
    let y = f(&xs);
    let refs: Vec<&Tensor> = xs.iter().collect();
    let grads = try_grad(&y, &refs, nested(primals))?;
    Ok((grads, y))
}

/// `f(primals)` and its pullback (`torch.func.vjp`): the pullback takes a cotangent of the
/// output's shape and gives `cotangentᵀ · ∂f/∂primalᵢ` for each primal. It may be called many
/// times.
pub fn vjp(
    f: impl FnOnce(&[Tensor]) -> Tensor,
    primals: &[&Tensor],
) -> (Tensor, impl Fn(&Tensor) -> Vec<Tensor>) {
    let xs = leaves(primals);
    let y = f(&xs);
    let keep = nested(primals);
    let out = y.clone();
    let pullback = move |cotangent: &Tensor| {
        try_pullback(&y, &xs, cotangent, keep).unwrap_or_else(|e| panic!("{e}"))
    };
    (out, pullback)
}

/// `Σ y ⊙ cotangent` differentiated with respect to `xs`: the vector-Jacobian product,
/// differentiable again when `keep` or when the cotangent is tracked.
fn try_pullback(y: &Tensor, xs: &[Tensor], cotangent: &Tensor, keep: bool) -> Result<Vec<Tensor>> {
    if cotangent.shape() != y.shape() {
        return Err(Error::Shape(format!(
            "vjp: the cotangent {:?} must have the output's shape {:?}",
            cotangent.shape(),
            y.shape()
        )));
    }
    let weighted = (y * cotangent).sum();
    let refs: Vec<&Tensor> = xs.iter().collect();
    try_grad(&weighted, &refs, keep || cotangent.is_tracked())
}

/// The Hessian of the one-element `f` at `primals` times `tangents` (one per primal), by
/// reverse over reverse: the gradient of `⟨∇f, tangents⟩` (`torch.func`'s `hvp` recipe).
pub fn hvp(
    f: impl FnOnce(&[Tensor]) -> Tensor,
    primals: &[&Tensor],
    tangents: &[&Tensor],
) -> Vec<Tensor> {
    assert_eq!(
        primals.len(),
        tangents.len(),
        "hvp: {} tangents for {} primals",
        tangents.len(),
        primals.len()
    );
    let xs = leaves(primals);
    let y = f(&xs);
    let refs: Vec<&Tensor> = xs.iter().collect();
    let g = try_grad(&y, &refs, true).unwrap_or_else(|e| panic!("{e}"));
    let dot = g
        .iter()
        .zip(tangents)
        .map(|(g, t)| (g * *t).sum())
        .reduce(|a, b| &a + &b)
        .expect("at least one primal");
    try_grad(&dot, &refs, nested(primals)).unwrap_or_else(|e| panic!("{e}"))
}

/// The Jacobian of `f` at `x` by reverse mode (`torch.func.jacrev`), shaped as the output's
/// shape followed by the input's: one pullback per output element.
pub fn jacrev(f: impl FnOnce(&Tensor) -> Tensor, x: &Tensor) -> Tensor {
    let (y, pullback) = vjp(|p: &[Tensor]| f(&p[0]), &[x]);
    let n = y.numel();
    let rows: Vec<Tensor> = (0..n)
        .map(|i| {
            let mut basis = vec![0.0; n];
            basis[i] = 1.0;
            let e = Tensor::from_vec(basis, y.shape()).to_dtype(y.dtype());
            pullback(&e).remove(0)
        })
        .collect();
    let shape = [y.shape(), x.shape()].concat();
    if rows.is_empty() {
        return Tensor::zeros(&shape, x.dtype());
    }
    let refs: Vec<&Tensor> = rows.iter().collect();
    Tensor::stack(&refs, 0).reshape(&shape)
}

/// The Hessian of the one-element `f` at `x` (`torch.func.hessian`), shaped as `x`'s shape
/// twice: the Jacobian of the gradient.
pub fn hessian(f: impl Fn(&Tensor) -> Tensor, x: &Tensor) -> Tensor {
    // Inside `jacrev` the point is tracked, so this gradient keeps its graph.
    let inner = |x: &Tensor| grad(|p: &[Tensor]| f(&p[0]), &[x]).remove(0);
    let h = jacrev(inner, x);
    h.reshape(&[x.shape(), x.shape()].concat())
}
