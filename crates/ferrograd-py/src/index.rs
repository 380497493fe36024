//! `tensor[key]` as numpy reads it, from differentiable ops: an int picks one position and
//! drops the axis, a slice of step 1 narrows, another step or a list of ints gathers
//! (`index_select`), a 1-D boolean mask gathers where it is true, `None` inserts an axis and
//! `...` stands for the axes not named.

use ferrograd::prelude::{DType, Tensor};
use pyo3::exceptions::{PyIndexError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyEllipsis, PyList, PySlice, PySliceMethods, PyTuple};

use crate::convert::to_tensor;
use crate::guard;
use crate::value::PyTensor;

enum Item {
    Int(isize),
    Slice(Py<PySlice>),
    Gather(Vec<isize>),
    /// A 1-D boolean mask: the positions where it is true, as numpy reads it.
    Mask(Vec<bool>),
    NewAxis,
    Rest,
}

impl Item {
    fn consumes_axis(&self) -> bool {
        matches!(
            self,
            Item::Int(_) | Item::Slice(_) | Item::Gather(_) | Item::Mask(_)
        )
    }
}

/// Whether `obj` is a boolean array or a non-empty list of Python bools: a mask, which the
/// integer conversion would otherwise read as the indices 0 and 1.
fn is_boolean(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    if let Ok(t) = obj.cast::<PyTensor>() {
        return Ok(t.get().is_mask());
    }
    if obj.hasattr("dtype")? && obj.hasattr("__array__")? {
        return Ok(obj.getattr("dtype")?.str()?.to_cow()? == "bool");
    }
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        let mut items = obj.try_iter()?.peekable();
        let mut all = items.peek().is_some();
        for item in items {
            all &= item?.is_instance_of::<PyBool>();
        }
        return Ok(all);
    }
    Ok(false)
}

/// The integer indices `obj` holds for `op` (a list, a numpy array or an int64 tensor, 1-D),
/// each in `0..len` or, when `negative` (numpy's indexing), in `−len..len`. Floats, booleans
/// and positions outside the axis are refused, naming the value.
pub fn integer_indices(
    obj: &Bound<'_, PyAny>,
    op: &str,
    (len, negative): (usize, bool),
) -> PyResult<Vec<usize>> {
    if is_boolean(obj)? {
        return Err(PyIndexError::new_err(format!(
            "{op}: indices must be integers, not booleans"
        )));
    }
    let idx = to_tensor(obj, None)?;
    if idx.dtype() != DType::I64 || idx.ndim() > 1 {
        return Err(PyIndexError::new_err(format!(
            "{op}: indices must be a 1-D list of integers, not {} of {:?} values",
            match idx.ndim() {
                0 | 1 => "a list".to_string(),
                n => format!("{n} axes"),
            },
            idx.dtype()
        )));
    }
    idx.to_vec::<i64>()
        .into_iter()
        .map(|i| {
            let n = len as i64;
            let j = if negative && i < 0 { i + n } else { i };
            if (0..n).contains(&j) {
                Ok(j as usize)
            } else {
                Err(PyIndexError::new_err(format!(
                    "{op}: index {i} is out of range for an axis of size {len}"
                )))
            }
        })
        .collect()
}

/// Whether `key` is a tensor or numpy array with at least one axis.
fn has_axes(key: &Bound<'_, PyAny>) -> PyResult<bool> {
    if let Ok(t) = key.cast::<PyTensor>() {
        return Ok(t.get().tensor().ndim() > 0);
    }
    if key.hasattr("__array__")? && key.hasattr("ndim")? {
        return Ok(key.getattr("ndim")?.extract::<usize>()? > 0);
    }
    Ok(false)
}

/// Whether `obj` is a boolean tensor without axes.
fn is_zero_d_mask(obj: &Bound<'_, PyAny>) -> bool {
    obj.cast::<PyTensor>()
        .is_ok_and(|t| t.get().is_mask() && t.get().tensor().ndim() == 0)
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
    } else if has_axes(key)? {
        // A tensor or array with axes gathers, even of one element (`x[t]` with `t` of shape
        // [1] keeps the axis, as in numpy and PyTorch).
    } else if key.is_instance_of::<PyBool>() || is_zero_d_mask(key) {
        // `x[True]` (a new axis) and `x[False]` (an empty one) in PyTorch: not positions 1
        // and 0, which `__index__` would make of them.
        return Err(PyIndexError::new_err(
            "indexing with a single True or False is not supported (x[None] adds an axis)",
        ));
    } else if let Ok(i) = key.call_method0("__index__") {
        // An int, a numpy integer or a 0-d int64 tensor: one position.
        return Ok(Item::Int(i.extract()?));
    }
    if is_boolean(key)? {
        let mask = to_tensor(key, None)?;
        if mask.ndim() != 1 {
            return Err(PyIndexError::new_err(
                "boolean masks of more than one axis are not supported (mask one axis at a time)",
            ));
        }
        return Ok(Item::Mask(
            mask.to_vec::<i64>().into_iter().map(|v| v != 0).collect(),
        ));
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

/// The items of `key` and how many of them name an axis, checked against a tensor of
/// `ndim` axes.
fn items_of(key: &Bound<'_, PyAny>, ndim: usize) -> PyResult<(Vec<Item>, usize)> {
    let items: Vec<Item> = match key.cast::<PyTuple>() {
        Ok(tuple) => tuple.iter().map(|k| parse(&k)).collect::<PyResult<_>>()?,
        Err(_) => vec![parse(key)?],
    };
    let count = |f: fn(&Item) -> bool| items.iter().filter(|i| f(i)).count();
    if count(|i| matches!(i, Item::Rest)) > 1 {
        return Err(PyIndexError::new_err(
            "an index can only have a single ellipsis ('...')",
        ));
    }
    if count(|i| matches!(i, Item::Gather(_) | Item::Mask(_))) > 1 {
        return Err(PyIndexError::new_err(
            "one list of indices per index: numpy's pointwise indexing by several lists is not \
             supported (index one axis at a time)",
        ));
    }
    let named = count(Item::consumes_axis);
    if named > ndim {
        return Err(PyIndexError::new_err(format!(
            "too many indices for a tensor of {ndim} axes: {named} were given"
        )));
    }
    Ok((items, named))
}

/// `key` as it selects now, if it selects a view of a tensor with `ndim` axes as PyTorch's
/// basic indexing does (integers, slices, `None`, `...`; a list, tensor or mask gathers a
/// copy): a tuple of Python ints, slices of ints, `None` and `...`, which later changes to
/// what `key` was made of (an index tensor updated in place, say) leave as it is.
pub fn basic_key(
    py: Python<'_>,
    key: &Bound<'_, PyAny>,
    ndim: usize,
) -> PyResult<Option<Py<PyAny>>> {
    let (items, _) = items_of(key, ndim)?;
    let index = |b: Bound<'_, PyAny>| -> PyResult<Py<PyAny>> {
        if b.is_none() {
            Ok(py.None())
        } else {
            Ok(b.call_method0("__index__")?.unbind())
        }
    };
    let mut frozen = Vec::with_capacity(items.len());
    for item in items {
        frozen.push(match item {
            Item::Int(i) => i.into_pyobject(py)?.into_any().unbind(),
            Item::Slice(s) => {
                let s = s.bind(py);
                let bounds = (
                    index(s.getattr("start")?)?,
                    index(s.getattr("stop")?)?,
                    index(s.getattr("step")?)?,
                );
                py.get_type::<PySlice>().call1(bounds)?.unbind()
            }
            Item::NewAxis => py.None(),
            Item::Rest => PyEllipsis::get(py).to_owned().into_any().unbind(),
            Item::Gather(_) | Item::Mask(_) => return Ok(None),
        });
    }
    Ok(Some(PyTuple::new(py, frozen)?.into_any().unbind()))
}

/// `t[key]`.
pub fn get(py: Python<'_>, t: &Tensor, key: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let (items, named) = items_of(key, t.ndim())?;
    let front = advanced_go_first(&items);
    let mut gathered_at = None;
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
            Item::Mask(mask) => {
                if mask.len() != len {
                    return Err(PyIndexError::new_err(format!(
                        "boolean index did not match the indexed tensor along axis {axis}: \
                         the axis has {len} positions, the mask {}",
                        mask.len()
                    )));
                }
                let picks: Vec<usize> = (0..len).filter(|&i| mask[i]).collect();
                gathered_at = Some(axis);
                axis += 1;
                guard::run(|| out.index_select(axis - 1, picks.as_slice()))?
            }
            Item::Gather(list) => {
                let picks: Vec<usize> = list
                    .iter()
                    .map(|&i| position(i, len, axis))
                    .collect::<PyResult<_>>()?;
                gathered_at = Some(axis);
                axis += 1;
                guard::run(|| out.index_select(axis - 1, picks.as_slice()))?
            }
        };
    }
    match gathered_at.filter(|_| front) {
        // numpy puts the gathered axis first when advanced indices are apart.
        Some(at) => guard::run(|| {
            let mut order: Vec<usize> = (0..out.ndim()).filter(|&a| a != at).collect();
            order.insert(0, at);
            out.permute(&order)
        }),
        None => Ok(out),
    }
}

/// Whether numpy places the axis of a list or mask first: when integers (advanced indices
/// too, beside a list) stand apart from it, with a slice, `None` or `...` between.
fn advanced_go_first(items: &[Item]) -> bool {
    let advanced = |i: &Item| matches!(i, Item::Int(_) | Item::Gather(_) | Item::Mask(_));
    if !items
        .iter()
        .any(|i| matches!(i, Item::Gather(_) | Item::Mask(_)))
    {
        return false;
    }
    let first = items.iter().position(advanced);
    let last = items.iter().rposition(advanced);
    match (first, last) {
        (Some(a), Some(b)) => items[a..=b].iter().any(|i| !advanced(i)),
        _ => false,
    }
}

/// `t` with `t[key] = value`, as a new tensor: the positions `key` selects are found by
/// indexing a table of flat positions with it (so every key `get` takes works here, and a
/// boolean mask of `t`'s whole shape too); `value` is broadcast to the selection's shape in
/// `t`'s dtype. A float `t` stays differentiable in its other elements and in `value`; an
/// integer one is written exactly. Where `key` selects a position twice, the last value
/// written stays, as numpy's assignment does.
pub fn set(py: Python<'_>, t: &Tensor, key: &Bound<'_, PyAny>, value: &Tensor) -> PyResult<Tensor> {
    let n = t.numel();
    let whole_mask = match is_boolean(key)? {
        true => Some(to_tensor(key, None)?).filter(|m| m.shape() == t.shape()),
        false => None,
    };
    let (chosen, shape): (Vec<i64>, Vec<usize>) = if let Some(mask) = whole_mask {
        let mask = mask.to_vec::<i64>();
        let chosen: Vec<i64> = (0..n as i64).filter(|&i| mask[i as usize] != 0).collect();
        let len = chosen.len();
        (chosen, vec![len])
    } else {
        let table = Tensor::from_vec((0..n as i64).collect::<Vec<_>>(), t.shape());
        let picked = get(py, &table, key)?;
        (picked.to_vec::<i64>(), picked.shape().to_vec())
    };
    let values = guard::run(|| {
        value
            .to_dtype(t.dtype())
            .broadcast_to(&shape)
            .reshape(&[chosen.len()])
    })?;
    // The last write to a position wins: keep each position's last source.
    let mut last = vec![usize::MAX; n];
    for (src, &p) in chosen.iter().enumerate() {
        last[p as usize] = src;
    }
    if !t.dtype().is_float() {
        let (mut out, values) = (t.to_vec::<i64>(), values.to_vec::<i64>());
        for (p, &src) in last.iter().enumerate().filter(|(_, &s)| s != usize::MAX) {
            out[p] = values[src];
        }
        return Ok(Tensor::from_vec(out, t.shape()));
    }
    let (positions, sources): (Vec<usize>, Vec<usize>) = (0..n)
        .filter(|&p| last[p] != usize::MAX)
        .map(|p| (p, last[p]))
        .unzip();
    let hit: Vec<f64> = last
        .iter()
        .map(|&s| f64::from(u8::from(s != usize::MAX)))
        .collect();
    guard::run(|| {
        let flat = t.reshape(&[n]);
        let placed = flat.zeros_like().detach().index_add(
            0,
            &positions,
            &values.index_select(0, sources.as_slice()),
        );
        Tensor::from_vec(hit, &[n])
            .where_cond(&placed, &flat)
            .reshape(t.shape())
    })
}
