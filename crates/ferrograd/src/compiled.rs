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

use crate::autograd::{with_substitutes, Gradients, Param};
use crate::error::{Error, Result};
use crate::graph::{trace_reading, Executable, Seen, Trace};
use crate::loss::Loss;
use crate::model::{Model, Net, StepPlans};
use crate::nn::Module;
use crate::tensor::draws;
use crate::tensor::{DType, Tensor};

/// A function compiled per set of input shapes and dtypes; see the [module](self).
pub struct Compiled<F> {
    f: F,
    params: Vec<(String, Param)>,
    plans: Plans,
}

/// `f` compiled: call it with [`Compiled::call`]. Parameters it reads must be given with
/// [`Compiled::params`], so that every call reads their current values.
pub fn compile<F: Fn(&[Tensor]) -> Vec<Tensor>>(f: F) -> Compiled<F> {
    Compiled {
        f,
        params: Vec::new(),
        plans: Plans::default(),
    }
}

impl<F: Fn(&[Tensor]) -> Vec<Tensor>> Compiled<F> {
    /// The parameters `f` reads (a module's [`params`](crate::nn::Module::params)): each call
    /// computes with their values at that moment, as eager code would.
    pub fn params(mut self, params: Vec<(String, Param)>) -> Self {
        self.params = params;
        self.plans = Plans::default();
        self
    }

    /// `f(inputs)`, from the plan for these shapes and dtypes (traced on first meeting them).
    /// The results are values: nothing is recorded for a backward outside the function
    /// (differentiate inside it). Errors come from tracing.
    pub fn call(&mut self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        self.plans.call(&self.f, &self.params, inputs)
    }

    /// Whether calls with inputs like these run a compiled plan (false before the first call
    /// at their shapes, and where the function runs eagerly).
    pub fn is_compiled(&self, inputs: &[Tensor]) -> bool {
        self.plans.fused(&self.params, inputs).is_some()
    }

    /// How many element-wise regions the plan for inputs like these fuses, and how many ops
    /// they hold; `None` without a compiled plan.
    pub fn fused(&self, inputs: &[Tensor]) -> Option<(usize, usize)> {
        self.plans.fused(&self.params, inputs)
    }
}

/// The plans of one function, by the shapes and dtypes they were traced for.
#[derive(Default)]
pub(crate) struct Plans {
    by_guard: HashMap<Guard, Plan>,
}

impl Plans {
    /// `f(inputs)` by the plan for these shapes and dtypes, traced and planned first when
    /// there is none; `params` are fed their current values.
    pub fn call(
        &mut self,
        f: &dyn Fn(&[Tensor]) -> Vec<Tensor>,
        params: &[(String, Param)],
        inputs: &[Tensor],
    ) -> Result<Vec<Tensor>> {
        let values: Vec<Tensor> = params.iter().map(|(_, p)| p.tensor()).collect();
        let guard = guard(inputs, &values);
        let mut traced_draws = None;
        if !self.by_guard.contains_key(&guard) {
            let (plan, drawn) = plan(f, params, inputs, &values)?;
            if let Plan::Eager(why) = &plan {
                eprintln!("ferrograd::compile: running eagerly at these shapes: {why}");
            }
            self.by_guard.insert(guard.clone(), plan);
            traced_draws = Some(drawn);
        }
        match &self.by_guard[&guard] {
            Plan::Graph(exe) => {
                let mut feed: Vec<Tensor> = inputs.iter().map(Tensor::detach).collect();
                feed.extend(values.iter().map(Tensor::detach));
                Ok(exe.run(&feed))
            }
            Plan::Eager(_) => {
                // The trace drew random numbers for this call: the eager run draws those
                // same ones, so that the call draws once, as an eager call does.
                let out = match &traced_draws {
                    Some(drawn) => draws::replayed(drawn, || f(inputs)),
                    None => f(inputs),
                };
                Ok(out.iter().map(Tensor::detach).collect())
            }
        }
    }

    /// The fused regions of the compiled plan for inputs like these, if there is one.
    pub fn fused(&self, params: &[(String, Param)], inputs: &[Tensor]) -> Option<(usize, usize)> {
        let values: Vec<Tensor> = params.iter().map(|(_, p)| p.tensor()).collect();
        match self.by_guard.get(&guard(inputs, &values)) {
            Some(Plan::Graph(exe)) => Some(exe.fused()),
            _ => None,
        }
    }
}

/// The shapes and dtypes a plan was traced for: the inputs', then the parameters' (whose
/// values are untracked while they are frozen).
type Guard = Vec<(Vec<usize>, DType, bool)>;

enum Plan {
    Graph(Executable),
    /// Why the function runs eagerly at these shapes.
    Eager(String),
}

/// Traces `f` at these inputs and plans its graph, or says why it must run eagerly; with
/// what the trace drew.
fn plan(
    f: &dyn Fn(&[Tensor]) -> Vec<Tensor>,
    params: &[(String, Param)],
    inputs: &[Tensor],
    values: &[Tensor],
) -> Result<(Plan, draws::Draws)> {
    let names: Vec<String> = (0..inputs.len())
        .map(|i| format!("input{i}"))
        .chain(params.iter().map(|(n, _)| n.clone()))
        .collect();
    let all: Vec<Tensor> = inputs.iter().chain(values).cloned().collect();
    let named: Vec<(&str, &Tensor)> = names.iter().map(String::as_str).zip(&all).collect();
    let k = inputs.len();
    let (result, drawn) = draws::recorded(|| {
        trace_reading(&named, &[], |fed| {
            let subs: Vec<(&Param, Tensor)> = params
                .iter()
                .zip(&fed[k..])
                .map(|((_, p), v)| (p, v.clone()))
                .collect();
            with_substitutes(&subs, || f(&fed[..k])).unwrap_or_else(|e| panic!("compile: {e}"))
        })
    });
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

/// The loss and the gradients of a model's step: how a compiled [`Model`] computes them.
#[derive(Default)]
struct ModelSteps {
    plans: Plans,
}

impl StepPlans for ModelSteps {
    fn loss_and_grads(
        &mut self,
        net: &Net,
        loss: &dyn Loss,
        x: &Tensor,
        target: &Tensor,
    ) -> (f32, Gradients) {
        let params = net.params();
        let step = |xs: &[Tensor]| {
            let l = loss.loss(&net.forward(&xs[0]), &xs[1]);
            let trained: Vec<Tensor> = params
                .iter()
                .filter(|(_, p)| !p.is_frozen())
                .map(|(_, p)| p.tensor())
                .collect();
            let refs: Vec<&Tensor> = trained.iter().collect();
            let mut out = vec![l.clone()];
            out.extend(crate::autograd::grad(&l, &refs));
            out
        };
        let out = self
            .plans
            .call(&step, &params, &[x.clone(), target.clone()])
            .unwrap_or_else(|e| panic!("Model::train_step (compiled): {e}"));
        let mut grads = Gradients::default();
        let trained = params.iter().filter(|(_, p)| !p.is_frozen());
        for ((_, p), g) in trained.zip(&out[1..]) {
            grads.insert(p, g.clone());
        }
        (out[0].item() as f32, grads)
    }
}

impl Model {
    /// This model with its training steps compiled: [`Model::train_step`] runs the forward,
    /// the loss and every gradient as one traced plan per batch shape (see
    /// [`compile`](crate::compile()), then the optimizer as before. Values and gradients are
    /// eager's; a network that draws random numbers (dropout) or reads values trains eagerly,
    /// said once.
    pub fn compile(self) -> Model {
        self.with_step_plans(Box::new(ModelSteps::default()))
    }
}

/// The shapes and dtypes of the inputs and the parameters' values.
fn guard(inputs: &[Tensor], values: &[Tensor]) -> Guard {
    inputs
        .iter()
        .chain(values)
        .map(|t| (t.shape().to_vec(), t.dtype(), t.is_tracked()))
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
