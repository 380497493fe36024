//! Gradient checking against central finite differences in f64.
//!
//! The function's output is projected onto a fixed random direction `r` (s = Σ f(x)·r), so one
//! backward pass checks a full vector-Jacobian product; every input element is then perturbed
//! by ±eps and the numeric derivative of s compared with the analytic one.

use rand::rngs::StdRng;
use rand::SeedableRng;

use super::engine::{grad, grad_with_graph};
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// Step and tolerances for [`gradcheck`] and [`gradgradcheck`]; `Default` gives values suited
/// to f64 central differences.
#[derive(Clone, Debug)]
pub struct GradcheckOptions {
    /// Finite-difference step.
    pub eps: f64,
    /// Absolute tolerance.
    pub atol: f64,
    /// Relative tolerance (of the numeric value).
    pub rtol: f64,
    /// Seed of the random projection direction.
    pub seed: u64,
}

impl Default for GradcheckOptions {
    fn default() -> Self {
        GradcheckOptions {
            eps: 1e-6,
            atol: 1e-5,
            rtol: 1e-3,
            seed: 0,
        }
    }
}

/// The inputs as fresh tracked f64 leaves.
fn leaves(inputs: &[Tensor]) -> Vec<Tensor> {
    inputs
        .iter()
        .map(|t| t.to_dtype(DType::F64).detach().requires_grad())
        .collect()
}

fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for ax in (0..shape.len()).rev() {
        idx[ax] = flat % shape[ax];
        flat /= shape[ax];
    }
    idx
}

/// `s(x) = Σ f(x) · r` for a random `r` fixed by the seed.
fn projected<'a>(
    f: &'a dyn Fn(&[Tensor]) -> Tensor,
    inputs: &[Tensor],
    seed: u64,
) -> impl Fn(&[Tensor]) -> Tensor + 'a {
    let probe = f(&leaves(inputs));
    let r = Tensor::randn(probe.shape(), DType::F64, &mut StdRng::seed_from_u64(seed));
    move |xs: &[Tensor]| (&f(xs).to_dtype(DType::F64) * &r).sum()
}

/// Checks the derivative rules used by `f` at `inputs`. Returns an error describing the worst
/// element (input, index, analytic and numeric values) when any is outside
/// `atol + rtol · |numeric|`.
pub fn gradcheck(
    f: impl Fn(&[Tensor]) -> Tensor,
    inputs: &[Tensor],
    opts: &GradcheckOptions,
) -> Result<()> {
    let s = projected(&f, inputs, opts.seed);
    check_scalar(&s, inputs, opts, "gradcheck")
}

/// Checks second derivatives: the gradient of `f` (built with a graph) is itself checked with
/// [`gradcheck`]'s method, projected on a second random direction.
pub fn gradgradcheck(
    f: impl Fn(&[Tensor]) -> Tensor,
    inputs: &[Tensor],
    opts: &GradcheckOptions,
) -> Result<()> {
    let s = projected(&f, inputs, opts.seed);
    let directions: Vec<Tensor> = {
        let mut rng = StdRng::seed_from_u64(opts.seed.wrapping_add(1));
        inputs
            .iter()
            .map(|t| Tensor::randn(t.shape(), DType::F64, &mut rng))
            .collect()
    };
    let h = |xs: &[Tensor]| {
        let refs: Vec<&Tensor> = xs.iter().collect();
        let gs = grad_with_graph(&s(xs), &refs);
        gs.iter()
            .zip(&directions)
            .map(|(g, d)| (g * d).sum())
            .reduce(|a, b| &a + &b)
            .expect("at least one input")
    };
    check_scalar(&h, inputs, opts, "gradgradcheck")
}

fn check_scalar(
    s: &dyn Fn(&[Tensor]) -> Tensor,
    inputs: &[Tensor],
    opts: &GradcheckOptions,
    name: &str,
) -> Result<()> {
    let xs = leaves(inputs);
    let refs: Vec<&Tensor> = xs.iter().collect();
    let analytic = grad(&s(&xs), &refs);
    let base: Vec<Vec<f64>> = xs.iter().map(|x| x.to_vec::<f64>()).collect();
    // (excess over tolerance, message) of the worst element so far.
    let mut worst: Option<(f64, String)> = None;
    for (i, x) in xs.iter().enumerate() {
        let a = analytic[i].to_vec::<f64>();
        for j in 0..base[i].len() {
            let eval = |delta: f64| {
                let mut data = base[i].clone();
                data[j] += delta;
                let mut moved = xs.clone();
                moved[i] = Tensor::from_vec(data, x.shape()).requires_grad();
                s(&moved).item()
            };
            let numeric = (eval(opts.eps) - eval(-opts.eps)) / (2.0 * opts.eps);
            let diff = (a[j] - numeric).abs();
            let tol = opts.atol + opts.rtol * numeric.abs();
            let excess = if diff.is_nan() {
                f64::INFINITY
            } else {
                diff / tol
            };
            if excess > 1.0 && worst.as_ref().is_none_or(|(e, _)| excess > *e) {
                worst = Some((
                    excess,
                    format!(
                        "{name}: input {i} (shape {:?}) at index {:?}: analytic {:.10e} vs numeric {:.10e} \
                         (|diff| {:.3e} > atol {:.1e} + rtol {:.1e} * |numeric|)",
                        x.shape(),
                        unravel(j, x.shape()),
                        a[j],
                        numeric,
                        diff,
                        opts.atol,
                        opts.rtol
                    ),
                ));
            }
        }
    }
    match worst {
        Some((_, msg)) => Err(Error::Gradcheck(msg)),
        None => Ok(()),
    }
}
