//! Losses, optimizers and tinynn's `Model` (net + loss + optimizer: `forward`, `backward`
//! returning `(loss, grads)`, `apply_grad`).

use std::sync::{Arc, Mutex, MutexGuard};

use ferrograd::prelude::*;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::autograd::{update_leaf_grads, GradUpdate, PyGradients};
use crate::convert::to_tensor;
use crate::guard::core_error;
use crate::guard::{self, HEAVY};
use crate::nn::{input, PyLayer};
use crate::tensor::{PyTensor, Value};

/// A loss's target: class indices stay int64, anything else takes the prediction's dtype.
fn as_target(t: &Bound<'_, PyAny>, dtype: DType) -> PyResult<Tensor> {
    let t = to_tensor(t, None)?;
    Ok(if t.dtype() == DType::I64 || t.dtype() == dtype {
        t
    } else {
        t.to_dtype(dtype)
    })
}

/// Base class of the losses: `loss(pred, target)` is the mean loss over the batch, a
/// differentiable 0-d tensor; `grad(pred, target)` its gradient with respect to `pred`
/// (tinynn's two methods).
#[pyclass(name = "Loss", module = "ferrograd.nn", subclass)]
pub struct PyLoss {
    pub loss: Arc<dyn Loss>,
    /// PyTorch's `reduction` (always the mean for the losses without that argument).
    reduction: Reduction,
}

/// A per-element loss with PyTorch's `reduction`, as a [`Loss`] (whose value, with
/// `"none"`, is not 0-d: a `Model` refuses that).
struct Reduced<L> {
    loss: L,
    reduction: Reduction,
}

impl<L: PerElement> Reduced<L> {
    /// `loss` reduced as PyTorch's `reduction` string says; panics on another string.
    fn new(loss: L, reduction: &str) -> Self {
        let reduction = match reduction {
            "mean" => Reduction::Mean,
            "sum" => Reduction::Sum,
            "none" => Reduction::None,
            other => panic!("{other:?} is not a valid value for reduction"),
        };
        Reduced { loss, reduction }
    }
}

impl<L: PerElement> Loss for Reduced<L> {
    fn loss(&self, pred: &Tensor, target: &Tensor) -> Tensor {
        self.loss.reduced(pred, target, self.reduction)
    }

    fn name(&self) -> String {
        match self.reduction {
            Reduction::Mean => self.loss.name(),
            r => format!("{}(reduction={r:?})", self.loss.name()),
        }
    }
}

#[pymethods]
impl PyLoss {
    fn loss(
        &self,
        py: Python<'_>,
        pred: &Bound<'_, PyAny>,
        target: &Bound<'_, PyAny>,
    ) -> PyResult<PyTensor> {
        let p = input(pred)?;
        let t = as_target(target, p.dtype())?;
        let loss = self.loss.clone();
        guard::run_heavy(py, p.numel() >= HEAVY, || loss.loss(&p, &t)).map(PyTensor::new)
    }

    fn __call__(
        &self,
        py: Python<'_>,
        pred: &Bound<'_, PyAny>,
        target: &Bound<'_, PyAny>,
    ) -> PyResult<PyTensor> {
        self.loss(py, pred, target)
    }

    /// The gradient of the loss with respect to `pred` (its values only).
    fn grad(
        &self,
        py: Python<'_>,
        pred: &Bound<'_, PyAny>,
        target: &Bound<'_, PyAny>,
    ) -> PyResult<PyTensor> {
        let p = input(pred)?;
        let t = as_target(target, p.dtype())?;
        let loss = self.loss.clone();
        guard::run_heavy(py, p.numel() >= HEAVY, || {
            let p = p.detach().requires_grad();
            ferrograd::prelude::grad(&loss.loss(&p, &t), &[&p]).remove(0)
        })
        .map(PyTensor::new)
    }

    fn __repr__(&self) -> String {
        self.loss.name()
    }
}

macro_rules! loss_class {
    ($(#[$doc:meta])* $rust:ident, $py:literal, $sig:tt, ($($arg:ident: $ty:ty),*) => reduced($red:ident) $build:expr) => {
        loss_class!($(#[$doc])* $rust, $py, $sig, ($($arg: $ty),*) => pair {
            let r = Reduced::new($build, $red);
            (r.reduction, r)
        });
    };
    ($(#[$doc:meta])* $rust:ident, $py:literal, $sig:tt, ($($arg:ident: $ty:ty),*) => pair $pair:expr) => {
        $(#[$doc])*
        #[pyclass(name = $py, module = "ferrograd.nn", extends = PyLoss)]
        pub struct $rust;

        #[pymethods]
        impl $rust {
            #[new]
            #[pyo3(signature = $sig)]
            fn new($($arg: $ty),*) -> PyResult<PyClassInitializer<Self>> {
                // Settings are validated by the core (a panic there is a ValueError here).
                let (reduction, loss) = guard::run(|| {
                    let (reduction, loss) = $pair;
                    (reduction, Arc::new(loss) as Arc<dyn Loss>)
                })?;
                Ok(PyClassInitializer::from(PyLoss { loss, reduction }).add_subclass($rust))
            }
        }
    };
    ($(#[$doc:meta])* $rust:ident, $py:literal, $sig:tt, ($($arg:ident: $ty:ty),*) => $build:expr) => {
        loss_class!($(#[$doc])* $rust, $py, $sig, ($($arg: $ty),*) => pair (Reduction::Mean, $build));
    };
}

loss_class!(
    /// Softmax cross-entropy of logits against one-hot rows or int64 class indices.
    PySoftmaxCE, "SoftmaxCrossEntropyLoss", (), () => SoftmaxCrossEntropy::new()
);
loss_class!(
    /// Sigmoid cross-entropy of logits against targets in [0, 1] (stable form).
    PySigmoidCE, "SigmoidCrossEntropyLoss", (), () => SigmoidCrossEntropy::new()
);
loss_class!(/// Squared error, `reduction` "mean" (PyTorch's `MSELoss`), "sum" or "none".
    PyMse, "MSELoss", (reduction="mean"), (reduction: &str) => reduced(reduction) Mse::new());
loss_class!(/// Absolute error, `reduction` "mean" (PyTorch's `L1Loss`), "sum" or "none".
    PyMae, "MAELoss", (reduction="mean"), (reduction: &str) => reduced(reduction) Mae::new());
loss_class!(/// Huber loss with threshold `delta`, `reduction` "mean", "sum" or "none" (PyTorch's
/// `HuberLoss(reduction="mean", delta=1.0)`); a number first is tinynn's `Huber(delta)`.
PyHuber, "HuberLoss", (reduction=None, delta=None),
    (reduction: Option<Bound<'_, PyAny>>, delta: Option<f64>) => pair {
        let (reduction, delta) = huber_args(reduction.as_ref(), delta);
        let r = Reduced::new(Huber::new(delta), &reduction);
        (r.reduction, r)
    });

/// `HuberLoss`'s settings from PyTorch's arguments or tinynn's (the threshold first);
/// panics (a ValueError in Python) when they contradict each other.
fn huber_args(first: Option<&Bound<'_, PyAny>>, delta: Option<f64>) -> (String, f64) {
    match first.map(|f| (f.extract::<String>(), f.extract::<f64>())) {
        None => ("mean".into(), delta.unwrap_or(1.0)),
        Some((Ok(reduction), _)) => (reduction, delta.unwrap_or(1.0)),
        Some((_, Ok(d))) if delta.is_none() => ("mean".into(), d),
        Some(_) => panic!("HuberLoss takes (reduction, delta) or (delta): got both or neither"),
    }
}
loss_class!(/// Negative log-likelihood of log-probabilities, PyTorch's `NLLLoss` without `weight`:
/// `ignore_index` (−100) and `reduction` "mean", "sum" or "none".
PyNll, "NLLLoss", (weight=None, ignore_index=-100, reduction="mean"),
    (weight: Option<Bound<'_, PyAny>>, ignore_index: i64, reduction: &str) => reduced(reduction) {
        assert!(weight.is_none(), "NLLLoss: class weights are not supported here: \
                use ferrograd.nn.functional.nll_loss(..., weight=w)");
        NllWith(CrossEntropy::new().ignore_index(ignore_index))
    });

/// PyTorch's `NLLLoss` with an ignored index: [`CrossEntropy::nll`].
struct NllWith(CrossEntropy);

impl Loss for NllWith {
    fn loss(&self, log_probs: &Tensor, target: &Tensor) -> Tensor {
        self.0.nll(log_probs, target)
    }
    fn name(&self) -> String {
        "Nll".into()
    }
}

impl PerElement for NllWith {
    fn per_element(&self, log_probs: &Tensor, target: &Tensor) -> Tensor {
        self.0.nll_per_element(log_probs, target)
    }
}

/// Base class of the optimizers. Built with `params` (PyTorch's way: `step()` then uses each
/// parameter's `.grad`, or the `Gradients` passed) or without (tinynn's way: a `Model` gives
/// it the network's parameters). `params` may be PyTorch's list of parameter groups, dicts
/// with `"params"` and their own `"lr"` or `"weight_decay"`.
#[pyclass(name = "Optimizer", module = "ferrograd.optim", subclass)]
pub struct PyOptimizer {
    /// A fresh optimizer with the constructor's settings: each group has its own.
    build: Box<dyn Fn() -> Box<dyn Optimizer> + Send + Sync>,
    groups: Mutex<Vec<Group>>,
    /// PyTorch's `param_groups`: one dict per group, read at every step, so that a schedule
    /// or the user can change a group's `"lr"` or `"weight_decay"` between steps.
    param_groups: Py<PyList>,
}

/// One parameter group: its parameters and the optimizer (with its state) that steps them.
struct Group {
    params: Vec<(String, Param)>,
    opt: Box<dyn Optimizer>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The parameters `params` names: a layer, or an iterable of trainable leaves.
fn param_list(params: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<(String, Param)>> {
    let Some(params) = params.filter(|p| !p.is_none()) else {
        return Ok(Vec::new());
    };
    if let Ok(layer) = params.cast::<PyLayer>() {
        return crate::guard::run(|| layer.borrow().layer.params());
    }
    let mut out = Vec::new();
    for (i, item) in params.try_iter()?.enumerate() {
        let item = item?;
        let t = item.cast::<PyTensor>().map_err(|_| {
            PyTypeError::new_err("optimizer params must be trainable tensors or a layer")
        })?;
        match &t.get().value() {
            Value::Leaf(l) => out.push((i.to_string(), l.param.clone())),
            Value::Plain(_) => {
                return Err(PyTypeError::new_err(format!(
                    "optimizer parameter {i} is not a trainable leaf (create it with \
                     requires_grad=True)"
                )))
            }
        }
    }
    Ok(out)
}

/// `params` as groups: PyTorch's list of dicts, or one group of everything it names.
fn group_dicts<'py>(
    py: Python<'py>,
    params: Option<&Bound<'py, PyAny>>,
) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let listed: Option<Vec<Bound<'py, PyAny>>> = params
        .filter(|p| p.is_instance_of::<PyList>() || p.is_instance_of::<PyTuple>())
        .map(|p| p.try_iter()?.collect::<PyResult<_>>())
        .transpose()?;
    match listed {
        Some(items) if !items.is_empty() && items.iter().all(|i| i.is_instance_of::<PyDict>()) => {
            items
                .into_iter()
                .map(|d| d.cast_into::<PyDict>()?.copy())
                .collect()
        }
        _ => {
            let d = PyDict::new(py);
            if let Some(p) = params.filter(|p| !p.is_none()) {
                d.set_item("params", p)?;
            }
            Ok(vec![d])
        }
    }
}

/// The keys a parameter group may hold: what the optimizers read per group, and what the
/// schedulers write into it.
const GROUP_KEYS: [&str; 10] = [
    "params",
    "lr",
    "weight_decay",
    "momentum",
    "betas",
    "initial_lr",
    "max_lr",
    "min_lr",
    "base_momentum",
    "max_momentum",
];

/// A group from its dict: its parameters, and an optimizer of its own built with the
/// constructor's settings; the dict's `"params"` becomes the list of parameters and a
/// missing `"lr"`, `"weight_decay"`, `"momentum"` (momentum SGD) or `"betas"` (the Adam
/// family) the constructor's. A key no group setting reads is an error, not a silent no-op.
fn group_of<'py>(
    py: Python<'py>,
    d: Bound<'py, PyDict>,
    build: &(dyn Fn() -> Box<dyn Optimizer> + Send + Sync),
) -> PyResult<(Bound<'py, PyDict>, Group)> {
    for key in d.keys() {
        let name: String = key.extract()?;
        if !GROUP_KEYS.contains(&name.as_str()) {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "parameter group setting {name:?} is not supported per group (lr, \
                 weight_decay, momentum and betas are)"
            )));
        }
    }
    let opt = guard::run(build)?;
    let params = param_list(d.get_item("params")?.as_ref())?;
    let listed: Vec<Py<PyAny>> = params
        .iter()
        .map(|(_, p)| crate::autograd::wrap_param(py, p))
        .collect::<PyResult<_>>()?;
    d.set_item("params", listed)?;
    if d.get_item("lr")?.is_none() {
        d.set_item("lr", opt.lr())?;
    }
    if d.get_item("weight_decay")?.is_none() {
        d.set_item("weight_decay", opt.weight_decay_rate())?;
    }
    match opt.momentum_setting() {
        Some(MomentumSetting::Momentum(m)) if d.get_item("momentum")?.is_none() => {
            d.set_item("momentum", m)?
        }
        Some(MomentumSetting::Betas(b1, b2)) if d.get_item("betas")?.is_none() => {
            d.set_item("betas", (b1, b2))?
        }
        _ => {}
    }
    Ok((d, Group { params, opt }))
}

/// PyTorch's checks of parameter groups: a ValueError when a parameter is in two groups (two
/// optimizers would step it), a warning when one group lists it twice (PyTorch's optimizers
/// then step it twice; here it is stepped once, its state keyed by its identity).
fn no_param_twice(py: Python<'_>, groups: &[Group]) -> PyResult<()> {
    let mut seen = std::collections::HashMap::new();
    for (g, group) in groups.iter().enumerate() {
        for (name, p) in &group.params {
            match seen.insert(p.id(), g) {
                Some(other) if other != g => {
                    return Err(pyo3::exceptions::PyValueError::new_err(format!(
                        "some parameters appear in more than one parameter group ({name:?} \
                         among them)"
                    )))
                }
                Some(_) => {
                    let msg = std::ffi::CString::new(format!(
                        "a parameter group lists {name:?} more than once (it is stepped \
                         once)"
                    ))?;
                    let category = py.get_type::<pyo3::exceptions::PyUserWarning>();
                    PyErr::warn(py, &category, &msg, 1)?;
                }
                None => {}
            }
        }
    }
    Ok(())
}

/// A group's parameters named by their place among all groups' parameters (from `first`),
/// as PyTorch's optimizer `state_dict` numbers them.
fn numbered(params: &[(String, Param)], first: usize) -> Vec<(String, Param)> {
    let at = (first..).map(|i| i.to_string());
    at.zip(params).map(|(i, (_, p))| (i, p.clone())).collect()
}

/// A state slot under PyTorch's name (momentum SGD's buffer), and back.
fn torch_slot(slot: &str) -> &str {
    if slot == "momentum" {
        "momentum_buffer"
    } else {
        slot
    }
}

fn core_slot(slot: &str) -> &str {
    if slot == "momentum_buffer" {
        "momentum"
    } else {
        slot
    }
}

/// One group's part of a saved `state_dict`: its step count and slots, named as
/// [`numbered`] names its parameters (`ids` are the saved numbers of its parameters, in
/// order).
fn saved_group_state(
    state: &Bound<'_, PyDict>,
    ids: &[Bound<'_, PyAny>],
    first: usize,
) -> PyResult<(u64, Vec<(String, Tensor)>)> {
    let (mut steps, mut slots) = (0u64, Vec::new());
    for (j, id) in ids.iter().enumerate() {
        let Some(entry) = state.get_item(id)?.filter(|e| !e.is_none()) else {
            continue;
        };
        for item in entry.cast::<PyDict>()?.items() {
            let (slot, value): (String, Bound<'_, PyAny>) = item.extract()?;
            if slot == "step" {
                // A number or a one-element tensor (PyTorch saves a tensor), whole and not
                // negative.
                let step = value
                    .call_method0("__float__")
                    .and_then(|v| v.extract::<f64>())
                    .ok()
                    .filter(|s| s.is_finite() && *s >= 0.0 && s.fract() == 0.0)
                    .ok_or_else(|| {
                        PyTypeError::new_err(format!(
                            "load_state_dict: the \"step\" of parameter {} must be a whole \
                             number of steps, got {}",
                            first + j,
                            value.repr().map_or_else(|_| "?".into(), |r| r.to_string())
                        ))
                    })?;
                steps = steps.max(step as u64);
            } else {
                let name = format!("{}.{}", first + j, core_slot(&slot));
                slots.push((name, to_tensor(&value, None)?));
            }
        }
    }
    Ok((steps, slots))
}

/// Whether a saved group's settings are ones an optimizer built by `build` takes (checked
/// on a scratch one before a load changes anything).
fn settings_fit(
    d: &Bound<'_, PyDict>,
    build: &(dyn Fn() -> Box<dyn Optimizer> + Send + Sync),
) -> PyResult<()> {
    let number = |key: &str| -> PyResult<Option<f64>> {
        d.get_item(key)?
            .map(|v| {
                v.extract::<f64>().map_err(|_| {
                    PyTypeError::new_err(format!("load_state_dict: group {key:?} must be a number"))
                })
            })
            .transpose()
    };
    let (lr, wd) = (number("lr")?, number("weight_decay")?);
    let mut opt = guard::run(build)?;
    let momentum = match opt.momentum_setting() {
        Some(MomentumSetting::Momentum(_)) => number("momentum")?.map(MomentumSetting::Momentum),
        Some(MomentumSetting::Betas(..)) => {
            d.get_item("betas")?.map(|b| betas_of(&b)).transpose()?
        }
        None => None,
    };
    guard::run(|| {
        if let Some(v) = lr {
            opt.set_lr(v);
        }
        if let Some(v) = wd {
            opt.set_weight_decay(v);
        }
        if let Some(m) = momentum {
            opt.set_momentum(m);
        }
    })
}

/// A group's `"betas"`: any sequence of two numbers (a tuple or a list).
fn betas_of(b: &Bound<'_, PyAny>) -> PyResult<MomentumSetting> {
    let v: Vec<f64> = b.extract()?;
    match v[..] {
        [b1, b2] => Ok(MomentumSetting::Betas(b1, b2)),
        _ => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "betas must be two numbers, got {}",
            v.len()
        ))),
    }
}

impl PyOptimizer {
    fn new(
        py: Python<'_>,
        params: Option<&Bound<'_, PyAny>>,
        build: Box<dyn Fn() -> Box<dyn Optimizer> + Send + Sync>,
    ) -> PyResult<PyOptimizer> {
        let param_groups = PyList::empty(py);
        let mut groups = Vec::new();
        for d in group_dicts(py, params)? {
            let (d, group) = group_of(py, d, &build)?;
            param_groups.append(d)?;
            groups.push(group);
        }
        no_param_twice(py, &groups)?;
        let this = PyOptimizer {
            build,
            groups: Mutex::new(groups),
            param_groups: param_groups.unbind(),
        };
        this.sync(py)?;
        Ok(this)
    }

    /// Gives each group's optimizer the `"lr"`, `"weight_decay"` and momentum of its dict.
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        let dicts = self.param_groups.bind(py);
        let mut groups = lock(&self.groups);
        self.sync_params(py, &mut groups)?;
        for (k, g) in groups.iter_mut().enumerate() {
            let d = dicts.get_item(k)?;
            let lr: f64 = d.get_item("lr")?.extract()?;
            let wd: f64 = d.get_item("weight_decay")?.extract()?;
            // The key this optimizer's kind reads (PyTorch's SGD reads "momentum", Adam
            // "betas"); another is left alone, as there.
            let momentum = match g.opt.momentum_setting() {
                Some(MomentumSetting::Momentum(_)) => match d.get_item("momentum") {
                    Ok(m) => Some(MomentumSetting::Momentum(m.extract()?)),
                    Err(_) => None,
                },
                Some(MomentumSetting::Betas(..)) => match d.get_item("betas") {
                    Ok(b) => Some(betas_of(&b)?),
                    Err(_) => None,
                },
                None => None,
            };
            guard::run(|| {
                g.opt.set_lr(lr);
                g.opt.set_weight_decay(wd);
                if let Some(m) = momentum.filter(|&m| g.opt.momentum_setting() != Some(m)) {
                    g.opt.set_momentum(m);
                }
            })?;
        }
        Ok(())
    }

    /// Each group's parameters as its dict's `"params"` lists them now: PyTorch reads the
    /// list at every step, so `opt.param_groups[0]["params"] = [v]` steps `v` from then on.
    /// The optimizer's state follows each parameter's identity, so a parameter that stays
    /// keeps its moments.
    fn sync_params(&self, py: Python<'_>, groups: &mut [Group]) -> PyResult<()> {
        let dicts = self.param_groups.bind(py);
        let mut listed = Vec::with_capacity(groups.len());
        for (k, g) in groups.iter().enumerate() {
            let now = param_list(Some(&dicts.get_item(k)?.get_item("params")?))?;
            let same = now.len() == g.params.len()
                && now.iter().zip(&g.params).all(|(a, b)| a.1.id() == b.1.id());
            listed.push((!same).then_some(now));
        }
        if listed.iter().all(Option::is_none) {
            return Ok(());
        }
        let before: Vec<Vec<(String, Param)>> = groups.iter().map(|g| g.params.clone()).collect();
        for (g, now) in groups.iter_mut().zip(listed) {
            if let Some(now) = now {
                g.params = now;
            }
        }
        if let Err(e) = no_param_twice(py, groups) {
            for (g, old) in groups.iter_mut().zip(before) {
                g.params = old;
            }
            return Err(e);
        }
        Ok(())
    }

    /// One update of `params` with `grads` by the first group's optimizer (a `Model`'s
    /// network, tinynn's way).
    pub fn step_with(
        &self,
        py: Python<'_>,
        params: &[(String, Param)],
        grads: &Gradients,
    ) -> PyResult<()> {
        self.sync(py)?;
        let heavy = params.iter().map(|(_, p)| p.numel()).sum::<usize>() >= HEAVY;
        // The lock is taken where the step runs (without the GIL when heavy), never held while
        // waiting for the GIL: a thread reading `lr` with the GIL waits for the step to end,
        // and the step never waits for that thread.
        guard::run_heavy(py, heavy, || lock(&self.groups)[0].opt.step(params, grads))
    }
}

impl PyOptimizer {
    /// The update of [`PyOptimizer::step`] with `grads`, or each parameter's `.grad`.
    fn step_with_grads(
        &self,
        py: Python<'_>,
        grads: Option<PyRef<'_, PyGradients>>,
    ) -> PyResult<()> {
        self.sync(py)?;
        let all: Vec<(String, Param)> = lock(&self.groups)
            .iter()
            .flat_map(|g| g.params.iter().cloned())
            .collect();
        let grads = match grads {
            Some(g) => g.grads.clone(),
            None => {
                let mut g = Gradients::default();
                for (_, p) in &all {
                    if let Some(t) = crate::autograd::leaf_of(p).grad() {
                        g.insert(p, t);
                    }
                }
                g
            }
        };
        let heavy = all.iter().map(|(_, p)| p.numel()).sum::<usize>() >= HEAVY;
        guard::run_heavy(py, heavy, || {
            for g in lock(&self.groups).iter_mut() {
                g.opt.step(&g.params, &grads);
            }
        })
    }
}

#[pymethods]
impl PyOptimizer {
    /// One update of every group's parameters with `grads`, or with each parameter's `.grad`
    /// when `grads` is None. Given a closure instead (PyTorch's `step(closure)`), it is
    /// called first, with gradients recorded (it computes the loss and runs backward), and
    /// its loss is returned.
    #[pyo3(signature = (grads=None, closure=None))]
    fn step(
        &self,
        py: Python<'_>,
        grads: Option<&Bound<'_, PyAny>>,
        closure: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        match grads.filter(|g| !g.is_none()).or(closure) {
            Some(g) if g.cast::<PyGradients>().is_err() && g.is_callable() => {
                let was = ferrograd::autograd::is_grad_enabled();
                ferrograd::autograd::set_grad_enabled(true);
                let loss = g.call0();
                ferrograd::autograd::set_grad_enabled(was);
                let loss = loss?;
                self.step_with_grads(py, None)?;
                Ok(loss.unbind())
            }
            Some(g) => {
                let g = g.cast::<PyGradients>().map_err(|_| {
                    PyTypeError::new_err("step takes Gradients, a closure, or nothing")
                })?;
                self.step_with_grads(py, Some(g.borrow()))?;
                Ok(py.None())
            }
            None => {
                self.step_with_grads(py, None)?;
                Ok(py.None())
            }
        }
    }

    /// Clears the `.grad` of the optimizer's parameters: to None (PyTorch's default), or to
    /// zeros where there is one when `set_to_none=False`.
    #[pyo3(signature = (set_to_none=true))]
    fn zero_grad(&self, py: Python<'_>, set_to_none: bool) -> PyResult<()> {
        let mut groups = lock(&self.groups);
        self.sync_params(py, &mut groups)?;
        for g in groups.iter() {
            for (_, p) in &g.params {
                let leaf = crate::autograd::leaf_of(p);
                let cleared = match leaf.grad() {
                    Some(g) if !set_to_none => Some(g.zeros_like()),
                    _ => None,
                };
                leaf.set_grad(cleared);
            }
        }
        Ok(())
    }

    /// PyTorch's `state_dict()`: `{"state": {i: {"step": t, "exp_avg": ..., ...}},
    /// "param_groups": [{..., "params": [i, ...]}]}`, the parameters numbered in order across
    /// the groups, the slots under PyTorch's names. The tensors are the state's values now
    /// (later steps do not change them).
    fn state_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (state, saved) = (PyDict::new(py), PyList::empty(py));
        let mut groups = lock(&self.groups);
        self.sync_params(py, &mut groups)?;
        let mut first = 0;
        for (k, g) in groups.iter().enumerate() {
            let named = numbered(&g.params, first);
            let (steps, slots) = guard::run(|| g.opt.state(&named))?.map_err(core_error)?;
            for (key, t) in slots {
                let (i, slot) = key.split_once('.').expect("a slot is named index.slot");
                let i: usize = i.parse().expect("numbered parameters");
                let entry = match state.get_item(i)? {
                    Some(e) => e.cast_into::<PyDict>()?,
                    None => {
                        let e = PyDict::new(py);
                        e.set_item("step", PyTensor::new(Tensor::scalar(steps as f32)))?;
                        state.set_item(i, &e)?;
                        e
                    }
                };
                entry.set_item(torch_slot(slot), PyTensor::new(t))?;
            }
            let d = self
                .param_groups
                .bind(py)
                .get_item(k)?
                .cast_into::<PyDict>()?
                .copy()?;
            d.set_item(
                "params",
                (first..first + g.params.len()).collect::<Vec<_>>(),
            )?;
            saved.append(d)?;
            first += g.params.len();
        }
        let out = PyDict::new(py);
        out.set_item("state", state)?;
        out.set_item("param_groups", saved)?;
        Ok(out)
    }

    /// Restores what `state_dict()` gave (this optimizer's, or one built over parameters of
    /// the same shapes in the same groups): each group's settings, step count and state.
    /// Everything is checked first; on error nothing changes.
    fn load_state_dict(&self, py: Python<'_>, state_dict: &Bound<'_, PyAny>) -> PyResult<()> {
        let saved: Vec<Bound<'_, PyDict>> = state_dict.get_item("param_groups")?.extract()?;
        let state = state_dict.get_item("state")?;
        let state = state.cast::<PyDict>().map_err(|_| {
            PyTypeError::new_err("load_state_dict: \"state\" must be a dict of parameter states")
        })?;
        let mut groups = lock(&self.groups);
        self.sync_params(py, &mut groups)?;
        if saved.len() != groups.len() {
            return Err(PyValueError::new_err(format!(
                "loaded state dict has {} parameter groups, the optimizer {}",
                saved.len(),
                groups.len()
            )));
        }
        let mut restored = Vec::new();
        let mut first = 0;
        for (k, (d, g)) in saved.iter().zip(groups.iter()).enumerate() {
            let ids: Vec<Bound<'_, PyAny>> = d
                .get_item("params")?
                .ok_or_else(|| PyValueError::new_err("a saved parameter group has no params"))?
                .extract()?;
            if ids.len() != g.params.len() {
                return Err(PyValueError::new_err(format!(
                    "loaded state dict's parameter group {k} has {} parameters, the \
                     optimizer's {}",
                    ids.len(),
                    g.params.len()
                )));
            }
            let named = numbered(&g.params, first);
            let (steps, slots) = saved_group_state(state, &ids, first)?;
            guard::run(|| g.opt.check_state(&named, &slots))?.map_err(core_error)?;
            restored.push((named, steps, slots));
            first += g.params.len();
        }
        for d in &saved {
            settings_fit(d, &self.build)?;
        }
        for (g, (named, steps, slots)) in groups.iter_mut().zip(restored) {
            guard::run(|| g.opt.load_state(&named, steps, slots))?.map_err(core_error)?;
        }
        drop(groups);
        let dicts = self.param_groups.bind(py);
        for (k, d) in saved.iter().enumerate() {
            let live = dicts.get_item(k)?;
            for (key, value) in d.iter() {
                if key.extract::<String>()? != "params" {
                    live.set_item(key, value)?;
                }
            }
        }
        self.sync(py)
    }

    /// PyTorch's parameter groups: a list of dicts (`"params"`, `"lr"`, `"weight_decay"`)
    /// that the next step reads.
    #[getter]
    fn param_groups(&self, py: Python<'_>) -> Py<PyList> {
        self.param_groups.clone_ref(py)
    }

    /// Adds a group (a dict with `"params"`, and optionally `"lr"` and `"weight_decay"`;
    /// unset ones are the constructor's).
    fn add_param_group(&self, py: Python<'_>, group: &Bound<'_, PyDict>) -> PyResult<()> {
        let (d, g) = group_of(py, group.copy()?, &self.build)?;
        let mut groups = lock(&self.groups);
        groups.push(g);
        if let Err(e) = no_param_twice(py, &groups) {
            groups.pop();
            return Err(e);
        }
        drop(groups);
        self.param_groups.bind(py).append(d)?;
        self.sync(py)
    }

    /// Gives every group's optimizer its dict's settings now rather than at the next step, so
    /// that a schedule that writes one the optimizer cannot take fails where it writes it.
    #[pyo3(name = "_apply_param_groups")]
    fn apply_param_groups(&self, py: Python<'_>) -> PyResult<()> {
        self.sync(py)
    }

    /// The learning rate of the first group (settable: sets every group's).
    #[getter]
    fn lr(&self, py: Python<'_>) -> PyResult<f64> {
        self.param_groups
            .bind(py)
            .get_item(0)?
            .get_item("lr")?
            .extract()
    }

    #[setter]
    fn set_lr(&self, py: Python<'_>, lr: f64) -> PyResult<()> {
        guard::run(|| (self.build)().set_lr(lr))?;
        for d in self.param_groups.bind(py).iter() {
            d.set_item("lr", lr)?;
        }
        self.sync(py)
    }

    /// The number of updates made (by the first group).
    #[getter]
    fn steps(&self) -> u64 {
        lock(&self.groups)[0].opt.steps()
    }
}

macro_rules! optimizer_class {
    ($(#[$doc:meta])* $rust:ident, $py:literal, $sig:tt, ($($arg:ident: $ty:ty),*) => $build:expr) => {
        $(#[$doc])*
        #[pyclass(name = $py, module = "ferrograd.optim", extends = PyOptimizer)]
        pub struct $rust;

        #[pymethods]
        impl $rust {
            #[new]
            #[pyo3(signature = $sig)]
            #[allow(clippy::too_many_arguments)]
            fn new(py: Python<'_>, params: Option<&Bound<'_, PyAny>>, $($arg: $ty),*) -> PyResult<PyClassInitializer<Self>> {
                let build = move || -> Box<dyn Optimizer> { $build };
                Ok(PyClassInitializer::from(PyOptimizer::new(py, params, Box::new(build))?).add_subclass($rust))
            }
        }
    };
}

optimizer_class!(
    /// `SGD(params=None, lr=0.01, momentum=0.0, nesterov=False, weight_decay=0.0)`.
    PySgd, "SGD", (params=None, lr=0.01, momentum=0.0, nesterov=false, weight_decay=0.0),
    (lr: f64, momentum: f64, nesterov: bool, weight_decay: f64) => {
        if momentum == 0.0 {
            Box::new(Sgd::new(lr).weight_decay(weight_decay))
        } else {
            Box::new(Momentum::new(lr).momentum(momentum).nesterov(nesterov).weight_decay(weight_decay))
        }
    }
);
optimizer_class!(
    /// `Adam(params=None, lr=0.001, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0,
    /// amsgrad=False)` (tinynn's names; `betas=(b1, b2)` as PyTorch's also works).
    PyAdam, "Adam", (params=None, lr=0.001, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, betas=None, amsgrad=false),
    (lr: f64, beta1: f64, beta2: f64, eps: f64, weight_decay: f64, betas: Option<(f64, f64)>, amsgrad: bool) => {
        let (b1, b2) = betas.unwrap_or((beta1, beta2));
        let adam = Adam::new(lr).betas(b1, b2).eps(eps).weight_decay(weight_decay);
        if amsgrad { Box::new(adam.amsgrad()) } else { Box::new(adam) }
    }
);
optimizer_class!(
    /// `AdamW(params=None, lr=0.001, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01,
    /// amsgrad=False)` (`betas=(b1, b2)` as PyTorch's also works).
    PyAdamW, "AdamW", (params=None, lr=0.001, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01, betas=None, amsgrad=false),
    (lr: f64, beta1: f64, beta2: f64, eps: f64, weight_decay: f64, betas: Option<(f64, f64)>, amsgrad: bool) => {
        let (b1, b2) = betas.unwrap_or((beta1, beta2));
        let adamw = AdamW::new(lr).betas(b1, b2).eps(eps).weight_decay(weight_decay);
        if amsgrad { Box::new(adamw.amsgrad()) } else { Box::new(adamw) }
    }
);
optimizer_class!(
    /// `RAdam(params=None, lr=0.001, beta1=0.9, beta2=0.999, eps=1e-8)`.
    PyRAdam, "RAdam", (params=None, lr=0.001, beta1=0.9, beta2=0.999, eps=1e-8, betas=None),
    (lr: f64, beta1: f64, beta2: f64, eps: f64, betas: Option<(f64, f64)>) => {
        let (b1, b2) = betas.unwrap_or((beta1, beta2));
        Box::new(RAdam::new(lr).betas(b1, b2).eps(eps))
    }
);
optimizer_class!(
    /// `RMSProp(params=None, lr=0.01, alpha=0.99)`.
    PyRmsProp, "RMSProp", (params=None, lr=0.01, alpha=0.99), (lr: f64, alpha: f64)
        => Box::new(RmsProp::new(lr).alpha(alpha))
);
optimizer_class!(
    /// `Momentum(params=None, lr=0.01, momentum=0.9)`.
    PyMomentum, "Momentum", (params=None, lr=0.01, momentum=0.9), (lr: f64, momentum: f64)
        => Box::new(Momentum::new(lr).momentum(momentum))
);
optimizer_class!(
    /// `Adagrad(params=None, lr=0.01)`.
    PyAdagrad, "Adagrad", (params=None, lr=0.01), (lr: f64) => Box::new(Adagrad::new(lr))
);

/// tinynn's `Model(net, loss, optimizer)`: `forward(x)`, `backward(pred, target)` returning
/// `(loss, grads)` (the loss a float), `apply_grad(grads)`.
#[pyclass(name = "Model", module = "ferrograd")]
pub struct PyModel {
    #[pyo3(get)]
    net: Py<PyLayer>,
    #[pyo3(get)]
    loss: Py<PyLoss>,
    #[pyo3(get)]
    optimizer: Py<PyOptimizer>,
}

#[pymethods]
impl PyModel {
    /// `net` is a core layer (a `Net`) or a `ferrograd.nn.Module` (a `Sequential`, a module
    /// written in Python), which runs as one layer with its own parameter names.
    #[new]
    fn new(
        py: Python<'_>,
        net: &Bound<'_, PyAny>,
        loss: Py<PyLoss>,
        optimizer: Py<PyOptimizer>,
    ) -> PyResult<PyModel> {
        let net: Py<PyLayer> = match net.cast::<PyLayer>() {
            Ok(layer) => layer.clone().unbind(),
            Err(_) => Py::new(py, crate::nn::python_module_layer(net)?)?,
        };
        if loss.bind(py).borrow().reduction == Reduction::None {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "Model: the loss must reduce to one number to train on; reduction='none' \
                 gives one per element",
            ));
        }
        Ok(PyModel {
            net,
            loss,
            optimizer,
        })
    }

    /// The network's output, recorded for backward.
    fn forward(&self, py: Python<'_>, x: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let net = self.net.bind(py).borrow();
        net.run(py, x, net.mode()).map(PyTensor::new)
    }

    /// The loss of `pred` against `target` (a float) and this pass's gradients of every
    /// parameter (tinynn's backward of one step, which `apply_grad` then applies); each
    /// parameter's `.grad` is set to them, as after PyTorch's `zero_grad(); backward()`.
    fn backward<'py>(
        &self,
        py: Python<'py>,
        pred: &Bound<'py, PyAny>,
        target: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let p = to_tensor(pred, None)?;
        if p.numel() == 0 {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "Model.backward: empty batch (predictions {:?})",
                p.shape()
            )));
        }
        let t = as_target(target, p.dtype())?;
        let loss = self.loss.bind(py).borrow().loss.clone();
        let (value, grads) = guard::run_heavy(py, true, || {
            let l = loss.loss(&p, &t);
            (l.item(), l.backward())
        })?;
        update_leaf_grads(&grads, GradUpdate::Replace);
        PyTuple::new(
            py,
            [
                value.into_pyobject(py)?.into_any(),
                Bound::new(py, PyGradients { grads })?.into_any(),
            ],
        )
    }

    /// tinynn's `set_phase("TRAIN")` / `set_phase("TEST")`: the network's mode.
    fn set_phase(&self, py: Python<'_>, phase: &str) -> PyResult<()> {
        let training = match phase.to_ascii_uppercase().as_str() {
            "TRAIN" => true,
            "TEST" | "EVAL" => false,
            other => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "set_phase: {other:?} is not TRAIN or TEST"
                )))
            }
        };
        self.net.bind(py).borrow().set_training(training);
        Ok(())
    }

    /// One optimizer step of the network's parameters with `grads`.
    fn apply_grad(&self, py: Python<'_>, grads: PyRef<'_, PyGradients>) -> PyResult<()> {
        let net = self.net.bind(py).borrow().layer.clone();
        let params = guard::run(|| net.params())?;
        self.optimizer
            .bind(py)
            .borrow()
            .step_with(py, &params, &grads.grads)
    }

    /// `apply_grad` under the core's name.
    fn apply_grads(&self, py: Python<'_>, grads: PyRef<'_, PyGradients>) -> PyResult<()> {
        self.apply_grad(py, grads)
    }

    /// Forward, backward and update on one batch, as PyTorch's `zero_grad(); backward();
    /// step()`: each parameter's `.grad` is this step's gradient afterwards. Returns the loss.
    fn train_step(
        &self,
        py: Python<'_>,
        x: &Bound<'_, PyAny>,
        target: &Bound<'_, PyAny>,
    ) -> PyResult<f64> {
        let net = self.net.bind(py).borrow();
        let x = input(x)?;
        let layer = net.layer.clone();
        let mode = net.mode();
        let loss = self.loss.bind(py).borrow().loss.clone();
        let params = guard::run(|| layer.params())?;
        let t = as_target(target, x.dtype())?;
        let (value, grads) = guard::run_heavy(py, true, || {
            let l = loss.loss(&layer.forward(&x, mode), &t);
            (l.item(), l.backward())
        })?;
        update_leaf_grads(&grads, GradUpdate::Replace);
        self.optimizer
            .bind(py)
            .borrow()
            .step_with(py, &params, &grads)?;
        Ok(value)
    }

    /// The output in evaluation mode, without recording.
    fn predict(&self, py: Python<'_>, x: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let net = self.net.bind(py).borrow();
        let x = input(x)?;
        let layer = net.layer.clone();
        guard::run_heavy(py, true, || no_grad(|| layer.forward(&x, Mode::Eval))).map(PyTensor::new)
    }
}

/// Registers the losses, optimizers and `Model` on `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyLoss>()?;
    m.add_class::<PySoftmaxCE>()?;
    m.add_class::<PySigmoidCE>()?;
    m.add_class::<PyMse>()?;
    m.add_class::<PyMae>()?;
    m.add_class::<PyHuber>()?;
    m.add_class::<PyNll>()?;
    m.add_class::<PyOptimizer>()?;
    m.add_class::<PySgd>()?;
    m.add_class::<PyAdam>()?;
    m.add_class::<PyAdamW>()?;
    m.add_class::<PyRAdam>()?;
    m.add_class::<PyRmsProp>()?;
    m.add_class::<PyMomentum>()?;
    m.add_class::<PyAdagrad>()?;
    m.add_class::<PyModel>()?;
    Ok(())
}
