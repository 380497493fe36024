//! `ferrograd.nn`: the core's layers as Python classes, `Net` (tinynn's name for a sequence
//! of layers) and the state-dict and safetensors interop of every layer.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ferrograd::nn::{LayerNorm, Module, RngStream};
use ferrograd::prelude::*;
use pyo3::exceptions::{
    PyAttributeError, PyIndexError, PyNotImplementedError, PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::autograd::{leaf_of, wrap_param};
use crate::convert::{to_tensor, LastAxis, Padding, Size2};
use crate::guard::{self, core_error, HEAVY};
use crate::printing::{py_bool, py_float, py_pair, py_size, tree_repr};
use crate::tensor::{PyTensor, WriteBack};
use crate::value::Leaf;

/// Base class of every layer: `layer(x)` runs it in training mode unless `eval()` was called.
#[pyclass(name = "Layer", module = "ferrograd.nn", subclass, weakref)]
pub struct PyLayer {
    pub layer: Arc<dyn Layer>,
    training: AtomicBool,
    /// The settings PyTorch prints after the class name, as given to the constructor (None:
    /// the core layer's own name is printed).
    settings: Option<String>,
    /// Whether its sub-layers are Python objects of their own (a `Net`'s), so that the
    /// dotted names belong to them; a built-in layer made of parts (`MultiheadAttention`)
    /// owns all of its parameters.
    lists_children: bool,
    /// The parameters' leaves, held while the layer lives so that backward sets their
    /// `.grad` even when Python holds no other reference to them.
    _leaves: Vec<Arc<Leaf>>,
    /// How `copy.deepcopy` builds a layer like this one when calling its class again with
    /// `made_with` would not do (a `Net` copies its layers through the deepcopy's memo).
    recipe: Option<Recipe>,
    /// The constructor's arguments under PyTorch's attribute names (`in_features`,
    /// `kernel_size`, `p`, ...), read as attributes.
    attributes: Vec<(&'static str, Py<PyAny>)>,
    /// Whether a hook was ever registered (`ferrograd.nn._hooks` holds them): a layer
    /// without one is called without asking Python.
    hooked: AtomicBool,
    /// The constructor's arguments, as given: what a copy or a pickle of the whole layer
    /// calls its class with again (`copy.deepcopy`, `torch.save(model)`).
    pub made_with: Option<Py<PyTuple>>,
}

/// Builds a new Python layer of one class and settings (a constructor and its arguments),
/// given the memo of the `copy.deepcopy` it serves (what a net copies its layers with).
pub type Recipe = Arc<dyn Fn(&Bound<'_, PyAny>) -> PyResult<Py<PyAny>> + Send + Sync>;

/// `to` takes `from`'s parameter and buffer values (their dtypes too) and frozen flags, and
/// each parameter's `.grad`.
pub fn copy_state(from: &dyn Layer, to: &dyn Layer) {
    let (names, others) = (from.state_params(), to.state_params());
    assert!(
        names
            .iter()
            .map(|(n, _)| n)
            .eq(others.iter().map(|(n, _)| n)),
        "deepcopy: the layer built again has other parameters than the original"
    );
    for ((_, src), (_, dst)) in names.into_iter().zip(others) {
        let value = src.tensor().detach();
        dst.set_dtype(value.dtype());
        dst.set(&value);
        dst.set_frozen(src.is_frozen());
    }
    for ((_, src), (_, dst)) in from.params().iter().zip(to.params()) {
        leaf_of(&dst).set_grad(leaf_of(src).grad());
    }
}

impl PyLayer {
    /// A hook of `kind` kept by `ferrograd.nn._hooks`. A class with a call of its own (the
    /// recurrent layers, attention, the losses) refuses hooks rather than skip them.
    fn register_hook(
        slf: &Bound<'_, Self>,
        kind: &str,
        hook: &Bound<'_, PyAny>,
        prepend: bool,
        with_kwargs: bool,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let own_call = slf.get_type().getattr("__call__")?;
        let base_call = py.get_type::<PyLayer>().getattr("__call__")?;
        if !own_call.is(&base_call) && !slf.hasattr("_calls_hooks")? {
            return Err(unsupported(&format!(
                "a {kind} hook on {}",
                slf.get_type().name()?
            )));
        }
        let hooks = py.import("ferrograd.nn._hooks")?;
        let handle = hooks
            .getattr("register")?
            .call1((slf, kind, hook, prepend, with_kwargs))?;
        slf.borrow().hooked.store(true, Ordering::Relaxed);
        Ok(handle.unbind())
    }

    /// A call of a layer whose class has a call of its own (and `_calls_hooks`), made
    /// through its hooks when it has any: `None` when it has none, to be run directly.
    pub fn through_hooks<'py>(
        slf: &Bound<'py, PyAny>,
        args: Bound<'py, PyTuple>,
        kwargs: Bound<'py, PyDict>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let hooked = slf
            .cast::<PyLayer>()?
            .borrow()
            .hooked
            .load(Ordering::Relaxed);
        if !hooked {
            return Ok(None);
        }
        let hooks = slf.py().import("ferrograd.nn._hooks")?;
        hooks.getattr("call")?.call1((slf, args, kwargs)).map(Some)
    }

    pub fn new(layer: Arc<dyn Layer>) -> PyLayer {
        let leaves = layer.params().iter().map(|(_, p)| leaf_of(p)).collect();
        PyLayer {
            layer,
            training: AtomicBool::new(true),
            settings: None,
            lists_children: false,
            _leaves: leaves,
            recipe: None,
            attributes: Vec::new(),
            hooked: AtomicBool::new(false),
            made_with: None,
        }
    }

    /// The layer with the constructor arguments that build it again when unpickled.
    pub fn made_with(self, args: Bound<'_, PyTuple>) -> PyLayer {
        PyLayer {
            made_with: Some(args.unbind()),
            ..self
        }
    }

    /// The layer with its constructor's arguments readable as attributes.
    pub fn with_attributes(self, attributes: Vec<(&'static str, Py<PyAny>)>) -> PyLayer {
        PyLayer { attributes, ..self }
    }

    /// The layer with the recipe that builds another like it.
    pub fn rebuilt_by(self, recipe: Recipe) -> PyLayer {
        PyLayer {
            recipe: Some(recipe),
            ..self
        }
    }

    /// `copy.deepcopy`: a layer of the same class, settings and mode built by the recipe,
    /// then given this one's values, dtypes, frozen flags and gradients. Its parameters are
    /// its own; their first values are drawn from the generator as any new layer's are, then
    /// replaced. A parameter that this deepcopy met before (in `memo`: a weight tied to a
    /// layer copied earlier) stays shared with that copy.
    pub fn deep_copy(slf: &Bound<'_, PyLayer>, memo: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let (recipe, made_with, from, training) = {
            let this = slf.borrow();
            (
                this.recipe.clone(),
                this.made_with.as_ref().map(|a| a.clone_ref(py)),
                this.layer.clone(),
                this.mode() == Mode::Train,
            )
        };
        // A layer made by its constructor is made again by it, from the same arguments.
        let copy = match (recipe, made_with) {
            (Some(recipe), _) => recipe(memo)?,
            (None, Some(args)) => slf.get_type().call1(args.bind(py))?.unbind(),
            (None, None) => {
                return Err(PyTypeError::new_err(format!(
                    "cannot deepcopy this {}: it was not built by its constructor",
                    slf.get_type().name()?
                )))
            }
        };
        let mut layer = copy.bind(py).cast::<PyLayer>()?.borrow_mut();
        let sizes = guard::run(|| from.params())?
            .into_iter()
            .map(|(name, p)| (name, p.tensor()));
        layer.take_sizes(sizes)?;
        let to = layer.layer.clone();
        guard::run(|| copy_state(&*from, &*to))?;
        layer.set_training(training);
        drop(to);
        layer.share_as_before(&*from, memo)?;
        drop(layer);
        Ok(copy)
    }

    /// Gives this new layer a parameter of its own of the size of each of `values` whose
    /// size differs from its parameter of that name (a parameter replaced by one of another
    /// size before the layer was copied or pickled); the values themselves are set later.
    pub fn take_sizes(&mut self, values: impl Iterator<Item = (String, Tensor)>) -> PyResult<()> {
        let ours: HashMap<String, Param> =
            guard::run(|| self.layer.params())?.into_iter().collect();
        for (name, value) in values {
            let differs = ours.get(&name).is_some_and(|p| p.shape() != value.shape());
            if !differs {
                continue;
            }
            let layer = Arc::get_mut(&mut self.layer).ok_or_else(|| {
                PyValueError::new_err(format!("cannot resize {name} of a shared layer"))
            })?;
            let fresh = Param::new(value.detach().to_dtype(ours[&name].dtype()));
            layer.tie(&name, &fresh).map_err(core_error)?;
        }
        self.refresh_leaves();
        Ok(())
    }

    /// Holds the leaves of the layer's parameters as they are now (after one was replaced).
    fn refresh_leaves(&mut self) {
        self._leaves = self
            .layer
            .params()
            .iter()
            .map(|(_, p)| leaf_of(p))
            .collect();
    }

    /// Ties each parameter of this new copy of `from` to the copy `memo` already holds of the
    /// same parameter, and records the others there (keeping their originals alive in it, as
    /// `copy.deepcopy` does).
    fn share_as_before(&mut self, from: &dyn Layer, memo: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = memo.py();
        let keep = memo.call_method1("setdefault", (memo.as_ptr() as usize, PyList::empty(py)))?;
        let originals = guard::run(|| from.params())?;
        for ((name, src), (_, dst)) in originals.iter().zip(guard::run(|| self.layer.params())?) {
            let original = wrap_param(py, src)?;
            let key = original.as_ptr() as usize;
            keep.call_method1("append", (original,))?;
            let seen = memo.call_method1("get", (key,))?;
            let earlier = seen
                .cast::<PyTensor>()
                .ok()
                .and_then(|t| t.get().leaf_param());
            match earlier.filter(|p| p.id() != dst.id()) {
                Some(p) => {
                    let Some(layer) = Arc::get_mut(&mut self.layer) else {
                        return Err(PyTypeError::new_err(format!(
                            "deepcopy: {name} is shared with a layer copied before, and this \
                             layer cannot share a parameter (only Linear and Embedding can)"
                        )));
                    };
                    layer.tie(name, &p).map_err(core_error)?
                }
                None => memo.set_item(key, wrap_param(py, &dst)?)?,
            }
        }
        self.refresh_leaves();
        Ok(())
    }

    /// The layer printed as `ClassName(settings)`, PyTorch's form.
    pub fn with_settings(self, settings: String) -> PyLayer {
        PyLayer {
            settings: Some(settings),
            ..self
        }
    }

    pub fn settings(&self) -> Option<String> {
        self.settings.clone()
    }

    /// Every entry, or with `recurse` false only this layer's own.
    pub fn own_or_all(&self, named: Vec<(String, Param)>, recurse: bool) -> Vec<(String, Param)> {
        let own = |(n, _): &(String, Param)| recurse || !self.lists_children || !n.contains('.');
        named.into_iter().filter(own).collect()
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

/// A layer's buffer as Python sees it: its value, updated in place through `zero_()` and
/// the other in-place methods (`bn.running_mean.zero_()`), as PyTorch's buffers are.
pub fn buffer_tensor(b: Param) -> PyTensor {
    PyTensor::new(b.tensor().detach()).writing_to(WriteBack::Buffer(b))
}

/// `name` under `prefix`, joined with a dot as PyTorch joins them (`"fc"` and `"weight"` give
/// `"fc.weight"`).
pub fn joined(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
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

    fn __call__(slf: &Bound<'_, Self>, x: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        if slf.borrow().hooked.load(Ordering::Relaxed) {
            let hooks = py.import("ferrograd.nn._hooks")?;
            let args = PyTuple::new(py, [x])?;
            return Ok(hooks
                .getattr("call")?
                .call1((slf, args, py.None()))?
                .unbind());
        }
        let out = slf.borrow().forward(py, x)?;
        Ok(Bound::new(py, out)?.into_any().unbind())
    }

    /// PyTorch's `register_forward_pre_hook`: `hook(module, args)` runs before each call
    /// and may return new arguments. Returns a handle whose `remove()` takes it away.
    #[pyo3(signature = (hook, *, prepend=false, with_kwargs=false))]
    fn register_forward_pre_hook(
        slf: &Bound<'_, Self>,
        hook: &Bound<'_, PyAny>,
        prepend: bool,
        with_kwargs: bool,
    ) -> PyResult<Py<PyAny>> {
        Self::register_hook(slf, "forward_pre", hook, prepend, with_kwargs)
    }

    /// PyTorch's `register_forward_hook`: `hook(module, args, output)` runs after each call
    /// and may return a new output.
    #[pyo3(signature = (hook, *, prepend=false, with_kwargs=false, always_call=false))]
    fn register_forward_hook(
        slf: &Bound<'_, Self>,
        hook: &Bound<'_, PyAny>,
        prepend: bool,
        with_kwargs: bool,
        always_call: bool,
    ) -> PyResult<Py<PyAny>> {
        let _ = always_call;
        Self::register_hook(slf, "forward", hook, prepend, with_kwargs)
    }

    /// PyTorch's `register_full_backward_hook`: `hook(module, grad_input, grad_output)` runs
    /// when the gradients of the call's inputs are known, and may return new ones.
    #[pyo3(signature = (hook, prepend=false))]
    fn register_full_backward_hook(
        slf: &Bound<'_, Self>,
        hook: &Bound<'_, PyAny>,
        prepend: bool,
    ) -> PyResult<Py<PyAny>> {
        Self::register_hook(slf, "backward", hook, prepend, false)
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
    #[pyo3(signature = (recurse=true))]
    fn parameters<'py>(&self, py: Python<'py>, recurse: bool) -> PyResult<Bound<'py, PyList>> {
        let ps: Vec<Py<PyAny>> = self
            .own_or_all(guard::run(|| self.layer.params())?, recurse)
            .iter()
            .map(|(_, p)| wrap_param(py, p))
            .collect::<PyResult<_>>()?;
        PyList::new(py, ps)
    }

    /// `(name, parameter)` pairs; nested layers are named `"0.weight"`, as PyTorch's, after
    /// `prefix`. A parameter is listed once (the core's layers never repeat one).
    #[pyo3(signature = (prefix="", recurse=true, remove_duplicate=true))]
    fn named_parameters<'py>(
        &self,
        py: Python<'py>,
        prefix: &str,
        recurse: bool,
        remove_duplicate: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let _ = remove_duplicate;
        let ps: Vec<(String, Py<PyAny>)> = self
            .own_or_all(guard::run(|| self.layer.params())?, recurse)
            .into_iter()
            .map(|(n, p)| Ok((joined(prefix, &n), wrap_param(py, &p)?)))
            .collect::<PyResult<_>>()?;
        PyList::new(py, ps)
    }

    /// The parameters by name (tinynn's `layer.params`).
    #[getter]
    fn params<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        named_params(py, guard::run(|| self.layer.params())?)
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
    /// converted with `.numpy()`), a float value cast to its parameter's float dtype as
    /// PyTorch's `copy_` casts it. Every shape must match, and with `strict` every name, or
    /// nothing changes and the error names each offending key. Returns PyTorch's
    /// `(missing_keys, unexpected_keys)`.
    #[pyo3(signature = (state, strict=true))]
    fn load_state_dict<'py>(
        &self,
        state: &Bound<'py, PyDict>,
        strict: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let dtypes: HashMap<String, DType> = guard::run(|| self.layer.state_params())?
            .into_iter()
            .map(|(n, p)| (n, p.dtype()))
            .collect();
        let mut map = HashMap::new();
        for (k, v) in state.iter() {
            let name = k.extract::<String>()?;
            let mut t = to_tensor(&v, None)?;
            if let Some(&d) = dtypes.get(&name) {
                if d.is_float() && t.dtype().is_float() && t.dtype() != d {
                    t = t.to_dtype(d);
                }
            }
            map.insert(name, t);
        }
        let (missing, unexpected) = if strict {
            guard::run(|| self.layer.load_state(&map))?.map_err(core_error)?;
            (Vec::new(), Vec::new())
        } else {
            let report = guard::run(|| self.layer.load_state_partial(&map))?;
            let report = report.map_err(core_error)?;
            (report.missing, report.unexpected)
        };
        let keys = state
            .py()
            .import("ferrograd.nn._module")?
            .getattr("IncompatibleKeys")?;
        keys.call1((missing, unexpected))
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

    /// A parameter or buffer by name (`dense.weight`, `bn.running_mean`); `bias` is None for
    /// a layer without one.
    fn __getattr__(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyAny>> {
        let params = guard::run(|| self.layer.params())?;
        let has_weight = params.iter().any(|(n, _)| n == "weight");
        if let Some((_, p)) = params.into_iter().find(|(n, _)| n == name) {
            return wrap_param(py, &p);
        }
        let buffers = guard::run(|| self.layer.buffers())?;
        match buffers.into_iter().find(|(n, _)| n == name) {
            Some((_, b)) => Ok(Bound::new(py, buffer_tensor(b))?.into_any().unbind()),
            // A weighted layer built without a bias (`Linear(.., bias=False)`): None, as
            // PyTorch's attribute is.
            None if name == "bias" && has_weight => Ok(py.None()),
            None => match self.attributes.iter().find(|(n, _)| *n == name) {
                Some((_, v)) => Ok(v.clone_ref(py)),
                None => Err(PyAttributeError::new_err(format!(
                    "{} has no parameter or attribute {name:?}",
                    guard::run(|| self.layer.name())?
                ))),
            },
        }
    }

    /// `layer.weight = other.weight` ties the two (PyTorch's weight tying): the layer's own
    /// parameter becomes the given one, shared from then on. A layer has no other attribute
    /// to set.
    fn __setattr__(
        mut slf: PyRefMut<'_, Self>,
        name: &str,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let owns = guard::run(|| slf.layer.params())?
            .iter()
            .any(|(n, _)| n == name);
        if !owns {
            // The layers keep no other attributes (no `__dict__`), as before this method.
            return Err(PyAttributeError::new_err(format!(
                "'{}' object has no attribute '{name}' to set",
                slf.into_pyobject(value.py())?.get_type().name()?
            )));
        }
        let Some(param) = value
            .cast::<PyTensor>()
            .ok()
            .and_then(|t| t.get().leaf_param())
        else {
            return Err(PyTypeError::new_err(format!(
                "{name} takes a parameter (a trainable tensor, such as another layer's weight), \
                 got {}",
                value.get_type().name()?
            )));
        };
        let Some(layer) = Arc::get_mut(&mut slf.layer) else {
            return Err(PyValueError::new_err(format!(
                "cannot tie {name} while the layer is shared (inside a Sequential or Net, or \
                 running): tie it before putting it into a container"
            )));
        };
        layer.tie(name, &param).map_err(core_error)?;
        slf.refresh_leaves();
        Ok(())
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

/// A `ferrograd.nn.Module` written in Python as a core layer of its own (what `Model` trains
/// when it is given one), its parameters under the module's own names.
pub fn python_module_layer(module: &Bound<'_, PyAny>) -> PyResult<PyLayer> {
    if !(module.hasattr("forward")? && module.hasattr("named_parameters")?) {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "expected a ferrograd layer or a ferrograd.nn.Module, got {}",
            module.get_type().name()?
        )));
    }
    let layer = PythonLayer(module.clone().unbind());
    guard::run(|| PyLayer::new(Arc::new(layer)))
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
    fn new(py: Python<'_>, layers: Vec<Bound<'_, PyAny>>) -> PyResult<PyClassInitializer<PyNet>> {
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
        // A copy is a net of copies of the layers.
        let children: Vec<Py<PyAny>> = net.layers.iter().map(|l| l.clone_ref(py)).collect();
        let recipe: Recipe = Arc::new(move |memo: &Bound<'_, PyAny>| {
            let py = memo.py();
            let deepcopy = py.import("copy")?.getattr("deepcopy")?;
            let copies = children
                .iter()
                .map(|l| deepcopy.call1((l.bind(py), memo)))
                .collect::<PyResult<Vec<_>>>()?;
            Ok(Py::new(py, PyNet::new(py, copies)?)?.into_any())
        });
        // A Python layer's parameters are read here, and it may raise.
        let listed = PyList::new(py, net.layers.iter().map(|l| l.clone_ref(py)))?;
        let mut base = guard::run(|| PyLayer::new(Arc::new(Net::new(shared))))?
            .rebuilt_by(recipe)
            .made_with(PyTuple::new(py, [listed])?);
        base.lists_children = true;
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

    /// `("0", layer)`, `("1", layer)`, ...: the layers under their state-dict names.
    fn named_children(&self, py: Python<'_>) -> Vec<(String, Py<PyAny>)> {
        let layers = self.layers.iter().enumerate();
        layers
            .map(|(i, l)| (i.to_string(), l.clone_ref(py)))
            .collect()
    }

    /// The tree of layers, as PyTorch prints a `Sequential`.
    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let py = slf.py();
        let layers: Vec<Py<PyAny>> = slf
            .borrow()
            .layers
            .iter()
            .map(|l| l.clone_ref(py))
            .collect();
        let mut children = Vec::new();
        for (i, l) in layers.iter().enumerate() {
            children.push((i.to_string(), l.bind(py).repr()?.to_string()));
        }
        Ok(tree_repr(
            &slf.get_type().name()?.to_string(),
            "",
            &children,
        ))
    }
}

/// A setting PyTorch has and ferrograd's layer does not, refused by name.
pub fn unsupported(what: &str) -> PyErr {
    PyNotImplementedError::new_err(format!("{what} is not supported"))
}

/// A convolution's settings, printed as PyTorch prints them: channels, kernel and stride
/// always, the rest only where they differ from the defaults.
struct ConvSettings {
    channels: [usize; 2],
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: Padding,
    output_padding: [usize; 2],
    dilation: [usize; 2],
    groups: usize,
    bias: bool,
}

fn conv_settings(c: ConvSettings) -> String {
    let [cin, cout] = c.channels;
    let mut s = format!(
        "{cin}, {cout}, kernel_size={}, stride={}",
        py_pair(c.kernel),
        py_pair(c.stride)
    );
    match c.padding {
        Padding::Same => s.push_str(", padding=same"),
        Padding::Valid => s.push_str(", padding=valid"),
        Padding::Sizes([0, 0]) => {}
        Padding::Sizes(p) => s.push_str(&format!(", padding={}", py_pair(p))),
    }
    if c.output_padding != [0, 0] {
        s.push_str(&format!(", output_padding={}", py_pair(c.output_padding)));
    }
    if c.dilation != [1, 1] {
        s.push_str(&format!(", dilation={}", py_pair(c.dilation)));
    }
    if c.groups != 1 {
        s.push_str(&format!(", groups={}", c.groups));
    }
    if !c.bias {
        s.push_str(", bias=False");
    }
    s
}

/// Batch norm's momentum, once the settings ferrograd does not have are refused.
fn batch_norm_momentum(momentum: Option<f64>, affine: bool, track: bool) -> PyResult<f64> {
    match (momentum, affine, track) {
        (Some(m), true, true) => Ok(m),
        (None, ..) => Err(unsupported(
            "batch norm with momentum=None (a cumulative average)",
        )),
        (_, false, _) => Err(unsupported("batch norm with affine=False")),
        (_, _, false) => Err(unsupported("batch norm with track_running_stats=False")),
    }
}

fn batch_norm_settings(features: usize, eps: f64, momentum: Option<f64>) -> String {
    format!(
        "{features}, eps={}, momentum={}, affine=True, bias=True, track_running_stats=True",
        py_float(eps),
        momentum.map_or("None".into(), py_float)
    )
}

/// PyTorch's `Flatten(start_dim, end_dim)`: the axes from `start_dim` to `end_dim`
/// (negative counts from the end) merged into one.
struct FlattenAxes(isize, isize);

impl Module for FlattenAxes {
    fn name(&self) -> String {
        format!("Flatten({}, {})", self.0, self.1)
    }
}

impl Layer for FlattenAxes {
    fn forward(&self, x: &Tensor, _: Mode) -> Tensor {
        let n = x.ndim().max(1) as isize;
        let at = |d: isize| if d < 0 { d + n } else { d };
        let (start, end) = (at(self.0), at(self.1));
        assert!(
            (0..n).contains(&start) && (0..n).contains(&end) && start <= end,
            "Flatten: start_dim {} and end_dim {} do not fit input {:?}",
            self.0,
            self.1,
            x.shape()
        );
        let (start, end) = (start as usize, end as usize);
        let shape = x.shape();
        let mut out = shape[..start.min(shape.len())].to_vec();
        out.push(shape.get(start..=end).map_or(1, |s| s.iter().product()));
        out.extend(shape.get(end + 1..).unwrap_or(&[]));
        x.reshape(&out)
    }
}

/// Softmax or log-softmax along a signed axis (PyTorch's `dim`, -1 for the last); without
/// one, PyTorch's old choice by the input's rank (axis 0 for 0-, 1- and 3-d input, else 1).
struct SoftmaxAlong {
    dim: Option<isize>,
    log: bool,
}

impl Module for SoftmaxAlong {
    fn name(&self) -> String {
        let kind = if self.log { "LogSoftmax" } else { "Softmax" };
        let dim = self.dim.map_or("None".to_string(), |d| d.to_string());
        format!("{kind}(dim={dim})")
    }
}

impl Layer for SoftmaxAlong {
    fn forward(&self, x: &Tensor, _: Mode) -> Tensor {
        if x.ndim() == 0 {
            // One element: its softmax is 1 (its log 0), as PyTorch's.
            return self.forward(&x.unsqueeze(0), Mode::Eval).squeeze(0);
        }
        let n = x.ndim() as isize;
        let dim = self.dim.unwrap_or(if matches!(n, 1 | 3) { 0 } else { 1 });
        assert!(
            (-n..n).contains(&dim),
            "{}: input {:?} has no axis {dim}",
            self.name(),
            x.shape()
        );
        if self.log {
            x.log_softmax(dim)
        } else {
            x.softmax(dim)
        }
    }
}

/// Declares a layer class: its Python name, constructor signature and how it builds the
/// core layer.
macro_rules! layer_class {
    ($(#[$doc:meta])* $rust:ident, $py:literal, $sig:tt, ($($arg:ident: $ty:ty),*) => $build:expr,
     settings: $settings:expr $(, attributes: $attrs:expr)?) => {
        $(#[$doc])*
        #[pyclass(name = $py, module = "ferrograd.nn", extends = PyLayer)]
        pub struct $rust;

        #[pymethods]
        impl $rust {
            #[new]
            #[pyo3(signature = $sig)]
            #[allow(clippy::too_many_arguments)]
            fn new(py: Python<'_>, $($arg: $ty),*) -> PyResult<PyClassInitializer<Self>> {
                let _ = py; // (layers without arguments keep no attributes)
                let settings: String = $settings;
                #[allow(unused_mut)]
                let mut attributes: Vec<(&'static str, Py<PyAny>)> = vec![$(
                    (stringify!($arg), pyo3::IntoPyObjectExt::into_py_any($arg.clone(), py)?)
                ),*];
                // Where PyTorch keeps an argument otherwise than as given (normalised, or a
                // default filled in), the class says so.
                $(
                    let overrides: Vec<(&'static str, Py<PyAny>)> = ($attrs)(py)?;
                    for (name, value) in overrides {
                        attributes.retain(|(n, _)| *n != name);
                        attributes.push((name, value));
                    }
                )?
                let args = PyTuple::new(py, [$(
                    pyo3::IntoPyObjectExt::into_py_any($arg.clone(), py)?
                ),*].into_iter().collect::<Vec<Py<PyAny>>>())?;
                let layer: Arc<dyn Layer> = guard::run(|| -> PyResult<Arc<dyn Layer>> {
                    Ok(Arc::new($build))
                })??;
                let base = PyLayer::new(layer)
                    .with_settings(settings)
                    .with_attributes(attributes)
                    .made_with(args);
                Ok(PyClassInitializer::from(base).add_subclass($rust))
            }
        }
    };
}

layer_class!(
    /// `Dense(in_features, out_features, bias=True)`: `x @ weight.T + bias`, weight
    /// `[out, in]`, tinynn's initialisation (Xavier weights, zero bias); `bias=False` leaves
    /// the bias out. `Linear` is the same layer initialised as PyTorch's.
    PyDense, "Dense", (in_features, out_features, bias=true),
    (in_features: usize, out_features: usize, bias: bool)
        => {
            let d = Dense::new(in_features, out_features);
            if bias { d } else { d.without_bias() }
        },
    settings: format!("in_features={in_features}, out_features={out_features}, bias={}", py_bool(bias))
);
layer_class!(
    /// `Linear(in_features, out_features, bias=True)`, PyTorch's `nn.Linear`: `Dense` with
    /// weight and bias drawn from U(±1/√in_features), as PyTorch draws them.
    PyLinear, "Linear", (in_features, out_features, bias=true),
    (in_features: usize, out_features: usize, bias: bool)
        => {
            let d = Dense::linear(in_features, out_features);
            if bias { d } else { d.without_bias() }
        },
    settings: format!("in_features={in_features}, out_features={out_features}, bias={}", py_bool(bias))
);
layer_class!(
    /// `Conv2D(in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
    /// groups=1, bias=True)`, NCHW, weight `[out, in/groups, kh, kw]`. Sizes are an int or a
    /// pair `(height, width)`; `padding` may be `"same"` or `"valid"`, as PyTorch's.
    PyConv2D, "Conv2d",
    (in_channels, out_channels, kernel_size, stride=Size2([1, 1]), padding=Padding::Sizes([0, 0]),
     dilation=Size2([1, 1]), groups=1, bias=true),
    (in_channels: usize, out_channels: usize, kernel_size: Size2, stride: Size2, padding: Padding,
     dilation: Size2, groups: usize, bias: bool)
        => {
            let ([kh, kw], [sh, sw], [dh, dw]) = (kernel_size.0, stride.0, dilation.0);
            let c = Conv2d::new_hw(in_channels, out_channels, kh, kw)
                .stride_hw(sh, sw).dilation_hw(dh, dw).groups(groups);
            let c = match padding.sizes() {
                Some([ph, pw]) => c.padding_hw(ph, pw),
                None => c.padding_same(),
            };
            if bias { c } else { c.without_bias() }
        },
    settings: conv_settings(ConvSettings {
        channels: [in_channels, out_channels], kernel: kernel_size.0, stride: stride.0,
        padding, output_padding: [0, 0], dilation: dilation.0, groups, bias,
    })
);
layer_class!(
    /// `ConvTranspose2D(in_channels, out_channels, kernel_size, stride=1, padding=0,
    /// output_padding=0, dilation=1, groups=1, bias=True)`, weight `[in, out/groups, kh, kw]`;
    /// sizes are an int or a pair `(height, width)`.
    PyConvTranspose2D, "ConvTranspose2d",
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
        },
    settings: conv_settings(ConvSettings {
        channels: [in_channels, out_channels], kernel: kernel_size.0, stride: stride.0,
        padding: Padding::Sizes(padding.0), output_padding: output_padding.0,
        dilation: dilation.0, groups, bias,
    })
);
layer_class!(
    /// `MaxPool2D(kernel_size, stride=kernel_size, padding=0)`; sizes an int or a pair.
    PyMaxPool2D, "MaxPool2d", (kernel_size, stride=None, padding=Size2([0, 0])),
    (kernel_size: Size2, stride: Option<Size2>, padding: Size2)
        => {
            let ([kh, kw], [sh, sw], [ph, pw]) = (kernel_size.0, stride.unwrap_or(kernel_size).0, padding.0);
            MaxPool2d::new(1, 1).kernel_hw(kh, kw).stride_hw(sh, sw).padding_hw(ph, pw)
        },
    settings: format!(
        "kernel_size={}, stride={}, padding={}, dilation=1, ceil_mode=False",
        py_size(kernel_size.0), py_size(stride.unwrap_or(kernel_size).0), py_size(padding.0)
    ),
    attributes: |py| pool_attributes(py, kernel_size, stride, padding, true)
);
layer_class!(
    /// `AvgPool2D(kernel_size, stride=kernel_size, padding=0)` (padding counted, as
    /// PyTorch's default); sizes an int or a pair.
    PyAvgPool2D, "AvgPool2d", (kernel_size, stride=None, padding=Size2([0, 0])),
    (kernel_size: Size2, stride: Option<Size2>, padding: Size2)
        => {
            let ([kh, kw], [sh, sw], [ph, pw]) = (kernel_size.0, stride.unwrap_or(kernel_size).0, padding.0);
            AvgPool2d::new(1, 1).kernel_hw(kh, kw).stride_hw(sh, sw).padding_hw(ph, pw)
        },
    settings: format!(
        "kernel_size={}, stride={}, padding={}",
        py_size(kernel_size.0), py_size(stride.unwrap_or(kernel_size).0), py_size(padding.0)
    ),
    attributes: |py| pool_attributes(py, kernel_size, stride, padding, false)
);
layer_class!(
    /// `BatchNorm1d(num_features, eps=1e-05, momentum=0.1, affine=True,
    /// track_running_stats=True)` over `[N, C]` or `[N, C, L]`, as PyTorch's.
    PyBatchNorm1d, "BatchNorm1d",
    (num_features, eps=1e-5, momentum=Some(0.1), affine=true, track_running_stats=true),
    (num_features: usize, eps: f64, momentum: Option<f64>, affine: bool, track_running_stats: bool)
        => BatchNorm1d::with_options(
            num_features, batch_norm_momentum(momentum, affine, track_running_stats)?, eps),
    settings: batch_norm_settings(num_features, eps, momentum)
);
layer_class!(
    /// `BatchNorm2d(num_features, eps=1e-05, momentum=0.1, affine=True,
    /// track_running_stats=True)` over NCHW channels, as PyTorch's.
    PyBatchNorm2d, "BatchNorm2d",
    (num_features, eps=1e-5, momentum=Some(0.1), affine=true, track_running_stats=true),
    (num_features: usize, eps: f64, momentum: Option<f64>, affine: bool, track_running_stats: bool)
        => BatchNorm2d::with_options(
            num_features, batch_norm_momentum(momentum, affine, track_running_stats)?, eps),
    settings: batch_norm_settings(num_features, eps, momentum)
);
layer_class!(
    /// `LayerNorm(normalized_shape, eps=1e-05, elementwise_affine=True, bias=True)` over the
    /// last axis (`normalized_shape` an int or a one-element tuple).
    PyLayerNorm, "LayerNorm", (normalized_shape, eps=1e-5, elementwise_affine=true, bias=true),
    (normalized_shape: LastAxis, eps: f64, elementwise_affine: bool, bias: bool)
        => {
            if !elementwise_affine {
                return Err(unsupported("LayerNorm without its weight and bias"));
            }
            let l = LayerNorm::new(normalized_shape.0).eps(eps);
            if bias { l } else { l.without_bias() }
        },
    settings: format!(
        "({},), eps={}, elementwise_affine={}, bias={}",
        normalized_shape.0, py_float(eps), py_bool(elementwise_affine), py_bool(bias)
    )
);
layer_class!(
    /// `Dropout(p=0.5)`: zeroes elements with probability `p` in training mode (`inplace` is
    /// accepted: tensors are values, so the result is the same).
    PyDropout, "Dropout", (p=0.5, inplace=false), (p: f64, inplace: bool) => Dropout::new(p),
    settings: format!("p={}, inplace={}", py_float(p), py_bool(inplace))
);
layer_class!(
    /// `Dropout2d(p=0.5)`: zeroes whole channels.
    PyDropout2d, "Dropout2d", (p=0.5, inplace=false), (p: f64, inplace: bool) => Dropout2d::new(p),
    settings: format!("p={}, inplace={}", py_float(p), py_bool(inplace))
);
layer_class!(
    /// `Flatten(start_dim=1, end_dim=-1)`: axes `start_dim..=end_dim` merged into one.
    PyFlatten, "Flatten", (start_dim=1, end_dim=-1), (start_dim: isize, end_dim: isize)
        => FlattenAxes(start_dim, end_dim),
    settings: format!("start_dim={start_dim}, end_dim={end_dim}")
);
layer_class!(
    /// `Reshape(shape)`: each sample to `shape` (the batch axis kept).
    PyReshape, "Reshape", (shape), (shape: Vec<usize>) => Reshape::new(&shape),
    settings: format!("{shape:?}")
);
layer_class!(
    /// `Embedding(num_embeddings, embedding_dim, padding_idx=None)`: rows of a table by
    /// int64 index, drawn from N(0, 1) as PyTorch's; the row `padding_idx` (negative counts
    /// from the end) starts at zeros and gets no gradient.
    PyEmbedding, "Embedding", (num_embeddings, embedding_dim, padding_idx=None),
    (num_embeddings: usize, embedding_dim: usize, padding_idx: Option<isize>)
        => {
            let e = Embedding::new(num_embeddings, embedding_dim);
            match padding_idx {
                None => e,
                Some(p) => e.padding_idx(padding_row(p, num_embeddings)?),
            }
        },
    settings: match padding_idx {
        // PyTorch prints the row a negative index names.
        Some(p) => format!(
            "{num_embeddings}, {embedding_dim}, padding_idx={}",
            if p < 0 { p + num_embeddings as isize } else { p }
        ),
        None => format!("{num_embeddings}, {embedding_dim}"),
    },
    attributes: |py| -> PyResult<Vec<(&'static str, Py<PyAny>)>> {
        use pyo3::IntoPyObjectExt;
        // PyTorch keeps the row a negative index names.
        let row = padding_idx.map(|p| if p < 0 { p + num_embeddings as isize } else { p });
        Ok(vec![("padding_idx", row.into_py_any(py)?)])
    }
);

/// A pooling layer's sizes as PyTorch keeps them: one int where both axes agree, the stride
/// the kernel's size when not given; with `dilation` and `ceil_mode` for max pooling, and
/// PyTorch's averaging switches for average pooling.
fn pool_attributes(
    py: Python<'_>,
    kernel_size: Size2,
    stride: Option<Size2>,
    padding: Size2,
    max: bool,
) -> PyResult<Vec<(&'static str, Py<PyAny>)>> {
    use pyo3::IntoPyObjectExt;
    let size = |s: Size2| -> PyResult<Py<PyAny>> {
        match s.0 {
            [h, w] if h == w => h.into_py_any(py),
            hw => Ok(PyTuple::new(py, hw)?.into_any().unbind()),
        }
    };
    let mut out = vec![
        ("kernel_size", size(kernel_size)?),
        ("stride", size(stride.unwrap_or(kernel_size))?),
        ("padding", size(padding)?),
        ("ceil_mode", false.into_py_any(py)?),
    ];
    if max {
        out.push(("dilation", 1usize.into_py_any(py)?));
    } else {
        out.push(("count_include_pad", true.into_py_any(py)?));
    }
    Ok(out)
}

/// PyTorch's `padding_idx` as a row: negative ones count from the end.
fn padding_row(p: isize, rows: usize) -> PyResult<usize> {
    let row = if p < 0 { p + rows as isize } else { p };
    usize::try_from(row)
        .ok()
        .filter(|&r| r < rows)
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "Embedding: padding_idx {p} must be within num_embeddings ({rows})"
            ))
        })
}
layer_class!(/// max(x, 0).
    PyReLU, "ReLU", (inplace=false), (inplace: bool) => Relu::new(),
    settings: if inplace { "inplace=True".into() } else { String::new() });
layer_class!(/// 1 / (1 + e⁻ˣ).
    PySigmoid, "Sigmoid", (), () => Sigmoid::new(), settings: String::new());
layer_class!(/// tanh x.
    PyTanh, "Tanh", (), () => Tanh::new(), settings: String::new());
layer_class!(/// x · sigmoid(x).
    PySiLU, "SiLU", (inplace=false), (inplace: bool) => Silu::new(),
    settings: if inplace { "inplace=True".into() } else { String::new() });
layer_class!(/// The input itself.
    PyIdentity, "Identity", (), () => Identity::new(),
    settings: String::new());
layer_class!(/// ln(1 + eˣ) (PyTorch's `beta=1`; above `threshold` the value is x in float32 anyway).
    PySoftplus, "Softplus", (beta=1.0, threshold=20.0), (beta: f64, threshold: f64)
        => {
            if beta != 1.0 {
                return Err(unsupported("Softplus with beta other than 1"));
            }
            Softplus::new()
        },
    settings: format!("beta={}, threshold={}", py_float(beta), py_float(threshold)));
layer_class!(/// x Φ(x), or its tanh approximation with `approximate="tanh"`.
    PyGelu, "GELU", (approximate="none".to_string()), (approximate: String)
        => {
            let gelu: Box<dyn Layer> = match approximate.as_str() {
                "none" => Box::new(Gelu::new()),
                "tanh" => Box::new(GeluTanh::new()),
                other => return Err(PyValueError::new_err(format!(
                    "GELU: approximate={other:?}, expected 'none' or 'tanh'"))),
            };
            gelu
        },
    settings: format!("approximate={approximate:?}").replace('"', "'"));
layer_class!(/// x for x > 0, `negative_slope`·x below.
    PyLeakyReLU, "LeakyReLU", (negative_slope=0.01, inplace=false), (negative_slope: f64, inplace: bool)
        => LeakyRelu::new(negative_slope),
    settings: format!("negative_slope={}{}", py_float(negative_slope), if inplace { ", inplace=True" } else { "" }));
layer_class!(/// x for x > 0, α(eˣ − 1) below.
    PyElu, "ELU", (alpha=1.0, inplace=false), (alpha: f64, inplace: bool) => Elu::new(alpha),
    settings: format!("alpha={}{}", py_float(alpha), if inplace { ", inplace=True" } else { "" }));
layer_class!(/// Softmax along `dim` (negative counts from the end; `axis` is tinynn's name; 1 when
    /// neither is given, PyTorch's choice for 2-d and 4-d input).
    PySoftmax, "Softmax", (dim=None, axis=None), (dim: Option<isize>, axis: Option<isize>)
        => SoftmaxAlong { dim: dim.or(axis), log: false },
    settings: format!("dim={}", dim.or(axis).map_or("None".into(), |d| d.to_string())));
layer_class!(/// Log-softmax along `dim` (negative counts from the end).
    PyLogSoftmax, "LogSoftmax", (dim=None), (dim: Option<isize>)
        => SoftmaxAlong { dim, log: true },
    settings: format!("dim={}", dim.map_or("None".into(), |d| d.to_string())));

/// Recurrent layers: `RNN`, `LSTM`, `GRU`, as PyTorch's: gate order and parameter names, the
/// layout `[T, N, F]` unless `batch_first` (or `[T, F]` for one unbatched sequence), and what a
/// call returns, `(output, h_n)` or, for the LSTM, `(output, (h_n, c_n))`, the states
/// `[num_layers, N, H]`. Inside a `Net` a recurrent layer passes on its output alone.
#[pyclass(name = "Recurrent", module = "ferrograd.nn", extends = PyLayer, subclass)]
pub struct PyRecurrent {
    kind: RecurrentKind,
    batch_first: bool,
}

#[derive(Clone)]
enum RecurrentKind {
    Rnn(Arc<Rnn>),
    Lstm(Arc<Lstm>),
    Gru(Arc<Gru>),
}

/// The constructor arguments that PyTorch's three recurrent layers share.
struct RecurrentArgs {
    input_size: usize,
    hidden_size: usize,
    num_layers: usize,
    bias: bool,
    batch_first: bool,
    dropout: f64,
    bidirectional: bool,
    /// ReLU instead of tanh (the RNN's `nonlinearity='relu'`).
    relu: bool,
}

impl RecurrentArgs {
    /// PyTorch's range for the dropout between layers (it does nothing in a single layer,
    /// where PyTorch only warns).
    fn check(&self) -> PyResult<()> {
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(PyValueError::new_err(format!(
                "dropout should be a number in range [0, 1) representing the probability of an \
                 element being zeroed, got {}",
                self.dropout
            )));
        }
        Ok(())
    }

    /// The arguments as the layer's attributes, PyTorch's names (`hidden_size`, ...).
    fn attributes(&self, py: Python<'_>) -> PyResult<Vec<(&'static str, Py<PyAny>)>> {
        use pyo3::IntoPyObjectExt;
        Ok(vec![
            ("input_size", self.input_size.into_py_any(py)?),
            ("hidden_size", self.hidden_size.into_py_any(py)?),
            ("num_layers", self.num_layers.into_py_any(py)?),
            ("bias", self.bias.into_py_any(py)?),
            ("batch_first", self.batch_first.into_py_any(py)?),
            ("dropout", self.dropout.into_py_any(py)?),
            ("bidirectional", self.bidirectional.into_py_any(py)?),
            ("proj_size", 0usize.into_py_any(py)?),
        ])
    }

    /// The settings as PyTorch prints them: sizes, then what differs from the defaults.
    fn settings(&self) -> String {
        let mut s = format!("{}, {}", self.input_size, self.hidden_size);
        if self.num_layers != 1 {
            s.push_str(&format!(", num_layers={}", self.num_layers));
        }
        if !self.bias {
            s.push_str(", bias=False");
        }
        if self.batch_first {
            s.push_str(", batch_first=True");
        }
        if self.dropout != 0.0 {
            s.push_str(&format!(", dropout={}", py_float(self.dropout)));
        }
        if self.bidirectional {
            s.push_str(", bidirectional=True");
        }
        s
    }
}

impl PyRecurrent {
    fn build(
        py: Python<'_>,
        kind: &str,
        a: &RecurrentArgs,
        made_with: Bound<'_, PyTuple>,
    ) -> PyResult<PyClassInitializer<PyRecurrent>> {
        a.check()?;
        let (n, first, both, bias, p) = (
            a.num_layers,
            a.batch_first,
            a.bidirectional,
            a.bias,
            a.dropout,
        );
        let (kind, layer): (RecurrentKind, Arc<dyn Layer>) = guard::run(|| match kind {
            "RNN" => {
                let l = Rnn::new(a.input_size, a.hidden_size)
                    .num_layers(n)
                    .bidirectional(both)
                    .bias(bias)
                    .dropout(p)
                    .relu(a.relu)
                    .batch_first(first);
                let l = Arc::new(l);
                (RecurrentKind::Rnn(l.clone()), l as Arc<dyn Layer>)
            }
            "LSTM" => {
                let l = Lstm::new(a.input_size, a.hidden_size)
                    .num_layers(n)
                    .bidirectional(both)
                    .bias(bias)
                    .dropout(p)
                    .batch_first(first);
                let l = Arc::new(l);
                (RecurrentKind::Lstm(l.clone()), l as Arc<dyn Layer>)
            }
            _ => {
                let l = Gru::new(a.input_size, a.hidden_size)
                    .num_layers(n)
                    .bidirectional(both)
                    .bias(bias)
                    .dropout(p)
                    .batch_first(first);
                let l = Arc::new(l);
                (RecurrentKind::Gru(l.clone()), l as Arc<dyn Layer>)
            }
        })?;
        let base = PyLayer::new(layer)
            .with_settings(a.settings())
            .with_attributes(a.attributes(py)?)
            .made_with(made_with);
        let rec = PyRecurrent {
            kind,
            batch_first: first,
        };
        Ok(PyClassInitializer::from(base).add_subclass(rec))
    }
}

/// A state given from Python as a tensor of a batch: `[L, H]` for an unbatched sequence
/// becomes `[L, 1, H]`.
fn state_in(s: &Bound<'_, PyAny>, unbatched: bool) -> PyResult<Tensor> {
    let t = to_tensor(s, None)?;
    Ok(if unbatched && t.ndim() == 2 {
        t.unsqueeze(1)
    } else {
        t
    })
}

#[pymethods]
impl PyRecurrent {
    /// `(output, h_n)`, or `(output, (h_n, c_n))` for the LSTM, from the initial state `hx`
    /// (`h_0`, or `(h_0, c_0)`; zeros when None).
    #[pyo3(signature = (input, hx=None))]
    fn forward<'py>(
        slf: PyRef<'py, Self>,
        py: Python<'py>,
        input: &Bound<'py, PyAny>,
        hx: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let x = crate::nn::input(input)?;
        // One unbatched sequence [T, F] runs as a batch of one.
        let unbatched = x.ndim() == 2;
        let axis = usize::from(!slf.batch_first);
        // Dropout between layers in training mode only.
        let mode = slf.as_super().mode();
        let x = if unbatched { x.unsqueeze(axis) } else { x };
        let out_of = |t: Tensor| if unbatched { t.squeeze(axis) } else { t };
        let state_of = |t: Tensor| if unbatched { t.squeeze(1) } else { t };
        let wrap = |t: Tensor| Bound::new(py, PyTensor::new(t)).map(Bound::into_any);
        let hx = hx.filter(|s| !s.is_none());
        let heavy = x.numel() >= HEAVY;
        match slf.kind.clone() {
            RecurrentKind::Lstm(l) => {
                let s = hx
                    .map(|s| -> PyResult<(Tensor, Tensor)> {
                        let (h, c): (Bound<'py, PyAny>, Bound<'py, PyAny>) = s.extract()?;
                        Ok((state_in(&h, unbatched)?, state_in(&c, unbatched)?))
                    })
                    .transpose()?;
                let (out, (h, c)) = guard::run_heavy(py, heavy, || l.forward_seq_in(&x, s, mode))?;
                let hc = PyTuple::new(py, [wrap(state_of(h))?, wrap(state_of(c))?])?;
                PyTuple::new(py, [wrap(out_of(out))?, hc.into_any()])
            }
            RecurrentKind::Rnn(l) => {
                let h0 = hx.map(|s| state_in(s, unbatched)).transpose()?;
                let (out, h) = guard::run_heavy(py, heavy, || l.forward_seq_in(&x, h0, mode))?;
                PyTuple::new(py, [wrap(out_of(out))?, wrap(state_of(h))?])
            }
            RecurrentKind::Gru(l) => {
                let h0 = hx.map(|s| state_in(s, unbatched)).transpose()?;
                let (out, h) = guard::run_heavy(py, heavy, || l.forward_seq_in(&x, h0, mode))?;
                PyTuple::new(py, [wrap(out_of(out))?, wrap(state_of(h))?])
            }
        }
    }

    #[pyo3(signature = (input, hx=None))]
    fn __call__<'py>(
        slf: &Bound<'py, Self>,
        py: Python<'py>,
        input: &Bound<'py, PyAny>,
        hx: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let args = match hx {
            Some(h) => PyTuple::new(py, [input, h])?,
            None => PyTuple::new(py, [input])?,
        };
        if let Some(out) = PyLayer::through_hooks(slf.as_any(), args, PyDict::new(py))? {
            return Ok(out);
        }
        Ok(Self::forward(slf.borrow(), py, input, hx)?.into_any())
    }

    /// PyTorch's call that lays the weights out in one block for cuDNN; on the CPU there is
    /// nothing to lay out (PyTorch's own CPU layers do nothing here either).
    fn flatten_parameters(&self) {}

    /// The recurrent layers run their hooks (as PyTorch's), from their own call.
    #[classattr]
    fn _calls_hooks() -> bool {
        true
    }

    /// The same as calling the layer (the name earlier versions had).
    #[pyo3(signature = (x, state=None))]
    fn forward_seq<'py>(
        slf: PyRef<'py, Self>,
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        state: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        Self::forward(slf, py, x, state)
    }
}

/// Whether an RNN's `nonlinearity` is ReLU (else tanh); another name is an error.
fn is_relu(nonlinearity: &str) -> PyResult<bool> {
    match nonlinearity {
        "tanh" => Ok(false),
        "relu" => Ok(true),
        other => Err(PyValueError::new_err(format!(
            "Unknown nonlinearity '{other}'. Select from 'tanh' or 'relu'."
        ))),
    }
}

macro_rules! recurrent_class {
    ($(#[$doc:meta])* $rust:ident, $py:literal, $sig:tt $(, $extra:ident: $ty:ty => $check:path)?) => {
        $(#[$doc])*
        #[pyclass(name = $py, module = "ferrograd.nn", extends = PyRecurrent)]
        pub struct $rust;

        #[pymethods]
        impl $rust {
            #[new]
            #[pyo3(signature = $sig)]
            #[allow(clippy::too_many_arguments)]
            fn new(
                py: Python<'_>,
                input_size: usize, hidden_size: usize, num_layers: usize, $($extra: $ty,)?
                bias: bool, batch_first: bool, dropout: f64, bidirectional: bool
            ) -> PyResult<PyClassInitializer<Self>> {
                let relu = false $(|| $check(&$extra)?)?;
                let args = RecurrentArgs {
                    input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                    relu,
                };
                let made_with = (
                    input_size, hidden_size, num_layers, $($extra.clone(),)?
                    bias, batch_first, dropout, bidirectional,
                ).into_pyobject(py)?;
                Ok(PyRecurrent::build(py, $py, &args, made_with)?.add_subclass($rust))
            }
        }
    };
}

recurrent_class!(/// Elman RNN with tanh.
    PyRNN, "RNN",
    (input_size, hidden_size, num_layers=1, nonlinearity="tanh".to_string(), bias=true,
     batch_first=false, dropout=0.0, bidirectional=false),
    nonlinearity: String => is_relu);
recurrent_class!(/// LSTM, gates i, f, g, o.
    PyLSTM, "LSTM",
    (input_size, hidden_size, num_layers=1, bias=true, batch_first=false, dropout=0.0,
     bidirectional=false));
recurrent_class!(/// GRU, gates r, z, n.
    PyGRU, "GRU",
    (input_size, hidden_size, num_layers=1, bias=true, batch_first=false, dropout=0.0,
     bidirectional=false));

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
    m.add_class::<PyLogSoftmax>()?;
    m.add_class::<PyLinear>()?;
    m.add_class::<PySiLU>()?;
    m.add_class::<PyIdentity>()?;
    m.add_class::<PyRecurrent>()?;
    m.add_class::<PyRNN>()?;
    m.add_class::<PyLSTM>()?;
    m.add_class::<PyGRU>()?;
    m.add_class::<PyBufferRef>()?;
    Ok(())
}
