//! `tensor[key]` as numpy reads it, from differentiable ops: an int picks one position and
//! drops the axis, a slice of step 1 narrows, another step or a list of ints gathers
//! (`index_select`), `None` inserts an axis and `...` stands for the axes not named.

use ferrograd::prelude::{DType, Tensor};
use pyo3::exceptions::{PyIndexError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyEllipsis, PyList, PySlice, PySliceMethods, PyTuple};

use crate::convert::to_tensor;
use crate::guard;
use crate::tensor::PyTensor;

enum Item {
    Int(isize),
    Slice(Py<PySlice>),
    Gather(Vec<isize>),
    NewAxis,
    Rest,
}

impl Item {
    fn consumes_axis(&self) -> bool {
        matches!(self, Item::Int(_) | Item::Slice(_) | Item::Gather(_))
    }
}

fn parse(key: &Bound<'_, PyAny>) -> PyResult<Item> {
    if key.is_none() {
        return Ok(Item::NewAxis);
    }
    if key.is_instance_of::<PyEllipsis>() {
        return Ok(Item::Rest);
    }
    if let Ok(s) = key.cast::<PySlice>() {
        return Ok(Item::Slice(s.clone().unbind()));
    }
    if key.is_instance_of::<PyList>() || key.is_instance_of::<PyTuple>() {
        if key.len()? == 0 {
            return Ok(Item::Gather(Vec::new()));
        }
    } else if let Ok(i) = key.call_method0("__index__") {
        // An int, a numpy integer or a one-element int64 tensor: one position.
        return Ok(Item::Int(i.extract()?));
    }
    if key.is_instance_of::<PyList>()
        || key.cast::<PyTensor>().is_ok()
        || key.hasattr("__array__")?
    {
        let idx = to_tensor(key, None)?;
        if idx.dtype() != DType::I64 || idx.ndim() != 1 {
            return Err(PyIndexError::new_err(
                "an index list must be 1-D integers (boolean masks are not supported)",
            ));
        }
        return Ok(Item::Gather(
            idx.to_vec::<i64>()
                .into_iter()
                .map(|i| i as isize)
                .collect(),
        ));
    }
    Err(PyTypeError::new_err(format!(
        "tensor indices must be ints, slices, None, ..., or lists of ints, not {}",
        key.get_type().name()?
    )))
}

fn position(i: isize, len: usize, axis: usize) -> PyResult<usize> {
    let n = len as isize;
    let j = if i < 0 { i + n } else { i };
    if (0..n).contains(&j) {
        Ok(j as usize)
    } else {
        Err(PyIndexError::new_err(format!(
            "index {i} is out of bounds for axis {axis} with size {len}"
        )))
    }
}

/// `t[key]`.
pub fn get(py: Python<'_>, t: &Tensor, key: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let items: Vec<Item> = match key.cast::<PyTuple>() {
        Ok(tuple) => tuple.iter().map(|k| parse(&k)).collect::<PyResult<_>>()?,
        Err(_) => vec![parse(key)?],
    };
    let named = items.iter().filter(|i| i.consumes_axis()).count();
    if items.iter().filter(|i| matches!(i, Item::Rest)).count() > 1 {
        return Err(PyIndexError::new_err(
            "an index can only have a single ellipsis ('...')",
        ));
    }
    if items
        .iter()
        .filter(|i| matches!(i, Item::Gather(_)))
        .count()
        > 1
    {
        return Err(PyIndexError::new_err(
            "one list of indices per index: numpy's pointwise indexing by several lists is not \
             supported (index one axis at a time)",
        ));
    }
    if named > t.ndim() {
        return Err(PyIndexError::new_err(format!(
            "too many indices for a tensor of {} axes: {named} were given",
            t.ndim()
        )));
    }
    let mut out = t.clone();
    let mut axis = 0;
    for item in items {
        let len = out.shape().get(axis).copied().unwrap_or(0);
        out = match item {
            Item::NewAxis => {
                axis += 1;
                guard::run(|| out.unsqueeze(axis - 1))?
            }
            Item::Rest => {
                axis += t.ndim() - named;
                out
            }
            Item::Int(i) => {
                let p = position(i, len, axis)?;
                guard::run(|| out.narrow(axis, p, 1).squeeze(axis))?
            }
            Item::Slice(s) => {
                let ind = s.bind(py).indices(len as isize)?;
                axis += 1;
                if ind.step == 1 {
                    let n = (ind.stop - ind.start).max(0) as usize;
                    guard::run(|| out.narrow(axis - 1, ind.start as usize, n))?
                } else {
                    let picks: Vec<usize> = (0..ind.slicelength)
                        .map(|k| (ind.start + k as isize * ind.step) as usize)
                        .collect();
                    guard::run(|| out.index_select(axis - 1, picks.as_slice()))?
                }
            }
            Item::Gather(list) => {
                let picks: Vec<usize> = list
                    .iter()
                    .map(|&i| position(i, len, axis))
                    .collect::<PyResult<_>>()?;
                axis += 1;
                guard::run(|| out.index_select(axis - 1, picks.as_slice()))?
            }
        };
    }
    Ok(out)
}
