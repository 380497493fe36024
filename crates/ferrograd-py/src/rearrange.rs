//! PyTorch's rearrangements and statistics of a tensor (`gather`, `flip`, `roll`, `repeat`,
//! `var`, `std`, `logsumexp`), each one call to the core's ops (`python/ferrograd/
//! tensor_methods.py` adds the smaller ones composed of these).

use ferrograd::prelude::*;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::convert::{axes_arg, to_tensor};
use crate::tensor::PyTensor;

/// PyTorch's `correction` of `var` and `std` from its `unbiased` flag or the number itself.
fn correction_of(unbiased: Option<bool>, correction: Option<f64>) -> PyResult<usize> {
    match (unbiased, correction) {
        (Some(_), Some(_)) => Err(PyTypeError::new_err(
            "var/std: give unbiased or correction, not both",
        )),
        (_, Some(c)) if c < 0.0 || c.fract() != 0.0 => Err(PyValueError::new_err(format!(
            "var/std: correction {c} must be a whole number, not negative"
        ))),
        (_, Some(c)) => Ok(c as usize),
        (Some(false), None) => Ok(0),
        _ => Ok(1),
    }
}

/// Every axis when `dim` names none.
fn axes_or_all(t: &Tensor, dim: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<isize>> {
    Ok(axes_arg(dim)?.unwrap_or_else(|| (0..t.ndim() as isize).collect()))
}

/// `var` and `std`'s arguments as PyTorch reads them: `x.var(False)` is `unbiased=False`
/// over every axis (its overload taking a bool), not an axis.
fn statistics_args(
    t: &Tensor,
    dim: Option<&Bound<'_, PyAny>>,
    unbiased: Option<bool>,
    correction: Option<f64>,
) -> PyResult<(Vec<isize>, usize)> {
    let (dim, unbiased) = match dim {
        Some(d) if d.is_instance_of::<pyo3::types::PyBool>() => {
            if unbiased.is_some() {
                return Err(PyTypeError::new_err("var/std: unbiased given twice"));
            }
            (None, Some(d.extract::<bool>()?))
        }
        d => (d, unbiased),
    };
    Ok((axes_or_all(t, dim)?, correction_of(unbiased, correction)?))
}

#[pymethods]
impl PyTensor {
    /// `out[..., j, ...] = self[..., index[..., j, ...], ...]` along `dim` (PyTorch's
    /// `gather`; `index` int64 of the result's shape).
    fn gather(&self, py: Python<'_>, dim: isize, index: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let index = to_tensor(index, None)?;
        if index.dtype() != DType::I64 {
            return Err(PyTypeError::new_err(
                "gather: index must be an int64 tensor",
            ));
        }
        self.map(py, |t| t.gather(dim, &index))
    }

    /// The core's `scatter_add` along `dim` (`index` int64 of `src`'s shape, checked by the
    /// Python method that calls this).
    fn _scatter_add(
        &self,
        py: Python<'_>,
        dim: isize,
        index: &Bound<'_, PyAny>,
        src: &Bound<'_, PyAny>,
    ) -> PyResult<PyTensor> {
        let (index, src) = (to_tensor(index, None)?, to_tensor(src, None)?);
        self.map(py, |t| t.scatter_add(dim, &index, &src))
    }

    /// The elements in reverse order along each of `dims`.
    #[pyo3(signature = (*dims))]
    fn flip(&self, py: Python<'_>, dims: &Bound<'_, PyTuple>) -> PyResult<PyTensor> {
        let axes: Vec<isize> = match dims.len() {
            1 => axes_arg(Some(&dims.get_item(0)?))?.unwrap_or_default(),
            _ => dims.extract()?,
        };
        self.map(py, |t| t.flip(&axes))
    }

    /// The elements shifted `shifts` places along `dims` (a number or tuples of both; without
    /// `dims` the flattened tensor, as PyTorch's `roll`).
    #[pyo3(signature = (shifts, dims=None))]
    fn roll(
        &self,
        py: Python<'_>,
        shifts: &Bound<'_, PyAny>,
        dims: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        let shifts: Vec<isize> = axes_arg(Some(shifts))?.unwrap_or_default();
        let Some(dims) = axes_arg(dims)? else {
            let [s] = shifts[..] else {
                return Err(crate::guard::op_error(
                    "roll: one shift for the flattened tensor".into(),
                ));
            };
            return self.map(py, |t| {
                t.reshape(&[t.numel()]).roll(s, 0).reshape(t.shape())
            });
        };
        if dims.len() != shifts.len() {
            return Err(crate::guard::op_error(format!(
                "roll: {} shifts for {} dims",
                shifts.len(),
                dims.len()
            )));
        }
        self.map(py, |t| {
            dims.iter()
                .zip(&shifts)
                .fold(t.clone(), |t, (&d, &s)| t.roll(s, d))
        })
    }

    /// The tensor tiled `sizes[a]` times along each axis (PyTorch's `repeat`).
    #[pyo3(signature = (*sizes))]
    fn repeat(&self, py: Python<'_>, sizes: &Bound<'_, PyTuple>) -> PyResult<PyTensor> {
        let reps: Vec<usize> = match sizes.len() {
            1 if sizes.get_item(0)?.extract::<usize>().is_err() => sizes.get_item(0)?.extract()?,
            _ => sizes.extract()?,
        };
        self.map(py, |t| t.repeat(&reps))
    }

    /// The variance over `dim` (every axis when None), with PyTorch's `unbiased` or
    /// `correction` (Bessel's by default).
    #[pyo3(signature = (dim=None, unbiased=None, keepdim=false, *, correction=None))]
    fn var(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        unbiased: Option<bool>,
        keepdim: bool,
        correction: Option<f64>,
    ) -> PyResult<PyTensor> {
        let (axes, c) = statistics_args(&self.tensor(), dim, unbiased, correction)?;
        self.map(py, |t| t.var_axes(&axes, c, keepdim))
    }

    /// The standard deviation, as `var`.
    #[pyo3(signature = (dim=None, unbiased=None, keepdim=false, *, correction=None))]
    fn std(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        unbiased: Option<bool>,
        keepdim: bool,
        correction: Option<f64>,
    ) -> PyResult<PyTensor> {
        let (axes, c) = statistics_args(&self.tensor(), dim, unbiased, correction)?;
        self.map(py, |t| t.std_axes(&axes, c, keepdim))
    }

    /// `log Σ exp` over `dim`, without overflow.
    #[pyo3(signature = (dim, keepdim=false))]
    fn logsumexp(
        &self,
        py: Python<'_>,
        dim: &Bound<'_, PyAny>,
        keepdim: bool,
    ) -> PyResult<PyTensor> {
        let axes = axes_or_all(&self.tensor(), Some(dim))?;
        self.map(py, |t| t.logsumexp(&axes, keepdim))
    }

    /// The running sums along `dim` (PyTorch's `cumsum`; integers stay integers, summed
    /// exactly and wrapping on overflow), in `dtype` when given (converted first, as
    /// PyTorch's).
    #[pyo3(signature = (dim, *, dtype=None))]
    fn cumsum(
        &self,
        py: Python<'_>,
        dim: isize,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        self.scan(py, dim, dtype, |t, d| t.cumsum(d))
    }

    /// The running products along `dim` (PyTorch's `cumprod`; integers multiply exactly,
    /// wrapping on overflow), in `dtype` when given.
    #[pyo3(signature = (dim, *, dtype=None))]
    fn cumprod(
        &self,
        py: Python<'_>,
        dim: isize,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        self.scan(py, dim, dtype, |t, d| t.cumprod(d))
    }
}

impl PyTensor {
    /// A running op along `dim` (`cumsum`, `cumprod`) in `dtype` when given; a 0-d tensor is
    /// its own scan, as PyTorch's (`dim` 0 or -1).
    fn scan(
        &self,
        py: Python<'_>,
        dim: isize,
        dtype: Option<&Bound<'_, PyAny>>,
        f: impl FnOnce(&Tensor, isize) -> Tensor + Send,
    ) -> PyResult<PyTensor> {
        let t = match crate::convert::dtype_arg(dtype)? {
            Some(d) => PyTensor::new(self.tensor().to_dtype(d)),
            None => PyTensor::new(self.tensor()),
        };
        if t.tensor().ndim() == 0 {
            if dim != 0 && dim != -1 {
                return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                    "Dimension out of range (expected to be in range of [-1, 0], but got {dim})"
                )));
            }
            return Ok(t);
        }
        t.map(py, |x| f(x, dim))
    }
}
