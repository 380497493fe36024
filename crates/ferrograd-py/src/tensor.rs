//! `ferrograd.Tensor`: a Rust tensor, or a trainable leaf (a parameter that keeps its identity
//! and its `.grad` across updates).

use std::sync::{Arc, Mutex, OnceLock, RwLock};

use ferrograd::prelude::*;
use pyo3::exceptions::{
    PyIndexError, PyRuntimeError, PyTypeError, PyValueError, PyZeroDivisionError,
};
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyFloat, PyList, PyString, PyTuple, PyWeakrefReference};

use crate::autograd;
use crate::convert::{
    axes_arg, dtype_arg, holds_bools, is_bool_dtype, operand, to_numpy, to_tensor, Operand,
    Padding, PyDType, Size2,
};
use crate::guard::{self, HEAVY};
use crate::index;
use crate::value::{set_leaf, ViewOf, ViewStep};
pub use crate::value::{PyTensor, Value, WriteBack};

/// How an arithmetic op treats integer operands, as PyTorch's type promotion does: an integer
/// beside a float tensor takes its dtype, beside a Python float becomes float32.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Promote {
    /// Two integers give an integer (computed in float64 and converted back: exact while the
    /// values stay below 2⁵³).
    KeepInt,
    /// Integers become float32 (true division, powers).
    ToFloat,
    /// Operands as they are (comparisons compare any dtypes).
    AsIs,
}

/// The operands of an op after promotion, and the dtype its result goes back to.
fn promoted(
    t: Tensor,
    o: Operand,
    py_float: bool,
    how: Promote,
) -> (Tensor, Operand, Option<DType>) {
    let int = |d: DType| !d.is_float();
    let both_int = |t: Tensor, o: Operand| match how {
        Promote::KeepInt => (t.to_dtype(DType::F64), o, Some(DType::I64)),
        _ => (t.to_dtype(DType::F32), o, None),
    };
    match o {
        _ if how == Promote::AsIs => (t, o, None),
        Operand::Scalar(s) if int(t.dtype()) && py_float => {
            (t.to_dtype(DType::F32), Operand::Scalar(s), None)
        }
        Operand::Scalar(s) if int(t.dtype()) => both_int(t, Operand::Scalar(s)),
        Operand::Scalar(s) => (t, Operand::Scalar(s), None),
        Operand::Tensor(o) => match (int(t.dtype()), int(o.dtype())) {
            (true, false) => (t.to_dtype(o.dtype()), Operand::Tensor(o), None),
            (false, true) => {
                let d = t.dtype();
                (t, Operand::Tensor(o.to_dtype(d)), None)
            }
            (true, true) => {
                let to = if how == Promote::KeepInt {
                    DType::F64
                } else {
                    DType::F32
                };
                both_int(t, Operand::Tensor(o.to_dtype(to)))
            }
            // A 0-d tensor beside a tensor with axes takes its float type, as PyTorch's
            // promotion lets dimensioned operands decide within a category.
            (false, false) if t.ndim() == 0 && o.ndim() > 0 => {
                (t.to_dtype(o.dtype()), Operand::Tensor(o), None)
            }
            (false, false) if o.ndim() == 0 && t.ndim() > 0 => {
                let d = t.dtype();
                (t, Operand::Tensor(o.to_dtype(d)), None)
            }
            (false, false) => (t, Operand::Tensor(o), None),
        },
    }
}

/// The element-wise primitives whose result on an integer tensor is an integer tensor, as in
/// PyTorch; the others (`exp`, `sqrt`, ...) give float32 there.
const INTEGER_CLOSED: [&str; 6] = ["neg", "abs", "sign", "floor", "relu", "square"];

/// `f` on `t` keeping PyTorch's result type: a float tensor as it is; an integer tensor
/// computed in float64 and converted back to int64 (exact while the values stay below 2⁵³).
pub(crate) fn int_exact(t: &Tensor, f: impl FnOnce(&Tensor) -> Tensor) -> Tensor {
    if t.dtype().is_float() {
        f(t)
    } else {
        f(&t.to_dtype(DType::F64)).to_dtype(DType::I64)
    }
}

impl PyTensor {
    /// Consecutive views of `sizes` along `dim` (which adds up to its length), as a tuple.
    fn pieces<'py>(
        slf: &Bound<'py, Self>,
        dim: isize,
        sizes: &[usize],
    ) -> PyResult<Bound<'py, PyTuple>> {
        let axis = norm_axis("split", dim, slf.get().tensor().ndim())?;
        let mut start = 0;
        let mut out = Vec::with_capacity(sizes.len());
        for &size in sizes {
            out.push(Self::narrow(slf, axis as isize, start, size)?);
            start += size;
        }
        PyTuple::new(slf.py(), out)
    }

    /// The axes in the order `perm`, a view whose in-place updates reach this tensor.
    pub(crate) fn permuted<'py>(
        slf: &Bound<'py, Self>,
        perm: Vec<usize>,
    ) -> PyResult<Bound<'py, PyTensor>> {
        let mut inverse = vec![0; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            if let Some(slot) = inverse.get_mut(p) {
                *slot = i;
            }
        }
        Self::aliased(
            slf,
            move |_, t| guard::run(|| t.permute(&perm)),
            move |_, _, v| guard::run(|| v.permute(&inverse)),
        )
    }

    /// As `map`, for a view or selection, which keeps a mask a mask.
    fn view_map(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Tensor) -> Tensor + Send,
    ) -> PyResult<PyTensor> {
        if !self.boolean {
            return self.map(py, f);
        }
        // A mask's view is a mask (its 0/1 made inside the guard: a view may be huge).
        let bits = self.map(py, |t| f(t).detach().ne_scalar(0.0).to_dtype(DType::I64))?;
        Ok(PyTensor {
            value: RwLock::new(bits.value()),
            boolean: true,
            writes_to: None,
        })
    }

    /// The view `derive` gives of `slf`, whose in-place updates reach `slf` (`put` gives
    /// `slf`'s new value from its current one and the view's), as PyTorch's views share their
    /// storage. A mask's views keep their own values.
    pub(crate) fn aliased<'py>(
        slf: &Bound<'py, Self>,
        derive: impl Fn(Python<'_>, &Tensor) -> PyResult<Tensor> + Send + Sync + 'static,
        put: impl Fn(Python<'_>, &Tensor, &Tensor) -> PyResult<Tensor> + Send + Sync + 'static,
    ) -> PyResult<Bound<'py, PyTensor>> {
        let (py, this) = (slf.py(), slf.get());
        let value = this.tensor();
        let view = this.like(derive(py, &value)?);
        if this.boolean {
            return Bound::new(py, view);
        }
        // (One element or none is where it is whatever the storage: a lone element is kept
        // inline, not shared.)
        let new = view.tensor();
        let strided = this.is_strided() && (new.numel() <= 1 || new.shares_storage(&value));
        let (base, parent) = match this.view_of() {
            Some(of) => (of.base.clone_ref(py), Some(Arc::clone(&of.step))),
            None => (slf.clone().unbind(), None),
        };
        let step = Arc::new(ViewStep {
            derive: Box::new(derive),
            put: Box::new(put),
            parent,
            view: OnceLock::new(),
        });
        let seen = Mutex::new(base.get().tensor());
        let of = ViewOf {
            base,
            step: Arc::clone(&step),
            strided,
            seen,
            recorded: ferrograd::autograd::is_grad_enabled(),
        };
        let view = Bound::new(py, view.writing_to(WriteBack::View(Arc::new(of))))?;
        let _ = step.view.set(PyWeakrefReference::new(&view)?.unbind());
        Ok(view)
    }

    /// `reshape` as PyTorch's: a view where the elements' places allow one (a reshape of this
    /// tensor's own elements that needs no copy), else a copy.
    fn reshaped_where_possible<'py>(
        slf: &Bound<'py, Self>,
        shape: Vec<usize>,
    ) -> PyResult<Bound<'py, PyTensor>> {
        let (py, this) = (slf.py(), slf.get());
        let t = this.tensor();
        let r = guard::run(|| t.reshape(&shape))?;
        if this.is_strided() && (r.numel() <= 1 || r.shares_storage(&t)) {
            return Self::reshaped(slf, shape);
        }
        Bound::new(py, this.like(r))
    }

    /// [`PyTensor::aliased`] for a view in another shape (the same elements in order).
    fn reshaped<'py>(slf: &Bound<'py, Self>, shape: Vec<usize>) -> PyResult<Bound<'py, PyTensor>> {
        Self::aliased(
            slf,
            move |_, t| guard::run(|| t.reshape(&shape)),
            |_, base, v| guard::run(|| v.reshape(base.shape())),
        )
    }

    /// `all` (`fold` the minimum) or `any` (the maximum) of the non-zero test over `dim`.
    fn truth(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
        fold: Reduction,
    ) -> PyResult<PyTensor> {
        let axes = axes_arg(dim)?;
        let nonzero = PyTensor::mask(self.tensor()).tensor().to_dtype(DType::F32);
        guard::run_heavy(py, nonzero.numel() >= HEAVY, || {
            reduce(&nonzero, axes, keepdim, fold)
        })
        .map(PyTensor::mask)
    }

    /// Element-wise logic on masks (`&`, `|`, `^`), refused for other tensors.
    fn logic(
        &self,
        py: Python<'_>,
        other: &Bound<'_, PyAny>,
        op: &str,
        f: impl FnOnce(&Tensor, &Tensor) -> Tensor + Send,
    ) -> PyResult<PyTensor> {
        let o = match other.cast::<PyTensor>() {
            Ok(o) if o.get().boolean => o.get().tensor(),
            Ok(_) => return Err(logic_error(op)),
            Err(_) => PyTensor::mask(to_tensor(other, None)?).tensor(),
        };
        if !self.boolean {
            return Err(logic_error(op));
        }
        let t = self.tensor().to_dtype(DType::F32);
        let o = o.to_dtype(DType::F32);
        guard::run_heavy(py, t.numel() >= HEAVY, || f(&t, &o)).map(PyTensor::mask)
    }

    /// The integer indices `index` gives along axis `dim` for `op`, each checked against
    /// that axis (floats, booleans and negative positions refused, as PyTorch does).
    fn indices_along(
        &self,
        index: &Bound<'_, PyAny>,
        op: &str,
        dim: isize,
    ) -> PyResult<Vec<usize>> {
        let shape = self.tensor().shape().to_vec();
        let axes = shape.len() as isize;
        let axis = if dim < 0 { dim + axes } else { dim };
        match usize::try_from(axis).ok().and_then(|a| shape.get(a)) {
            Some(&len) => crate::index::integer_indices(index, op, (len, false)),
            None => Err(pyo3::exceptions::PyIndexError::new_err(format!(
                "{op}: dimension {dim} is out of range for a tensor of {axes} axes"
            ))),
        }
    }

    pub(crate) fn map(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Tensor) -> Tensor + Send,
    ) -> PyResult<PyTensor> {
        let t = self.tensor();
        let heavy = t.numel() >= HEAVY;
        guard::run_heavy(py, heavy, || f(&t)).map(PyTensor::new)
    }

    /// An element-wise primitive by name, typed as PyTorch types it on integers (above).
    pub(crate) fn map_unary(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Tensor) -> Tensor + Send,
        name: &str,
    ) -> PyResult<PyTensor> {
        self.map(py, |t| match t.dtype() {
            d if d.is_float() => f(t),
            _ if INTEGER_CLOSED.contains(&name) => int_exact(t, f),
            _ => f(&t.to_dtype(DType::F32)),
        })
    }

    /// numpy's `ufunc` (`floor_divide`, `remainder`, `power`) of this tensor and `other`
    /// (swapped when `reflected`), in PyTorch's result dtype: exact for integers of any size,
    /// and with Python's rounding for floats, where `floor(a / b)` would round the quotient
    /// first (`1.0 // 0.1` is 9). On tracked operands the result carries PyTorch's derivative:
    /// the remainder's is `a − q·b` with the quotient `q` constant, the quotient has none (its
    /// backward stops at `floor`, naming it), and so has an integer power.
    fn by_numpy(
        &self,
        py: Python<'_>,
        other: &Bound<'_, PyAny>,
        reflected: bool,
        ufunc: &str,
    ) -> PyResult<PyTensor> {
        let t = self.tensor();
        let o = operand(other, t.dtype())?;
        let ints = self.int_with_int(other)?;
        let (t, o) = if ints {
            (t, o)
        } else {
            let (t, o, _) = promoted(t, o, other.is_instance_of::<PyFloat>(), Promote::ToFloat);
            (t, o)
        };
        let other_t = match o {
            Operand::Tensor(o) => Some(o),
            Operand::Scalar(_) => None,
        };
        // An integer division by zero is an error, as in PyTorch (a float one gives inf or NaN).
        if ints && ufunc != "power" {
            let by_zero = match (reflected, &other_t) {
                (true, _) => t.to_vec::<i64>().contains(&0),
                (false, Some(o)) => o.to_vec::<i64>().contains(&0),
                (false, None) => other.extract::<i64>().is_ok_and(|v| v == 0),
            };
            if by_zero {
                return Err(PyZeroDivisionError::new_err(
                    "integer division or remainder by zero",
                ));
            }
        }
        let dtype = match &other_t {
            _ if ints => DType::I64,
            Some(o) => t.dtype().promote(o.dtype()),
            None => t.dtype(),
        };
        // A Python number goes to numpy as it is (an int of any size stays exact).
        let theirs = match &other_t {
            Some(o) => to_numpy(py, &o.detach())?,
            None => other.clone(),
        };
        let mine = to_numpy(py, &t.detach())?;
        let (a, b) = if reflected {
            (theirs, mine)
        } else {
            (mine, theirs)
        };
        let value = numpy_call(py, ufunc, (&a, &b), dtype)?;
        let (num, den) = if reflected {
            (other_t, Some(t))
        } else {
            (Some(t), other_t)
        };
        // x − x.detach(): zero, carrying x's graph when x is tracked.
        let graph_of = |x: &Option<Tensor>| {
            x.as_ref()
                .filter(|x| x.is_tracked())
                .map(|x| x - &x.detach())
        };
        let (dnum, dden) = (graph_of(&num), graph_of(&den));
        if dnum.is_none() && dden.is_none() {
            return Ok(PyTensor::new(value));
        }
        let q = if ufunc == "remainder" {
            Some(numpy_call(py, "floor_divide", (&a, &b), dtype)?)
        } else {
            None
        };
        guard::run(|| match q {
            Some(q) => {
                let plus = dnum.map_or(value.clone(), |d| &value + &d);
                dden.map_or(plus.clone(), |d| &plus - &(&q * &d))
            }
            None => &value + &dnum.or(dden).expect("a tracked operand").floor(),
        })
        .map(PyTensor::new)
    }

    /// Whether this tensor and `other` (a Python int or a tensor) are both integers.
    fn int_with_int(&self, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        if self.tensor().dtype().is_float() || other.is_instance_of::<PyFloat>() {
            return Ok(false);
        }
        Ok(match other.cast::<PyTensor>() {
            Ok(o) => !o.get().tensor().dtype().is_float(),
            Err(_) => other.is_instance_of::<pyo3::types::PyInt>(),
        })
    }

    /// `f` on the tensor, an integer one staying integer (`int_exact`).
    pub(crate) fn map_int(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Tensor) -> Tensor + Send,
    ) -> PyResult<PyTensor> {
        self.map(py, |t| int_exact(t, f))
    }

    fn binary(
        &self,
        py: Python<'_>,
        other: &Bound<'_, PyAny>,
        promote: Promote,
        tensors: impl FnOnce(&Tensor, &Tensor) -> Tensor + Send,
        scalar: impl FnOnce(&Tensor, f64) -> Tensor + Send,
    ) -> PyResult<PyTensor> {
        let t = self.tensor();
        let o = operand(other, t.dtype())?;
        let py_float = other.is_instance_of::<PyFloat>();
        let (t, o, back) = promoted(t, o, py_float, promote);
        let heavy = match &o {
            Operand::Scalar(_) => t.numel(),
            Operand::Tensor(o) => t.numel().max(o.numel()),
        } >= HEAVY;
        let r = guard::run_heavy(py, heavy, || match &o {
            Operand::Scalar(s) => scalar(&t, *s),
            Operand::Tensor(o) => tensors(&t, o),
        })?;
        Ok(PyTensor::new(match back {
            Some(d) => r.to_dtype(d),
            None => r,
        }))
    }

    /// `op=` on this object: a trainable leaf is updated in place (only under `no_grad`, as in
    /// PyTorch, since the old value may be needed by a recorded graph); a plain tensor is
    /// replaced by the result, and a view's update reaches the tensor it was taken from.
    pub(crate) fn in_place(&self, result: PyTensor, op: &str) -> PyResult<()> {
        let result = self.in_place_result(result, op)?;
        let Some(view) = self.view_of() else {
            return self.commit(result, op);
        };
        let steps = view.steps();
        let base = view.base.get();
        Python::attach(|py| -> PyResult<()> {
            // The base's value and that of each view between it and this one, now...
            let mut parents = vec![base.tensor()];
            for s in &steps[..steps.len() - 1] {
                let next = (s.derive)(py, &parents[parents.len() - 1])?;
                parents.push(next);
            }
            // ...then each takes its view's new values, back to the base.
            let mut value = result.tensor();
            for (s, parent) in steps.iter().zip(&parents).rev() {
                value = (s.put)(py, parent, &value)?;
            }
            // The base keeps its elements in order (as PyTorch's storage does), so that
            // views taken of it later are views again.
            if parents[0].is_contiguous() && !value.is_contiguous() {
                value = guard::run(|| value.contiguous())?;
            }
            // Refused at the base (a trainable leaf while gradients are recorded): nothing
            // changes.
            base.commit(base.in_place_result(base.like(value), op)?, op)?;
            // This view and those between that are still about read the base's new value;
            // one that was in the graph stays in it (under `no_grad` too, as PyTorch's views
            // of a trainable tensor do).
            let new_base = base.tensor();
            let mut tracked = new_base.clone();
            for s in &steps {
                tracked = ferrograd::autograd::enable_grad(|| (s.derive)(py, &tracked))?;
                let mine = std::ptr::eq(*s, &*view.step);
                let alive = (!mine)
                    .then(|| s.view.get().and_then(|w| w.bind(py).upgrade()))
                    .flatten()
                    .and_then(|v| v.cast_into::<PyTensor>().ok());
                let here = if mine {
                    Some(self)
                } else {
                    alive.as_ref().map(|v| v.get())
                };
                if let Some((v, of)) = here.and_then(|v| Some((v, v.view_of()?))) {
                    let value = if of.tracked(&new_base) {
                        tracked.clone()
                    } else {
                        tracked.detach()
                    };
                    v.replace(Value::Plain(value));
                    *of.seen.lock().unwrap_or_else(|e| e.into_inner()) = new_base.clone();
                }
            }
            Ok(())
        })
    }

    /// Takes `result` (checked) as this tensor's value, and writes it to the storage behind
    /// `.grad`, `.data` or a buffer.
    fn commit(&self, result: PyTensor, op: &str) -> PyResult<()> {
        // A cleared `.grad` is no longer this tensor's storage: nothing to write to.
        if let Some(target) = self.writes_to.as_ref().filter(|w| w.live()) {
            target.write(&result.tensor())?;
        }
        match &self.value() {
            Value::Leaf(leaf) => {
                if ferrograd::autograd::is_grad_enabled() {
                    return Err(PyRuntimeError::new_err(format!(
                        "a trainable leaf cannot be updated in place ({op}) while gradients are \
                         recorded; update it inside `with ferrograd.no_grad():` or assign .data"
                    )));
                }
                set_leaf(leaf, &result.tensor())
            }
            Value::Plain(_) => {
                self.replace(result.value());
                Ok(())
            }
        }
    }
}

impl PyTensor {
    /// What an in-place `op` leaves in this tensor, as PyTorch allows it: the same shape,
    /// a float result in the tensor's own float type; an integer or boolean tensor cannot take a
    /// float or integer result.
    fn in_place_result(&self, result: PyTensor, op: &str) -> PyResult<PyTensor> {
        let (old, new) = (self.tensor(), result.tensor());
        let kind = |t: &Tensor, mask: bool| {
            if mask {
                "bool".to_string()
            } else {
                t.dtype().to_string()
            }
        };
        let widened = (self.boolean && !result.boolean)
            || (!old.dtype().is_float() && new.dtype().is_float());
        if widened {
            return Err(PyRuntimeError::new_err(format!(
                "{op}: result type {} can't be cast to the desired output type {}",
                kind(&new, result.boolean),
                kind(&old, self.boolean)
            )));
        }
        if new.shape() != old.shape() {
            return Err(PyRuntimeError::new_err(format!(
                "{op}: output with shape {:?} doesn't match the broadcast shape {:?}",
                old.shape(),
                new.shape()
            )));
        }
        Ok(if new.dtype() == old.dtype() {
            result
        } else {
            self.like(new.to_dtype(old.dtype()))
        })
    }
}

/// numpy's `ufunc(a, b)` (warnings of division by zero silenced, as PyTorch gives inf and NaN
/// without one) as a tensor of `dtype`.
fn numpy_call(
    py: Python<'_>,
    ufunc: &str,
    (a, b): (&Bound<'_, PyAny>, &Bound<'_, PyAny>),
    dtype: DType,
) -> PyResult<Tensor> {
    let np = py.import("numpy")?;
    let quiet = np.call_method("errstate", (), Some(&[("all", "ignore")].into_py_dict(py)?))?;
    quiet.call_method0("__enter__")?;
    let r = np.call_method1(ufunc, (a, b));
    quiet.call_method1("__exit__", (py.None(), py.None(), py.None()))?;
    to_tensor(&np.call_method1("asarray", (r?,))?, Some(dtype))
}

fn shape_arg(args: &Bound<'_, PyTuple>) -> PyResult<Vec<isize>> {
    if args.len() == 1 {
        let first = args.get_item(0)?;
        if first.is_instance_of::<PyTuple>() || first.is_instance_of::<PyList>() {
            return first.extract();
        }
    }
    args.extract()
}

/// `shape` with one `-1` inferred from `numel`.
fn infer_shape(shape: &[isize], numel: usize) -> PyResult<Vec<usize>> {
    let known: usize = shape
        .iter()
        .filter(|&&d| d >= 0)
        .map(|&d| d as usize)
        .product();
    let free = shape.iter().filter(|&&d| d < 0).count();
    if free > 1 || shape.iter().any(|&d| d < -1) {
        return Err(PyValueError::new_err(format!(
            "reshape: {shape:?} has more than one -1 or a negative size"
        )));
    }
    shape
        .iter()
        .map(|&d| {
            if d >= 0 {
                Ok(d as usize)
            } else if known > 0 && numel.is_multiple_of(known) {
                Ok(numel / known)
            } else {
                Err(PyValueError::new_err(format!(
                    "reshape: cannot infer -1 in {shape:?} for {numel} elements"
                )))
            }
        })
        .collect()
}

#[pymethods]
impl PyTensor {
    /// `Tensor(data, dtype=None, requires_grad=False)`: `ferrograd.tensor`, but float32
    /// unless `dtype` says otherwise, as PyTorch's `torch.Tensor([1, 2])` (its float tensor
    /// type) is.
    #[new]
    #[pyo3(signature = (data, dtype=None, requires_grad=false))]
    fn py_new(
        data: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
        requires_grad: bool,
    ) -> PyResult<PyTensor> {
        let given = dtype_arg(dtype)?;
        let t = to_tensor(data, given.or(Some(DType::F32)))?.detach();
        if is_bool_dtype(dtype)? {
            return Ok(PyTensor::mask(t));
        }
        value_for(t, requires_grad).map(PyTensor::from_value)
    }

    /// Numpy does not apply its ufuncs to tensors: `array + tensor` calls `Tensor.__radd__`,
    /// so the result stays a tensor on the graph.
    #[classattr]
    fn __array_ufunc__() -> Option<()> {
        None
    }

    #[classattr]
    fn __array_priority__() -> f64 {
        1000.0
    }

    // ---- what it is ----

    /// The shape, as a tuple.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.tensor().shape())
    }

    /// The size of axis `dim`, or the shape when `dim` is None.
    #[pyo3(signature = (dim=None))]
    fn size<'py>(&self, py: Python<'py>, dim: Option<isize>) -> PyResult<Bound<'py, PyAny>> {
        let t = self.tensor();
        match dim {
            None => Ok(PyTuple::new(py, t.shape())?.into_any()),
            Some(d) => {
                let i = norm_axis("size", d, t.ndim())?;
                Ok(t.shape()[i].into_pyobject(py)?.into_any())
            }
        }
    }

    /// The element type.
    #[getter]
    fn dtype(&self) -> PyDType {
        if self.boolean {
            PyDType::Bool
        } else {
            self.tensor().dtype().into()
        }
    }

    /// The number of axes.
    #[getter]
    fn ndim(&self) -> usize {
        self.tensor().ndim()
    }

    /// The number of elements.
    fn numel(&self) -> usize {
        self.tensor().numel()
    }

    fn dim(&self) -> usize {
        self.tensor().ndim()
    }

    fn __len__(&self) -> PyResult<usize> {
        self.tensor()
            .shape()
            .first()
            .copied()
            .ok_or_else(|| PyTypeError::new_err("len() of a 0-d tensor"))
    }

    /// Whether gradients flow to this tensor: a trainable leaf, or a result computed from one
    /// while recording.
    #[getter]
    fn requires_grad(&self) -> bool {
        match &self.fresh_value() {
            Value::Leaf(l) => !l.param.is_frozen(),
            Value::Plain(t) => t.is_tracked(),
        }
    }

    /// `t.requires_grad = flag`, as `t.requires_grad_(flag)` (PyTorch's way of freezing a
    /// parameter).
    #[setter(requires_grad)]
    fn set_requires_grad(slf: Bound<'_, Self>, flag: bool) -> PyResult<()> {
        if let Value::Plain(t) = slf.get().fresh_value() {
            if t.is_tracked() && !flag {
                return Err(PyRuntimeError::new_err(
                    "requires_grad: only a leaf's flag can be changed; this tensor was computed \
                     from trainable ones (take .detach() for one without gradients)",
                ));
            }
        }
        Self::requires_grad_(slf, flag).map(drop)
    }

    /// Whether this is a trainable leaf (made with `requires_grad=True` or a layer's
    /// parameter) rather than a computed result.
    #[getter]
    fn is_leaf(&self) -> bool {
        match &self.fresh_value() {
            Value::Leaf(_) => true,
            Value::Plain(t) => !t.is_tracked() || t.is_leaf(),
        }
    }

    /// The name of the op that computed this tensor (`"mul"`, `"matmul"`), as PyTorch's
    /// `grad_fn` names it; `None` for a leaf and for a tensor no gradient flows through.
    #[getter]
    fn grad_fn(&self) -> Option<String> {
        self.tensor().grad_fn()
    }

    /// The recorded graph that leads to this tensor, one node per line, inputs first.
    fn graph_listing(&self) -> String {
        self.tensor().graph_listing()
    }

    /// Whether this is a trainable leaf (a parameter), frozen or not: what optimizers update.
    #[getter]
    fn is_parameter(&self) -> bool {
        matches!(self.value(), Value::Leaf(_))
    }

    /// A trainable leaf's value converted to `dtype` in place, keeping its identity (what
    /// a module's `double()` does to its own parameters).
    fn _convert_leaf(&self, dtype: &Bound<'_, PyAny>) -> PyResult<()> {
        let d = dtype_arg(Some(dtype))?.unwrap_or(DType::F32);
        match &self.value() {
            Value::Leaf(l) if d.is_float() => guard::run(|| l.param.set_dtype(d)),
            Value::Leaf(_) => Err(PyTypeError::new_err("a parameter's dtype must be a float")),
            Value::Plain(_) => Err(PyTypeError::new_err(
                "only a trainable leaf converts in place",
            )),
        }
    }

    /// Makes this tensor a trainable leaf in place (a copy of its value, cut from any graph),
    /// or, with `False`, a plain value. Returns the tensor itself.
    #[pyo3(signature = (requires_grad=true))]
    fn requires_grad_<'py>(
        slf: Bound<'py, Self>,
        requires_grad: bool,
    ) -> PyResult<Bound<'py, Self>> {
        let this = slf.get();
        match this.fresh_value() {
            // A parameter keeps its identity: turning it off freezes it (no gradient, no
            // update), as PyTorch's `p.requires_grad_(False)`.
            Value::Leaf(l) => l.param.set_frozen(!requires_grad),
            Value::Plain(t) if requires_grad => {
                if t.is_tracked() {
                    return Err(PyRuntimeError::new_err(
                        "requires_grad_: only a leaf can be made trainable; this tensor was \
                         computed from trainable ones (use .detach().requires_grad_())",
                    ));
                }
                if !t.dtype().is_float() {
                    return Err(PyTypeError::new_err(
                        "requires_grad_: only float tensors can require gradients",
                    ));
                }
                let leaf = autograd::new_leaf(&t);
                this.replace(Value::Leaf(leaf.clone()));
                autograd::set_owner(&leaf, slf.as_any())?;
            }
            Value::Plain(_) => {}
        }
        Ok(slf)
    }

    /// Pickling (`pickle`, `torch.save`-style checkpoints of nested dicts): the values as a
    /// numpy array, rebuilt by `ferrograd.tensor` (a trainable leaf as a new trainable leaf, a
    /// frozen one as a frozen one, a computed tensor as its values).
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let values = slf.call_method0("detach")?.call_method0("numpy")?;
        let frozen = matches!(slf.get().value(), Value::Leaf(l) if l.param.is_frozen());
        if frozen {
            let rebuild = py
                .import("ferrograd.serialization")?
                .getattr("_frozen_leaf")?;
            return (rebuild, (values,)).into_pyobject(py);
        }
        let rebuild = py.import("ferrograd._core")?.getattr("tensor")?;
        let trainable = matches!(slf.get().value(), Value::Leaf(_));
        (rebuild, (values, py.None(), trainable)).into_pyobject(py)
    }

    /// `copy.deepcopy(t)`: the same values in a tensor of its own. A trainable leaf becomes a
    /// new one (its frozen flag and `.grad` copied), so an optimizer tells them apart; a
    /// tensor computed from trainable ones is refused, as PyTorch refuses it.
    fn __deepcopy__(slf: &Bound<'_, Self>, _memo: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let this = slf.get();
        match this.fresh_value() {
            Value::Leaf(l) => {
                let leaf = autograd::new_leaf(&l.param.tensor().detach());
                leaf.param.set_frozen(l.param.is_frozen());
                leaf.set_grad(l.grad());
                let copy = PyTensor {
                    value: RwLock::new(Value::Leaf(leaf.clone())),
                    boolean: this.boolean,
                    writes_to: None,
                };
                let obj = Bound::new(slf.py(), copy)?.into_any();
                autograd::set_owner(&leaf, &obj)?;
                Ok(obj.unbind())
            }
            Value::Plain(t) if t.is_tracked() => Err(PyRuntimeError::new_err(
                "deepcopy: only tensors made by the user (leaves) can be copied, as in PyTorch; \
                 this one was computed from trainable tensors (copy its .detach())",
            )),
            Value::Plain(t) => Ok(Bound::new(slf.py(), this.like(t.detach()))?
                .into_any()
                .unbind()),
        }
    }

    /// The gradients the backward passes that reached this leaf gave it, summed since the
    /// last `zero_grad()` (or `w.grad = None`), as PyTorch's; None before any. Plain tensors
    /// have none.
    #[getter]
    fn grad(&self) -> Option<PyTensor> {
        match &self.value() {
            Value::Leaf(l) => l
                .grad()
                .map(|g| PyTensor::new(g).writing_to(WriteBack::Grad(l.clone()))),
            Value::Plain(_) => None,
        }
    }

    #[setter]
    fn set_grad(&self, g: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let Value::Leaf(l) = &self.value() else {
            return Err(PyTypeError::new_err(
                "only a trainable leaf has a .grad (make one with requires_grad=True)",
            ));
        };
        let param = l.param.tensor();
        let g = g.filter(|g| !g.is_none());
        // A tensor keeps its dtype, as PyTorch's setter requires (a float64 gradient is not
        // rounded into a float32 parameter); other values are read in the parameter's.
        if let Some(t) = g.and_then(|g| g.cast::<PyTensor>().ok()) {
            let dtype = t.get().tensor().dtype();
            if dtype != param.dtype() {
                return Err(PyRuntimeError::new_err(format!(
                    "assigned grad has data of a different type ({}) from the tensor's ({})",
                    PyDType::from(dtype).name(),
                    PyDType::from(param.dtype()).name()
                )));
            }
        }
        let g = g.map(|g| to_tensor(g, Some(param.dtype()))).transpose()?;
        // Checked here, as PyTorch does, not at the optimizer's step that would read it.
        if let Some(g) = g.as_ref().filter(|g| g.shape() != param.shape()) {
            return Err(PyValueError::new_err(format!(
                "a gradient of shape {:?} cannot be the .grad of a tensor of shape {:?}",
                g.shape(),
                param.shape()
            )));
        }
        l.set_grad(g);
        Ok(())
    }

    /// The value cut from the graph (shares the data).
    #[getter]
    fn data(&self) -> PyTensor {
        self.detach()
    }

    /// Sets the value: a trainable leaf keeps its identity (the shape must stay).
    #[setter]
    fn set_data(&self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let t = to_tensor(value, Some(self.tensor().dtype()))?;
        match &self.value() {
            Value::Leaf(l) => set_leaf(l, &t),
            Value::Plain(_) => {
                self.replace(Value::Plain(t.detach()));
                Ok(())
            }
        }
    }

    /// The same values cut from the graph; in-place updates of it reach the same storage,
    /// as PyTorch's `detach()` and `.data` share it (a leaf's value, a `.grad`, a buffer).
    fn detach(&self) -> PyTensor {
        let values = self.like(self.tensor().detach());
        let target = match &self.value() {
            Value::Leaf(l) => Some(WriteBack::Data(l.clone())),
            // (A view's values detached are a copy: what it was taken from, tracked or not,
            // is not changed through them.)
            Value::Plain(_) => self
                .writes_to
                .clone()
                .filter(|w| !matches!(w, WriteBack::View(_))),
        };
        match target {
            Some(t) => values.writing_to(t),
            None => values,
        }
    }

    /// A plain copy (tracked like any op: gradients flow through it).
    fn clone(&self, py: Python<'_>) -> PyResult<PyTensor> {
        self.view_map(py, |t| {
            if t.dtype().is_float() {
                t * 1.0
            } else {
                t.detach()
            }
        })
    }

    // ---- to Python ----

    /// A numpy array with a copy of the values.
    fn numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let a = to_numpy(py, &self.tensor())?;
        if self.boolean {
            a.call_method1("astype", ("bool",))
        } else {
            Ok(a)
        }
    }

    #[pyo3(signature = (dtype=None, copy=None))]
    fn __array__<'py>(
        &self,
        py: Python<'py>,
        dtype: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = copy;
        let a = self.numpy(py)?;
        match dtype.filter(|d| !d.is_none()) {
            Some(d) => a.call_method1("astype", (d,)),
            None => Ok(a),
        }
    }

    /// The value of a one-element tensor, as a Python float (int for int64).
    fn item<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let t = self.tensor();
        if t.numel() != 1 {
            return Err(PyValueError::new_err(format!(
                "item: the tensor has {} elements (shape {:?}); only one-element tensors \
                 convert to a Python number",
                t.numel(),
                t.shape()
            )));
        }
        Ok(match t.dtype() {
            DType::I64 if self.boolean => {
                let b = t.to_vec::<i64>()[0] != 0;
                b.into_pyobject(py)?.to_owned().into_any()
            }
            DType::I64 => t.to_vec::<i64>()[0].into_pyobject(py)?.into_any(),
            _ => t.item().into_pyobject(py)?.into_any(),
        })
    }

    /// The values as nested Python lists.
    fn tolist<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.numpy(py)?.call_method0("tolist")
    }

    fn __float__(&self, py: Python<'_>) -> PyResult<f64> {
        self.item(py)?.extract()
    }

    fn __int__(&self, py: Python<'_>) -> PyResult<i64> {
        let v = self.item(py)?;
        match v.extract::<i64>() {
            Ok(i) => Ok(i),
            Err(_) => Ok(v.extract::<f64>()? as i64),
        }
    }

    /// An int64 one-element tensor used as an index (`xs[t]`).
    fn __index__(&self, py: Python<'_>) -> PyResult<i64> {
        let t = self.tensor();
        if t.dtype() != DType::I64 || t.numel() != 1 {
            return Err(PyTypeError::new_err(
                "only one-element int64 tensors can be used as an index",
            ));
        }
        self.__int__(py)
    }

    fn __bool__(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.item(py)?.extract::<f64>()? != 0.0)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        if self.boolean {
            let values = self
                .numpy(py)?
                .call_method0("__repr__")?
                .extract::<String>()?;
            let body = values.trim_start_matches("array(").trim_end_matches(')');
            return Ok(format!("tensor({body}, dtype=ferrograd.bool)"));
        }
        Ok(self.tensor().to_string())
    }

    /// Tensors hash by identity (as PyTorch's): `==` compares element-wise.
    fn __hash__(slf: &Bound<'_, Self>) -> isize {
        slf.as_ptr() as isize
    }

    // ---- conversions ----

    /// `to(dtype)`, `to("cpu")`, `to(other_tensor)`, `to(device, dtype)`, as PyTorch's: the
    /// values converted to the dtype (a differentiable cast between float dtypes); the device
    /// can only be the CPU, where the tensor already is.
    #[pyo3(signature = (*args, dtype=None, device=None, non_blocking=false, copy=false))]
    fn to(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        dtype: Option<&Bound<'_, PyAny>>,
        device: Option<&Bound<'_, PyAny>>,
        non_blocking: bool,
        copy: bool,
    ) -> PyResult<Py<PyAny>> {
        let _ = (non_blocking, copy);
        let py = slf.py();
        let target = to_target(args.iter().chain(dtype.cloned()).chain(device.cloned()))?;
        let this = slf.get();
        match target {
            None => Ok(slf.clone().into_any().unbind()),
            Some(d) if is_bool_dtype(Some(&d))? => {
                Ok(Bound::new(py, PyTensor::mask(this.tensor()))?
                    .into_any()
                    .unbind())
            }
            Some(d) => {
                let d = dtype_arg(Some(&d))?.unwrap_or(DType::F32);
                Ok(Bound::new(py, this.map(py, |t| t.to_dtype(d))?)?
                    .into_any()
                    .unbind())
            }
        }
    }

    /// The tensor itself: ferrograd computes on the CPU.
    fn cpu(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// The device, always the CPU (`fg.device("cpu")`, equal to the string `"cpu"`).
    #[getter]
    fn device<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        py.import("ferrograd.devices")?
            .getattr("device")?
            .call1(("cpu",))
    }

    /// A boolean tensor: true where the element is non-zero.
    fn bool(&self) -> PyTensor {
        PyTensor::mask(self.tensor())
    }

    /// Whether every element (along `dim`, when given) is non-zero, as a boolean tensor.
    #[pyo3(signature = (dim=None, keepdim=false))]
    fn all(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
    ) -> PyResult<PyTensor> {
        self.truth(py, dim, keepdim, Tensor::min_axes)
    }

    /// Whether any element (along `dim`, when given) is non-zero, as a boolean tensor.
    #[pyo3(signature = (dim=None, keepdim=false))]
    fn any(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
    ) -> PyResult<PyTensor> {
        self.truth(py, dim, keepdim, Tensor::max_axes)
    }

    /// Logical not of a boolean tensor.
    pub(crate) fn __invert__(&self) -> PyResult<PyTensor> {
        if !self.boolean {
            return Err(logic_error("~"));
        }
        Ok(PyTensor::mask(
            self.tensor().to_dtype(DType::F32).rsub_scalar(1.0),
        ))
    }

    fn __and__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.logic(py, other, "&", |a, b| a * b)
    }

    fn __rand__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.__and__(py, other)
    }

    fn __or__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.logic(py, other, "|", Tensor::maximum)
    }

    fn __ror__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.__or__(py, other)
    }

    fn __xor__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.logic(py, other, "^", Tensor::ne)
    }

    fn __rxor__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.__xor__(py, other)
    }

    fn float(&self, py: Python<'_>) -> PyResult<PyTensor> {
        self.map(py, |t| t.to_dtype(DType::F32))
    }

    fn double(&self, py: Python<'_>) -> PyResult<PyTensor> {
        self.map(py, |t| t.to_dtype(DType::F64))
    }

    pub(crate) fn long(&self, py: Python<'_>) -> PyResult<PyTensor> {
        self.map(py, |t| t.to_dtype(DType::I64))
    }

    // ---- operators ----

    pub(crate) fn __add__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.binary(py, other, Promote::KeepInt, |a, b| a + b, |a, s| a + s)
    }

    fn __radd__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.binary(py, other, Promote::KeepInt, |a, b| b + a, |a, s| a + s)
    }

    pub(crate) fn __sub__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.binary(py, other, Promote::KeepInt, |a, b| a - b, |a, s| a - s)
    }

    fn __rsub__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.binary(py, other, Promote::KeepInt, |a, b| b - a, |a, s| s - a)
    }

    pub(crate) fn __mul__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.binary(py, other, Promote::KeepInt, |a, b| a * b, |a, s| a * s)
    }

    fn __rmul__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.binary(py, other, Promote::KeepInt, |a, b| b * a, |a, s| a * s)
    }

    pub(crate) fn __truediv__(
        &self,
        py: Python<'_>,
        other: &Bound<'_, PyAny>,
    ) -> PyResult<PyTensor> {
        self.binary(py, other, Promote::ToFloat, |a, b| a / b, |a, s| a / s)
    }

    fn __rtruediv__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.binary(py, other, Promote::ToFloat, |a, b| b / a, |a, s| s / a)
    }

    /// `x // y`: the quotient rounded down (PyTorch's `floor_divide`); integers stay integers.
    fn __floordiv__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.by_numpy(py, other, false, "floor_divide")
    }

    fn __rfloordiv__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.by_numpy(py, other, true, "floor_divide")
    }

    /// `x % y` with the divisor's sign, as Python's and PyTorch's `remainder`.
    fn __mod__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.by_numpy(py, other, false, "remainder")
    }

    fn __rmod__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.by_numpy(py, other, true, "remainder")
    }

    pub(crate) fn __matmul__(
        &self,
        py: Python<'_>,
        other: &Bound<'_, PyAny>,
    ) -> PyResult<PyTensor> {
        let o = to_tensor(other, Some(self.tensor().dtype()))?;
        self.map(py, |t| t.matmul(&o))
    }

    fn __rmatmul__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let o = to_tensor(other, Some(self.tensor().dtype()))?;
        self.map(py, |t| o.matmul(t))
    }

    /// `x ** p`: a number `p` is `powf`; a tensor exponent is `exp(p · ln x)` (x > 0).
    fn __pow__(
        &self,
        py: Python<'_>,
        exponent: &Bound<'_, PyAny>,
        modulo: &Bound<'_, PyAny>,
    ) -> PyResult<PyTensor> {
        if !modulo.is_none() {
            return Err(PyTypeError::new_err(
                "pow with a modulo is not defined for tensors",
            ));
        }
        // An integer to an integer power stays an integer, as in PyTorch (numpy refuses a
        // negative power, as PyTorch does).
        if self.int_with_int(exponent)? {
            return self.by_numpy(py, exponent, false, "power");
        }
        self.binary(
            py,
            exponent,
            Promote::ToFloat,
            |a, p| (p * &a.log()).exp(),
            |a, s| a.powf(s),
        )
    }

    /// `s ** x` for a number `s > 0`: `exp(x · ln s)`.
    fn __rpow__(
        &self,
        py: Python<'_>,
        base: &Bound<'_, PyAny>,
        modulo: &Bound<'_, PyAny>,
    ) -> PyResult<PyTensor> {
        if !modulo.is_none() {
            return Err(PyTypeError::new_err(
                "pow with a modulo is not defined for tensors",
            ));
        }
        if self.int_with_int(base)? {
            return self.by_numpy(py, base, true, "power");
        }
        self.binary(
            py,
            base,
            Promote::ToFloat,
            |x, b| (x * &b.log()).exp(),
            |x, s| (x * s.ln()).exp(),
        )
    }

    fn __neg__(&self, py: Python<'_>) -> PyResult<PyTensor> {
        self.map_unary(py, |t| -t, "neg")
    }

    fn __pos__(&self) -> PyTensor {
        PyTensor::new(self.tensor())
    }

    fn __abs__(&self, py: Python<'_>) -> PyResult<PyTensor> {
        self.map_unary(py, Tensor::abs, "abs")
    }

    fn __iadd__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        let r = self.__add__(py, other)?;
        self.in_place(r, "+=")
    }

    fn __isub__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        let r = self.__sub__(py, other)?;
        self.in_place(r, "-=")
    }

    fn __imul__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        let r = self.__mul__(py, other)?;
        self.in_place(r, "*=")
    }

    fn __itruediv__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        let r = self.__truediv__(py, other)?;
        self.in_place(r, "/=")
    }

    // Comparisons give boolean tensors, with no derivative.
    pub(crate) fn __lt__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.binary(py, other, Promote::AsIs, Tensor::lt, Tensor::lt_scalar)
            .map(|r| PyTensor::mask(r.tensor()))
    }

    pub(crate) fn __le__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.binary(py, other, Promote::AsIs, Tensor::le, Tensor::le_scalar)
            .map(|r| PyTensor::mask(r.tensor()))
    }

    pub(crate) fn __gt__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.binary(py, other, Promote::AsIs, Tensor::gt, Tensor::gt_scalar)
            .map(|r| PyTensor::mask(r.tensor()))
    }

    pub(crate) fn __ge__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.binary(py, other, Promote::AsIs, Tensor::ge, Tensor::ge_scalar)
            .map(|r| PyTensor::mask(r.tensor()))
    }

    /// Element-wise `==`; against None (or anything that is not a number or an array) Python's
    /// identity comparison applies, so `t == None` is False.
    pub(crate) fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        if other.is_none() {
            return Ok(py.NotImplemented());
        }
        let r = PyTensor::mask(
            self.binary(py, other, Promote::AsIs, Tensor::eq, Tensor::eq_scalar)?
                .tensor(),
        );
        Ok(Bound::new(py, r)?.into_any().unbind())
    }

    pub(crate) fn __ne__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        if other.is_none() {
            return Ok(py.NotImplemented());
        }
        let r = PyTensor::mask(
            self.binary(py, other, Promote::AsIs, Tensor::ne, Tensor::ne_scalar)?
                .tensor(),
        );
        Ok(Bound::new(py, r)?.into_any().unbind())
    }

    /// `t[key]`: a view for basic indexing (integers, slices, `None`, `...`), whose in-place
    /// updates reach `t` as in PyTorch; a copy for a list, tensor or mask.
    fn __getitem__<'py>(
        slf: &Bound<'py, Self>,
        key: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PyTensor>> {
        let (py, this) = (slf.py(), slf.get());
        let t = this.tensor();
        let frozen = match index::basic_key(py, key, t.ndim())? {
            Some(frozen) if !this.boolean => frozen,
            _ => return Bound::new(py, this.like(index::get(py, &t, key)?)),
        };
        let (key, again) = (frozen.clone_ref(py), frozen);
        Self::aliased(
            slf,
            move |py, t| index::get(py, t, again.bind(py)),
            move |py, base, v| index::set(py, base, key.bind(py), v),
        )
    }

    /// `t[key] = value`, as PyTorch's: `value` (a number or a tensor, broadcast to what `key`
    /// selects, cast to `t`'s dtype) replaces the selected elements. `t` takes the new value
    /// as an in-place op gives it (a trainable leaf only under `no_grad`); the result is
    /// differentiable in the rest of `t` and in `value`. Views taken of `t` read the new values,
    /// as PyTorch's do.
    fn __setitem__(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let t = self.tensor();
        let mut v = to_tensor(value, None)?;
        if self.boolean {
            // Any non-zero value is True.
            v = guard::run(|| v.to_dtype(DType::F64).ne_scalar(0.0).to_dtype(DType::I64))?;
        } else if !t.dtype().is_float()
            && v.dtype().is_float()
            && v.to_vec::<f64>().iter().any(|x| !x.is_finite())
        {
            return Err(PyValueError::new_err(
                "a non-finite value cannot be written into an integer tensor",
            ));
        }
        let result = index::set(py, &t, key, &v)?;
        self.in_place(self.like(result), "__setitem__")
    }

    // ---- element-wise math (the primitives without constants: `elementwise.rs`) ----

    /// GELU: exact (`x·Φ(x)`), or PyTorch's tanh approximation with `approximate="tanh"`.
    #[pyo3(signature = (approximate="none"))]
    fn gelu(&self, py: Python<'_>, approximate: &str) -> PyResult<PyTensor> {
        match approximate {
            "none" => self.map(py, Tensor::gelu),
            "tanh" => self.map(py, Tensor::gelu_tanh),
            other => Err(PyValueError::new_err(format!(
                "gelu: approximate must be 'none' or 'tanh', got {other:?}"
            ))),
        }
    }

    /// RMS normalisation over the last axis, times `weight` if given; `eps` the dtype's
    /// machine epsilon when None, as PyTorch's.
    #[pyo3(signature = (weight=None, eps=None))]
    fn rms_norm(
        &self,
        py: Python<'_>,
        weight: Option<&Bound<'_, PyAny>>,
        eps: Option<f64>,
    ) -> PyResult<PyTensor> {
        let w = weight
            .filter(|w| !w.is_none())
            .map(|w| to_tensor(w, Some(self.tensor().dtype())))
            .transpose()?;
        self.map(py, |t| t.rms_norm(w.as_ref(), eps))
    }
    /// Layer normalisation over the last axis (PyTorch's `F.layer_norm` with one normalised
    /// axis): scale `weight` and shift `bias` when given, ones and zeros when None.
    #[pyo3(signature = (weight=None, bias=None, eps=1e-5))]
    fn layer_norm(
        &self,
        py: Python<'_>,
        weight: Option<&Bound<'_, PyAny>>,
        bias: Option<&Bound<'_, PyAny>>,
        eps: f64,
    ) -> PyResult<PyTensor> {
        let x = self.tensor();
        let features = [x.shape().last().copied().unwrap_or(1)];
        let param = |p: Option<&Bound<'_, PyAny>>, fill: f64| match p.filter(|p| !p.is_none()) {
            Some(p) => to_tensor(p, Some(x.dtype())),
            None => Ok(Tensor::full(&features, fill, x.dtype())),
        };
        let (w, b) = (param(weight, 1.0)?, param(bias, 0.0)?);
        self.map(py, |t| t.layer_norm(&w, &b, eps))
    }
    #[pyo3(signature = (negative_slope=0.01))]
    fn leaky_relu(&self, py: Python<'_>, negative_slope: f64) -> PyResult<PyTensor> {
        self.map(py, |t| t.leaky_relu(negative_slope))
    }
    #[pyo3(signature = (alpha=1.0))]
    fn elu(&self, py: Python<'_>, alpha: f64) -> PyResult<PyTensor> {
        self.map(py, |t| t.elu(alpha))
    }
    /// `x ** exponent` for a number exponent.
    fn pow(&self, py: Python<'_>, exponent: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.__pow__(py, exponent, &py.None().into_bound(py))
    }
    #[pyo3(signature = (min=None, max=None))]
    pub(crate) fn clamp(
        &self,
        py: Python<'_>,
        min: Option<&Bound<'_, PyAny>>,
        max: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        let (min, max) = (min.filter(|b| !b.is_none()), max.filter(|b| !b.is_none()));
        // Tensor bounds: max(x, min) then min(·, max), broadcast, as PyTorch's.
        if [min, max]
            .into_iter()
            .flatten()
            .any(|b| b.cast::<PyTensor>().is_ok())
        {
            let low = match min {
                Some(lo) => self.maximum(py, lo)?,
                None => PyTensor::new(self.tensor()),
            };
            return match max {
                Some(hi) => low.minimum(py, hi),
                None => Ok(low),
            };
        }
        let bound = |b: Option<&Bound<'_, PyAny>>, none: f64| -> PyResult<f64> {
            b.map_or(Ok(none), |b| b.extract())
        };
        let (lo, hi) = (bound(min, f64::NEG_INFINITY)?, bound(max, f64::INFINITY)?);
        // min(max(x, lo), hi): every element is hi when the bounds cross.
        let lo = lo.min(hi);
        // Integer bounds keep an integer tensor integer; a float bound makes it float32, as
        // PyTorch's promotion does.
        let float_bound = [min, max]
            .into_iter()
            .flatten()
            .any(|b| b.is_instance_of::<PyFloat>());
        if float_bound {
            self.map_unary(py, |t| t.clamp(lo, hi), "clamp")
        } else {
            self.map_int(py, |t| t.clamp(lo, hi))
        }
    }
    /// The larger of each pair of elements (a number compares with every element).
    pub(crate) fn maximum(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.binary(
            py,
            other,
            Promote::KeepInt,
            |a, b| a.maximum(b),
            |a, s| a.clamp(s, f64::INFINITY),
        )
    }
    /// The smaller of each pair of elements (a number compares with every element).
    pub(crate) fn minimum(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.binary(
            py,
            other,
            Promote::KeepInt,
            |a, b| a.minimum(b),
            |a, s| a.clamp(f64::NEG_INFINITY, s),
        )
    }
    fn matmul(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.__matmul__(py, other)
    }

    /// `self @ weight.T + bias` (PyTorch's `F.linear`) in one op, bias `[out]`. The weight
    /// takes this tensor's dtype, as `@` gives it; a bias tensor keeps its own (promoted as
    /// `+` promotes), other values take this tensor's.
    #[pyo3(signature = (weight, bias=None))]
    fn linear(
        &self,
        py: Python<'_>,
        weight: &Bound<'_, PyAny>,
        bias: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        let dtype = self.tensor().dtype();
        let w = to_tensor(weight, Some(dtype))?;
        let b = bias
            .filter(|b| !b.is_none())
            .map(|b| {
                let own = b.cast::<PyTensor>().is_ok();
                to_tensor(b, (!own).then_some(dtype))
            })
            .transpose()?;
        self.map(py, |x| x.linear(&w, b.as_ref()))
    }

    // ---- reductions ----

    /// The sum over `dim` (an int or a tuple; every axis when None).
    #[pyo3(signature = (dim=None, keepdim=false, *, axis=None, keepdims=None, out=None, dtype=None))]
    #[allow(clippy::too_many_arguments)]
    fn sum(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: Option<bool>,
        out: Option<&Bound<'_, PyAny>>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        let (axes, keepdim) = numpy_reduction(dim, keepdim, axis, keepdims, out, dtype)?;
        // Integers (and booleans, which count) sum to int64 as in PyTorch, exactly.
        self.map(py, |t| reduce(t, axes, keepdim, Tensor::sum_axes))
    }

    #[pyo3(signature = (dim=None, keepdim=false, *, axis=None, keepdims=None, out=None, dtype=None))]
    #[allow(clippy::too_many_arguments)]
    fn mean(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: Option<bool>,
        out: Option<&Bound<'_, PyAny>>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        let (axes, keepdim) = numpy_reduction(dim, keepdim, axis, keepdims, out, dtype)?;
        self.map(py, |t| reduce(t, axes, keepdim, Tensor::mean_axes))
    }

    /// The largest values over `dim` (every axis when None).
    #[pyo3(signature = (dim=None, keepdim=false, *, axis=None, keepdims=None, out=None, dtype=None))]
    #[allow(clippy::too_many_arguments)]
    fn amax(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: Option<bool>,
        out: Option<&Bound<'_, PyAny>>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        let (axes, keepdim) = numpy_reduction(dim, keepdim, axis, keepdims, out, dtype)?;
        self.map_int(py, |t| reduce(t, axes, keepdim, Tensor::max_axes))
    }

    #[pyo3(signature = (dim=None, keepdim=false, *, axis=None, keepdims=None, out=None, dtype=None))]
    #[allow(clippy::too_many_arguments)]
    fn amin(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: Option<bool>,
        out: Option<&Bound<'_, PyAny>>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        let (axes, keepdim) = numpy_reduction(dim, keepdim, axis, keepdims, out, dtype)?;
        self.map_int(py, |t| reduce(t, axes, keepdim, Tensor::min_axes))
    }

    /// The largest element; with `dim`, the pair `(values, indices)` along it, as PyTorch.
    /// numpy's `axis=` (what `np.max(t, axis=1)` passes) gives the values alone.
    #[pyo3(signature = (dim=None, keepdim=false, *, axis=None, keepdims=None, out=None))]
    #[allow(clippy::too_many_arguments)]
    fn max<'py>(
        &self,
        py: Python<'py>,
        dim: Option<isize>,
        keepdim: bool,
        axis: Option<&Bound<'py, PyAny>>,
        keepdims: Option<bool>,
        out: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if axis.is_some() || keepdims.is_some() || out.is_some() {
            let r = self.amax(py, None, keepdim, axis, keepdims, out, None)?;
            return Ok(Bound::new(py, r)?.into_any());
        }
        extreme(self, py, dim, keepdim, true)
    }

    /// numpy's `axis=` (what `np.min(t, axis=1)` passes) gives the values alone.
    #[pyo3(signature = (dim=None, keepdim=false, *, axis=None, keepdims=None, out=None))]
    #[allow(clippy::too_many_arguments)]
    fn min<'py>(
        &self,
        py: Python<'py>,
        dim: Option<isize>,
        keepdim: bool,
        axis: Option<&Bound<'py, PyAny>>,
        keepdims: Option<bool>,
        out: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if axis.is_some() || keepdims.is_some() || out.is_some() {
            let r = self.amin(py, None, keepdim, axis, keepdims, out, None)?;
            return Ok(Bound::new(py, r)?.into_any());
        }
        extreme(self, py, dim, keepdim, false)
    }

    /// The index of the largest element along `dim` (of the flattened tensor when None).
    #[pyo3(signature = (dim=None, keepdim=false))]
    fn argmax(&self, py: Python<'_>, dim: Option<isize>, keepdim: bool) -> PyResult<PyTensor> {
        self.map_int(py, |t| {
            arg_extreme(t, dim, keepdim, Tensor::argmax::<isize>)
        })
    }

    #[pyo3(signature = (dim=None, keepdim=false))]
    fn argmin(&self, py: Python<'_>, dim: Option<isize>, keepdim: bool) -> PyResult<PyTensor> {
        self.map_int(py, |t| {
            arg_extreme(t, dim, keepdim, Tensor::argmin::<isize>)
        })
    }

    #[pyo3(signature = (dim=-1))]
    fn softmax(&self, py: Python<'_>, dim: isize) -> PyResult<PyTensor> {
        self.map(py, |t| t.softmax(dim))
    }

    #[pyo3(signature = (dim=-1))]
    fn log_softmax(&self, py: Python<'_>, dim: isize) -> PyResult<PyTensor> {
        self.map(py, |t| t.log_softmax(dim))
    }

    // ---- shape ----

    /// The same values in a new shape (one axis may be -1); `reshape(2, 3)` or
    /// `reshape((2, 3))`. As PyTorch's, a view where the elements' places allow one (its
    /// in-place updates reach this tensor), a copy where they do not (most reshapes of a
    /// transposed tensor or of a slice with a step).
    #[pyo3(signature = (*shape))]
    fn reshape<'py>(
        slf: &Bound<'py, Self>,
        shape: &Bound<'_, PyTuple>,
    ) -> PyResult<Bound<'py, PyTensor>> {
        let shape = infer_shape(&shape_arg(shape)?, slf.get().tensor().numel())?;
        Self::reshaped_where_possible(slf, shape)
    }

    /// The same elements in another shape, a view whose in-place updates reach this tensor.
    /// As PyTorch's, it never copies: a shape that the strides cannot give without a copy
    /// (`x.t().view(-1)`) is an error, where `reshape` would copy.
    #[pyo3(signature = (*shape))]
    fn view<'py>(
        slf: &Bound<'py, Self>,
        shape: &Bound<'_, PyTuple>,
    ) -> PyResult<Bound<'py, PyTensor>> {
        let t = slf.get().tensor();
        let shape = infer_shape(&shape_arg(shape)?, t.numel())?;
        let r = guard::run(|| t.reshape(&shape))?;
        if r.numel() > 1 && !r.shares_storage(&t) {
            return Err(PyRuntimeError::new_err(
                "view size is not compatible with input tensor's size and stride (at least one \
                 dimension spans across two contiguous subspaces). Use .reshape(...) instead.",
            ));
        }
        Self::reshaped(slf, shape)
    }

    /// The axes from `start_dim` on made one, as `reshape` makes it (a view where PyTorch's
    /// is one).
    #[pyo3(signature = (start_dim=0))]
    fn flatten<'py>(slf: &Bound<'py, Self>, start_dim: usize) -> PyResult<Bound<'py, PyTensor>> {
        let dims = slf.get().tensor().shape().to_vec();
        let start = start_dim.min(dims.len());
        if start_dim > dims.len() || (start_dim == dims.len() && !dims.is_empty()) {
            return Err(PyIndexError::new_err(format!(
                "flatten: start_dim {start_dim} out of range for {} axes",
                dims.len()
            )));
        }
        let mut shape = dims[..start].to_vec();
        shape.push(dims[start..].iter().product());
        Self::reshaped_where_possible(slf, shape)
    }

    pub(crate) fn transpose<'py>(
        slf: &Bound<'py, Self>,
        dim0: isize,
        dim1: isize,
    ) -> PyResult<Bound<'py, PyTensor>> {
        let swap = move |_: Python<'_>, t: &Tensor| guard::run(|| t.transpose(dim0, dim1));
        Self::aliased(slf, swap, move |py, _, v| swap(py, v))
    }

    /// The transpose of a 2-D tensor (the axes reversed for other ranks).
    #[getter(T)]
    fn t_prop<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTensor>> {
        let n = slf.get().tensor().ndim();
        let perm: Vec<usize> = (0..n).rev().collect();
        Self::permuted(slf, perm)
    }

    #[pyo3(signature = (*dims))]
    fn permute<'py>(
        slf: &Bound<'py, Self>,
        dims: &Bound<'_, PyTuple>,
    ) -> PyResult<Bound<'py, PyTensor>> {
        let n = slf.get().tensor().ndim() as isize;
        let perm: Vec<usize> = shape_arg(dims)?
            .into_iter()
            .map(|d| if d < 0 { (d + n) as usize } else { d as usize })
            .collect();
        Self::permuted(slf, perm)
    }

    #[pyo3(signature = (dim=None))]
    fn squeeze<'py>(
        slf: &Bound<'py, Self>,
        dim: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyTensor>> {
        let t = slf.get().tensor();
        let axes: Vec<usize> = match dim.filter(|d| !d.is_none()) {
            None => (0..t.ndim()).collect(),
            Some(d) => {
                let dims: Vec<isize> = match d.extract::<isize>() {
                    Ok(one) => vec![one],
                    Err(_) => d.extract()?,
                };
                let n = t.ndim().max(1) as isize;
                dims.iter()
                    .map(|&a| {
                        let b = if a < 0 { a + n } else { a };
                        if (0..n).contains(&b) {
                            Ok(b as usize)
                        } else {
                            Err(PyIndexError::new_err(format!(
                                "squeeze: dimension {a} out of range for {n} axes"
                            )))
                        }
                    })
                    .collect::<PyResult<_>>()?
            }
        };
        // As PyTorch's: the axes named (every axis when none is) that have length 1 go; a
        // named axis of another length stays.
        let shape: Vec<usize> = (0..t.ndim())
            .filter(|a| !(axes.contains(a) && t.shape()[*a] == 1))
            .map(|a| t.shape()[a])
            .collect();
        Self::reshaped(slf, shape)
    }

    fn unsqueeze<'py>(slf: &Bound<'py, Self>, dim: isize) -> PyResult<Bound<'py, PyTensor>> {
        let t = slf.get().tensor();
        let shape = guard::run(|| t.unsqueeze(dim).shape().to_vec())?;
        Self::reshaped(slf, shape)
    }

    /// The values repeated along broadcast axes to `shape` (numpy's `broadcast_to`).
    #[pyo3(signature = (*shape))]
    fn expand(&self, py: Python<'_>, shape: &Bound<'_, PyTuple>) -> PyResult<PyTensor> {
        let t = self.tensor();
        let sizes = shape_arg(shape)?;
        let lead = sizes.len().saturating_sub(t.ndim());
        // -1 keeps an axis's length (PyTorch's `expand(-1, 4)`); new leading axes need sizes.
        let shape: Vec<usize> = sizes
            .iter()
            .enumerate()
            .map(|(i, &d)| match d {
                -1 if i >= lead => Ok(t.shape()[i - lead]),
                d if d >= 0 => Ok(d as usize),
                d => Err(crate::guard::op_error(format!(
                    "expand: size {d} at position {i} (only -1, keeping an existing axis, may be \
                     negative)"
                ))),
            })
            .collect::<PyResult<_>>()?;
        self.view_map(py, |t| t.broadcast_to(&shape))
    }

    fn broadcast_to(&self, py: Python<'_>, shape: Vec<usize>) -> PyResult<PyTensor> {
        self.view_map(py, |t| t.broadcast_to(&shape))
    }

    /// `length` elements from `start` along `dim`, a view whose in-place updates reach this
    /// tensor (which then takes them between its parts before and after).
    pub(crate) fn narrow<'py>(
        slf: &Bound<'py, Self>,
        dim: isize,
        start: usize,
        length: usize,
    ) -> PyResult<Bound<'py, PyTensor>> {
        let put = move |_: Python<'_>, base: &Tensor, v: &Tensor| {
            let axis = norm_axis("narrow", dim, base.ndim())?;
            guard::run(|| {
                let rest = base.shape()[axis].saturating_sub(start + length);
                let (before, after) = (
                    base.narrow(axis, 0, start),
                    base.narrow(axis, start + length, rest),
                );
                Tensor::cat(&[&before, v, &after], axis)
            })
        };
        Self::aliased(
            slf,
            move |_, t| guard::run(|| t.narrow(dim, start, length)),
            put,
        )
    }

    /// PyTorch's `split`: pieces of `split_size` along `dim` (the last may be shorter; an
    /// empty axis gives one empty piece), or of the sizes listed, which must add up to the
    /// axis' length. A tuple of views.
    #[pyo3(signature = (split_size_or_sections, dim=0))]
    fn split<'py>(
        slf: &Bound<'py, Self>,
        split_size_or_sections: &Bound<'py, PyAny>,
        dim: isize,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let len = slf.get().tensor().shape()[norm_axis("split", dim, slf.get().tensor().ndim())?];
        let sizes: Vec<usize> = match split_size_or_sections.extract::<i64>() {
            Ok(size) if size < 0 || (size == 0 && len > 0) => {
                return Err(PyValueError::new_err(format!(
                    "split: split_size must be positive, got {size}"
                )))
            }
            Ok(_) if len == 0 => vec![0],
            Ok(size) => {
                let size = size as usize;
                (0..len.div_ceil(size))
                    .map(|i| size.min(len - i * size))
                    .collect()
            }
            Err(_) => {
                let sizes: Vec<usize> = split_size_or_sections.extract()?;
                if sizes.iter().sum::<usize>() != len {
                    return Err(PyValueError::new_err(format!(
                        "split: sizes {sizes:?} do not add up to the length {len} of dim {dim}"
                    )));
                }
                sizes
            }
        };
        Self::pieces(slf, dim, &sizes)
    }

    /// PyTorch's `chunk`: `chunks` pieces along `dim` of ⌈length / chunks⌉ each (fewer when
    /// the length runs out first; `chunks` empty pieces of an empty axis).
    #[pyo3(signature = (chunks, dim=0))]
    fn chunk<'py>(
        slf: &Bound<'py, Self>,
        chunks: usize,
        dim: isize,
    ) -> PyResult<Bound<'py, PyTuple>> {
        if chunks == 0 {
            return Err(PyValueError::new_err("chunk: chunks must be positive"));
        }
        let len = slf.get().tensor().shape()[norm_axis("chunk", dim, slf.get().tensor().ndim())?];
        let sizes: Vec<usize> = if len == 0 {
            let mut empty = Vec::new();
            empty.try_reserve_exact(chunks).map_err(|_| {
                pyo3::exceptions::PyMemoryError::new_err(format!(
                    "chunk: cannot hold {chunks} empty pieces"
                ))
            })?;
            empty.resize(chunks, 0);
            empty
        } else {
            let size = len.div_ceil(chunks);
            (0..len.div_ceil(size))
                .map(|i| size.min(len - i * size))
                .collect()
        };
        Self::pieces(slf, dim, &sizes)
    }

    fn index_select(
        &self,
        py: Python<'_>,
        dim: isize,
        index: &Bound<'_, PyAny>,
    ) -> PyResult<PyTensor> {
        let idx = self.indices_along(index, "index_select", dim)?;
        self.view_map(py, |t| t.index_select(dim, idx.as_slice()))
    }

    /// Adds the rows of `source` into positions `index` along `dim` (repeated indices add up).
    fn index_add(
        &self,
        py: Python<'_>,
        dim: isize,
        index: &Bound<'_, PyAny>,
        source: &Bound<'_, PyAny>,
    ) -> PyResult<PyTensor> {
        let idx = self.indices_along(index, "index_add", dim)?;
        let src = to_tensor(source, Some(self.tensor().dtype()))?;
        self.map(py, |t| t.index_add(dim, &idx, &src))
    }

    /// `pad` values before and after each axis, from the first: `[(before, after), ...]`.
    #[pyo3(signature = (pads, value=0.0))]
    fn pad(&self, py: Python<'_>, pads: Vec<(usize, usize)>, value: f64) -> PyResult<PyTensor> {
        self.map(py, |t| t.pad(&pads, value))
    }

    /// `on_true` where this tensor is non-zero, else `on_false` (broadcast); differentiable
    /// in both branches.
    fn where_(
        &self,
        py: Python<'_>,
        on_true: &Bound<'_, PyAny>,
        on_false: &Bound<'_, PyAny>,
    ) -> PyResult<PyTensor> {
        // Each branch keeps its dtype; where_cond promotes them by the one rule.
        let (a, b) = (to_tensor(on_true, None)?, to_tensor(on_false, None)?);
        if !a.dtype().is_float() && !b.dtype().is_float() {
            // Two integer branches give an integer tensor, as in PyTorch.
            let (a, b) = (a.to_dtype(DType::F64), b.to_dtype(DType::F64));
            let picked = self.map(py, |c| c.where_cond(&a, &b))?;
            return Ok(PyTensor::new(picked.tensor().to_dtype(DType::I64)));
        }
        self.map(py, |c| c.where_cond(&a, &b))
    }

    /// Whether every element is within `atol + rtol·|other|` of `other`'s.
    #[pyo3(signature = (other, rtol=1e-5, atol=1e-8))]
    fn allclose(&self, other: &Bound<'_, PyAny>, rtol: f64, atol: f64) -> PyResult<bool> {
        let o = to_tensor(other, Some(self.tensor().dtype()))?;
        let t = self.tensor();
        guard::run(|| t.allclose(&o, rtol, atol))
    }

    /// Batch normalisation over axis 1 with batch statistics (training mode):
    /// `(y, mean, var)`, `var` biased, as the fused core op computes them.
    #[pyo3(signature = (weight, bias, eps=1e-5))]
    fn batch_norm<'py>(
        &self,
        py: Python<'py>,
        weight: &Bound<'py, PyAny>,
        bias: &Bound<'py, PyAny>,
        eps: f64,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let t = self.tensor();
        let (w, b) = (
            to_tensor(weight, Some(t.dtype()))?,
            to_tensor(bias, Some(t.dtype()))?,
        );
        let (y, m, v) = guard::run_heavy(py, t.numel() >= HEAVY, || t.batch_norm(&w, &b, eps))?;
        PyTuple::new(py, [PyTensor::new(y), PyTensor::new(m), PyTensor::new(v)])
    }

    /// The elements on and below diagonal `diagonal` of the last two axes, zeros above.
    #[pyo3(signature = (diagonal=0))]
    fn tril(&self, py: Python<'_>, diagonal: isize) -> PyResult<PyTensor> {
        self.view_map(py, |t| t.tril(diagonal))
    }

    /// The elements on and above diagonal `diagonal` of the last two axes, zeros below.
    #[pyo3(signature = (diagonal=0))]
    fn triu(&self, py: Python<'_>, diagonal: isize) -> PyResult<PyTensor> {
        self.view_map(py, |t| t.triu(diagonal))
    }

    /// `value` where `mask` (broadcast) is true, this tensor's elements elsewhere.
    fn masked_fill(
        &self,
        py: Python<'_>,
        mask: &Bound<'_, PyAny>,
        value: f64,
    ) -> PyResult<PyTensor> {
        let m = to_tensor(mask, None)?;
        let t = self.tensor();
        if t.dtype().is_float() {
            return self.map(py, |t| t.masked_fill(&m, value));
        }
        if !value.is_finite() {
            return Err(PyValueError::new_err(format!(
                "masked_fill: {value} cannot fill an integer tensor"
            )));
        }
        // Integers (and booleans) exactly, a fractional value cast (truncated) as PyTorch's.
        let fill = if self.boolean {
            i64::from(value != 0.0)
        } else {
            value as i64
        };
        let mask = guard::run(|| m.broadcast_to(t.shape()).to_vec::<f64>())?;
        let mut out = t.to_vec::<i64>();
        for (o, _) in out.iter_mut().zip(&mask).filter(|(_, &on)| on != 0.0) {
            *o = fill;
        }
        Ok(self.like(Tensor::from_vec(out, t.shape())))
    }

    /// `(values, indices)` of the `k` largest entries along `dim` (with `largest=False` the
    /// smallest), as PyTorch's `topk`: a named tuple, so `.values` and `.indices` read them.
    /// The entries come in order (largest or smallest first) whatever `sorted` says, an order
    /// PyTorch's `sorted=False` allows.
    #[pyo3(signature = (k, dim=-1, largest=true, sorted=true))]
    fn topk<'py>(
        &self,
        py: Python<'py>,
        k: usize,
        dim: isize,
        largest: bool,
        sorted: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = sorted;
        let t = self.tensor();
        let (v, i) = guard::run_heavy(py, t.numel() >= HEAVY, || t.topk_along(k, dim, largest))?;
        named_pair(py, "topk", PyTensor::new(v), PyTensor::new(i))
    }

    fn contiguous(&self, py: Python<'_>) -> PyResult<PyTensor> {
        self.view_map(py, Tensor::contiguous)
    }

    /// Whether the elements lie in row-major order without gaps (PyTorch's
    /// `is_contiguous`): false for a transpose or a strided slice.
    fn is_contiguous(&self) -> bool {
        self.tensor().is_contiguous()
    }

    // ---- autodiff ----

    /// Backward from this tensor: returns this pass's gradients of every trainable leaf it
    /// depends on (fresh, as seed 002 defines a backward), and adds each to the leaf's `.grad`,
    /// which accumulates over backward calls until `zero_grad()` or `w.grad = None`, as
    /// PyTorch's does. A result with more than one element needs `gradient` (the
    /// upstream gradient, same shape); `create_graph=True` records the backward pass so that
    /// the gradients can be differentiated again.
    #[pyo3(signature = (gradient=None, create_graph=false, retain_graph=None))]
    fn backward(
        &self,
        py: Python<'_>,
        gradient: Option<&Bound<'_, PyAny>>,
        create_graph: bool,
        retain_graph: Option<bool>,
    ) -> PyResult<autograd::PyGradients> {
        let _ = retain_graph; // graphs are kept while referenced: every backward may run again
        let t = self.tensor();
        let seed = gradient
            .filter(|g| !g.is_none())
            .map(|g| to_tensor(g, Some(t.dtype())))
            .transpose()?;
        // Backward is as heavy as the forward it mirrors: the GIL is released (a custom
        // gradient written in Python takes it back while its rule runs).
        let grads = guard::run_heavy(py, true, || match (&seed, create_graph) {
            (Some(s), c) => t.backward_with(s, c),
            (None, false) => t.backward(),
            (None, true) => t.backward_with_graph(),
        })?;
        autograd::update_leaf_grads(&grads, autograd::GradUpdate::Accumulate);
        Ok(autograd::PyGradients { grads })
    }

    // ---- convolution and pooling (NCHW, PyTorch's semantics) ----

    /// 2-D convolution with weight `[out, in/groups, kh, kw]`; bias added when given.
    #[pyo3(signature = (weight, bias=None, stride=Size2([1, 1]), padding=Padding::Sizes([0, 0]), dilation=Size2([1, 1]), groups=1))]
    #[allow(clippy::too_many_arguments)]
    fn conv2d(
        &self,
        py: Python<'_>,
        weight: &Bound<'_, PyAny>,
        bias: Option<&Bound<'_, PyAny>>,
        stride: Size2,
        padding: Padding,
        dilation: Size2,
        groups: usize,
    ) -> PyResult<PyTensor> {
        let dtype = self.tensor().dtype();
        let w = to_tensor(weight, Some(dtype))?;
        let b = bias
            .filter(|b| !b.is_none())
            .map(|b| to_tensor(b, Some(dtype)))
            .transpose()?;
        let [(sh, sw), (dh, dw)] = [stride.0, dilation.0].map(|[h, w]| (h, w));
        let opts = ConvOpts::new()
            .stride_hw(sh, sw)
            .dilation_hw(dh, dw)
            .groups(groups);
        self.map(py, |x| {
            let y = match padding.sizes() {
                Some([ph, pw]) => x.conv2d(&w, &opts.padding_hw(ph, pw)),
                None => x.conv2d_same(&w, &opts),
            };
            add_channel_bias(y, b.as_ref())
        })
    }

    /// Transposed 2-D convolution with weight `[in, out/groups, kh, kw]`.
    #[pyo3(signature = (weight, bias=None, stride=Size2([1, 1]), padding=Size2([0, 0]), output_padding=Size2([0, 0]), groups=1, dilation=Size2([1, 1])))]
    #[allow(clippy::too_many_arguments)]
    fn conv_transpose2d(
        &self,
        py: Python<'_>,
        weight: &Bound<'_, PyAny>,
        bias: Option<&Bound<'_, PyAny>>,
        stride: Size2,
        padding: Size2,
        output_padding: Size2,
        groups: usize,
        dilation: Size2,
    ) -> PyResult<PyTensor> {
        let dtype = self.tensor().dtype();
        let w = to_tensor(weight, Some(dtype))?;
        let b = bias
            .filter(|b| !b.is_none())
            .map(|b| to_tensor(b, Some(dtype)))
            .transpose()?;
        let opts = ConvOpts::new()
            .stride_hw(stride.0[0], stride.0[1])
            .padding_hw(padding.0[0], padding.0[1])
            .output_padding_hw(output_padding.0[0], output_padding.0[1])
            .dilation_hw(dilation.0[0], dilation.0[1])
            .groups(groups);
        self.map(py, |x| {
            add_channel_bias(x.conv_transpose2d(&w, &opts), b.as_ref())
        })
    }

    /// Sizes an int or a pair `(height, width)`; the stride defaults to the kernel size.
    #[pyo3(signature = (kernel_size, stride=None, padding=Size2([0, 0])))]
    fn max_pool2d(
        &self,
        py: Python<'_>,
        kernel_size: Size2,
        stride: Option<Size2>,
        padding: Size2,
    ) -> PyResult<PyTensor> {
        let s = stride.unwrap_or(kernel_size);
        self.map(py, |x| x.max_pool2d_hw(kernel_size.0, s.0, padding.0))
    }

    /// Sizes an int or a pair `(height, width)`; the stride defaults to the kernel size.
    #[pyo3(signature = (kernel_size, stride=None, padding=Size2([0, 0])))]
    fn avg_pool2d(
        &self,
        py: Python<'_>,
        kernel_size: Size2,
        stride: Option<Size2>,
        padding: Size2,
    ) -> PyResult<PyTensor> {
        let s = stride.unwrap_or(kernel_size);
        self.map(py, |x| x.avg_pool2d_hw(kernel_size.0, s.0, padding.0))
    }

    fn adaptive_avg_pool2d(
        &self,
        py: Python<'_>,
        output_size: (usize, usize),
    ) -> PyResult<PyTensor> {
        self.map(py, |x| x.adaptive_avg_pool2d(output_size.0, output_size.1))
    }

    #[pyo3(signature = (scale_factor))]
    fn upsample_nearest2d(&self, py: Python<'_>, scale_factor: usize) -> PyResult<PyTensor> {
        self.map(py, |x| x.upsample_nearest2d(scale_factor, scale_factor))
    }
}

fn add_channel_bias(y: Tensor, bias: Option<&Tensor>) -> Tensor {
    match bias {
        Some(b) => &y + &b.reshape(&[1, b.numel(), 1, 1]),
        None => y,
    }
}

/// The axes and keepdim of a reduction called PyTorch's way (`dim`, `keepdim`) or numpy's
/// (`axis`, `keepdims`: what `np.sum(t)` passes); `out` and `dtype` are refused unless None.
fn numpy_reduction(
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
    axis: Option<&Bound<'_, PyAny>>,
    keepdims: Option<bool>,
    out: Option<&Bound<'_, PyAny>>,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<(Option<Vec<isize>>, bool)> {
    if out.is_some_and(|o| !o.is_none()) || dtype.is_some_and(|d| !d.is_none()) {
        return Err(PyTypeError::new_err(
            "reductions take no out= or dtype= (tensors are values)",
        ));
    }
    let axes = match axis.filter(|a| !a.is_none()) {
        Some(a) => axes_arg(Some(a))?,
        None => axes_arg(dim)?,
    };
    Ok((axes, keepdims.unwrap_or(keepdim)))
}

/// A reduction over axes (`sum_axes`, `max_axes`, ...).
type Reduction = fn(&Tensor, &[isize], bool) -> Tensor;

fn reduce(t: &Tensor, axes: Option<Vec<isize>>, keepdim: bool, f: Reduction) -> Tensor {
    let all: Vec<isize>;
    let axes = match &axes {
        Some(a) => a.as_slice(),
        None => {
            all = (0..t.ndim() as isize).collect();
            &all
        }
    };
    f(t, axes, keepdim)
}

fn arg_extreme(
    t: &Tensor,
    dim: Option<isize>,
    keepdim: bool,
    f: fn(&Tensor, isize) -> Tensor,
) -> Tensor {
    match dim {
        None => f(&t.reshape(&[t.numel()]), 0),
        Some(d) => {
            let r = f(t, d);
            if keepdim {
                r.unsqueeze(d)
            } else {
                r
            }
        }
    }
}

/// `(values, indices)` as the named tuple `ferrograd.return_types.<name>`, PyTorch's
/// `torch.return_types` (fields by name, picklable).
fn named_pair<'py>(
    py: Python<'py>,
    name: &str,
    values: PyTensor,
    indices: PyTensor,
) -> PyResult<Bound<'py, PyAny>> {
    let types = py.import("ferrograd.return_types")?;
    types.getattr(name)?.call1((values, indices))
}

fn extreme<'py>(
    x: &PyTensor,
    py: Python<'py>,
    dim: Option<isize>,
    keepdim: bool,
    largest: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let (values, arg): (Reduction, fn(&Tensor, isize) -> Tensor) = if largest {
        (Tensor::max_axes, Tensor::argmax::<isize>)
    } else {
        (Tensor::min_axes, Tensor::argmin::<isize>)
    };
    match dim {
        None => Ok(x
            .map_int(py, |t| reduce(t, None, false, values))?
            .into_pyobject(py)?
            .into_any()),
        Some(d) => {
            let v = x.map_int(py, |t| values(t, &[d], keepdim))?;
            let i = x.map_int(py, |t| arg_extreme(t, Some(d), keepdim, arg))?;
            named_pair(py, if largest { "max" } else { "min" }, v, i)
        }
    }
}

/// `ferrograd.tensor(data, dtype=None, requires_grad=False)`: a tensor from a numpy array
/// (its dtype kept), a nested list (floats become float32) or a number. With
/// `requires_grad=True`, a trainable leaf: backward sets its `.grad`, optimizers update it.
pub fn make(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<Py<PyAny>> {
    // A tensor passed in is copied as a value, cut from its graph, as torch.tensor does.
    let t = to_tensor(data, dtype_arg(dtype)?)?.detach();
    if wants_mask(data, dtype)? {
        return Ok(Bound::new(py, PyTensor::mask(t))?.into_any().unbind());
    }
    with_grad(py, t, requires_grad)
}

fn logic_error(op: &str) -> PyErr {
    PyTypeError::new_err(format!(
        "{op} is logic on boolean tensors (comparisons' results); convert with .bool() first"
    ))
}

/// The dtype that PyTorch's `to(...)` arguments ask for (a dtype, its name, another tensor's
/// dtype), once every device among them is checked to be the CPU; None when they name only
/// devices.
pub fn to_target<'py>(
    args: impl Iterator<Item = Bound<'py, PyAny>>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let mut target = None;
    for a in args.filter(|a| !a.is_none()) {
        if let Ok(t) = a.cast::<PyTensor>() {
            target = Some(t.get().dtype().into_pyobject(a.py())?.into_any());
        } else if a.is_instance_of::<PyString>() && is_device(&a.extract::<String>()?) {
            check_cpu(&a.extract::<String>()?)?;
        } else if a.cast::<PyDType>().is_err() && a.hasattr("type")? && !a.hasattr("itemsize")? {
            check_cpu(&a.getattr("type")?.extract::<String>()?)?;
        } else {
            target = Some(a);
        }
    }
    Ok(target)
}

/// Whether `name` names a device (`"cpu"`, `"cuda:0"`, `"mps"`) rather than a dtype.
pub fn is_device(name: &str) -> bool {
    let kind = name.split(':').next().unwrap_or(name);
    matches!(kind, "cpu" | "cuda" | "mps" | "xpu" | "meta")
}

pub fn check_cpu(name: &str) -> PyResult<()> {
    if name == "cpu" || name.starts_with("cpu:") {
        Ok(())
    } else {
        Err(PyValueError::new_err(format!(
            "device {name:?}: ferrograd computes on the CPU only"
        )))
    }
}

/// Whether a new tensor of `data` is boolean: asked for, or made of booleans with no other
/// dtype asked for.
fn wants_mask(data: &Bound<'_, PyAny>, dtype: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
    Ok(is_bool_dtype(dtype)? || (dtype.is_none_or(|d| d.is_none()) && holds_bools(data)?))
}

/// What a new tensor holding `t` holds: a trainable leaf when `requires_grad`.
fn value_for(t: Tensor, requires_grad: bool) -> PyResult<Value> {
    if !requires_grad {
        return Ok(Value::Plain(t));
    }
    if !t.dtype().is_float() {
        return Err(PyTypeError::new_err(
            "requires_grad=True needs a float dtype (float32 or float64)",
        ));
    }
    Ok(Value::Leaf(autograd::new_leaf(&t)))
}

/// `t` as a Python tensor: a trainable leaf when `requires_grad` (the object then stands for
/// the leaf wherever the core hands it back).
pub fn with_grad(py: Python<'_>, t: Tensor, requires_grad: bool) -> PyResult<Py<PyAny>> {
    match value_for(t, requires_grad)? {
        Value::Leaf(leaf) => autograd::leaf_object(py, leaf),
        plain => Ok(Bound::new(py, PyTensor::from_value(plain))?
            .into_any()
            .unbind()),
    }
}

/// Axis `dim` of `ndim` (negative counts from the end), or an `IndexError` naming `op`.
fn norm_axis(op: &str, dim: isize, ndim: usize) -> PyResult<usize> {
    let n = ndim as isize;
    let i = if dim < 0 { dim + n } else { dim };
    if !(0..n).contains(&i) {
        return Err(pyo3::exceptions::PyIndexError::new_err(format!(
            "{op}: axis {dim} out of range for {n} axes"
        )));
    }
    Ok(i as usize)
}
