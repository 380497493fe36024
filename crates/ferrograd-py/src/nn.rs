//! `ferrograd.nn`: the core's layers as Python classes, `Net` (tinynn's name for a sequence
//! of layers) and the state-dict and safetensors interop of every layer.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ferrograd::nn::{LayerNorm, Module, RngStream};
use ferrograd::prelude::*;
use pyo3::exceptions::{PyAttributeError, PyIndexError, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::autograd::{leaf_of, wrap_param, Leaf};
use crate::convert::{to_tensor, Padding, Size2};
use crate::guard::{self, HEAVY};
use crate::tensor::PyTensor;

/// A core error as the Python exception for it: file errors as `OSError`, the rest as
/// `ValueError`, each with the core's message (which names the file or the key).
pub fn core_error(e: ferrograd::Error) -> PyErr {
    match e {
        ferrograd::Error::Io { .. } => PyOSError::new_err(e.to_string()),
        other => PyValueError::new_err(other.to_string()),
    }
}

/// Base class of every layer: `layer(x)` runs it in training mode unless `eval()` was called.
#[pyclass(name = "Layer", module = "ferrograd.nn", subclass)]
pub struct PyLayer {
    pub layer: Arc<dyn Layer>,
    training: AtomicBool,
    /// The parameters' leaves, held while the layer lives so that backward sets their
    /// `.grad` even when Python holds no other reference to them.
    _leaves: Vec<Arc<Leaf>>,
}

impl PyLayer {
    pub fn new(layer: Arc<dyn Layer>) -> PyLayer {
        let leaves = layer.params().iter().map(|(_, p)| leaf_of(p)).collect();
        PyLayer {
            layer,
            training: AtomicBool::new(true),
            _leaves: leaves,
        }
    }

    pub fn set_training(&self, on: bool) {
        self.training.store(on, Ordering::Relaxed);
    }

    pub fn mode(&self) -> Mode {
        if self.training.load(Ordering::Relaxed) {
            Mode::Train
        } else {
            Mode::Eval
        }
    }

    /// Converts every parameter and buffer to `dtype`, keeping their identities.
    pub fn convert(&self, dtype: DType) -> PyResult<()> {
        let layer = self.layer.clone();
        guard::run(|| {
            for (_, p) in layer.state_params() {
                if p.dtype().is_float() {
                    p.set_dtype(dtype);
                }
            }
        })
    }

    /// The layer's output for a tensor-like `x`, the GIL released for large inputs.
    pub fn run(&self, py: Python<'_>, x: &Bound<'_, PyAny>, mode: Mode) -> PyResult<Tensor> {
        let x = input(x)?;
        let layer = self.layer.clone();
        guard::run_heavy(py, x.numel() >= HEAVY, || layer.forward(&x, mode))
    }
}

/// A layer's input: tensors as they are, numpy float64 arrays and lists as float32 (the
/// layers' dtype), as the seed's numpy pipeline hands them over.
pub fn input(x: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    if x.cast::<PyTensor>().is_ok() {
        to_tensor(x, None)
    } else {
        let t = to_tensor(x, None)?;
        Ok(if t.dtype() == DType::F64 {
            t.to_dtype(DType::F32)
        } else {
            t
        })
    }
}

fn named_params<'py>(py: Python<'py>, named: Vec<(String, Param)>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (name, p) in named {
        d.set_item(name, wrap_param(py, &p)?)?;
    }
    Ok(d)
}

#[pymethods]
impl PyLayer {
    /// The output for `x` (tracked for backward when the parameters are).
    fn forward(&self, py: Python<'_>, x: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.run(py, x, self.mode()).map(PyTensor::new)
    }

    fn __call__(&self, py: Python<'_>, x: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.forward(py, x)
    }

    /// Training mode (dropout on, batch statistics) or, with `False`, evaluation mode.
    #[pyo3(signature = (mode=true))]
    fn train(slf: PyRef<'_, Self>, mode: bool) -> PyRef<'_, Self> {
        slf.training.store(mode, Ordering::Relaxed);
        slf
    }

    /// Evaluation mode: dropout off, running statistics.
    fn eval(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf.training.store(false, Ordering::Relaxed);
        slf
    }

    #[getter]
    fn training(&self) -> bool {
        self.training.load(Ordering::Relaxed)
    }

    /// The trainable parameters, in order (each a leaf: `.grad` is set by backward).
    fn parameters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let ps: Vec<Py<PyAny>> = guard::run(|| self.layer.params())?
            .iter()
            .map(|(_, p)| wrap_param(py, p))
            .collect::<PyResult<_>>()?;
        PyList::new(py, ps)
    }

    /// `(name, parameter)` pairs; nested layers are named `"0.weight"`, as PyTorch's.
    fn named_parameters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let ps: Vec<(String, Py<PyAny>)> = guard::run(|| self.layer.params())?
            .into_iter()
            .map(|(n, p)| Ok((n, wrap_param(py, &p)?)))
            .collect::<PyResult<_>>()?;
        PyList::new(py, ps)
    }

    /// The parameters by name (tinynn's `layer.params`).
    #[getter]
    fn params<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        named_params(py, guard::run(|| self.layer.params())?)
    }

    /// Saved but not trained (batch norm's running statistics), by name.
    fn buffers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (name, p) in self.layer.buffers() {
            d.set_item(name, PyTensor::new(p.tensor().detach()))?;
        }
        Ok(d)
    }

    /// Handles of the buffers by name, for a Python module holding this layer: a network
    /// that holds the module then saves and loads them.
    fn _named_buffer_refs(&self) -> Vec<(String, PyBufferRef)> {
        self.layer
            .buffers()
            .into_iter()
            .map(|(n, p)| (n, PyBufferRef(p)))
            .collect()
    }

    /// Every parameter and buffer by its PyTorch state-dict name, as plain tensors.
    fn state_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (name, t) in self.layer.state() {
            d.set_item(name, PyTensor::new(t))?;
        }
        Ok(d)
    }

    /// Loads values by state-dict name (tensors or numpy arrays, e.g. a PyTorch state dict
    /// converted with `.numpy()`): every key must match in name and shape, or nothing
    /// changes and the error names each offending key.
    fn load_state_dict(&self, state: &Bound<'_, PyDict>) -> PyResult<()> {
        let mut map = HashMap::new();
        for (k, v) in state.iter() {
            map.insert(k.extract::<String>()?, to_tensor(&v, None)?);
        }
        guard::run(|| self.layer.load_state(&map))?.map_err(core_error)
    }

    /// Writes the state dict to a safetensors file.
    fn save(&self, path: std::path::PathBuf) -> PyResult<()> {
        guard::run(|| Shared(self.layer.clone()).save_safetensors(&path))?.map_err(core_error)
    }

    /// Loads a safetensors file, such as one written by
    /// `safetensors.torch.save_file(model.state_dict(), path)`.
    fn load(&self, path: std::path::PathBuf) -> PyResult<()> {
        guard::run(|| Shared(self.layer.clone()).load_safetensors(&path))?.map_err(core_error)
    }

    /// Copies every parameter and buffer of `other` (same structure) into this layer.
    fn copy_from(&self, other: PyRef<'_, PyLayer>) -> PyResult<()> {
        let src = other.layer.clone();
        guard::run(|| self.layer.copy_from(&Shared(src)))?.map_err(core_error)
    }

    /// Every parameter and buffer converted to float64 in place (PyTorch's `double()`).
    fn double(slf: PyRef<'_, Self>) -> PyResult<PyRef<'_, Self>> {
        slf.convert(DType::F64)?;
        Ok(slf)
    }

    /// Every parameter and buffer converted to float32 in place (PyTorch's `float()`).
    fn float(slf: PyRef<'_, Self>) -> PyResult<PyRef<'_, Self>> {
        slf.convert(DType::F32)?;
        Ok(slf)
    }

    /// The number of trainable scalars.
    fn num_params(&self) -> PyResult<usize> {
        guard::run(|| self.layer.num_params())
    }

    /// A parameter by name (`dense.weight`); `bias` is None for a layer without one.
    fn __getattr__(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyAny>> {
        let params = guard::run(|| self.layer.params())?;
        let has_weight = params.iter().any(|(n, _)| n == "weight");
        match params.into_iter().find(|(n, _)| n == name) {
            Some((_, p)) => wrap_param(py, &p),
            // A weighted layer built without a bias (`Linear(.., bias=False)`): None, as
            // PyTorch's attribute is.
            None if name == "bias" && has_weight => Ok(py.None()),
            None => Err(PyAttributeError::new_err(format!(
                "{} has no parameter or attribute {name:?}",
                guard::run(|| self.layer.name())?
            ))),
        }
    }

    fn __repr__(&self) -> PyResult<String> {
        guard::run(|| self.layer.name())
    }

    /// A table of the layers, their parameters and shapes.
    fn summary(&self) -> PyResult<String> {
        guard::run(|| self.layer.summary())
    }
}

/// A layer written in Python (a `ferrograd.nn.Module`) inside a core network: its `forward`
/// runs with the GIL taken back, its parameters are the trainable leaves its
/// `named_parameters()` lists. An exception it raises reaches the caller unchanged.
pub struct PythonLayer(Py<PyAny>);

impl PythonLayer {
    fn call<R>(&self, what: &str, f: impl FnOnce(&Bound<'_, PyAny>) -> PyResult<R>) -> R {
        Python::attach(|py| f(self.0.bind(py)).unwrap_or_else(|e| guard::raise_through(e, what)))
    }
}

/// A core layer's buffer (batch norm's running statistics), passed through a Python module.
#[pyclass(name = "_BufferRef", module = "ferrograd.nn", frozen)]
pub struct PyBufferRef(Param);

impl Module for PythonLayer {
    fn buffers(&self) -> Vec<(String, Param)> {
        self.call("_named_buffer_refs", |m| {
            let mut out = Vec::new();
            if !m.hasattr("_named_buffer_refs")? {
                return Ok(out);
            }
            for item in m.call_method0("_named_buffer_refs")?.try_iter()? {
                let (name, handle): (String, Bound<'_, PyAny>) = item?.extract()?;
                out.push((name, handle.cast::<PyBufferRef>()?.get().0.clone()));
            }
            Ok(out)
        })
    }

    fn params(&self) -> Vec<(String, Param)> {
        self.call("named_parameters", |m| {
            let mut out = Vec::new();
            for item in m.call_method0("named_parameters")?.try_iter()? {
                let (name, t): (String, Bound<'_, PyAny>) = item?.extract()?;
                if let Ok(t) = t.cast::<PyTensor>() {
                    if let crate::tensor::Value::Leaf(leaf) = t.get().value() {
                        out.push((name, leaf.param.clone()));
                    }
                }
            }
            Ok(out)
        })
    }

    fn name(&self) -> String {
        self.call("name", |m| Ok(m.get_type().name()?.to_string()))
    }
}

impl Layer for PythonLayer {
    fn forward(&self, x: &Tensor, mode: Mode) -> Tensor {
        self.call("forward", |m| {
            // The mode reaches the module and its own sub-layers, as `train()` sets it.
            if m.hasattr("train")? {
                m.call_method1("train", (mode == Mode::Train,))?;
            }
            let y = m.call_method1("forward", (PyTensor::new(x.clone()),))?;
            to_tensor(&y, None)
        })
    }
}

/// A layer shared between its Python object and the networks it is part of.
pub struct Shared(pub Arc<dyn Layer>);

impl Module for Shared {
    fn params(&self) -> Vec<(String, Param)> {
        self.0.params()
    }
    fn buffers(&self) -> Vec<(String, Param)> {
        self.0.buffers()
    }
    fn rng_streams(&self) -> Vec<(String, RngStream)> {
        self.0.rng_streams()
    }
    fn name(&self) -> String {
        self.0.name()
    }
    fn state_params(&self) -> Vec<(String, Param)> {
        self.0.state_params()
    }
}

impl Layer for Shared {
    fn forward(&self, x: &Tensor, mode: Mode) -> Tensor {
        self.0.forward(x, mode)
    }
}

/// tinynn's `Net(layers)`: the layers applied in order. Parameters are named by position
/// (`"0.weight"`), as in PyTorch's `nn.Sequential`. A layer may be one of the core's or a
/// `ferrograd.nn.Module` written in Python (its `forward` and `named_parameters`).
#[pyclass(name = "Net", module = "ferrograd.nn", extends = PyLayer)]
pub struct PyNet {
    layers: Vec<Py<PyAny>>,
}

#[pymethods]
impl PyNet {
    #[new]
    fn new(layers: Vec<Bound<'_, PyAny>>) -> PyResult<PyClassInitializer<PyNet>> {
        let shared: Vec<Box<dyn Layer>> = layers
            .iter()
            .enumerate()
            .map(|(i, l)| -> PyResult<Box<dyn Layer>> {
                if let Ok(core) = l.cast::<PyLayer>() {
                    return Ok(Box::new(Shared(core.borrow().layer.clone())));
                }
                if l.hasattr("forward")? && l.hasattr("named_parameters")? {
                    return Ok(Box::new(PythonLayer(l.clone().unbind())));
                }
                Err(pyo3::exceptions::PyTypeError::new_err(format!(
                    "Net: layer {i} is a {}, neither a ferrograd layer nor a ferrograd.nn.Module",
                    l.get_type().name()?
                )))
            })
            .collect::<PyResult<_>>()?;
        let net = PyNet {
            layers: layers.into_iter().map(Bound::unbind).collect(),
        };
        // A Python layer's parameters are read here, and it may raise.
        let base = guard::run(|| PyLayer::new(Arc::new(Net::new(shared))))?;
        Ok(PyClassInitializer::from(base).add_subclass(net))
    }

    /// The layers, in order.
    #[getter]
    fn layers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.layers.iter().map(|l| l.clone_ref(py)))
    }

    fn __len__(&self) -> usize {
        self.layers.len()
    }

    fn __getitem__(&self, py: Python<'_>, i: isize) -> PyResult<Py<PyAny>> {
        let n = self.layers.len() as isize;
        let j = if i < 0 { i + n } else { i };
        if !(0..n).contains(&j) {
            return Err(PyIndexError::new_err(format!("layer {i} of {n}")));
        }
        Ok(self.layers[j as usize].clone_ref(py))
    }
}

/// Declares a layer class: its Python name, constructor signature and how it builds the
/// core layer.
macro_rules! layer_class {
    ($(#[$doc:meta])* $rust:ident, $py:literal, $sig:tt, ($($arg:ident: $ty:ty),*) => $build:expr) => {
        $(#[$doc])*
        #[pyclass(name = $py, module = "ferrograd.nn", extends = PyLayer)]
        pub struct $rust;

        #[pymethods]
        impl $rust {
            #[new]
            #[pyo3(signature = $sig)]
            #[allow(clippy::too_many_arguments)]
            fn new($($arg: $ty),*) -> PyResult<PyClassInitializer<Self>> {
                let layer: Arc<dyn Layer> = guard::run(|| -> Arc<dyn Layer> { Arc::new($build) })?;
                Ok(PyClassInitializer::from(PyLayer::new(layer)).add_subclass($rust))
            }
        }
    };
}

layer_class!(
    /// `Dense(in_features, out_features, bias=True)`: `x @ weight.T + bias`, weight
    /// `[out, in]` (PyTorch's `nn.Linear`; `bias=False` leaves the bias out).
    PyDense, "Dense", (in_features, out_features, bias=true),
    (in_features: usize, out_features: usize, bias: bool)
        => {
            let d = Dense::new(in_features, out_features);
            if bias { d } else { d.without_bias() }
        }
);
layer_class!(
    /// `Conv2D(in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
    /// groups=1, bias=True)`, NCHW, weight `[out, in/groups, kh, kw]`. Sizes are an int or a
    /// pair `(height, width)`; `padding` may be `"same"` or `"valid"`, as PyTorch's.
    PyConv2D, "Conv2D",
    (in_channels, out_channels, kernel_size, stride=Size2([1, 1]), padding=Padding::Sizes([0, 0]),
     dilation=Size2([1, 1]), groups=1, bias=true),
    (in_channels: usize, out_channels: usize, kernel_size: Size2, stride: Size2, padding: Padding,
     dilation: Size2, groups: usize, bias: bool)
        => {
            let ([kh, kw], [sh, sw], [dh, dw]) = (kernel_size.0, stride.0, dilation.0);
            let c = Conv2d::new_hw(in_channels, out_channels, kh, kw)
                .stride_hw(sh, sw).dilation_hw(dh, dw).groups(groups);
            let c = match padding {
                Padding::Sizes([ph, pw]) => c.padding_hw(ph, pw),
                Padding::Same => c.padding_same(),
            };
            if bias { c } else { c.without_bias() }
        }
);
layer_class!(
    /// `ConvTranspose2D(in_channels, out_channels, kernel_size, stride=1, padding=0,
    /// output_padding=0, dilation=1, groups=1, bias=True)`, weight `[in, out/groups, kh, kw]`;
    /// sizes are an int or a pair `(height, width)`.
    PyConvTranspose2D, "ConvTranspose2D",
    (in_channels, out_channels, kernel_size, stride=Size2([1, 1]), padding=Size2([0, 0]),
     output_padding=Size2([0, 0]), dilation=Size2([1, 1]), groups=1, bias=true),
    (in_channels: usize, out_channels: usize, kernel_size: Size2, stride: Size2, padding: Size2,
     output_padding: Size2, dilation: Size2, groups: usize, bias: bool)
        => {
            let ([kh, kw], [sh, sw], [ph, pw]) = (kernel_size.0, stride.0, padding.0);
            let ([oh, ow], [dh, dw]) = (output_padding.0, dilation.0);
            let c = ConvTranspose2d::new_hw(in_channels, out_channels, kh, kw)
                .stride_hw(sh, sw).padding_hw(ph, pw).output_padding_hw(oh, ow)
                .dilation_hw(dh, dw).groups(groups);
            if bias { c } else { c.without_bias() }
        }
);
layer_class!(
    /// `MaxPool2D(kernel_size, stride=kernel_size, padding=0)`; sizes an int or a pair.
    PyMaxPool2D, "MaxPool2D", (kernel_size, stride=None, padding=Size2([0, 0])),
    (kernel_size: Size2, stride: Option<Size2>, padding: Size2)
        => {
            let ([kh, kw], [sh, sw], [ph, pw]) = (kernel_size.0, stride.unwrap_or(kernel_size).0, padding.0);
            MaxPool2d::new(1, 1).kernel_hw(kh, kw).stride_hw(sh, sw).padding_hw(ph, pw)
        }
);
layer_class!(
    /// `AvgPool2D(kernel_size, stride=kernel_size, padding=0)` (padding counted, as
    /// PyTorch's default); sizes an int or a pair.
    PyAvgPool2D, "AvgPool2D", (kernel_size, stride=None, padding=Size2([0, 0])),
    (kernel_size: Size2, stride: Option<Size2>, padding: Size2)
        => {
            let ([kh, kw], [sh, sw], [ph, pw]) = (kernel_size.0, stride.unwrap_or(kernel_size).0, padding.0);
            AvgPool2d::new(1, 1).kernel_hw(kh, kw).stride_hw(sh, sw).padding_hw(ph, pw)
        }
);
layer_class!(
    /// `BatchNorm1d(num_features)`: momentum 0.1, eps 1e-5, as PyTorch.
    PyBatchNorm1d, "BatchNorm1d", (num_features), (num_features: usize)
        => BatchNorm1d::new(num_features)
);
layer_class!(
    /// `BatchNorm2d(num_features)` over NCHW channels.
    PyBatchNorm2d, "BatchNorm2d", (num_features), (num_features: usize)
        => BatchNorm2d::new(num_features)
);
layer_class!(
    /// `LayerNorm(normalized_shape)` over the last axis.
    PyLayerNorm, "LayerNorm", (normalized_shape), (normalized_shape: usize)
        => LayerNorm::new(normalized_shape)
);
layer_class!(
    /// `Dropout(p=0.5)`: zeroes elements with probability `p` in training mode.
    PyDropout, "Dropout", (p=0.5), (p: f64) => Dropout::new(p)
);
layer_class!(
    /// `Dropout2d(p=0.5)`: zeroes whole channels.
    PyDropout2d, "Dropout2d", (p=0.5), (p: f64) => Dropout2d::new(p)
);
layer_class!(
    /// `Flatten()`: `[N, ...]` to `[N, features]`.
    PyFlatten, "Flatten", (), () => Flatten::new()
);
layer_class!(
    /// `Reshape(shape)`: each sample to `shape` (the batch axis kept).
    PyReshape, "Reshape", (shape), (shape: Vec<usize>) => Reshape::new(&shape)
);
layer_class!(
    /// `Embedding(num_embeddings, embedding_dim)`: rows of a table by int64 index.
    PyEmbedding, "Embedding", (num_embeddings, embedding_dim),
    (num_embeddings: usize, embedding_dim: usize) => Embedding::new(num_embeddings, embedding_dim)
);
layer_class!(/// max(x, 0).
    PyReLU, "ReLU", (), () => Relu::new());
layer_class!(/// 1 / (1 + e⁻ˣ).
    PySigmoid, "Sigmoid", (), () => Sigmoid::new());
layer_class!(/// tanh x.
    PyTanh, "Tanh", (), () => Tanh::new());
layer_class!(/// ln(1 + eˣ).
    PySoftplus, "Softplus", (), () => Softplus::new());
layer_class!(/// x Φ(x).
    PyGelu, "GELU", (), () => Gelu::new());
layer_class!(/// x for x > 0, `negative_slope`·x below.
    PyLeakyReLU, "LeakyReLU", (negative_slope=0.01), (negative_slope: f64) => LeakyRelu::new(negative_slope));
layer_class!(/// x for x > 0, α(eˣ − 1) below.
    PyElu, "ELU", (alpha=1.0), (alpha: f64) => Elu::new(alpha));
layer_class!(/// Softmax along `axis` (non-negative).
    PySoftmax, "Softmax", (axis=1), (axis: usize) => Softmax::new(axis));

/// Recurrent layers: `RNN`, `LSTM`, `GRU` (batch-first, PyTorch's gate order and parameter
/// names). Calling one returns the outputs `[N, T, H]`; `forward_seq(x, state=None)` also
/// returns the last state (`h`, or `(h, c)` for the LSTM), each `[layers, N, H]`.
#[pyclass(name = "Recurrent", module = "ferrograd.nn", extends = PyLayer, subclass)]
pub struct PyRecurrent {
    kind: RecurrentKind,
}

#[derive(Clone)]
enum RecurrentKind {
    Rnn(Arc<Rnn>),
    Lstm(Arc<Lstm>),
    Gru(Arc<Gru>),
}

impl PyRecurrent {
    fn build(
        kind: &str,
        input_size: usize,
        hidden_size: usize,
        num_layers: usize,
    ) -> PyResult<(PyRecurrent, PyLayer)> {
        let (kind, layer): (RecurrentKind, Arc<dyn Layer>) = guard::run(|| match kind {
            "RNN" => {
                let l = Arc::new(Rnn::new(input_size, hidden_size).num_layers(num_layers));
                (RecurrentKind::Rnn(l.clone()), l as Arc<dyn Layer>)
            }
            "LSTM" => {
                let l = Arc::new(Lstm::new(input_size, hidden_size).num_layers(num_layers));
                (RecurrentKind::Lstm(l.clone()), l as Arc<dyn Layer>)
            }
            _ => {
                let l = Arc::new(Gru::new(input_size, hidden_size).num_layers(num_layers));
                (RecurrentKind::Gru(l.clone()), l as Arc<dyn Layer>)
            }
        })?;
        Ok((PyRecurrent { kind }, PyLayer::new(layer)))
    }
}

#[pymethods]
impl PyRecurrent {
    /// The outputs for every step and the last state.
    #[pyo3(signature = (x, state=None))]
    fn forward_seq<'py>(
        &self,
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        state: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let x = input(x)?;
        let state = state.filter(|s| !s.is_none());
        let wrap = |t: Tensor| Bound::new(py, PyTensor::new(t)).map(Bound::into_any);
        match self.kind.clone() {
            RecurrentKind::Lstm(l) => {
                let s = state
                    .map(|s| -> PyResult<(Tensor, Tensor)> {
                        let (h, c): (Bound<'py, PyAny>, Bound<'py, PyAny>) = s.extract()?;
                        Ok((to_tensor(&h, None)?, to_tensor(&c, None)?))
                    })
                    .transpose()?;
                let (out, (h, c)) =
                    guard::run_heavy(py, x.numel() >= HEAVY, || l.forward_seq(&x, s))?;
                let hc = PyTuple::new(py, [wrap(h)?, wrap(c)?])?.into_any();
                PyTuple::new(py, [wrap(out)?, hc])
            }
            RecurrentKind::Rnn(l) => {
                let h0 = state.map(|s| to_tensor(s, None)).transpose()?;
                let (out, h) = guard::run_heavy(py, x.numel() >= HEAVY, || l.forward_seq(&x, h0))?;
                PyTuple::new(py, [wrap(out)?, wrap(h)?])
            }
            RecurrentKind::Gru(l) => {
                let h0 = state.map(|s| to_tensor(s, None)).transpose()?;
                let (out, h) = guard::run_heavy(py, x.numel() >= HEAVY, || l.forward_seq(&x, h0))?;
                PyTuple::new(py, [wrap(out)?, wrap(h)?])
            }
        }
    }
}

macro_rules! recurrent_class {
    ($(#[$doc:meta])* $rust:ident, $py:literal) => {
        $(#[$doc])*
        #[pyclass(name = $py, module = "ferrograd.nn", extends = PyRecurrent)]
        pub struct $rust;

        #[pymethods]
        impl $rust {
            #[new]
            #[pyo3(signature = (input_size, hidden_size, num_layers=1))]
            fn new(input_size: usize, hidden_size: usize, num_layers: usize) -> PyResult<PyClassInitializer<Self>> {
                let (rec, base) = PyRecurrent::build($py, input_size, hidden_size, num_layers)?;
                Ok(PyClassInitializer::from(base).add_subclass(rec).add_subclass($rust))
            }
        }
    };
}

recurrent_class!(/// Elman RNN with tanh.
    PyRNN, "RNN");
recurrent_class!(/// LSTM, gates i, f, g, o.
    PyLSTM, "LSTM");
recurrent_class!(/// GRU, gates r, z, n.
    PyGRU, "GRU");

/// Registers the layer classes on `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyLayer>()?;
    m.add_class::<PyNet>()?;
    m.add_class::<PyDense>()?;
    m.add_class::<PyConv2D>()?;
    m.add_class::<PyConvTranspose2D>()?;
    m.add_class::<PyMaxPool2D>()?;
    m.add_class::<PyAvgPool2D>()?;
    m.add_class::<PyBatchNorm1d>()?;
    m.add_class::<PyBatchNorm2d>()?;
    m.add_class::<PyLayerNorm>()?;
    m.add_class::<PyDropout>()?;
    m.add_class::<PyDropout2d>()?;
    m.add_class::<PyFlatten>()?;
    m.add_class::<PyReshape>()?;
    m.add_class::<PyEmbedding>()?;
    m.add_class::<PyReLU>()?;
    m.add_class::<PySigmoid>()?;
    m.add_class::<PyTanh>()?;
    m.add_class::<PySoftplus>()?;
    m.add_class::<PyGelu>()?;
    m.add_class::<PyLeakyReLU>()?;
    m.add_class::<PyElu>()?;
    m.add_class::<PySoftmax>()?;
    m.add_class::<PyRecurrent>()?;
    m.add_class::<PyRNN>()?;
    m.add_class::<PyLSTM>()?;
    m.add_class::<PyGRU>()?;
    m.add_class::<PyBufferRef>()?;
    Ok(())
}
