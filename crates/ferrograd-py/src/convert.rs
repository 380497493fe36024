//! Between Python values and tensors: dtypes, numpy arrays, nested lists and scalars.

use ferrograd::prelude::{DType, Tensor};
use numpy::ndarray::{ArrayD, IxDyn};
use numpy::{IntoPyArray, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray};
use numpy::{PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::value::PyTensor;

/// A tensor's element type: `ferrograd.float32`, `ferrograd.float64` or `ferrograd.int64`.
#[pyclass(name = "dtype", module = "ferrograd", eq, eq_int, frozen, hash)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum PyDType {
    /// 32-bit float, the default.
    #[pyo3(name = "float32")]
    Float32,
    /// 64-bit float.
    #[pyo3(name = "float64")]
    Float64,
    /// 64-bit integer (labels and indices; no arithmetic gradients).
    #[pyo3(name = "int64")]
    Int64,
    /// Boolean: comparisons' results (stored as int64 0/1).
    #[pyo3(name = "bool")]
    Bool,
}

#[pymethods]
impl PyDType {
    fn __repr__(&self) -> String {
        format!("ferrograd.{}", self.name())
    }

    fn __str__(&self) -> String {
        self.__repr__()
    }

    /// The numpy name of this dtype.
    #[getter]
    pub fn name(&self) -> &'static str {
        match self {
            PyDType::Float32 => "float32",
            PyDType::Float64 => "float64",
            PyDType::Int64 => "int64",
            PyDType::Bool => "bool",
        }
    }

    /// Whether this is a floating-point dtype.
    #[getter]
    fn is_floating_point(&self) -> bool {
        matches!(self, PyDType::Float32 | PyDType::Float64)
    }
}

impl From<DType> for PyDType {
    fn from(d: DType) -> Self {
        match d {
            DType::F32 => PyDType::Float32,
            DType::F64 => PyDType::Float64,
            DType::I64 => PyDType::Int64,
        }
    }
}

impl From<PyDType> for DType {
    fn from(d: PyDType) -> Self {
        match d {
            PyDType::Float32 => DType::F32,
            PyDType::Float64 => DType::F64,
            PyDType::Int64 | PyDType::Bool => DType::I64,
        }
    }
}

/// A dtype given as `ferrograd.float32`, a name (`"float64"`) or anything numpy reads as a
/// dtype (`numpy.float32`).
pub fn dtype_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<DType>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    if let Ok(d) = obj.cast::<PyDType>() {
        return Ok(Some((*d.get()).into()));
    }
    let name: String = if obj.is_instance_of::<PyString>() {
        obj.extract()?
    } else {
        let np = obj.py().import("numpy")?;
        np.call_method1("dtype", (obj,))?
            .getattr("name")?
            .extract()?
    };
    match name.as_str() {
        "float32" | "float" | "f32" => Ok(Some(DType::F32)),
        "float64" | "double" | "f64" => Ok(Some(DType::F64)),
        "int64" | "long" | "i64" | "bool" => Ok(Some(DType::I64)),
        other => Err(PyTypeError::new_err(format!(
            "unsupported dtype {other:?}: ferrograd has float32, float64 and int64"
        ))),
    }
}

/// Whether `obj` names the boolean dtype (`ferrograd.bool`, `"bool"`, `numpy.bool_`).
pub fn is_bool_dtype(obj: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(false);
    };
    if let Ok(d) = obj.cast::<PyDType>() {
        return Ok(*d.get() == PyDType::Bool);
    }
    if obj.is_instance_of::<PyString>() {
        return Ok(obj.extract::<String>()? == "bool");
    }
    let np = obj.py().import("numpy")?;
    Ok(np
        .call_method1("dtype", (obj,))
        .and_then(|d| d.getattr("name")?.extract::<String>())
        .is_ok_and(|n| n == "bool"))
}

/// Whether `obj` holds booleans: a numpy bool array, a boolean tensor, or a Python bool.
pub fn holds_bools(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    if obj.is_instance_of::<PyBool>() {
        return Ok(true);
    }
    if let Ok(t) = obj.cast::<PyTensor>() {
        return Ok(t.get().is_mask());
    }
    if obj.hasattr("dtype")? && obj.hasattr("__array__")? {
        return Ok(obj.getattr("dtype")?.str()?.to_cow()? == "bool");
    }
    // A nested list whose first element is a bool: booleans if numpy reads them all so.
    let mut first = obj.clone();
    for _ in 0..MAX_NESTING {
        if !(first.is_instance_of::<PyList>() || first.is_instance_of::<PyTuple>())
            || first.len()? == 0
        {
            break;
        }
        first = first.get_item(0)?;
    }
    if !first.is_instance_of::<PyBool>() || first.is(obj) {
        return Ok(false);
    }
    let np = obj.py().import("numpy")?;
    Ok(np
        .call_method1("asarray", (obj,))
        .and_then(|a| a.getattr("dtype")?.getattr("name")?.extract::<String>())
        .is_ok_and(|n| n == "bool"))
}

/// The tensor `obj` stands for: a Tensor (converted to `dtype` if given), a Python number, a
/// numpy array (its dtype kept: float16 widens to float32, other integers and bools become
/// int64) or a nested list (floats become float32 and integers int64, as in PyTorch).
pub fn to_tensor(obj: &Bound<'_, PyAny>, dtype: Option<DType>) -> PyResult<Tensor> {
    to_tensor_at(obj, dtype, 0)
}

/// Lists nested deeper than this are refused, as numpy refuses more than 64 dimensions: the
/// conversion recurses once per level, and a list that holds itself has no bottom.
const MAX_NESTING: usize = 64;

fn too_deep() -> PyErr {
    PyValueError::new_err(format!(
        "cannot make a tensor of lists nested more than {MAX_NESTING} deep (or holding themselves)"
    ))
}

/// [`to_tensor`] of an object found `depth` lists deep.
fn to_tensor_at(obj: &Bound<'_, PyAny>, dtype: Option<DType>, depth: usize) -> PyResult<Tensor> {
    if depth > MAX_NESTING {
        return Err(too_deep());
    }
    if let Ok(t) = obj.cast::<PyTensor>() {
        let t = t.get().tensor();
        return Ok(match dtype {
            Some(d) if d != t.dtype() => t.to_dtype(d),
            _ => t,
        });
    }
    // numpy's float64 scalar is a Python float too: it keeps its dtype, as an array does.
    let numpy_scalar = obj.is_instance_of::<PyFloat>() && obj.hasattr("dtype")?;
    if (obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>())
        && holds_tensors(obj, depth)?
    {
        // Tensors inside a list are stacked, not read through numpy, so that they stay on
        // the graph.
        let parts: Vec<Tensor> = obj
            .try_iter()?
            .map(|item| to_tensor_at(&item?, dtype, depth + 1))
            .collect::<PyResult<_>>()?;
        let refs: Vec<&Tensor> = parts.iter().collect();
        return crate::guard::run(|| Tensor::stack(&refs, 0));
    }
    if numpy_scalar {
        return from_array_like(obj, dtype);
    }
    if obj.is_instance_of::<PyBool>() || obj.is_instance_of::<PyInt>() {
        let v: i64 = obj.extract()?;
        return Ok(match dtype.unwrap_or(DType::I64) {
            DType::I64 => Tensor::scalar(v),
            d => Tensor::full(&[], v as f64, d),
        });
    }
    if obj.is_instance_of::<PyFloat>() {
        let v: f64 = obj.extract()?;
        return Ok(Tensor::full(&[], v, dtype.unwrap_or(DType::F32)));
    }
    from_array_like(obj, dtype)
}

/// Whether a list or tuple found `depth` lists deep holds a tensor, at any depth up to
/// [`MAX_NESTING`] (an error beyond).
fn holds_tensors(obj: &Bound<'_, PyAny>, depth: usize) -> PyResult<bool> {
    if depth >= MAX_NESTING {
        return Err(too_deep());
    }
    for item in obj.try_iter()? {
        let item = item?;
        if item.cast::<PyTensor>().is_ok()
            || ((item.is_instance_of::<PyList>() || item.is_instance_of::<PyTuple>())
                && holds_tensors(&item, depth + 1)?)
        {
            return Ok(true);
        }
    }
    Ok(false)
}

fn from_array_like(obj: &Bound<'_, PyAny>, dtype: Option<DType>) -> PyResult<Tensor> {
    let py = obj.py();
    let np = py.import("numpy")?;
    // numpy's own arrays and scalars keep their dtype; Python lists follow PyTorch.
    let was_array = obj.cast::<PyUntypedArray>().is_ok() || obj.hasattr("dtype")?;
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("order", "C")?;
    // asarray keeps a 0-d array 0-d (ascontiguousarray would make it 1-d).
    let arr = np
        .call_method("asarray", (obj,), Some(&kwargs))
        .map_err(|e| {
            PyTypeError::new_err(format!(
                "cannot make a tensor of a {}: {e}",
                obj.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?;
    let untyped = arr.cast::<PyUntypedArray>()?;
    let descr = untyped.dtype();
    let kind = descr.kind() as char;
    // Unsigned 64-bit values above int64's range would wrap to negatives.
    if kind == 'u' && descr.itemsize() == 8 && untyped.len() > 0 {
        let max: u64 = arr.call_method0("max")?.extract()?;
        if max > i64::MAX as u64 {
            return Err(PyOverflowError::new_err(format!(
                "cannot make a tensor of the integer {max}: int64 holds at most {}",
                i64::MAX
            )));
        }
    }
    let target = match (dtype, kind) {
        (Some(d), 'f' | 'i' | 'u' | 'b') => d,
        (None, 'f') if was_array && descr.itemsize() == 8 => DType::F64,
        (None, 'f') => DType::F32,
        (None, 'i' | 'u' | 'b') => DType::I64,
        _ => {
            return Err(PyTypeError::new_err(format!(
                "cannot make a tensor of numpy dtype {} (numbers only)",
                descr.str()?
            )))
        }
    };
    let name = match target {
        DType::F32 => "float32",
        DType::F64 => "float64",
        DType::I64 => "int64",
    };
    // No copy when the array already has the dtype: the one copy is into the tensor.
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("copy", false)?;
    let arr = arr.call_method("astype", (name,), Some(&kwargs))?;
    let shape: Vec<usize> = arr.cast::<PyUntypedArray>()?.shape().to_vec();
    Ok(match target {
        DType::F32 => Tensor::from_vec(read::<f32>(&arr)?, &shape),
        DType::F64 => Tensor::from_vec(read::<f64>(&arr)?, &shape),
        DType::I64 => Tensor::from_vec(read::<i64>(&arr)?, &shape),
    })
}

fn read<T: numpy::Element + Copy>(arr: &Bound<'_, PyAny>) -> PyResult<Vec<T>> {
    let typed = arr.cast::<PyArrayDyn<T>>()?;
    let view: PyReadonlyArrayDyn<'_, T> = typed.readonly();
    Ok(match view.as_slice() {
        Ok(s) => s.to_vec(),
        Err(_) => view.as_array().iter().copied().collect(),
    })
}

/// A numpy array holding a copy of `t`'s values, of its dtype and shape (a view that would
/// need more memory than the allocator gives is a `ValueError`).
pub fn to_numpy<'py>(py: Python<'py>, t: &Tensor) -> PyResult<Bound<'py, PyAny>> {
    fn array<'py, T: numpy::Element>(
        py: Python<'py>,
        v: Vec<T>,
        shape: &[usize],
    ) -> Bound<'py, PyAny> {
        ArrayD::from_shape_vec(IxDyn(shape), v)
            .expect("a tensor's values fill its shape")
            .into_pyarray(py)
            .into_any()
    }
    Ok(match t.dtype() {
        DType::F32 => array(py, crate::guard::run(|| t.to_vec::<f32>())?, t.shape()),
        DType::F64 => array(py, crate::guard::run(|| t.to_vec::<f64>())?, t.shape()),
        DType::I64 => array(py, crate::guard::run(|| t.to_vec::<i64>())?, t.shape()),
    })
}

/// The right-hand side of an arithmetic operator.
pub enum Operand {
    /// A tensor (a non-tensor array is converted to the left side's dtype).
    Tensor(Tensor),
    /// A Python number, applied without making a tensor of it.
    Scalar(f64),
}

/// `obj` as the other operand of an op on a tensor of dtype `like`.
pub fn operand(obj: &Bound<'_, PyAny>, like: DType) -> PyResult<Operand> {
    if let Ok(t) = obj.cast::<PyTensor>() {
        return Ok(Operand::Tensor(t.get().tensor()));
    }
    if (obj.is_instance_of::<PyFloat>() || obj.is_instance_of::<PyInt>())
        && !obj.is_instance_of::<PyBool>()
    {
        return Ok(Operand::Scalar(obj.extract()?));
    }
    // An array takes a float tensor's dtype, as a Python number does; beside an integer
    // tensor it keeps its own (casting 0.5 to an integer would change the comparison).
    let to = like.is_float().then_some(like);
    Ok(Operand::Tensor(to_tensor(obj, to)?))
}

/// Axes given as `None` (every axis), an int or a sequence of ints.
pub fn axes_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<isize>>> {
    match obj.filter(|o| !o.is_none()) {
        None => Ok(None),
        Some(o) if o.is_instance_of::<PyInt>() => Ok(Some(vec![o.extract()?])),
        Some(o) => Ok(Some(o.extract()?)),
    }
}

/// PyTorch's size argument of a 2-d op: one int for both axes (`3`) or a pair `(height,
/// width)` (`(3, 5)`).
#[derive(Clone, Copy)]
pub struct Size2(pub [usize; 2]);

impl<'a, 'py> FromPyObject<'a, 'py> for Size2 {
    type Error = PyErr;

    fn extract(obj: pyo3::Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if let Ok(v) = obj.extract::<usize>() {
            return Ok(Size2([v, v]));
        }
        let pair: Vec<usize> = obj.extract().map_err(|_| {
            PyTypeError::new_err("expected a non-negative int or a pair of them (height, width)")
        })?;
        match pair.as_slice() {
            [h, w] => Ok(Size2([*h, *w])),
            _ => Err(PyValueError::new_err(format!(
                "expected one size or two (height, width), got {}",
                pair.len()
            ))),
        }
    }
}

/// As PyTorch keeps it on a layer: `(height, width)`.
impl<'py> IntoPyObject<'py> for Size2 {
    type Target = PyTuple;
    type Output = Bound<'py, PyTuple>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        PyTuple::new(py, self.0)
    }
}

/// A normalised shape that is one last axis: an int, or a sequence of one int (PyTorch's
/// `LayerNorm(8)` and `LayerNorm((8,))`).
#[derive(Clone, Copy)]
pub struct LastAxis(pub usize);

impl<'a, 'py> FromPyObject<'a, 'py> for LastAxis {
    type Error = PyErr;

    fn extract(obj: pyo3::Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if let Ok(v) = obj.extract::<usize>() {
            return Ok(LastAxis(v));
        }
        let dims: Vec<usize> = obj
            .extract()
            .map_err(|_| PyTypeError::new_err("expected an int or a sequence of ints"))?;
        match dims.as_slice() {
            [d] => Ok(LastAxis(*d)),
            _ => Err(pyo3::exceptions::PyNotImplementedError::new_err(format!(
                "normalising over {} trailing axes is not supported: ferrograd's LayerNorm \
                 normalises the last axis (reshape so that one axis holds {dims:?})",
                dims.len()
            ))),
        }
    }
}

/// As PyTorch keeps it on a layer (`normalized_shape`): `(features,)`.
impl<'py> IntoPyObject<'py> for LastAxis {
    type Target = PyTuple;
    type Output = Bound<'py, PyTuple>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        PyTuple::new(py, [self.0])
    }
}

/// PyTorch's `padding` of a convolution: sizes, or `"same"` / `"valid"`.
#[derive(Clone, Copy)]
pub enum Padding {
    /// Zeros on both sides of each axis, `[height, width]`.
    Sizes([usize; 2]),
    /// The output keeps the input's size (stride 1).
    Same,
    /// No padding, asked for by name (kept as `"valid"`, as PyTorch keeps it).
    Valid,
}

impl Padding {
    /// The zeros on each side of each axis, `[height, width]`, where they are fixed.
    pub fn sizes(self) -> Option<[usize; 2]> {
        match self {
            Padding::Sizes(hw) => Some(hw),
            Padding::Valid => Some([0, 0]),
            Padding::Same => None,
        }
    }
}

impl<'a, 'py> FromPyObject<'a, 'py> for Padding {
    type Error = PyErr;

    fn extract(obj: pyo3::Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if let Ok(name) = obj.extract::<String>() {
            return match name.as_str() {
                "same" => Ok(Padding::Same),
                "valid" => Ok(Padding::Valid),
                other => Err(PyValueError::new_err(format!(
                    "padding {other:?}: expected 'same', 'valid', an int or a pair"
                ))),
            };
        }
        obj.extract::<Size2>().map(|s| Padding::Sizes(s.0))
    }
}

/// Rows `index` of the C-contiguous numpy array `array` (float32, float64 or int64) as a new
/// tensor, copied once from numpy's buffer: what a batch iterator gathers each step. `None`
/// for an array of another layout or dtype (the caller indexes it with numpy instead).
pub fn take_rows(array: &Bound<'_, PyAny>, index: &[i64]) -> PyResult<Option<Tensor>> {
    fn rows<T: numpy::Element + ferrograd::tensor::Element + Copy>(
        arr: &Bound<'_, PyAny>,
        index: &[i64],
    ) -> PyResult<Option<Tensor>> {
        let Ok(typed) = arr.cast::<PyArrayDyn<T>>() else {
            return Ok(None);
        };
        let view = typed.readonly();
        let (Ok(data), Some((&n, rest))) = (view.as_slice(), view.shape().split_first()) else {
            return Ok(None);
        };
        let width: usize = rest.iter().product();
        let mut out = Vec::with_capacity(index.len().saturating_mul(width));
        for &i in index {
            let row = usize::try_from(i).ok().filter(|&r| r < n).ok_or_else(|| {
                pyo3::exceptions::PyIndexError::new_err(format!(
                    "index {i} is out of bounds for axis 0 with size {n}"
                ))
            })?;
            out.extend_from_slice(&data[row * width..(row + 1) * width]);
        }
        let mut shape = vec![index.len()];
        shape.extend_from_slice(rest);
        Ok(Some(Tensor::from_vec(out, &shape)))
    }
    if let Some(t) = rows::<f32>(array, index)? {
        return Ok(Some(t));
    }
    if let Some(t) = rows::<f64>(array, index)? {
        return Ok(Some(t));
    }
    rows::<i64>(array, index)
}

/// As PyTorch keeps it on a layer: `(height, width)`, `"same"` or `"valid"`.
impl<'py> IntoPyObject<'py> for Padding {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        match self {
            Padding::Sizes(hw) => Ok(PyTuple::new(py, hw)?.into_any()),
            Padding::Same => Ok(pyo3::types::PyString::new(py, "same").into_any()),
            Padding::Valid => Ok(pyo3::types::PyString::new(py, "valid").into_any()),
        }
    }
}
