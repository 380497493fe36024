//! ONNX export for Python modules: the module's forward, traced by the core while Python runs
//! it once, written by the core's exporter (`ferrograd::onnx`).

use ferrograd::graph::trace_named;
use ferrograd::onnx::{bytes_of, ExportOptions};
use ferrograd::tensor::Tensor;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

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
    items
        .iter()
        .map(|o| outputs_of(o).map(|mut v| v.remove(0)))
        .collect()
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
    let mut failure = None;
    let traced = trace_named(&fed, &named, |xs| {
        let run = || -> PyResult<Vec<Tensor>> {
            let args: Vec<Py<PyTensor>> = xs
                .iter()
                .map(|x| Py::new(py, PyTensor::new(x.clone())))
                .collect::<PyResult<_>>()?;
            outputs_of(&f.call1(PyTuple::new(py, args)?)?)
        };
        run().unwrap_or_else(|e| {
            failure = Some(e);
            Vec::new()
        })
    });
    if let Some(e) = failure {
        return Err(e);
    }
    let opts = ExportOptions {
        opset,
        dynamic_batch,
        output_names,
    };
    let bytes = bytes_of(&traced.map_err(core_error)?, &opts).map_err(core_error)?;
    Ok(PyBytes::new(py, &bytes))
}

/// An ONNX model's bytes as a layer: called on one tensor, it gives the model's first
/// output; its parameters are the model's float weights, under their names.
#[pyfunction]
pub fn onnx_load(py: Python<'_>, data: &[u8]) -> PyResult<Py<PyLayer>> {
    let model = ferrograd::onnx::from_bytes(data).map_err(core_error)?;
    let settings = format!(
        "inputs={:?}, outputs={:?}",
        model.input_names(),
        model.output_names()
    );
    Py::new(py, PyLayer::new(Arc::new(model)).with_settings(settings))
}
