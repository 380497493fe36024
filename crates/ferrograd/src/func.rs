//! Function transforms with `torch.func`'s names: in reverse mode the gradient of a closure,
//! its vector-Jacobian product, Hessian-vector products, and whole Jacobians and Hessians; in
//! forward mode its Jacobian-vector product ([`jvp`], [`linearize`], [`jacfwd`]), with a
//! tangent rule per op (`graph::tangent`), and [`jvpcheck`] to check those rules; and
//! [`vmap`], which runs a function written for one example on a batch, with a batching rule
//! per op (`graph::batch`). They compose: `vmap` of `grad` gives per-example gradients.
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

use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::autograd::{try_grad, GradcheckOptions};
use crate::error::{Error, Result};
use crate::graph::batch::vmap_call;
use crate::graph::recording::Recording;
use crate::tensor::{no_grad, DType, Tensor};

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
/// shape followed by the input's: the pullback of every output basis vector, by `vmap`.
pub fn jacrev(f: impl FnOnce(&Tensor) -> Tensor, x: &Tensor) -> Tensor {
    let (y, pullback) = vjp(|p: &[Tensor]| f(&p[0]), &[x]);
    let shape = [y.shape(), x.shape()].concat();
    let rows = over_basis(y.shape(), y.dtype(), |e| Ok(pullback(e).remove(0)));
    match rows.unwrap_or_else(|e| panic!("{e}")) {
        Some(rows) => rows.reshape(&shape),
        None => Tensor::zeros(&shape, x.dtype()),
    }
}

/// The most basis vectors [`over_basis`] runs as one batch.
const MAX_BATCHED_BASIS: usize = 1024;

/// `each` of every basis vector of a tensor shaped `shape`, stacked first (`[n, ..]`), by
/// `vmap` over the basis: one batched pass where `each`'s ops have batching rules, one pass
/// per vector where they do not. `None` for an empty shape's basis.
fn over_basis(
    shape: &[usize],
    dtype: DType,
    each: impl Fn(&Tensor) -> Result<Tensor>,
) -> Result<Option<Tensor>> {
    let n: usize = shape.iter().product();
    if n == 0 {
        return Ok(None);
    }
    let basis = |i: usize| {
        let mut v = vec![0.0; n];
        v[i] = 1.0;
        Tensor::from_vec(v, shape).to_dtype(dtype)
    };
    // The whole basis at once while it is small; a large one (a Hessian of many parameters)
    // one vector at a time, as its batch would hold n times each intermediate.
    if n <= MAX_BATCHED_BASIS {
        let rows: Vec<Tensor> = (0..n).map(basis).collect();
        let eye = Tensor::stack(&rows.iter().collect::<Vec<_>>(), 0);
        let batched = try_vmap(
            |a| each(&a[0]).map(|t| vec![t]).unwrap_or_default(),
            &[&eye],
            &[Some(0)],
        );
        if let Ok(mut b) = batched {
            if b.len() == 1 {
                return Ok(Some(b.remove(0)));
            }
        }
    }
    let rows = (0..n)
        .map(|i| each(&basis(i)))
        .collect::<Result<Vec<Tensor>>>()?;
    Ok(Some(Tensor::stack(&rows.iter().collect::<Vec<_>>(), 0)))
}

/// The Hessian of the one-element `f` at `x` (`torch.func.hessian`), shaped as `x`'s shape
/// twice: the Jacobian of the gradient.
pub fn hessian(f: impl Fn(&Tensor) -> Tensor, x: &Tensor) -> Tensor {
    // Inside `jacrev` the point is tracked, so this gradient keeps its graph.
    let inner = |x: &Tensor| grad(|p: &[Tensor]| f(&p[0]), &[x]).remove(0);
    let h = jacrev(inner, x);
    h.reshape(&[x.shape(), x.shape()].concat())
}

/// `f(primals)` and its derivative along `tangents` (one per primal, of its shape and dtype),
/// by forward mode (`torch.func.jvp`, JAX's `jvp`): the tangent of each op is computed beside
/// its value, from the op's tangent rule, at a small constant times the cost of `f`.
///
/// Tangent rules are written with tensor ops, so the results are differentiable: a `jvp`
/// inside [`grad`] (reverse over forward), a [`grad`] inside a `jvp` (forward over reverse,
/// as [`hessian_fwd`]) and a `jvp` inside a `jvp` all work.
///
/// ```
/// use ferrograd::func;
/// use ferrograd::prelude::*;
///
/// let x = Tensor::from_vec(vec![0.0f64, 1.0], &[2]);
/// let t = Tensor::from_vec(vec![1.0f64, 2.0], &[2]);
/// let (y, ty) = func::jvp(|p: &[Tensor]| p[0].sin(), &[&x], &[&t]);
/// assert_eq!(ty.to_vec::<f64>(), [1.0, 2.0 * 1f64.cos()]); // cos(x) · t
/// assert_eq!(y.to_vec::<f64>(), [0.0, 1f64.sin()]);
/// ```
pub fn jvp(
    f: impl FnOnce(&[Tensor]) -> Tensor,
    primals: &[&Tensor],
    tangents: &[&Tensor],
) -> (Tensor, Tensor) {
    try_jvp(f, primals, tangents).unwrap_or_else(|e| panic!("{e}"))
}

/// [`jvp`] returning the error: tangents that do not fit the primals, or an op in `f` with
/// no tangent rule (named).
pub fn try_jvp(
    f: impl FnOnce(&[Tensor]) -> Tensor,
    primals: &[&Tensor],
    tangents: &[&Tensor],
) -> Result<(Tensor, Tensor)> {
    let (mut ys, mut ts) = jvp_many(|p| vec![f(p)], primals, tangents)?;
    Ok((ys.remove(0), ts.remove(0)))
}

/// [`jvp`] of a function of several outputs: each output and its tangent.
pub fn jvp_many(
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
    primals: &[&Tensor],
    tangents: &[&Tensor],
) -> Result<(Vec<Tensor>, Vec<Tensor>)> {
    let lin = linearize_many(f, primals)?;
    let ts = lin.jvp_many(tangents)?;
    Ok((lin.values, ts))
}

/// A function linearized at a point (`torch.func.linearize`): its value there and the linear
/// map `tangents ↦ ∂f·tangents`. The function ran once; each [`Linearized::jvp`] runs only the
/// tangent rules of the ops it recorded.
///
/// ```
/// use ferrograd::func;
/// use ferrograd::prelude::*;
///
/// let x = Tensor::from_vec(vec![2.0f64], &[1]);
/// let cube = func::linearize(|p: &[Tensor]| p[0].powf(3.0), &[&x])?;
/// assert_eq!(cube.value().item(), 8.0);
/// assert_eq!(cube.jvp(&[&Tensor::from_vec(vec![1.0f64], &[1])])?.item(), 12.0); // 3x²
/// assert_eq!(cube.jvp(&[&Tensor::from_vec(vec![0.5f64], &[1])])?.item(), 6.0);
/// # Ok::<(), ferrograd::Error>(())
/// ```
pub struct Linearized {
    values: Vec<Tensor>,
    recorded: Recording,
    /// Whether the results belong to an outer differentiation.
    keep: bool,
}

impl Linearized {
    /// The function's value (its first output).
    pub fn value(&self) -> &Tensor {
        &self.values[0]
    }

    /// Every output of a function of several.
    pub fn values(&self) -> &[Tensor] {
        &self.values
    }

    /// The derivative along `tangents` (one per primal, of its shape and dtype) of the first
    /// output.
    pub fn jvp(&self, tangents: &[&Tensor]) -> Result<Tensor> {
        Ok(self.jvp_many(tangents)?.remove(0))
    }

    /// The derivative along `tangents` of every output.
    pub fn jvp_many(&self, tangents: &[&Tensor]) -> Result<Vec<Tensor>> {
        // Outside another differentiation the pass records nothing.
        if self.keep || tangents.iter().any(|t| t.is_tracked()) {
            self.recorded.push(tangents)
        } else {
            no_grad(|| self.recorded.push(tangents))
        }
    }
}

/// Runs `f` once at `primals` and keeps what forward mode needs: see [`Linearized`].
pub fn linearize(f: impl FnOnce(&[Tensor]) -> Tensor, primals: &[&Tensor]) -> Result<Linearized> {
    linearize_many(|p| vec![f(p)], primals)
}

/// [`linearize`] of a function of several outputs.
pub fn linearize_many(
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
    primals: &[&Tensor],
) -> Result<Linearized> {
    let recorded = Recording::record(f, primals, ("forward mode", false))?;
    let keep = recorded.outer;
    // Outside another differentiation the values are cut from what `f` recorded.
    let values: Vec<Tensor> = match keep {
        true => recorded.outputs.clone(),
        false => recorded.outputs.iter().map(Tensor::detach).collect(),
    };
    Ok(Linearized {
        values,
        recorded,
        keep,
    })
}

/// The Jacobian of `f` at `x` by forward mode (`torch.func.jacfwd`), shaped as the output's
/// shape followed by the input's: `f` runs once, then the tangent pass of every input basis
/// vector, by `vmap`.
/// Cheaper than [`jacrev`] where the input has fewer elements than the output.
pub fn jacfwd(f: impl FnOnce(&Tensor) -> Tensor, x: &Tensor) -> Tensor {
    try_jacfwd(f, x).unwrap_or_else(|e| panic!("{e}"))
}

/// [`jacfwd`] returning the error.
pub fn try_jacfwd(f: impl FnOnce(&Tensor) -> Tensor, x: &Tensor) -> Result<Tensor> {
    let lin = linearize(|p: &[Tensor]| f(&p[0]), &[x])?;
    let y = lin.value();
    let shape = [y.shape(), x.shape()].concat();
    // Column j is ∂y/∂xⱼ: stacked first, [n, .. y], moved last and reshaped to y's shape ++ x's.
    Ok(match over_basis(x.shape(), x.dtype(), |e| lin.jvp(&[e]))? {
        Some(columns) => {
            let perm: Vec<usize> = (1..columns.ndim()).chain([0]).collect();
            columns.permute(&perm).reshape(&shape)
        }
        None => Tensor::zeros(&shape, y.dtype()),
    })
}

/// The Hessian of the one-element `f` at `x` by forward over reverse (JAX's and
/// `torch.func`'s recipe for `hessian`): the forward-mode Jacobian of the gradient.
pub fn hessian_fwd(f: impl Fn(&Tensor) -> Tensor, x: &Tensor) -> Tensor {
    let inner = |x: &Tensor| grad(|p: &[Tensor]| f(&p[0]), &[x]).remove(0);
    jacfwd(inner, x).reshape(&[x.shape(), x.shape()].concat())
}

/// The points [`jvpcheck`] checks at and the tangents along which: floats in f64 with
/// random tangents (seeded), integer inputs (positions) as they are, with zero tangents.
fn probe(inputs: &[Tensor], seed: u64) -> (Vec<Tensor>, Vec<Tensor>) {
    let mut rng = StdRng::seed_from_u64(seed);
    inputs
        .iter()
        .map(|t| match t.dtype().is_float() {
            true => (
                t.to_dtype(DType::F64).detach(),
                Tensor::randn(t.shape(), DType::F64, &mut rng),
            ),
            false => (t.detach(), t.zeros_like()),
        })
        .unzip()
}

/// Checks the tangent rules used by `f` at `inputs` (converted to f64) against central
/// differences: along random tangents (seeded by `opts.seed`), `jvp`'s output tangent must
/// match `(f(x + εt) − f(x − εt)) / 2ε` element by element within `atol + rtol·|numeric|`. The
/// error names the worst element.
///
/// ```
/// use ferrograd::autograd::GradcheckOptions;
/// use ferrograd::func::jvpcheck;
/// use ferrograd::prelude::*;
///
/// let x = Tensor::from_vec(vec![0.3f64, -1.2, 2.0], &[3]);
/// jvpcheck(|p: &[Tensor]| p[0].tanh().softmax(0), &[x], &GradcheckOptions::default())?;
/// # Ok::<(), ferrograd::Error>(())
/// ```
pub fn jvpcheck(
    f: impl Fn(&[Tensor]) -> Tensor,
    inputs: &[Tensor],
    opts: &GradcheckOptions,
) -> Result<()> {
    let (xs, ts) = probe(inputs, opts.seed);
    let refs: Vec<&Tensor> = xs.iter().collect();
    let trefs: Vec<&Tensor> = ts.iter().collect();
    let (_, analytic) = try_jvp(|p| f(p).to_dtype(DType::F64), &refs, &trefs)?;
    let moved = |sign: f64| -> Vec<f64> {
        let at: Vec<Tensor> = xs
            .iter()
            .zip(&ts)
            .map(|(x, t)| match x.dtype().is_float() {
                true => x + &(t * (sign * opts.eps)),
                false => x.clone(),
            })
            .collect();
        f(&at).to_dtype(DType::F64).to_vec::<f64>()
    };
    let (up, down) = (moved(1.0), moved(-1.0));
    let a = analytic.to_vec::<f64>();
    let mut worst: Option<(f64, String)> = None;
    for (j, ((u, d), a)) in up.iter().zip(&down).zip(&a).enumerate() {
        let numeric = (u - d) / (2.0 * opts.eps);
        let diff = (a - numeric).abs();
        let excess = match diff.is_nan() {
            true => f64::INFINITY,
            false => diff / (opts.atol + opts.rtol * numeric.abs()),
        };
        if excess > 1.0 && worst.as_ref().is_none_or(|(e, _)| excess > *e) {
            let at = format!(
                "jvpcheck: output element {j}: forward mode {a:.10e} vs numeric {numeric:.10e}"
            );
            worst = Some((
                excess,
                format!(
                    "{at} (|diff| {diff:.3e}, atol {:.1e}, rtol {:.1e})",
                    opts.atol, opts.rtol
                ),
            ));
        }
    }
    match worst {
        Some((_, msg)) => Err(Error::Gradcheck(msg)),
        None => Ok(()),
    }
}

/// `f`, written for one example, made a function of a batch (`torch.func.vmap`, JAX's
/// `vmap`): input `i` is batched along axis `in_dims[i]` (all of one size), or shared by every
/// example where that is `None`; the result has the batch axis first.
///
/// `f` runs once, on the first example, while its ops are recorded; each op then runs once
/// on the whole batch by its batching rule, so the batch costs one batched computation, not a
/// loop. `f` runs once more on the last example alone, to check the batch: where values steer
/// `f` (its control flow, or positions read from values) the two differ, and `f` then runs
/// once per example instead (said once on standard error). Random draws inside `f` are the
/// same for every example (`randomness="same"`).
///
/// ```
/// use ferrograd::func;
/// use ferrograd::prelude::*;
///
/// let w = Tensor::from_vec(vec![1.0f64, 2.0], &[2]);
/// let xs = Tensor::from_vec(vec![1.0f64, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2]);
/// // A dot product written for one vector, run on three.
/// let dot = func::vmap(|a: &[Tensor]| (&a[0] * &a[1]).sum(), &[Some(0), None]);
/// assert_eq!(dot(&[&xs, &w]).to_vec::<f64>(), [1.0, 2.0, 3.0]);
/// // Per-example gradients of a loss: vmap of grad.
/// let loss = |w: &Tensor, x: &Tensor| (w * x).sum().square();
/// let per_example = func::vmap(
///     |a: &[Tensor]| func::grad(|p: &[Tensor]| loss(&p[0], &a[1]), &[&a[0]]).remove(0),
///     &[None, Some(0)],
/// )(&[&w, &xs]);
/// assert_eq!(per_example.shape(), &[3, 2]);
/// assert_eq!(per_example.to_vec::<f64>(), [2.0, 0.0, 0.0, 4.0, 6.0, 6.0]); // 2(w·x)x
/// ```
pub fn vmap<F: Fn(&[Tensor]) -> Tensor>(
    f: F,
    in_dims: &[Option<usize>],
) -> impl Fn(&[&Tensor]) -> Tensor + use<F> {
    let in_dims = in_dims.to_vec();
    move |inputs: &[&Tensor]| {
        try_vmap(|a| vec![f(a)], inputs, &in_dims)
            .unwrap_or_else(|e| panic!("{e}"))
            .remove(0)
    }
}

/// `f` of several outputs applied to a batch at once, as [`vmap`] describes, returning the
/// error: `in_dims` that do not fit the inputs, batches of different sizes, or an op in `f`
/// with no batching rule (named).
pub fn try_vmap(
    f: impl Fn(&[Tensor]) -> Vec<Tensor>,
    inputs: &[&Tensor],
    in_dims: &[Option<usize>],
) -> Result<Vec<Tensor>> {
    let (outputs, keep) = vmap_call(f, inputs, in_dims)?;
    // The recording's tracked copies stay inside: outside another differentiation the results
    // are values.
    Ok(match keep {
        true => outputs,
        false => outputs.iter().map(Tensor::detach).collect(),
    })
}

/// Whether a transform is recording the ops this thread runs (`jvp`, `vmap`, `linearize`, a
/// trace): code that would read values it could compute with ops instead can ask.
pub fn is_recording() -> bool {
    crate::tensor::trace::is_tracing()
}
