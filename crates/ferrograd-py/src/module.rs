//! PyTorch's `nn.Module` protocol on the core's layers: the walks over the tree of layers
//! (`children`, `modules`, `apply`), `zero_grad`, `requires_grad_`, `to`, the buffers as
//! tensors and the printed form (`Linear(in_features=4, out_features=2, bias=True)`). With
//! these, and `ferrograd.nn.Module` counting the core's layers as its instances, code written
//! for `torch.nn` modules runs on them unchanged.

use std::collections::HashSet;

use ferrograd::prelude::*;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyList, PyTuple};

use crate::autograd::{leaf_of, wrap_param};
use crate::convert::{dtype_arg, is_bool_dtype};
use crate::guard;
use crate::nn::{buffer_tensor, joined, PyLayer};
use crate::tensor::{to_target, PyTensor};

#[pymethods]
impl PyLayer {
    /// Pickling the whole layer (`torch.save(model)`, `pickle.dumps`): its class called
    /// with its constructor's arguments again, then given its state (`__setstate__`: the
    /// state dict, the mode, which parameters are frozen). Parameters shared between layers
    /// come back as copies of their own.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let Some(args) = slf.borrow().made_with.as_ref().map(|a| a.clone_ref(py)) else {
            return Err(PyTypeError::new_err(format!(
                "cannot pickle a {} that was not made by its constructor: save its \
                 state_dict() instead",
                slf.get_type().name()?
            )));
        };
        let frozen = PyList::empty(py);
        for item in slf.call_method0("named_parameters")?.try_iter()? {
            let (name, p): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item?.extract()?;
            if !p.getattr("requires_grad")?.is_truthy()? {
                frozen.append(name)?;
            }
        }
        let state = [
            ("state_dict", slf.call_method0("state_dict")?),
            ("training", slf.getattr("training")?),
            ("frozen", frozen.into_any()),
        ]
        .into_py_dict(py)?;
        (slf.get_type(), args, state).into_pyobject(py)
    }

    /// The state a pickle gives back (see `__reduce__`).
    fn __setstate__(slf: &Bound<'_, Self>, state: &Bound<'_, PyAny>) -> PyResult<()> {
        let saved = state.get_item("state_dict")?;
        let mut values = Vec::new();
        for item in saved.call_method0("items")?.try_iter()? {
            let (name, value): (String, Bound<'_, PyAny>) = item?.extract()?;
            values.push((name, crate::convert::to_tensor(&value, None)?));
        }
        slf.borrow_mut().take_sizes(values.into_iter())?;
        slf.call_method1("load_state_dict", (saved,))?;
        slf.call_method1("train", (state.get_item("training")?,))?;
        let params = slf.call_method0("named_parameters")?;
        let by_name: std::collections::HashMap<String, Bound<'_, PyAny>> = params
            .try_iter()?
            .map(|item| item?.extract())
            .collect::<PyResult<_>>()?;
        for name in state.get_item("frozen")?.try_iter()? {
            let name: String = name?.extract()?;
            if let Some(p) = by_name.get(&name) {
                p.setattr("requires_grad", false)?;
            }
        }
        Ok(())
    }

    /// A copy with parameters of its own, as `copy.deepcopy` gives in PyTorch.
    fn __deepcopy__(slf: &Bound<'_, Self>, memo: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        PyLayer::deep_copy(slf, memo)
    }

    /// `(name, layer)` for each direct sub-layer: none for a single layer (a `Net` lists
    /// its layers).
    fn named_children<'py>(&self, py: Python<'py>) -> Bound<'py, PyList> {
        PyList::empty(py)
    }

    /// The direct sub-layers.
    fn children<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyList>> {
        let items = slf.call_method0("named_children")?;
        let mut out = Vec::new();
        for item in items.try_iter()? {
            out.push(item?.cast_into::<PyTuple>()?.get_item(1)?);
        }
        PyList::new(slf.py(), out)
    }

    /// `(name, module)` for this layer and every one inside it, each once, as PyTorch's.
    #[pyo3(signature = (memo=None, prefix="", remove_duplicate=true))]
    fn named_modules<'py>(
        slf: &Bound<'py, Self>,
        memo: Option<&Bound<'py, PyAny>>,
        prefix: &str,
        remove_duplicate: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let _ = memo;
        let py = slf.py();
        let mut out = vec![(prefix.to_string(), slf.clone().into_any())];
        for item in slf.call_method0("named_children")?.try_iter()? {
            let (name, child): (String, Bound<'py, PyAny>) = item?.extract()?;
            let kwargs = [("prefix", joined(prefix, &name))].into_py_dict(py)?;
            for sub in child
                .call_method("named_modules", (), Some(&kwargs))?
                .try_iter()?
            {
                out.push(sub?.extract()?);
            }
        }
        let mut seen = HashSet::new();
        out.retain(|(_, m)| !remove_duplicate || seen.insert(m.as_ptr() as usize));
        PyList::new(py, out)
    }

    /// This layer and every one inside it.
    fn modules<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyList>> {
        let mut out = Vec::new();
        for item in slf.call_method0("named_modules")?.try_iter()? {
            out.push(item?.cast_into::<PyTuple>()?.get_item(1)?);
        }
        PyList::new(slf.py(), out)
    }

    /// Calls `fn` on every sub-layer, then on this one (custom initialisation), and returns
    /// the layer.
    fn apply<'py>(slf: &Bound<'py, Self>, func: &Bound<'py, PyAny>) -> PyResult<Bound<'py, Self>> {
        for child in Self::children(slf)?.iter() {
            child.call_method1("apply", (func,))?;
        }
        func.call1((slf,))?;
        Ok(slf.clone())
    }

    /// Clears every parameter's `.grad`: to None, or to zeros with `set_to_none=False`.
    #[pyo3(signature = (set_to_none=true))]
    fn zero_grad(&self, set_to_none: bool) -> PyResult<()> {
        for (_, p) in guard::run(|| self.layer.params())? {
            let leaf = leaf_of(&p);
            let cleared = match leaf.grad() {
                Some(g) if !set_to_none => Some(guard::run(|| g.zeros_like())?),
                _ => None,
            };
            leaf.set_grad(cleared);
        }
        Ok(())
    }

    /// Turns gradient tracking of every parameter on or off; returns the layer.
    #[pyo3(signature = (requires_grad=true))]
    fn requires_grad_<'py>(
        slf: &Bound<'py, Self>,
        requires_grad: bool,
    ) -> PyResult<Bound<'py, Self>> {
        let layer = slf.borrow().layer.clone();
        let params = guard::run(|| layer.params())?;
        for (_, p) in params {
            wrap_param(slf.py(), &p)?
                .bind(slf.py())
                .call_method1("requires_grad_", (requires_grad,))?;
        }
        Ok(slf.clone())
    }

    /// `to(dtype)`, `to("cpu")`, `to(device, dtype)`, as PyTorch's: the parameters and buffers
    /// converted in place to a float dtype; the device can only be the CPU. Returns the layer.
    #[pyo3(signature = (*args, dtype=None, device=None, non_blocking=false))]
    fn to<'py>(
        slf: &Bound<'py, Self>,
        args: &Bound<'py, PyTuple>,
        dtype: Option<&Bound<'py, PyAny>>,
        device: Option<&Bound<'py, PyAny>>,
        non_blocking: bool,
    ) -> PyResult<Bound<'py, Self>> {
        let _ = non_blocking;
        if let Some(a) = to_target(args.iter().chain(dtype.cloned()).chain(device.cloned()))? {
            match dtype_arg(Some(&a))? {
                Some(d) if d.is_float() && !is_bool_dtype(Some(&a))? => slf.borrow().convert(d)?,
                _ => {
                    return Err(PyTypeError::new_err(format!(
                        "Module.to only accepts floating point dtypes, got {a}"
                    )))
                }
            }
        }
        Ok(slf.clone())
    }

    /// The layer itself: ferrograd computes on the CPU.
    fn cpu<'py>(slf: &Bound<'py, Self>) -> Bound<'py, Self> {
        slf.clone()
    }

    /// `(name, buffer)` pairs: saved, not trained (batch norm's running statistics).
    #[pyo3(signature = (prefix="", recurse=true, remove_duplicate=true))]
    fn named_buffers(
        &self,
        prefix: &str,
        recurse: bool,
        remove_duplicate: bool,
    ) -> PyResult<Vec<(String, PyTensor)>> {
        let _ = remove_duplicate;
        Ok(self
            .own_or_all(guard::run(|| self.layer.buffers())?, recurse)
            .into_iter()
            .map(|(n, p)| (joined(prefix, &n), buffer_tensor(p)))
            .collect())
    }

    /// The buffers, in order.
    #[pyo3(signature = (recurse=true))]
    fn buffers(&self, recurse: bool) -> PyResult<Vec<PyTensor>> {
        Ok(self
            .named_buffers("", recurse, true)?
            .into_iter()
            .map(|(_, t)| t)
            .collect())
    }

    /// The settings PyTorch prints after the class name (`in_features=4, out_features=2,
    /// bias=True`).
    fn extra_repr(&self) -> String {
        self.settings().unwrap_or_default()
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let (settings, layer) = {
            let this = slf.borrow();
            (this.settings(), this.layer.clone())
        };
        match settings {
            Some(s) => Ok(format!("{}({s})", slf.get_type().name()?)),
            None => guard::run(|| layer.name()),
        }
    }
}
