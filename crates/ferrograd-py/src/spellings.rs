//! PyTorch's other spellings of what `Tensor` already does: the named forms of the operators
//! (`add`, `eq`, `mm`, ...), the in-place updates (`zero_`, `add_`, `copy_`, ...), the
//! predicates (`isnan`, `isinf`, `logical_not`) and `new_zeros` / `new_ones`. Each is one
//! call to the operator or op it names, so the two spellings cannot differ.

use ferrograd::prelude::*;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::convert::to_tensor;
use crate::guard;
use crate::tensor::PyTensor;

/// The result of an in-place method: the same Python object, its value replaced.
fn updated<'py>(
    slf: &Bound<'py, PyTensor>,
    result: PyTensor,
    op: &str,
) -> PyResult<Bound<'py, PyTensor>> {
    slf.get().in_place(result, op)?;
    Ok(slf.clone())
}

impl PyTensor {
    /// `value` in a new tensor of `size`, of this tensor's dtype unless `dtype` is given.
    fn new_filled(
        &self,
        size: &Bound<'_, PyTuple>,
        dtype: Option<&Bound<'_, PyAny>>,
        value: f64,
    ) -> PyResult<PyTensor> {
        let shape = crate::shape_of(size)?;
        let d = crate::convert::dtype_arg(dtype)?.unwrap_or(self.tensor().dtype());
        guard::run(|| Tensor::full(&shape, value, d)).map(PyTensor::new)
    }

    /// A boolean tensor from `test` on a float tensor; `on_integers` everywhere for an
    /// integer one (integers are finite).
    fn float_test(
        &self,
        py: Python<'_>,
        test: impl FnOnce(&Tensor) -> Tensor + Send,
        on_integers: bool,
    ) -> PyResult<PyTensor> {
        let t = self.tensor().detach();
        if !t.dtype().is_float() {
            let fill = if on_integers {
                t.ones_like()
            } else {
                t.zeros_like()
            };
            return Ok(PyTensor::mask(fill));
        }
        self.map(py, test).map(|r| PyTensor::mask(r.tensor()))
    }
}

/// PyTorch's named forms of the operators: `x.add(y)` is `x + y`, `x.eq(y)` is `x == y`, ...
/// Where the operator falls back on Python's identity test (`x == None` is False), the named
/// form refuses `None`, as PyTorch's `x.eq(None)` does, rather than return `NotImplemented`.
macro_rules! named_forms {
    ($($name:ident => $op:ident -> $ret:ty;)*) => {
        #[pymethods]
        impl PyTensor {
            $(fn $name(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<$ret> {
                if other.is_none() {
                    return Err(PyTypeError::new_err(concat!(
                        stringify!($name),
                        "(): argument 'other' must be a tensor or a number, not None"
                    )));
                }
                self.$op(py, other)
            })*
        }
    };
}

named_forms! {
    mul => __mul__ -> PyTensor;
    div => __truediv__ -> PyTensor;
    lt => __lt__ -> PyTensor;
    le => __le__ -> PyTensor;
    gt => __gt__ -> PyTensor;
    ge => __ge__ -> PyTensor;
    eq => __eq__ -> Py<PyAny>;
    ne => __ne__ -> Py<PyAny>;
    mm => __matmul__ -> PyTensor;
    bmm => __matmul__ -> PyTensor;
}

/// The in-place forms: `x.add_(y)` is `x += y` and returns `x`.
macro_rules! in_place_forms {
    ($($name:ident => $op:ident;)*) => {
        #[pymethods]
        impl PyTensor {
            $(fn $name<'py>(slf: &Bound<'py, Self>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, Self>> {
                let r = slf.get().$op(slf.py(), other)?;
                updated(slf, r, stringify!($name))
            })*
        }
    };
}

in_place_forms! {
    mul_ => __mul__;
    div_ => __truediv__;
}

/// `other · alpha` (PyTorch's `alpha` of `add` and `sub`), or `other` itself without one.
fn scaled<'py>(
    other: &Bound<'py, PyAny>,
    alpha: Option<&Bound<'py, PyAny>>,
    op: &str,
) -> PyResult<Bound<'py, PyAny>> {
    if other.is_none() {
        return Err(PyTypeError::new_err(format!(
            "{op}(): argument 'other' must be a tensor or a number, not None"
        )));
    }
    match alpha {
        Some(a) => other.mul(a),
        None => Ok(other.clone()),
    }
}

#[pymethods]
impl PyTensor {
    /// `self + alpha · other`, PyTorch's `add` (`alpha` 1 by default).
    #[pyo3(signature = (other, *, alpha=None))]
    fn add(
        &self,
        py: Python<'_>,
        other: &Bound<'_, PyAny>,
        alpha: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        self.__add__(py, &scaled(other, alpha, "add")?)
    }
    /// `self − alpha · other`, PyTorch's `sub`.
    #[pyo3(signature = (other, *, alpha=None))]
    fn sub(
        &self,
        py: Python<'_>,
        other: &Bound<'_, PyAny>,
        alpha: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        self.__sub__(py, &scaled(other, alpha, "sub")?)
    }
    /// `self += alpha · other` (the moving average's `p.add_(q, alpha=0.1)`).
    #[pyo3(signature = (other, *, alpha=None))]
    fn add_<'py>(
        slf: &Bound<'py, Self>,
        other: &Bound<'py, PyAny>,
        alpha: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, Self>> {
        let r = slf.get().add(slf.py(), other, alpha)?;
        updated(slf, r, "add_")
    }
    /// `self -= alpha · other`.
    #[pyo3(signature = (other, *, alpha=None))]
    fn sub_<'py>(
        slf: &Bound<'py, Self>,
        other: &Bound<'py, PyAny>,
        alpha: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, Self>> {
        let r = slf.get().sub(slf.py(), other, alpha)?;
        updated(slf, r, "sub_")
    }
    /// A matrix transposed (a vector as it is), as PyTorch's `t()`: a view whose in-place
    /// updates reach this tensor.
    fn t<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTensor>> {
        if slf.get().tensor().ndim() < 2 {
            return Self::permuted(slf, vec![0; slf.get().tensor().ndim()]);
        }
        Self::transpose(slf, 0, 1)
    }
    /// True where an element is NaN.
    fn isnan(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.__ne__(
            py,
            &Bound::new(py, PyTensor::new(self.tensor()))?.into_any(),
        )
    }
    /// True where an element is +inf or -inf (never for integers).
    fn isinf(&self, py: Python<'_>) -> PyResult<PyTensor> {
        self.float_test(py, |x| x.abs().eq_scalar(f64::INFINITY), false)
    }
    /// True where an element is neither NaN nor infinite (always for integers).
    fn isfinite(&self, py: Python<'_>) -> PyResult<PyTensor> {
        self.float_test(py, |x| x.abs().lt_scalar(f64::INFINITY), true)
    }
    /// True where an element is zero (`~` of a boolean tensor).
    fn logical_not(&self, py: Python<'_>) -> PyResult<PyTensor> {
        self.map(py, |x| x.eq_scalar(0.0))
            .map(|r| PyTensor::mask(r.tensor()))
    }
    /// Zeros of `size` (ints or one sequence), of this tensor's dtype unless `dtype` is given.
    #[pyo3(signature = (*size, dtype=None))]
    fn new_zeros(
        &self,
        size: &Bound<'_, PyTuple>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        self.new_filled(size, dtype, 0.0)
    }
    /// Ones of `size` (ints or one sequence), of this tensor's dtype unless `dtype` is given.
    #[pyo3(signature = (*size, dtype=None))]
    fn new_ones(
        &self,
        size: &Bound<'_, PyTuple>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        self.new_filled(size, dtype, 1.0)
    }
    /// The values as int64 (truncated toward zero), as PyTorch's `int()` is for its int32.
    fn int(&self, py: Python<'_>) -> PyResult<PyTensor> {
        self.long(py)
    }

    // ---- in place: a plain tensor's value is replaced, a trainable leaf is updated under
    // no_grad (see `+=`); each returns the tensor itself ----

    /// `result` (an op of this tensor) written into it as the in-place form `op` of that op
    /// writes it: the in-place methods written in Python (`scatter_`, `exp_`, ...) end here.
    fn _in_place_<'py>(
        slf: &Bound<'py, Self>,
        result: PyRef<'py, PyTensor>,
        op: &str,
    ) -> PyResult<Bound<'py, Self>> {
        let result = if result.is_mask() {
            PyTensor::mask(result.tensor())
        } else {
            PyTensor::new(result.tensor())
        };
        updated(slf, result, op)
    }

    fn zero_<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
        let zeros = slf.get().like(slf.get().tensor().detach().zeros_like());
        updated(slf, zeros, "zero_")
    }
    /// Every element set to `value` (converted to the tensor's dtype: a mask takes its truth).
    fn fill_<'py>(slf: &Bound<'py, Self>, value: f64) -> PyResult<Bound<'py, Self>> {
        let t = slf.get().tensor();
        if !t.dtype().is_float() && !value.is_finite() {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
                "fill_: {value} cannot be converted to {} without overflow",
                t.dtype()
            )));
        }
        let filled = slf.get().like(Tensor::full(t.shape(), value, t.dtype()));
        updated(slf, filled, "fill_")
    }
    /// Copies `src`'s values (broadcast to this shape, converted to this dtype).
    fn copy_<'py>(slf: &Bound<'py, Self>, src: &Bound<'py, PyAny>) -> PyResult<Bound<'py, Self>> {
        let t = slf.get().tensor();
        let s = to_tensor(src, Some(t.dtype()))?.detach();
        let s = guard::run(|| s.try_broadcast_to(t.shape()))?.map_err(crate::guard::core_error)?;
        updated(slf, slf.get().like(s.to_dtype(t.dtype())), "copy_")
    }
    #[pyo3(signature = (min=None, max=None))]
    fn clamp_<'py>(
        slf: &Bound<'py, Self>,
        min: Option<&Bound<'py, PyAny>>,
        max: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, Self>> {
        let r = slf.get().clamp(slf.py(), min, max)?;
        updated(slf, r, "clamp_")
    }
}
