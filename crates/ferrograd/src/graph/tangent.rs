//! Forward mode: how a tangent moves through each op, and the pass that pushes tangents
//! through a function recorded once.
//!
//! Each declared op's tangent rule is the `jvp` entry of its declaration (`graph/table.rs`);
//! the element-wise tables' derivative entries serve as their rules read forward. A rule takes
//! the op's primal inputs and outputs and its inputs' tangents (absent where an input has
//! none, which stands for zero) and gives one tangent per output. Rules are written with
//! tensor ops, so a tangent is itself differentiable: reverse over forward needs nothing more,
//! and forward over reverse reads the ops that a backward pass runs like any others.
//!
//! A function is recorded by running it once on tracked copies of its primals while a trace
//! notes its ops ([`Recording::record`]); each push of tangents then walks those ops in
//! order. Nothing that runs outside an op's rules is needed, so one recording serves many
//! tangents (`linearize`, `jacfwd`).

use std::collections::HashMap;

use super::recording::{key, Recording};
use super::Op;
use crate::autograd::try_grad;
use crate::error::{Error, Result};
use crate::tensor::{enable_grad, is_grad_enabled, Tensor};

/// The tangents of an op's inputs, as a rule reads them.
pub(crate) struct Tangents<'a>(&'a [Option<Tensor>]);

impl Tangents<'_> {
    /// Input `i`'s tangent, `None` where it has none (zero).
    pub(crate) fn at(&self, i: usize) -> Option<&Tensor> {
        self.0.get(i).and_then(Option::as_ref)
    }

    /// Input `i`'s tangent, or zeros shaped as `like`.
    pub(crate) fn or_zeros(&self, i: usize, like: &Tensor) -> Tensor {
        self.at(i).cloned().unwrap_or_else(|| like.zeros_like())
    }

    /// `f` of input `i`'s tangent, where it has one.
    pub(crate) fn map(&self, i: usize, f: impl FnOnce(&Tensor) -> Tensor) -> Option<Tensor> {
        self.at(i).map(f)
    }
}

/// The sum of the terms present (`None` when none is).
pub(crate) fn total(terms: impl IntoIterator<Item = Option<Tensor>>) -> Option<Tensor> {
    terms.into_iter().flatten().reduce(|a, b| &a + &b)
}

/// The tangent of an op linear in each of its inputs separately (a product, a convolution, an
/// einsum): the op with one input at a time replaced by its tangent, summed.
pub(crate) fn multilinear(
    x: &[Tensor],
    t: &Tangents<'_>,
    f: impl Fn(&[Tensor]) -> Tensor,
) -> Option<Tensor> {
    total((0..x.len()).map(|i| {
        t.map(i, |ti| {
            let mut args = x.to_vec();
            args[i] = ti.clone();
            f(&args)
        })
    }))
}

/// The tangents of an op computed by pushing them through a composite of ops with rules of
/// their own, that computes what the op computes (a fused kernel's reference form).
pub(crate) fn via_composite(
    x: &[Tensor],
    t: &Tangents<'_>,
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> Vec<Option<Tensor>> {
    let primals: Vec<&Tensor> = x.iter().collect();
    let lin =
        Recording::record(f, &primals, ("forward mode", false)).unwrap_or_else(|e| panic!("{e}"));
    let ts: Vec<Option<&Tensor>> = (0..x.len()).map(|i| t.at(i)).collect();
    lin.push_some(&ts).unwrap_or_else(|e| panic!("{e}"))
}

/// The tangents of an op from its derivative rule transposed: its vector-Jacobian product is
/// linear in the cotangent `u`, so differentiating `Σ vjp(u) ⊙ t` in `u` gives `J·t`. For ops
/// whose rule is the routing of a fused kernel (max pooling, a product scan); it costs the
/// op's backward twice.
pub(crate) fn via_transpose(
    x: &[Tensor],
    t: &Tangents<'_>,
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> Vec<Option<Tensor>> {
    let keep = is_grad_enabled();
    enable_grad(|| {
        let with: Vec<usize> = (0..x.len()).filter(|&i| t.at(i).is_some()).collect();
        let args: Vec<Tensor> = x
            .iter()
            .enumerate()
            .map(|(i, x)| match with.contains(&i) && !x.is_tracked() {
                true => x.detach().requires_grad(),
                false => x.clone(),
            })
            .collect();
        let ys = f(&args);
        let floats: Vec<usize> = (0..ys.len())
            .filter(|&k| ys[k].dtype().is_float())
            .collect();
        let us: Vec<Tensor> = floats
            .iter()
            .map(|&k| ys[k].zeros_like().requires_grad())
            .collect();
        let pairing = total(
            floats
                .iter()
                .zip(&us)
                .map(|(&k, u)| Some((&ys[k] * u).sum())),
        );
        let wrt: Vec<&Tensor> = with.iter().map(|&i| &args[i]).collect();
        let back = try_grad(&pairing.expect("a float output"), &wrt, true);
        let back = back.unwrap_or_else(|e| panic!("{e}"));
        let dot = total(
            with.iter()
                .zip(&back)
                .map(|(&i, g)| Some((g * &t.at(i).unwrap().to_dtype(g.dtype())).sum())),
        );
        let us_refs: Vec<&Tensor> = us.iter().collect();
        let jt =
            try_grad(&dot.expect("a tangent"), &us_refs, keep).unwrap_or_else(|e| panic!("{e}"));
        let mut out = vec![None; ys.len()];
        for (&k, jt) in floats.iter().zip(jt) {
            out[k] = Some(jt);
        }
        out
    })
}

/// `y`, reduced over `axes`, with those axes kept as size 1 (as `keepdim` gives it).
pub(crate) fn kept(y: &Tensor, axes: &[usize], keepdim: bool) -> Tensor {
    if keepdim {
        return y.clone();
    }
    let mut shape = y.shape().to_vec();
    let mut sorted = axes.to_vec();
    sorted.sort_unstable();
    for &a in &sorted {
        shape.insert(a, 1);
    }
    y.reshape(&shape)
}

/// The tangent of a maximum or minimum `y` of `x` over `axes`: the mean of `t` over the
/// elements that attain it, as the gradient splits ties.
pub(crate) fn extremum(
    x: &Tensor,
    y: &Tensor,
    t: &Tensor,
    axes: &[usize],
    keepdim: bool,
) -> Tensor {
    let hits = x.detach().eq(&kept(y, axes, keepdim).detach());
    &(t * &hits).sum_axes(axes, keepdim) / &hits.sum_axes(axes, keepdim)
}

/// The tangent of `x`'s variance over `axes` with `correction`: `2 Σ (x − x̄) t / (n − c)`.
pub(crate) fn variance_tangent(
    x: &Tensor,
    t: &Tensor,
    axes: &[usize],
    correction: usize,
    keepdim: bool,
) -> Tensor {
    let n: usize = axes.iter().map(|&a| x.shape()[a]).product();
    let centered = x - &x.mean_axes(axes, true);
    (&centered * t).sum_axes(axes, keepdim) * (2.0 / (n as f64 - correction as f64).max(0.0))
}

/// What a rule gives: one tangent per output, `None` for one that has none.
pub(crate) trait IntoTangents {
    fn into_tangents(self) -> Vec<Option<Tensor>>;
}

impl IntoTangents for Tensor {
    fn into_tangents(self) -> Vec<Option<Tensor>> {
        vec![Some(self)]
    }
}

impl IntoTangents for Option<Tensor> {
    fn into_tangents(self) -> Vec<Option<Tensor>> {
        vec![self]
    }
}

impl IntoTangents for Vec<Option<Tensor>> {
    fn into_tangents(self) -> Vec<Option<Tensor>> {
        self
    }
}

impl Op {
    /// The tangents of this op's outputs `y` at inputs `x` along the inputs' tangents `t`.
    pub(crate) fn tangent(
        &self,
        x: &[Tensor],
        y: &[Tensor],
        t: &[Option<Tensor>],
    ) -> Vec<Option<Tensor>> {
        let t = Tangents(t);
        match self {
            Op::Unary(u) => match t.at(0) {
                Some(t0) => vec![u.tangent(&x[0], &y[0], &t0.to_dtype(y[0].dtype()))],
                None => vec![None],
            },
            Op::Binary(b) => vec![b.tangent((&x[0], &x[1], &y[0]), t.at(0), t.at(1))],
            op => op
                .declared_tangent(x, y, &t)
                .unwrap_or_else(|| panic!("{} is not an op a function calls", op.name())),
        }
    }
}

impl Recording {
    /// The outputs' tangents along the primals' `tangents` (one per primal, of its shape and
    /// dtype): zeros for an output no tangent reaches.
    pub(crate) fn push(&self, tangents: &[&Tensor]) -> Result<Vec<Tensor>> {
        if tangents.len() != self.inputs.len() {
            return Err(Error::Shape(format!(
                "jvp: {} tangents for {} primals",
                tangents.len(),
                self.inputs.len()
            )));
        }
        for (i, (t, p)) in tangents.iter().zip(&self.inputs).enumerate() {
            if t.shape() != p.shape() || t.dtype() != p.dtype() {
                return Err(Error::Shape(format!(
                    "jvp: tangent {i} is {:?} {}, but its primal is {:?} {}",
                    t.shape(),
                    t.dtype(),
                    p.shape(),
                    p.dtype()
                )));
            }
        }
        let some: Vec<Option<&Tensor>> = tangents.iter().map(|t| Some(*t)).collect();
        let outs = self.push_some(&some)?;
        Ok(outs
            .into_iter()
            .zip(&self.outputs)
            .map(|(t, y)| t.unwrap_or_else(|| y.zeros_like()))
            .collect())
    }

    /// [`Linearization::push`] with some primals' tangents absent (zero), and absent output
    /// tangents left so.
    pub(crate) fn push_some(&self, tangents: &[Option<&Tensor>]) -> Result<Vec<Option<Tensor>>> {
        let mut known: HashMap<usize, Tensor> = HashMap::new();
        for (p, t) in self.inputs.iter().zip(tangents) {
            if let (Some(t), true) = (t, p.dtype().is_float()) {
                let sum = match known.remove(&key(p)) {
                    Some(before) => &before + *t,
                    None => (*t).clone(),
                };
                known.insert(key(p), sum);
            }
        }
        for step in &self.steps {
            let ts: Vec<Option<Tensor>> = step
                .inputs
                .iter()
                .map(|x| known.get(&key(x)).cloned())
                .collect();
            if ts.iter().all(Option::is_none) {
                continue;
            }
            let outs = step.op.tangent(&step.inputs, &step.outputs, &ts);
            for (y, t) in step.outputs.iter().zip(outs) {
                if let Some(t) = t {
                    known.insert(key(y), t);
                }
            }
        }
        Ok(self
            .outputs
            .iter()
            .map(|y| known.get(&key(y)).cloned())
            .collect())
    }
}
