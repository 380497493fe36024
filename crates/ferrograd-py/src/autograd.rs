//! Gradients for Python: the trainable leaves Python holds (and their `.grad`), `Gradients`,
//! `grad`, recording scopes, custom gradients written in Python, and gradient checks.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, Weak};

use ferrograd::autograd::custom_gradient_with_variables;
use ferrograd::prelude::*;
use pyo3::exceptions::{PyKeyError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple, PyWeakrefMethods, PyWeakrefReference};

use crate::convert::to_tensor;
use crate::guard;
use crate::value::{lock, Leaf, PyTensor, Value};

/// Every leaf Python holds, by parameter identity. Entries die with their last Python
/// wrapper and are swept when the table has doubled since the last sweep.
struct Registry {
    leaves: HashMap<u64, Weak<Leaf>>,
    sweep_at: usize,
}

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(|| {
    Mutex::new(Registry {
        leaves: HashMap::new(),
        sweep_at: 64,
    })
});

/// The leaf of `param`, shared by every Python object that wraps it.
pub fn leaf_of(param: &Param) -> Arc<Leaf> {
    let mut reg = lock(&REGISTRY);
    if let Some(leaf) = reg.leaves.get(&param.id()).and_then(Weak::upgrade) {
        return leaf;
    }
    let leaf = Arc::new(Leaf {
        param: param.clone(),
        grad: Mutex::new(None),
        owner: Mutex::new(None),
    });
    reg.leaves.insert(param.id(), Arc::downgrade(&leaf));
    if reg.leaves.len() >= reg.sweep_at {
        reg.leaves.retain(|_, w| w.strong_count() > 0);
        reg.sweep_at = (2 * reg.leaves.len()).max(64);
    }
    leaf
}

/// A new trainable leaf holding `value`.
pub fn new_leaf(value: &Tensor) -> Arc<Leaf> {
    leaf_of(&Param::new(value.clone()))
}

/// The Python object for `param`: the one already wrapping it if it is alive, else a new one.
pub fn wrap_param(py: Python<'_>, param: &Param) -> PyResult<Py<PyAny>> {
    leaf_object(py, leaf_of(param))
}

/// The Python object of `leaf`: the one already wrapping it if it is alive, else a new one
/// that later lookups return.
pub fn leaf_object(py: Python<'_>, leaf: Arc<Leaf>) -> PyResult<Py<PyAny>> {
    if let Some(obj) = lock(&leaf.owner)
        .as_ref()
        .and_then(|w| w.bind(py).upgrade())
    {
        return Ok(obj.unbind());
    }
    let obj = Bound::new(py, PyTensor::from_value(Value::Leaf(leaf.clone())))?.into_any();
    set_owner(&leaf, &obj)?;
    Ok(obj.unbind())
}

/// Makes `obj` the Python object that stands for `leaf`.
pub fn set_owner(leaf: &Leaf, obj: &Bound<'_, PyAny>) -> PyResult<()> {
    *lock(&leaf.owner) = Some(PyWeakrefReference::new(obj)?.unbind());
    Ok(())
}

/// The Python object of a tracked leaf tensor the core hands back (a custom gradient's
/// variable): its wrapper when Python holds it, else a plain tensor.
fn wrap_leaf_tensor(py: Python<'_>, t: &Tensor) -> PyResult<Py<PyAny>> {
    let leaf = t
        .id()
        .and_then(|id| lock(&REGISTRY).leaves.get(&id).and_then(Weak::upgrade));
    match leaf {
        Some(leaf) => wrap_param(py, &leaf.param),
        None => Ok(Bound::new(py, PyTensor::new(t.clone()))?
            .into_any()
            .unbind()),
    }
}

/// What a backward does to the `.grad` of the leaves it reached.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum GradUpdate {
    /// Adds to what is there, as PyTorch's `.grad` does until `zero_grad()`.
    Accumulate,
    /// Replaces what is there: a whole training step, whose `.grad` is that step's gradient
    /// (as after PyTorch's `zero_grad(); backward(); step()`).
    Replace,
}

/// Updates `.grad` of every leaf Python holds that received a gradient.
pub fn update_leaf_grads(grads: &Gradients, how: GradUpdate) {
    let live: Vec<Arc<Leaf>> = lock(&REGISTRY)
        .leaves
        .values()
        .filter_map(Weak::upgrade)
        .collect();
    for leaf in live {
        if let Some(g) = grads.get_param(&leaf.param) {
            let mut slot = lock(&leaf.grad);
            *slot = Some(match (slot.take(), how) {
                (Some(old), GradUpdate::Accumulate) => &old + &g,
                _ => g,
            });
        }
    }
}

/// The result of a backward pass: the gradient of each trainable leaf, looked up by the leaf
/// (`grads[w]`). Fresh on every backward; add two to accumulate.
#[pyclass(name = "Gradients", module = "ferrograd")]
pub struct PyGradients {
    pub grads: Gradients,
}

fn leaf_gradient(grads: &Gradients, t: &Bound<'_, PyAny>) -> PyResult<Option<Tensor>> {
    let t = t
        .cast::<PyTensor>()
        .map_err(|_| PyTypeError::new_err("gradients are looked up by tensor"))?;
    Ok(match &t.get().value() {
        Value::Leaf(l) => grads.get_param(&l.param),
        Value::Plain(x) => grads.get(x),
    })
}

#[pymethods]
impl PyGradients {
    fn __getitem__(&self, t: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        leaf_gradient(&self.grads, t)?
            .map(PyTensor::new)
            .ok_or_else(|| PyKeyError::new_err("this tensor received no gradient"))
    }

    /// The gradient of `t`, or `default` when `t` does not reach the result.
    #[pyo3(signature = (t, default=None))]
    fn get(
        &self,
        py: Python<'_>,
        t: &Bound<'_, PyAny>,
        default: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        Ok(match leaf_gradient(&self.grads, t)? {
            Some(g) => Bound::new(py, PyTensor::new(g))?.into_any().unbind(),
            None => default.unwrap_or_else(|| py.None()),
        })
    }

    fn __contains__(&self, t: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(leaf_gradient(&self.grads, t)?.is_some())
    }

    fn __len__(&self) -> usize {
        self.grads.len()
    }

    fn __add__(&self, other: PyRef<'_, PyGradients>) -> PyResult<PyGradients> {
        guard::run(|| PyGradients {
            grads: &self.grads + &other.grads,
        })
    }

    /// Every gradient multiplied by `factor`.
    fn scale(&self, factor: f64) -> PyGradients {
        PyGradients {
            grads: self.grads.scale(factor),
        }
    }

    /// The L2 norm of all gradients together.
    fn norm(&self) -> f64 {
        self.grads.norm()
    }

    fn __repr__(&self) -> String {
        format!("Gradients({} tensors)", self.grads.len())
    }
}

fn tensors(objs: &Bound<'_, PyAny>) -> PyResult<(Vec<Tensor>, bool)> {
    if objs.cast::<PyTensor>().is_ok() {
        return Ok((vec![to_tensor(objs, None)?], true));
    }
    let list: Vec<Bound<'_, PyAny>> = objs.extract()?;
    Ok((
        list.iter()
            .map(|o| to_tensor(o, None))
            .collect::<PyResult<_>>()?,
        false,
    ))
}

/// One upstream gradient per output (`None`: none given), each of its output's shape and
/// converted to its dtype. `grad_outputs` is a sequence of tensors (or `None`s), or, for a
/// single output, one tensor-like value.
fn seeds(grad_outputs: Option<&Bound<'_, PyAny>>, ys: &[Tensor]) -> PyResult<Vec<Option<Tensor>>> {
    let Some(g) = grad_outputs.filter(|g| !g.is_none()) else {
        return Ok(vec![None; ys.len()]);
    };
    let seq_of_tensors = |v: &Vec<Bound<'_, PyAny>>| {
        v.iter()
            .all(|i| i.is_none() || i.cast::<PyTensor>().is_ok())
    };
    // A tensor is iterable too: it is one seed, never a sequence of them.
    let items: Option<Vec<Bound<'_, PyAny>>> = match g.cast::<PyTensor>() {
        Ok(_) => None,
        Err(_) => g.extract().ok().filter(seq_of_tensors),
    };
    let items = match items {
        Some(v) => v,
        None if ys.len() == 1 => vec![g.clone()],
        None => {
            return Err(PyTypeError::new_err(
                "grad: grad_outputs must be a sequence of tensors, one per output",
            ))
        }
    };
    if items.len() != ys.len() {
        return Err(PyValueError::new_err(format!(
            "grad: {} grad_outputs for {} outputs",
            items.len(),
            ys.len()
        )));
    }
    items
        .iter()
        .zip(ys)
        .enumerate()
        .map(|(k, (g, y))| {
            if g.is_none() {
                return Ok(None);
            }
            let s = to_tensor(g, Some(y.dtype()))?;
            if s.shape() != y.shape() {
                return Err(PyValueError::new_err(format!(
                    "grad: grad_outputs[{k}] has shape {:?}, outputs[{k}] {:?}; they must be the \
                     same",
                    s.shape(),
                    y.shape()
                )));
            }
            Ok(Some(s))
        })
        .collect()
}

/// PyTorch's `autograd.grad(outputs, inputs, grad_outputs=None, retain_graph=None,
/// create_graph=False, allow_unused=None, materialize_grads=False)`: a tuple with the
/// gradient of `outputs` (one element, or weighted by `grad_outputs`) with respect to each of
/// `inputs`. An input the outputs do not depend on is an error, `None` with `allow_unused`,
/// zeros with `materialize_grads`. The graph is always kept (`retain_graph` changes nothing).
/// Sets no `.grad`.
#[pyfunction]
#[pyo3(signature = (outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=false,
    only_inputs=true, allow_unused=None, is_grads_batched=false, materialize_grads=false))]
#[allow(clippy::too_many_arguments)]
pub fn grad<'py>(
    py: Python<'py>,
    outputs: &Bound<'py, PyAny>,
    inputs: &Bound<'py, PyAny>,
    grad_outputs: Option<&Bound<'py, PyAny>>,
    retain_graph: Option<bool>,
    create_graph: bool,
    only_inputs: bool,
    allow_unused: Option<bool>,
    is_grads_batched: bool,
    materialize_grads: bool,
) -> PyResult<Bound<'py, PyTuple>> {
    let _ = (retain_graph, only_inputs);
    if is_grads_batched {
        return Err(pyo3::exceptions::PyNotImplementedError::new_err(
            "grad: is_grads_batched=True (a batch of grad_outputs) is not supported; call grad \
             once per row of grad_outputs",
        ));
    }
    if materialize_grads && allow_unused == Some(false) {
        return Err(PyValueError::new_err(
            "grad: expected allow_unused to be True or not passed when materialize_grads=True",
        ));
    }
    let allow_unused = allow_unused.unwrap_or(materialize_grads);
    // Several outputs are taken together: the gradient of Σᵢ ⟨outputᵢ, grad_outputᵢ⟩.
    let (ys, _) = tensors(outputs)?;
    let seeds = seeds(grad_outputs, &ys)?;
    let (xs, _) = tensors(inputs)?;
    if let Some(k) = xs.iter().position(|x| !x.is_tracked()) {
        return Err(PyRuntimeError::new_err(format!(
            "grad: inputs[{k}] does not require grad (create it with requires_grad=True)"
        )));
    }
    let gs = guard::run_heavy(py, true, || {
        // The weights stay on the graph: with create_graph the result is differentiable in
        // them too (a Hessian-vector product differentiates in the vector).
        let terms: Vec<Tensor> = ys
            .iter()
            .zip(&seeds)
            .map(|(y, s)| match s {
                Some(s) => (y * s).sum(),
                None if ys.len() == 1 => y.clone(),
                None => y.sum(),
            })
            .collect();
        let y = terms
            .into_iter()
            .reduce(|a, b| &a + &b)
            .expect("at least one output");
        let refs: Vec<&Tensor> = xs.iter().collect();
        try_grad_reached(&y, &refs, create_graph)
    })?
    .map_err(crate::guard::core_error)?;
    let out: Vec<Option<Tensor>> = gs
        .into_iter()
        .zip(&xs)
        .enumerate()
        .map(|(k, (g, x))| match g {
            Some(g) => Ok(Some(g)),
            None if materialize_grads => Ok(Some(x.zeros_like())),
            None if allow_unused => Ok(None),
            None => Err(PyRuntimeError::new_err(format!(
                "grad: the outputs do not depend on inputs[{k}]; pass allow_unused=True to get \
                 None for it, or materialize_grads=True to get zeros"
            ))),
        })
        .collect::<PyResult<_>>()?;
    let out: Vec<Py<PyAny>> = out
        .into_iter()
        .map(|g| match g {
            Some(g) => Ok(Bound::new(py, PyTensor::new(g))?.into_any().unbind()),
            None => Ok(py.None()),
        })
        .collect::<PyResult<_>>()?;
    PyTuple::new(py, out)
}

/// Turns recording on this thread on or off; returns the previous setting (what
/// `ferrograd.no_grad()` uses).
#[pyfunction]
pub fn set_grad_enabled(enabled: bool) -> bool {
    ferrograd::autograd::set_grad_enabled(enabled)
}

#[pyfunction]
pub fn is_grad_enabled() -> bool {
    ferrograd::autograd::is_grad_enabled()
}

/// The gradients a Python rule returned: one tensor, or a sequence of them.
fn returned_tensors(r: &Bound<'_, PyAny>, what: &str) -> Vec<Tensor> {
    let list: PyResult<Vec<Tensor>> = if r.cast::<PyTensor>().is_ok() {
        to_tensor(r, None).map(|t| vec![t])
    } else {
        r.extract::<Vec<Bound<'_, PyAny>>>()
            .and_then(|l| l.iter().map(|o| to_tensor(o, None)).collect())
    };
    list.unwrap_or_else(|e| guard::raise_through(e, what))
}

/// Calls the user's function on stand-ins of its inputs; it must return `(y, grad_fn)`.
fn call_forward(
    py: Python<'_>,
    f: &Bound<'_, PyAny>,
    stand_ins: &[Tensor],
    name: &str,
) -> (Tensor, Py<PyAny>) {
    let result = (|| -> PyResult<(Tensor, Py<PyAny>)> {
        let args: Vec<Bound<'_, PyAny>> = stand_ins
            .iter()
            .map(|t| Ok(Bound::new(py, PyTensor::new(t.clone()))?.into_any()))
            .collect::<PyResult<_>>()?;
        let out = f.call1(PyTuple::new(py, args)?)?;
        let (y, rule): (Bound<'_, PyAny>, Bound<'_, PyAny>) = out.extract().map_err(|_| {
            PyTypeError::new_err(format!(
                "{name}: a custom_gradient function must return (output, grad_fn)"
            ))
        })?;
        Ok((to_tensor(&y, None)?, rule.unbind()))
    })();
    result.unwrap_or_else(|e| guard::raise_through(e, name))
}

/// Whether a `grad_fn` takes TensorFlow's `variables` argument.
fn takes_variables(py: Python<'_>, rule: &Bound<'_, PyAny>) -> PyResult<bool> {
    let params = py
        .import("inspect")?
        .call_method1("signature", (rule,))?
        .getattr("parameters")?;
    params.contains("variables")
}

/// `f(*args)` with the derivative `f` defines: `f` returns `(y, grad_fn)`, and
/// `grad_fn(upstream)` returns one gradient per argument. A `grad_fn` that takes `variables`
/// is called as `grad_fn(upstream, variables=[...])` with the trainable leaves `f` read
/// besides its arguments (None when there are none) and returns
/// `(argument_grads, variable_grads)`.
#[pyfunction]
pub fn custom_gradient_call(
    py: Python<'_>,
    f: &Bound<'_, PyAny>,
    args: &Bound<'_, PyTuple>,
    name: String,
) -> PyResult<PyTensor> {
    let inputs: Vec<Tensor> = args
        .iter()
        .map(|a| to_tensor(&a, None))
        .collect::<PyResult<_>>()?;
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let label = name.clone();
    let y = guard::run(|| {
        custom_gradient_with_variables(&name, &refs, |xs| {
            let (y, rule) = call_forward(py, f, xs, &name);
            let wants = takes_variables(py, rule.bind(py))
                .unwrap_or_else(|e| guard::raise_through(e, &name));
            (y, move |up: &Tensor, vars: &[Tensor]| {
                if wants {
                    rule_with_variables(&rule, up, vars, &label)
                } else {
                    if !vars.is_empty() {
                        warn_unused_variables(vars.len(), &label);
                    }
                    (plain_rule(&rule, up, &label), vec![None; vars.len()])
                }
            })
        })
    })?;
    Ok(PyTensor::new(y))
}

/// A function read trainable leaves besides its arguments but its `grad_fn` takes no
/// `variables`: they get no gradient through it. TensorFlow refuses this; here it is a
/// warning, since a leaf reached through an outer function's argument counts too.
fn warn_unused_variables(count: usize, label: &str) {
    Python::attach(|py| {
        let message = std::ffi::CString::new(format!(
            "custom_gradient {label}: the function read {count} trainable tensor(s) besides its \
             arguments, and its grad_fn takes no `variables`, so they get no gradient through \
             it; accept `variables` in grad_fn to give them one"
        ))
        .unwrap_or_default();
        let category = py.get_type::<pyo3::exceptions::PyUserWarning>();
        if let Err(e) = PyErr::warn(py, &category, &message, 1) {
            guard::raise_through(e, label);
        }
    })
}

fn plain_rule(rule: &Py<PyAny>, up: &Tensor, label: &str) -> Vec<Tensor> {
    Python::attach(|py| {
        let r = Bound::new(py, PyTensor::new(up.clone()))
            .and_then(|up| rule.bind(py).call1((up,)))
            .unwrap_or_else(|e| guard::raise_through(e, label));
        returned_tensors(&r, label)
    })
}

fn rule_with_variables(
    rule: &Py<PyAny>,
    up: &Tensor,
    vars: &[Tensor],
    label: &str,
) -> (Vec<Tensor>, Vec<Option<Tensor>>) {
    Python::attach(|py| {
        let result = (|| -> PyResult<(Vec<Tensor>, Vec<Option<Tensor>>)> {
            let up = Bound::new(py, PyTensor::new(up.clone()))?;
            let vs: Vec<Py<PyAny>> = vars
                .iter()
                .map(|v| wrap_leaf_tensor(py, v))
                .collect::<PyResult<_>>()?;
            let kwargs = pyo3::types::PyDict::new(py);
            if vs.is_empty() {
                kwargs.set_item("variables", py.None())?;
            } else {
                kwargs.set_item("variables", PyList::new(py, vs)?)?;
            }
            let r = rule.bind(py).call((up,), Some(&kwargs))?;
            let (gi, gv): (Bound<'_, PyAny>, Bound<'_, PyAny>) = r.extract().map_err(|_| {
                PyTypeError::new_err(format!(
                    "{label}: a grad_fn taking variables must return (input_grads, variable_grads)"
                ))
            })?;
            let gv: Vec<Option<Tensor>> = if gv.is_none() {
                vec![None; vars.len()]
            } else {
                gv.extract::<Vec<Bound<'_, PyAny>>>()?
                    .iter()
                    .map(|g| {
                        if g.is_none() {
                            Ok(None)
                        } else {
                            to_tensor(g, None).map(Some)
                        }
                    })
                    .collect::<PyResult<_>>()?
            };
            Ok((returned_tensors(&gi, label), gv))
        })();
        result.unwrap_or_else(|e| guard::raise_through(e, label))
    })
}

/// `gradcheck(f, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, second_order=False)`: compares the
/// gradients of `f` at `inputs` (converted to float64) with central finite differences;
/// with `second_order=True`, also its second derivatives. Returns True, or raises
/// `ValueError` naming the worst element.
#[pyfunction]
#[pyo3(signature = (f, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, second_order=false))]
pub fn gradcheck(
    py: Python<'_>,
    f: &Bound<'_, PyAny>,
    inputs: &Bound<'_, PyAny>,
    eps: f64,
    atol: f64,
    rtol: f64,
    second_order: bool,
) -> PyResult<bool> {
    let (xs, _) = tensors(inputs)?;
    let opts = GradcheckOptions {
        eps,
        atol,
        rtol,
        ..GradcheckOptions::default()
    };
    let call = |args: &[Tensor]| -> Tensor {
        let result = (|| -> PyResult<Tensor> {
            let objs: Vec<Bound<'_, PyAny>> = args
                .iter()
                .map(|t| Ok(Bound::new(py, PyTensor::new(t.clone()))?.into_any()))
                .collect::<PyResult<_>>()?;
            to_tensor(&f.call1(PyTuple::new(py, objs)?)?, None)
        })();
        result.unwrap_or_else(|e| guard::raise_through(e, "gradcheck"))
    };
    let checked = guard::run(|| {
        if second_order {
            gradgradcheck(call, &xs, &opts)
        } else {
            ferrograd::prelude::gradcheck(call, &xs, &opts)
        }
    })?;
    checked
        .map(|()| true)
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

/// `checkpoint(function, args)`: `function(*args)` run without keeping its graph, and run
/// again during backward to give its gradients (to `args` and to the trainable leaves it
/// reads), as PyTorch's `torch.utils.checkpoint.checkpoint`: memory for time. Run again, it
/// draws the random numbers it drew the first time (dropout masks). `function` returns one
/// tensor.
#[pyfunction]
pub fn checkpoint(function: &Bound<'_, PyAny>, args: &Bound<'_, PyTuple>) -> PyResult<PyTensor> {
    let inputs: Vec<Tensor> = args
        .iter()
        .map(|a| to_tensor(&a, None))
        .collect::<PyResult<_>>()?;
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let f = std::sync::Arc::new(function.clone().unbind());
    let run = move |xs: &[Tensor]| -> Tensor {
        Python::attach(|py| {
            let call_args: Vec<PyTensor> = xs.iter().map(|t| PyTensor::new(t.clone())).collect();
            let y = f.bind(py).call1(PyTuple::new(py, call_args)?)?;
            if y.cast::<PyTensor>().is_err() {
                return Err(PyTypeError::new_err(format!(
                    "checkpoint: the function must return one tensor, not {}",
                    y.get_type().name()?
                )));
            }
            to_tensor(&y, None)
        })
        .unwrap_or_else(|e| guard::raise_through(e, "checkpoint"))
    };
    guard::run(|| ferrograd::autograd::checkpoint(run, &refs)).map(PyTensor::new)
}

/// While entered, the given values stand in for parameters and core buffers on this thread
/// (`torch.func.functional_call`'s mechanism, over the core's `Substitutes`).
#[pyclass(name = "ParamSubstitutes", module = "ferrograd._core", unsendable)]
pub struct PySubstitutes {
    pairs: Vec<(Param, Tensor)>,
    guard: Option<ferrograd::autograd::Substitutes>,
}

#[pymethods]
impl PySubstitutes {
    /// `pairs`: `(parameter, value)` tuples; the parameter a trainable leaf or a core layer's
    /// buffer, the value a tensor of its shape and dtype.
    #[new]
    fn new(pairs: Vec<(PyRef<'_, PyTensor>, Bound<'_, PyAny>)>) -> PyResult<PySubstitutes> {
        let pairs = pairs
            .into_iter()
            .map(|(p, v)| {
                let param = p.backing_param().ok_or_else(|| {
                    PyTypeError::new_err(
                        "functional_call: only a parameter or a layer's buffer can be replaced here",
                    )
                })?;
                Ok((param, to_tensor(&v, None)?))
            })
            .collect::<PyResult<_>>()?;
        Ok(PySubstitutes { pairs, guard: None })
    }

    fn __enter__(mut slf: PyRefMut<'_, Self>) -> PyResult<PyRefMut<'_, Self>> {
        let refs: Vec<(&Param, Tensor)> = slf.pairs.iter().map(|(p, t)| (p, t.clone())).collect();
        let guard =
            ferrograd::autograd::Substitutes::push(&refs).map_err(crate::guard::core_error)?;
        slf.guard = Some(guard);
        Ok(slf)
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, _args: &Bound<'_, PyTuple>) -> bool {
        self.guard = None;
        false
    }
}
