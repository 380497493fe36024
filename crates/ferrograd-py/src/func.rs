//! Forward mode and `vmap` for Python functions: the core records the ops a Python function
//! calls while it runs once, then pushes tangents through them (`ferrograd::func::linearize`)
//! or runs them again on a batch (`ferrograd::func::try_vmap`). `fg.func` wraps these with
//! `torch.func`'s signatures.

use std::cell::RefCell;

use ferrograd::func::{linearize_many, try_vmap, Linearized};
use ferrograd::tensor::Tensor;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::guard::core_error;
use crate::value::PyTensor;

/// The tensors a function returned: one tensor, or a tuple or list of them.
fn outputs_of(out: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<Tensor>> {
    if let Ok(t) = out.cast::<PyTensor>() {
        return Ok(vec![t.get().tensor()]);
    }
    let items: Vec<Bound<'_, PyAny>> = out.extract().map_err(|_| {
        let name = out
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        PyTypeError::new_err(format!(
            "{what}: the function returned {name}, not a tensor or a tuple of tensors"
        ))
    })?;
    items
        .iter()
        .map(|item| match item.cast::<PyTensor>() {
            Ok(t) => Ok(t.get().tensor()),
            Err(_) => Err(PyTypeError::new_err(format!(
                "{what}: the function returned a {}, not a tensor, among its outputs",
                item.get_type().name()?
            ))),
        })
        .collect()
}

/// Runs the core's `run` with `f` (a Python function of tensors) as the function it records;
/// a Python error inside is raised after it.
fn with_python<'py, R>(
    py: Python<'py>,
    f: &Bound<'py, PyAny>,
    what: &str,
    run: impl FnOnce(&dyn Fn(&[Tensor]) -> Vec<Tensor>) -> ferrograd::Result<R>,
) -> PyResult<R> {
    let failure = RefCell::new(None);
    let call = |xs: &[Tensor]| {
        let attempt = || -> PyResult<Vec<Tensor>> {
            let args: Vec<Py<PyTensor>> = xs
                .iter()
                .map(|x| Py::new(py, PyTensor::new(x.clone())))
                .collect::<PyResult<_>>()?;
            outputs_of(&f.call1(PyTuple::new(py, args)?)?, what)
        };
        attempt().unwrap_or_else(|e| {
            failure.borrow_mut().get_or_insert(e);
            Vec::new()
        })
    };
    let result = run(&call);
    let raised = failure.borrow_mut().take();
    match raised {
        Some(e) => Err(e),
        None => result.map_err(core_error),
    }
}

fn wrapped(py: Python<'_>, ts: Vec<Tensor>) -> PyResult<Vec<Py<PyTensor>>> {
    ts.into_iter()
        .map(|t| Py::new(py, PyTensor::new(t)))
        .collect()
}

/// A Python function linearized at its primals: its outputs, and `jvp(tangents)` for their
/// tangents, without running the function again.
#[pyclass(name = "Linearized", unsendable)]
pub struct PyLinearized {
    inner: Linearized,
}

#[pymethods]
impl PyLinearized {
    /// The function's outputs at the primals.
    fn values(&self, py: Python<'_>) -> PyResult<Vec<Py<PyTensor>>> {
        wrapped(py, self.inner.values().to_vec())
    }

    /// The outputs' tangents along `tangents` (one per primal).
    fn jvp(
        &self,
        py: Python<'_>,
        tangents: Vec<PyRef<'_, PyTensor>>,
    ) -> PyResult<Vec<Py<PyTensor>>> {
        let ts: Vec<Tensor> = tangents.iter().map(|t| t.tensor()).collect();
        let refs: Vec<&Tensor> = ts.iter().collect();
        wrapped(py, self.inner.jvp_many(&refs).map_err(core_error)?)
    }
}

/// `f(*primals)` recorded for forward mode.
#[pyfunction]
pub fn func_linearize<'py>(
    py: Python<'py>,
    f: &Bound<'py, PyAny>,
    primals: Vec<PyRef<'py, PyTensor>>,
) -> PyResult<PyLinearized> {
    let xs: Vec<Tensor> = primals.iter().map(|t| t.tensor()).collect();
    let refs: Vec<&Tensor> = xs.iter().collect();
    let inner = with_python(py, f, "jvp", |call| linearize_many(call, &refs))?;
    Ok(PyLinearized { inner })
}

/// `f` run on a batch: input `i` batched along `in_dims[i]`, or shared where that is None;
/// the outputs batched along axis 0.
#[pyfunction]
pub fn func_vmap<'py>(
    py: Python<'py>,
    f: &Bound<'py, PyAny>,
    inputs: Vec<PyRef<'py, PyTensor>>,
    in_dims: Vec<Option<usize>>,
) -> PyResult<Vec<Py<PyTensor>>> {
    let xs: Vec<Tensor> = inputs.iter().map(|t| t.tensor()).collect();
    let refs: Vec<&Tensor> = xs.iter().collect();
    let outs = with_python(py, f, "vmap", |call| try_vmap(call, &refs, &in_dims))?;
    wrapped(py, outs)
}

/// Whether a transform is recording the ops this thread runs (`fg.func.jvp`, `vmap`): Python
/// code that would read tensor values for checks skips them then.
#[pyfunction]
pub fn func_is_recording() -> bool {
    ferrograd::func::is_recording()
}
