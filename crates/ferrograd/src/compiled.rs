//! Compiled functions: [`compile`] traces a function of tensors into a graph the first time
//! it meets a set of input shapes and dtypes, plans that graph once (common sub-expressions
//! merged, constants folded, element-wise chains fused into passes over cache-sized blocks,
//! each value dropped after its last reader) and runs the plan on every later call with those
//! shapes. A training step is compiled whole when the function differentiates inside
//! (`autograd::grad`, `func::grad`): the backward's ops are traced with the forward's.
//!
//! What a graph cannot reproduce runs eagerly instead, said once on stderr, and stays
//! correct: a function that reads values (`item`, `to_vec`, so its control flow may depend
//! on them), draws random numbers (a graph would replay the same draws), reads a trainable
//! tensor it was not given as a parameter (a graph would keep its traced value), or calls an
//! op without a graph form.
//!
//! ```
//! use ferrograd::prelude::*;
//!
//! let w = Param::new(Tensor::from_vec(vec![0.5f32, -1.0], &[1, 2]));
//! let mut f = ferrograd::compile(|xs: &[Tensor]| {
//!     vec![xs[0].linear(&w.tensor(), None).sigmoid().mul_scalar(2.0)]
//! })
//! .params(vec![("w".to_string(), w.clone())]);
//! let x = Tensor::from_vec(vec![1.0f32, 2.0], &[1, 2]);
//! let y = f.call(&[x.clone()])?;
//! assert_eq!(y[0].to_vec::<f32>(), x.linear(&w.tensor(), None).sigmoid().mul_scalar(2.0).to_vec::<f32>());
//! assert!(f.is_compiled(&[x]));
//! # Ok::<(), ferrograd::Error>(())
//! ```

use std::collections::HashMap;

use crate::autograd::{with_substitutes, Param};
use crate::error::{Error, Result};
use crate::graph::{trace_reading, Executable, Seen, Trace};
use crate::tensor::draws;
use crate::tensor::{DType, Tensor};

/// A function compiled per set of input shapes and dtypes; see the [module](self).
pub struct Compiled<F> {
    f: F,
    params: Vec<(String, Param)>,
    plans: HashMap<Guard, Plan>,
}

/// The shapes and dtypes a plan was traced for: the inputs', then the parameters'.
type Guard = Vec<(Vec<usize>, DType)>;

enum Plan {
    Graph(Executable),
    /// Why the function runs eagerly at these shapes.
    Eager(String),
}

/// `f` compiled: call it with [`Compiled::call`]. Parameters it reads must be given with
/// [`Compiled::params`], so that every call reads their current values.
pub fn compile<F: Fn(&[Tensor]) -> Vec<Tensor>>(f: F) -> Compiled<F> {
    Compiled {
        f,
        params: Vec::new(),
        plans: HashMap::new(),
    }
}

impl<F: Fn(&[Tensor]) -> Vec<Tensor>> Compiled<F> {
    /// The parameters `f` reads (a layer's [`params`](crate::nn::Layer::params)): each call
    /// computes with their values at that moment, as eager code would.
    pub fn params(mut self, params: Vec<(String, Param)>) -> Self {
        self.params = params;
        self.plans.clear();
        self
    }

    /// `f(inputs)`, from the plan for these shapes and dtypes (traced on first meeting them).
    /// The results are values: nothing is recorded for a backward outside the function
    /// (differentiate inside it). Errors come from tracing, or from a function that returned
    /// a different number of results when run eagerly.
    pub fn call(&mut self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let values: Vec<Tensor> = self.params.iter().map(|(_, p)| p.tensor()).collect();
        let guard = guard(inputs, &values);
        let mut traced_draws = None;
        if !self.plans.contains_key(&guard) {
            let (plan, drawn) = self.plan(inputs, &values)?;
            if let Plan::Eager(why) = &plan {
                eprintln!("ferrograd::compile: running eagerly at these shapes: {why}");
            }
            self.plans.insert(guard.clone(), plan);
            traced_draws = Some(drawn);
        }
        match &self.plans[&guard] {
            Plan::Graph(exe) => {
                let mut feed: Vec<Tensor> = inputs.iter().map(Tensor::detach).collect();
                feed.extend(values.iter().map(Tensor::detach));
                Ok(exe.run(&feed))
            }
            Plan::Eager(_) => {
                let run = || (self.f)(inputs);
                // The trace drew random numbers for this call: the eager run draws those
                // same ones, so that the call draws once, as an eager call does.
                let out = match &traced_draws {
                    Some(drawn) => draws::replayed(drawn, run),
                    None => run(),
                };
                Ok(out.iter().map(Tensor::detach).collect())
            }
        }
    }

    /// Whether calls with inputs like these run a compiled plan (false before the first call
    /// at their shapes, and where the function runs eagerly).
    pub fn is_compiled(&self, inputs: &[Tensor]) -> bool {
        let values: Vec<Tensor> = self.params.iter().map(|(_, p)| p.tensor()).collect();
        matches!(
            self.plans.get(&guard(inputs, &values)),
            Some(Plan::Graph(_))
        )
    }

    /// How many element-wise regions the plan for inputs like these fuses, and how many ops
    /// they hold; `None` without a compiled plan.
    pub fn fused(&self, inputs: &[Tensor]) -> Option<(usize, usize)> {
        let values: Vec<Tensor> = self.params.iter().map(|(_, p)| p.tensor()).collect();
        match self.plans.get(&guard(inputs, &values)) {
            Some(Plan::Graph(exe)) => Some(exe.fused()),
            _ => None,
        }
    }

    /// Traces `f` at these inputs and plans its graph, or says why it must run eagerly.
    fn plan(&self, inputs: &[Tensor], values: &[Tensor]) -> Result<(Plan, draws::Draws)> {
        let names: Vec<String> = (0..inputs.len())
            .map(|i| format!("input{i}"))
            .chain(self.params.iter().map(|(n, _)| n.clone()))
            .collect();
        let all: Vec<Tensor> = inputs.iter().chain(values).cloned().collect();
        let named: Vec<(&str, &Tensor)> = names.iter().map(String::as_str).zip(&all).collect();
        let k = inputs.len();
        let traced = draws::recorded(|| {
            trace_reading(&named, &[], |fed| {
                let subs: Vec<(&Param, Tensor)> = self
                    .params
                    .iter()
                    .map(|(_, p)| p)
                    .zip(fed[k..].iter().cloned())
                    .collect();
                with_substitutes(&subs, || (self.f)(&fed[..k]))
                    .unwrap_or_else(|e| panic!("compile: {e}"))
            })
        });
        let (result, drawn) = traced;
        let plan = match result {
            Ok((trace, seen)) => match eager_because(&trace, &seen, drawn.any()) {
                Some(why) => Plan::Eager(why),
                None => Plan::Graph(Executable::new(
                    &trace.graph,
                    &trace.inputs,
                    &trace.outputs,
                )?),
            },
            Err(Error::Graph(why)) => Plan::Eager(why),
            Err(e) => return Err(e),
        };
        Ok((plan, drawn))
    }
}

/// The shapes and dtypes of the inputs and the parameters' values.
fn guard(inputs: &[Tensor], values: &[Tensor]) -> Guard {
    inputs
        .iter()
        .chain(values)
        .map(|t| (t.shape().to_vec(), t.dtype()))
        .collect()
}

/// Why a traced function cannot run as its graph, if it cannot.
fn eager_because(trace: &Trace, seen: &Seen, drew: bool) -> Option<String> {
    if seen.read {
        return Some(
            "the function reads values (item, to_vec), so its steps may depend on them".into(),
        );
    }
    if drew {
        return Some(
            "the function draws random numbers, which a graph would replay unchanged".into(),
        );
    }
    let listing = trace.graph.to_string();
    let line = listing
        .lines()
        .nth(seen.trainable_constant?)?
        .trim()
        .to_string();
    Some(format!(
        "the function reads a trainable tensor not given in `params` ({line}); a graph would \
         keep its traced value"
    ))
}
