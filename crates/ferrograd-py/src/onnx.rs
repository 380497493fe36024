//! ONNX export for Python modules: the module's forward, traced by the core while Python runs
//! it once, written by the core's exporter (`ferrograd::onnx`).

use ferrograd::graph::trace_named;
use ferrograd::onnx::{bytes_of, check_free_batch, ExportOptions, OnnxModel};
use ferrograd::tensor::Tensor;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};
use pyo3::PyClassInitializer;

use std::cell::RefCell;
use std::sync::Arc;

use crate::guard::core_error;
use crate::nn::PyLayer;
use crate::value::PyTensor;

/// The tensors a forward returned: one tensor, or a tuple or list of them.
fn outputs_of(out: &Bound<'_, PyAny>) -> PyResult<Vec<Tensor>> {
    if let Ok(t) = out.cast::<PyTensor>() {
        return Ok(vec![t.get().tensor()]);
    }
    let items: Vec<Bound<'_, PyAny>> = match out.extract() {
        Ok(items) => items,
        Err(_) => {
            return Err(PyTypeError::new_err(format!(
                "onnx.export: the model returned {}, not a tensor or a tuple of tensors",
                out.get_type().name()?
            )))
        }
    };
    let mut all = Vec::new();
    for item in &items {
        all.extend(outputs_of(item)?);
    }
    Ok(all)
}

/// `fn(*inputs)` traced and written as an ONNX model; its bytes. `named` holds the module's
/// parameters and buffers under their `state_dict` names.
#[pyfunction]
#[pyo3(signature = (f, inputs, input_names, named, output_names, dynamic_batch, opset))]
#[allow(clippy::too_many_arguments)]
pub fn onnx_export<'py>(
    py: Python<'py>,
    f: &Bound<'py, PyAny>,
    inputs: Vec<PyRef<'py, PyTensor>>,
    input_names: Vec<String>,
    named: Vec<(String, PyRef<'py, PyTensor>)>,
    output_names: Vec<String>,
    dynamic_batch: bool,
    opset: i64,
) -> PyResult<Bound<'py, PyBytes>> {
    let values: Vec<Tensor> = inputs.iter().map(|t| t.tensor()).collect();
    let fed: Vec<(&str, &Tensor)> = input_names
        .iter()
        .map(String::as_str)
        .zip(&values)
        .collect();
    let named: Vec<(String, Tensor)> = named.into_iter().map(|(n, t)| (n, t.tensor())).collect();
    // A Python error inside the core's call is kept here and raised after it.
    let failure = RefCell::new(None);
    let call = |xs: &[Tensor]| {
        let run = || -> PyResult<Vec<Tensor>> {
            let args: Vec<Py<PyTensor>> = xs
                .iter()
                .map(|x| Py::new(py, PyTensor::new(x.clone())))
                .collect::<PyResult<_>>()?;
            outputs_of(&f.call1(PyTuple::new(py, args)?)?)
        };
        run().unwrap_or_else(|e| {
            failure.borrow_mut().get_or_insert(e);
            Vec::new()
        })
    };
    let traced = trace_named(&fed, &named, call);
    let opts = ExportOptions {
        opset,
        dynamic_batch,
        output_names,
    };
    let traced = traced.and_then(|t| bytes_of(&t, &opts));
    let bytes = match failure.borrow_mut().take() {
        Some(e) => return Err(e),
        None => traced.map_err(core_error)?,
    };
    if dynamic_batch {
        let checked = check_free_batch(&bytes, &values.iter().collect::<Vec<_>>(), call);
        match (checked, failure.borrow_mut().take()) {
            (Ok(()), None) => {}
            (Ok(()), Some(e)) => return Err(e),
            (Err(e), None) => return Err(core_error(e)),
            // The model raised on one more row: the batch size is its own.
            (Err(e), Some(raised)) => {
                return Err(core_error(ferrograd::Error::Graph(format!(
                    "{e}: {raised}"
                ))))
            }
        }
    }
    Ok(PyBytes::new(py, &bytes))
}

/// An imported ONNX model: a layer (parameters under the model's weight names, `state_dict`,
/// `train()`/`eval()`, hooks) whose call takes the model's inputs in order and gives its
/// output, or a tuple of its outputs.
#[pyclass(name = "OnnxModule", module = "ferrograd.onnx", extends = PyLayer)]
pub struct PyOnnxModule {
    model: Arc<OnnxModel>,
}

#[pymethods]
impl PyOnnxModule {
    /// The model's outputs for `inputs` (one tensor per model input).
    #[pyo3(signature = (*inputs))]
    fn forward<'py>(
        slf: PyRef<'py, Self>,
        py: Python<'py>,
        inputs: Vec<PyRef<'py, PyTensor>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let values: Vec<Tensor> = inputs.iter().map(|t| t.tensor()).collect();
        let refs: Vec<&Tensor> = values.iter().collect();
        let mut outs: Vec<Bound<'py, PyAny>> = slf
            .model
            .run(&refs)
            .map_err(core_error)?
            .into_iter()
            .map(|t| Bound::new(py, PyTensor::new(t)).map(Bound::into_any))
            .collect::<PyResult<_>>()?;
        match outs.len() {
            1 => Ok(outs.remove(0)),
            _ => Ok(PyTuple::new(py, outs)?.into_any()),
        }
    }

    #[pyo3(signature = (*inputs))]
    fn __call__<'py>(
        slf: &Bound<'py, Self>,
        py: Python<'py>,
        inputs: Vec<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let args = PyTuple::new(py, &inputs)?;
        if let Some(out) = PyLayer::through_hooks(slf.as_any(), args, PyDict::new(py))? {
            return Ok(out);
        }
        let tensors = inputs
            .iter()
            .map(|x| x.extract::<PyRef<'py, PyTensor>>().map_err(PyErr::from))
            .collect::<PyResult<Vec<_>>>()?;
        Self::forward(slf.borrow(), py, tensors)
    }

    /// The names of the model's inputs, in the order its call takes them.
    #[getter]
    fn input_names(&self) -> Vec<String> {
        self.model.input_names().to_vec()
    }

    /// The names of its outputs, in the order its call gives them.
    #[getter]
    fn output_names(&self) -> Vec<String> {
        self.model.output_names().to_vec()
    }

    /// It runs its hooks from its own call.
    #[classattr]
    fn _calls_hooks() -> bool {
        true
    }
}

/// An ONNX model's bytes as an [`PyOnnxModule`].
#[pyfunction]
pub fn onnx_load(py: Python<'_>, data: &[u8]) -> PyResult<Py<PyOnnxModule>> {
    let model = Arc::new(ferrograd::onnx::from_bytes(data).map_err(core_error)?);
    let settings = format!(
        "inputs={:?}, outputs={:?}",
        model.input_names(),
        model.output_names()
    );
    let layer = PyLayer::new(model.clone()).with_settings(settings);
    Py::new(
        py,
        PyClassInitializer::from(layer).add_subclass(PyOnnxModule { model }),
    )
}
