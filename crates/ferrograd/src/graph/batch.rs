//! `vmap`: a function written for one example, run on a batch as one batched computation.
//!
//! The function runs once on the first example while a trace records its ops; then each op is
//! run again on the batched values by its batching rule (the `vmap` entry of its declaration in
//! `graph/table.rs`), which gives the batched result from the batched inputs in one call: the
//! batch axis first, every other axis as the example has it. An op without a batched form of its
//! own (a product of two batched convolution operands, the recurrent layers with batched
//! weights) runs once per example ([`Batch::each`]), as `torch.func.vmap` does for its ops
//! without a rule.
//!
//! The values a function computes must steer nothing: control flow is recorded as the first
//! example takes it. The batched result is checked against the function run on the last
//! example alone, and where they differ the function runs once per example instead. Random
//! draws are the same for every example (`torch.func`'s `randomness="same"`).

use std::collections::HashMap;

use super::recording::{key, Recording};
use super::table::weights_of;
use super::Op;
use crate::error::{Error, Result};
use crate::tensor::{no_grad, Tensor};

/// An op's inputs as its batching rule reads them: the batched ones with the batch axis first.
pub(crate) struct Batch<'a> {
    x: &'a [Tensor],
    on: &'a [bool],
    /// The batch size.
    pub(crate) n: usize,
    op: &'a Op,
}

impl Batch<'_> {
    /// Input `i`, batched or not.
    pub(crate) fn x(&self, i: usize) -> &Tensor {
        &self.x[i]
    }

    /// Input `i`, where the op has one.
    pub(crate) fn get(&self, i: usize) -> Option<&Tensor> {
        self.x.get(i)
    }

    /// The axes of input 0's example, as axes of the batch: every axis but the first.
    pub(crate) fn example_axes(&self) -> Vec<usize> {
        (1..self.x[0].ndim()).collect()
    }

    /// The op itself on the [`Batch::aligned`] inputs: the rule of ops that broadcast their
    /// inputs' leading axes.
    pub(crate) fn aligned_eval(&self) -> Vec<Tensor> {
        self.op.eval(&self.aligned())
    }

    /// `op` (this op with its axes moved past the batch axis) on the [`Batch::lifted`] inputs.
    pub(crate) fn lifted_eval(&self, op: Op) -> Vec<Tensor> {
        let x: Vec<Tensor> = (0..self.x.len()).map(|i| self.lifted(i)).collect();
        op.eval(&x)
    }

    /// Whether input `i` is batched.
    pub(crate) fn on(&self, i: usize) -> bool {
        self.on.get(i).copied().unwrap_or(false)
    }

    /// Whether the batched inputs are among the first `k` and no other is batched.
    pub(crate) fn only_first(&self, k: usize) -> bool {
        (k..self.x.len()).all(|i| !self.on(i))
    }

    /// Input `i` with the batch axis first: broadcast along it when it is not batched.
    pub(crate) fn lifted(&self, i: usize) -> Tensor {
        let x = &self.x[i];
        match self.on(i) {
            true => x.clone(),
            false => x
                .unsqueeze(0)
                .broadcast_to(&[&[self.n][..], x.shape()].concat()),
        }
    }

    /// The inputs ready for an op that broadcasts them (numpy's rules align trailing axes):
    /// each batched one with axes of length 1 after the batch axis, up to the largest rank of
    /// an example, so that the batch axis meets the batch axis.
    pub(crate) fn aligned(&self) -> Vec<Tensor> {
        let rank = |i: usize| self.x[i].ndim() - usize::from(self.on(i));
        let most = (0..self.x.len()).map(rank).max().unwrap_or(0);
        (0..self.x.len())
            .map(|i| match self.on(i) {
                true => {
                    let x = &self.x[i];
                    let ones = vec![1; most - rank(i)];
                    x.reshape(&[&[self.n][..], &ones, &x.shape()[1..]].concat())
                }
                false => self.x[i].clone(),
            })
            .collect()
    }

    /// Input `i`, lifted, with the batch axis merged into the next (`[n·N, ..]`): for ops that
    /// treat their first axis as a batch of their own.
    pub(crate) fn folded(&self, i: usize) -> Tensor {
        let x = self.lifted(i);
        let shape = x.shape();
        x.reshape(&[&[shape[0] * shape[1]][..], &shape[2..]].concat())
    }

    /// `y` (`[n·N, ..]`) with the batch axis split out again.
    pub(crate) fn unfolded(&self, y: &Tensor) -> Tensor {
        let rest = &y.shape()[1..];
        y.reshape(&[&[self.n, y.shape()[0] / self.n.max(1)][..], rest].concat())
    }

    /// The op run once per example and the results stacked: the rule of ops without a
    /// batched form of their own.
    pub(crate) fn each(&self) -> Vec<Tensor> {
        let runs: Vec<Vec<Tensor>> = (0..self.n)
            .map(|k| {
                let args: Vec<Tensor> = (0..self.x.len())
                    .map(|i| match self.on(i) {
                        true => self.x[i].narrow(0, k, 1).squeeze(0),
                        false => self.x[i].clone(),
                    })
                    .collect();
                self.op.eval(&args)
            })
            .collect();
        (0..runs[0].len())
            .map(|j| Tensor::stack(&runs.iter().map(|r| &r[j]).collect::<Vec<_>>(), 0))
            .collect()
    }
}

/// `axes` of an example as axes of the batch.
pub(crate) fn shifted(axes: &[usize]) -> Vec<usize> {
    axes.iter().map(|a| a + 1).collect()
}

/// `x` with axis `d` moved first.
fn to_front(x: &Tensor, d: usize) -> Tensor {
    let perm: Vec<usize> = std::iter::once(d)
        .chain((0..x.ndim()).filter(|&a| a != d))
        .collect();
    x.permute(&perm)
}

/// `[n] ++ shape`.
pub(crate) fn with_batch(n: usize, shape: &[usize]) -> Vec<usize> {
    [&[n][..], shape].concat()
}

/// The matrix product of batched operands: vectors made matrices (and the result made
/// vectors again) so that the batch axis never meets a matrix axis.
pub(crate) fn matmul(b: &Batch<'_>) -> Tensor {
    let rank = |i: usize| b.x(i).ndim() - usize::from(b.on(i));
    let (ra, rb) = (rank(0), rank(1));
    let a = match ra {
        1 => b.x(0).unsqueeze(b.x(0).ndim() - 1),
        _ => b.x(0).clone(),
    };
    let m = match rb {
        1 => b.x(1).unsqueeze(b.x(1).ndim()),
        _ => b.x(1).clone(),
    };
    let on = [b.on(0), b.on(1)];
    let inner = Batch {
        x: &[a, m],
        on: &on,
        n: b.n,
        op: b.op,
    };
    let [a, m]: [Tensor; 2] = inner.aligned().try_into().expect("two operands");
    let mut y = a.matmul(&m);
    if rb == 1 {
        y = y.squeeze(y.ndim() - 1);
    }
    if ra == 1 {
        y = y.squeeze(y.ndim() - 1 - usize::from(rb != 1));
    }
    y
}

/// A recurrent layer (the sequence, `states` states, then the four weights) on the batch:
/// where only the sequence and the states are batched, the batch is folded into the layer's
/// own batch axis and `run` runs once; otherwise once per example.
pub(crate) fn recurrent(
    b: &Batch<'_>,
    states: usize,
    run: impl Fn(&Tensor, &[Tensor], crate::RecurrentWeights<'_>) -> Vec<Tensor>,
) -> Vec<Tensor> {
    if !b.only_first(1 + states) {
        return b.each();
    }
    let s: Vec<Tensor> = (1..=states).map(|i| b.folded(i)).collect();
    let outputs = run(&b.folded(0), &s, weights_of(&b.x[1 + states..]));
    outputs.iter().map(|y| b.unfolded(y)).collect()
}

/// An einsum with a new letter for the batch axis on the batched operands and the result;
/// once per example where the spec has an ellipsis or no explicit result.
pub(crate) fn einsum(b: &Batch<'_>, spec: &str) -> Vec<Tensor> {
    let Some((ins, out)) = spec.split_once("->") else {
        return b.each();
    };
    let letter = ('a'..='z').chain('A'..='Z').find(|c| !spec.contains(*c));
    let (Some(letter), false) = (letter, spec.contains("...")) else {
        return b.each();
    };
    let operands: Vec<String> = ins
        .split(',')
        .enumerate()
        .map(|(i, s)| match b.on(i) {
            true => format!("{letter}{}", s.trim()),
            false => s.trim().to_string(),
        })
        .collect();
    let spec = format!("{}->{letter}{}", operands.join(","), out.trim());
    vec![Tensor::einsum(&spec, &b.x.iter().collect::<Vec<_>>())]
}

impl Op {
    /// This op on inputs `x`, those marked in `on` batched along axis 0 (of size `n`): its
    /// outputs, batched along axis 0.
    pub(crate) fn batch(&self, x: &[Tensor], on: &[bool], n: usize) -> Vec<Tensor> {
        let b = Batch { x, on, n, op: self };
        match self {
            Op::Unary(u) => vec![u.apply(&x[0])],
            Op::Binary(op) => {
                let a = b.aligned();
                vec![op.apply(&a[0], &a[1])]
            }
            op => op
                .declared_batch(&b)
                .unwrap_or_else(|| panic!("{} is not an op a function calls", op.name())),
        }
    }
}

impl Recording {
    /// The outputs for a batch: `batched[i]` is input `i` batched along axis 0 (of size `n`),
    /// or `None` where every example shares the recorded value. An output that no batched
    /// value reaches is broadcast along the batch.
    pub(crate) fn replay(&self, batched: &[Option<Tensor>], n: usize) -> Vec<Tensor> {
        let mut values: HashMap<usize, Tensor> = HashMap::new();
        for (x, v) in self.inputs.iter().zip(batched) {
            if let Some(v) = v {
                values.insert(key(x), v.clone());
            }
        }
        for step in &self.steps {
            let on: Vec<bool> = step
                .inputs
                .iter()
                .map(|x| values.contains_key(&key(x)))
                .collect();
            if !on.contains(&true) {
                continue;
            }
            let xs: Vec<Tensor> = step
                .inputs
                .iter()
                .map(|x| values.get(&key(x)).cloned().unwrap_or_else(|| x.clone()))
                .collect();
            for (y, v) in step.outputs.iter().zip(step.op.batch(&xs, &on, n)) {
                values.insert(key(y), v);
            }
        }
        self.outputs
            .iter()
            .map(|y| match values.get(&key(y)) {
                Some(v) => v.clone(),
                None => y
                    .detach()
                    .unsqueeze(0)
                    .broadcast_to(&with_batch(n, y.shape())),
            })
            .collect()
    }
}

/// `f` of a batch: the inputs with an axis in `in_dims` are batched along it (all of one
/// size), the others shared; `f` sees one example and its outputs come back batched along
/// axis 0.
///
/// Where `f` read values it computed (to steer its control flow, or as positions an op's
/// derivative routes by), and where the batched result differs from `f` run alone on the last
/// example, `f` runs once per example instead; the first time this happens it is said on
/// standard error.
///
/// Also says whether an outer differentiation follows the results (see [`Recording`]).
pub(crate) fn vmap_call(
    f: impl Fn(&[Tensor]) -> Vec<Tensor>,
    inputs: &[&Tensor],
    in_dims: &[Option<usize>],
) -> Result<(Vec<Tensor>, bool)> {
    let (batched, n) = batched_inputs(inputs, in_dims)?;
    let example = |k: usize| -> Vec<Tensor> {
        inputs
            .iter()
            .zip(&batched)
            .map(|(x, b)| match b {
                Some(b) => b.narrow(0, k, 1).squeeze(0),
                None => (*x).clone(),
            })
            .collect()
    };
    let first = example(0);
    let refs: Vec<&Tensor> = first.iter().collect();
    let recorded = Recording::record(&f, &refs, ("vmap", true))?;
    let outer = recorded.outer;
    if !recorded.read {
        // The replay is plain computation: it records for reverse mode only inside another
        // differentiation.
        let replayed = match outer {
            true => recorded.replay(&batched, n),
            false => no_grad(|| recorded.replay(&batched, n)),
        };
        if n == 1 || agrees(&replayed, &f(&example(n - 1)), n - 1) {
            return Ok((replayed, outer));
        }
    }
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        eprintln!(
            "vmap: the batched result differs from the function run on one example (its ops \
             depend on the batched values: control flow, or positions read from them); \
             running it once per example instead"
        )
    });
    let runs: Vec<Vec<Tensor>> = (0..n).map(|k| f(&example(k))).collect();
    let stacked = (0..runs[0].len())
        .map(|j| Tensor::stack(&runs.iter().map(|r| &r[j]).collect::<Vec<_>>(), 0))
        .collect();
    Ok((stacked, outer))
}

/// Whether example `k` of each batched output is `alone` (the function run on that example
/// by itself), to rounding.
fn agrees(batched: &[Tensor], alone: &[Tensor], k: usize) -> bool {
    batched.len() == alone.len()
        && batched.iter().zip(alone).all(|(b, a)| {
            // Compared as values: an outer recording need not note these reads.
            let (b, a) = (b.narrow(0, k, 1).squeeze(0).detach(), a.detach());
            let tol = match a.dtype() {
                crate::tensor::DType::F64 => 1e-9,
                _ => 1e-4,
            };
            b.shape() == a.shape() && b.dtype() == a.dtype() && b.allclose(&a, tol, tol)
        })
}

/// The batched inputs with their batch axis first (`None` for a shared one), and the batch
/// size; or why `in_dims` do not fit.
fn batched_inputs(
    inputs: &[&Tensor],
    in_dims: &[Option<usize>],
) -> Result<(Vec<Option<Tensor>>, usize)> {
    if in_dims.len() != inputs.len() {
        return Err(Error::Shape(format!(
            "vmap: {} in_dims for {} inputs",
            in_dims.len(),
            inputs.len()
        )));
    }
    let mut sizes = Vec::new();
    let mut batched = Vec::with_capacity(inputs.len());
    for (i, (x, d)) in inputs.iter().zip(in_dims).enumerate() {
        batched.push(match d {
            Some(d) if *d >= x.ndim() => {
                return Err(Error::Shape(format!(
                    "vmap: input {i} {:?} has no axis {d} to map over",
                    x.shape()
                )))
            }
            Some(d) => {
                sizes.push(x.shape()[*d]);
                Some(to_front(x, *d))
            }
            None => None,
        });
    }
    let n = match sizes.first() {
        None => {
            return Err(Error::Shape(
                "vmap: no input is batched (in_dims are all None)".into(),
            ))
        }
        Some(&n) if sizes.iter().any(|&s| s != n) => {
            return Err(Error::Shape(format!(
                "vmap: the batched inputs have batches of different sizes: {sizes:?}"
            )))
        }
        Some(0) => return Err(Error::Shape("vmap: the batch is empty".into())),
        Some(&n) => n,
    };
    Ok((batched, n))
}
