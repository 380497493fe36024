//! `ferrograd._core`, the extension module under the Python package `ferrograd`
//! (`python/ferrograd/`): tensors and autodiff, layers, losses, optimizers and data loading,
//! on the Rust crate's kernels.

// Functions stay short enough to read at once (the threshold is in clippy.toml).
#![deny(clippy::too_many_lines)]

mod autograd;
mod convert;
mod elementwise;
mod func;
mod graph;
mod guard;
mod index;
mod module;
mod nn;
mod onnx;
mod printing;
mod profiler;
mod rearrange;
mod spellings;
mod tensor;
mod train;
mod transformer;
mod value;

use ferrograd::prelude::*;
use numpy::ndarray::Array1;
use numpy::IntoPyArray;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use convert::{dtype_arg, to_numpy, to_tensor, PyDType};
use tensor::PyTensor;

pub(crate) fn shape_of(args: &Bound<'_, PyTuple>) -> PyResult<Vec<usize>> {
    if args.len() == 1 {
        if let Ok(v) = args.get_item(0)?.extract::<Vec<usize>>() {
            return Ok(v);
        }
    }
    args.extract()
}

fn dtype_or_f32(dtype: Option<&Bound<'_, PyAny>>) -> PyResult<DType> {
    Ok(dtype_arg(dtype)?.unwrap_or(DType::F32))
}

/// A new tensor `t` as Python gets it: boolean when `dtype` asks for `bool` (PyTorch's
/// `ones(L, L, dtype=torch.bool)`), a trainable leaf when `requires_grad`.
fn created(
    py: Python<'_>,
    t: Tensor,
    dtype: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<Py<PyAny>> {
    if convert::is_bool_dtype(dtype)? {
        if requires_grad {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "requires_grad=True needs a float dtype (float32 or float64)",
            ));
        }
        return Ok(Bound::new(py, PyTensor::mask(t))?.into_any().unbind());
    }
    tensor::with_grad(py, t, requires_grad)
}

/// `tensor(data, dtype=None, requires_grad=False)`: a tensor from a numpy array (its dtype
/// kept), a nested list (floats become float32, ints int64) or a number; with
/// `requires_grad=True`, a trainable leaf whose `.grad` backward sets.
#[pyfunction]
#[pyo3(name = "tensor", signature = (data, dtype=None, requires_grad=false))]
fn make_tensor(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<Py<PyAny>> {
    tensor::make(py, data, dtype, requires_grad)
}

/// Zeros of `shape` (`zeros(2, 3)` or `zeros((2, 3))`).
#[pyfunction]
#[pyo3(signature = (*shape, dtype=None, requires_grad=false))]
fn zeros(
    py: Python<'_>,
    shape: &Bound<'_, PyTuple>,
    dtype: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<Py<PyAny>> {
    let (shape, d) = (shape_of(shape)?, dtype_or_f32(dtype)?);
    created(
        py,
        guard::run(|| Tensor::zeros(&shape, d))?,
        dtype,
        requires_grad,
    )
}

#[pyfunction]
#[pyo3(signature = (*shape, dtype=None, requires_grad=false))]
fn ones(
    py: Python<'_>,
    shape: &Bound<'_, PyTuple>,
    dtype: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<Py<PyAny>> {
    let (shape, d) = (shape_of(shape)?, dtype_or_f32(dtype)?);
    created(
        py,
        guard::run(|| Tensor::ones(&shape, d))?,
        dtype,
        requires_grad,
    )
}

/// `full(shape, fill_value, dtype=None, requires_grad=False)`: `fill_value` everywhere; without
/// a dtype, PyTorch's from the value: bool for a bool, int64 for an int, else float32.
#[pyfunction]
#[pyo3(signature = (shape, fill_value, dtype=None, requires_grad=false))]
fn full(
    py: Python<'_>,
    shape: Vec<usize>,
    fill_value: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<Py<PyAny>> {
    let value: f64 = fill_value.extract()?;
    let given = dtype.filter(|d| !d.is_none());
    if given.is_none() && fill_value.is_instance_of::<pyo3::types::PyBool>() {
        let bool_dtype = "bool".into_pyobject(py)?.into_any();
        let t = guard::run(|| Tensor::full(&shape, value, DType::I64))?;
        return created(py, t, Some(&bool_dtype), requires_grad);
    }
    // An int (Python's or numpy's: anything with `__index__`) gives int64, as PyTorch's.
    let integral = fill_value.hasattr("__index__")?;
    let d = match given {
        None if integral => DType::I64,
        _ => dtype_or_f32(dtype)?,
    };
    created(
        py,
        guard::run(|| Tensor::full(&shape, value, d))?,
        dtype,
        requires_grad,
    )
}

/// Standard normal samples from the generator `manual_seed` sets.
#[pyfunction]
#[pyo3(signature = (*shape, dtype=None, requires_grad=false))]
fn randn(
    py: Python<'_>,
    shape: &Bound<'_, PyTuple>,
    dtype: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<Py<PyAny>> {
    let (shape, dtype) = (shape_of(shape)?, dtype_or_f32(dtype)?);
    tensor::with_grad(
        py,
        guard::run(|| Tensor::randn_default(&shape, dtype))?,
        requires_grad,
    )
}

/// Uniform samples in [0, 1) from the generator `manual_seed` sets.
#[pyfunction]
#[pyo3(signature = (*shape, dtype=None, requires_grad=false))]
fn rand(
    py: Python<'_>,
    shape: &Bound<'_, PyTuple>,
    dtype: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<Py<PyAny>> {
    let (shape, dtype) = (shape_of(shape)?, dtype_or_f32(dtype)?);
    tensor::with_grad(
        py,
        guard::run(|| Tensor::rand_uniform_default(&shape, 0.0, 1.0, dtype))?,
        requires_grad,
    )
}

/// `arange(start, end, step=1)` (or `arange(end)`): int64 when every argument is an int,
/// as PyTorch's, else float32, unless `dtype` says.
#[pyfunction]
#[pyo3(signature = (start, end=None, step=None, dtype=None))]
fn arange(
    start: &Bound<'_, PyAny>,
    end: Option<&Bound<'_, PyAny>>,
    step: Option<&Bound<'_, PyAny>>,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyTensor> {
    // As PyTorch: whole-number arguments give int64 positions unless a dtype is named.
    // An integer is what `__index__` accepts (numpy's too), bool aside.
    let ints = [Some(start), end, step]
        .into_iter()
        .flatten()
        .all(|v| !v.is_instance_of::<pyo3::types::PyBool>() && v.call_method0("__index__").is_ok());
    let (a, b) = match end {
        Some(e) => (start.extract::<f64>()?, e.extract::<f64>()?),
        None => (0.0, start.extract::<f64>()?),
    };
    let step: f64 = step.map_or(Ok(1.0), |s| s.extract())?;
    let target = match dtype {
        None if ints => DType::I64,
        _ => dtype_or_f32(dtype)?,
    };
    let work = if target.is_float() {
        target
    } else {
        DType::F64
    };
    guard::run(|| Tensor::arange(a, b, step, work).to_dtype(target)).map(PyTensor::new)
}

/// The L2 norm of all `tensors` together, in f64 (`nn.utils.clip_grad_norm_`'s figure): one
/// pass over each, without a tensor per step.
#[pyfunction]
fn _global_norm(tensors: Vec<PyRef<'_, PyTensor>>) -> PyResult<f64> {
    let ts: Vec<Tensor> = tensors.iter().map(|t| t.tensor()).collect();
    guard::run(|| ferrograd::autograd::global_norm(&ts))
}

#[pyfunction]
#[pyo3(signature = (start, end, steps, dtype=None))]
fn linspace(
    start: f64,
    end: f64,
    steps: usize,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyTensor> {
    let dtype = dtype_or_f32(dtype)?;
    guard::run(|| Tensor::linspace(start, end, steps, dtype)).map(PyTensor::new)
}

fn tensor_list(tensors: &Bound<'_, PyAny>) -> PyResult<Vec<Tensor>> {
    let items: Vec<Bound<'_, PyAny>> = tensors.extract()?;
    items.iter().map(|t| to_tensor(t, None)).collect()
}

/// The tensors joined along an existing axis `dim`.
#[pyfunction]
#[pyo3(signature = (tensors, dim=0))]
fn cat(py: Python<'_>, tensors: &Bound<'_, PyAny>, dim: isize) -> PyResult<PyTensor> {
    let ts = tensor_list(tensors)?;
    guard::run_heavy(py, true, || {
        Tensor::cat(&ts.iter().collect::<Vec<_>>(), dim)
    })
    .map(PyTensor::new)
}

/// The tensors stacked along a new axis `dim`.
#[pyfunction]
#[pyo3(signature = (tensors, dim=0))]
fn stack(py: Python<'_>, tensors: &Bound<'_, PyAny>, dim: isize) -> PyResult<PyTensor> {
    let ts = tensor_list(tensors)?;
    guard::run_heavy(py, true, || {
        Tensor::stack(&ts.iter().collect::<Vec<_>>(), dim)
    })
    .map(PyTensor::new)
}

/// Einstein summation over `operands` as PyTorch's `einsum` reads `equation`.
#[pyfunction]
fn einsum(py: Python<'_>, equation: &str, operands: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
    let ts = tensor_list(operands)?;
    let heavy = ts.iter().map(Tensor::numel).sum::<usize>() >= guard::HEAVY;
    guard::run_heavy(py, heavy, || {
        Tensor::einsum(equation, &ts.iter().collect::<Vec<_>>())
    })
    .map(PyTensor::new)
}

/// One LSTM step from its gate pre-activations `gi`, `gh` (`[N, 4H]`, gates i, f, g, o) and
/// cell `c` (`[N, H]`): `(h', c')`, by the core's fused cell.
#[pyfunction]
fn lstm_cell(
    gi: &Bound<'_, PyAny>,
    gh: &Bound<'_, PyAny>,
    c: &Bound<'_, PyAny>,
) -> PyResult<(PyTensor, PyTensor)> {
    let (gi, gh, c) = (
        to_tensor(gi, None)?,
        to_tensor(gh, None)?,
        to_tensor(c, None)?,
    );
    let (h, c) = guard::run(|| Tensor::lstm_cell(&gi, &gh, &c))?;
    Ok((PyTensor::new(h), PyTensor::new(c)))
}

/// One GRU step from its gate pre-activations `gi`, `gh` (`[N, 3H]`, gates r, z, n) and state
/// `h` (`[N, H]`): `h'`, by the core's fused cell.
#[pyfunction]
fn gru_cell(
    gi: &Bound<'_, PyAny>,
    gh: &Bound<'_, PyAny>,
    h: &Bound<'_, PyAny>,
) -> PyResult<PyTensor> {
    let (gi, gh, h) = (
        to_tensor(gi, None)?,
        to_tensor(gh, None)?,
        to_tensor(h, None)?,
    );
    guard::run(|| Tensor::gru_cell(&gi, &gh, &h)).map(PyTensor::new)
}

/// The entries of `x` along axis 0 in a random order from the generator `manual_seed` sets.
/// Has no derivative: wrap it in `stop_gradient` where a gradient could reach it.
#[pyfunction]
fn shuffle(x: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
    let t = to_tensor(x, None)?;
    guard::run(|| with_default_rng(|rng| t.shuffle(rng))).map(PyTensor::new)
}

/// Seeds the generator that layers, initializers and `randn` use.
#[pyfunction(name = "manual_seed")]
fn seed_generator(seed: u64) {
    ferrograd::prelude::manual_seed(seed);
}

/// The permutation of `n` samples that a shuffled epoch visits, fixed by `seed` and `epoch`
/// (the Rust `BatchIterator`'s), as an int64 array.
#[pyfunction]
fn epoch_order<'py>(
    py: Python<'py>,
    n: usize,
    seed: u64,
    epoch: u64,
) -> PyResult<Bound<'py, PyAny>> {
    let order: Vec<i64> = guard::run(|| ferrograd::data::epoch_order(n, seed, epoch))?
        .into_iter()
        .map(|i| i as i64)
        .collect();
    Ok(Array1::from_vec(order).into_pyarray(py).into_any())
}

/// MNIST (or Fashion-MNIST) from the IDX files in `directory`: `(images, labels)`, images
/// float32 `[N, 784]` scaled to [0, 1], labels int64 `[N]`. `train` picks the training or
/// the test set. A missing or malformed file raises `OSError` / `ValueError` naming it.
#[pyfunction]
#[pyo3(signature = (directory, train=true))]
fn load_mnist<'py>(
    py: Python<'py>,
    directory: std::path::PathBuf,
    train: bool,
) -> PyResult<Bound<'py, PyTuple>> {
    let set = guard::run_heavy(py, true, || ferrograd::data::Mnist::load(&directory, train))?
        .map_err(guard::core_error)?;
    let labels: Vec<i64> = set.labels.iter().map(|&l| l as i64).collect();
    PyTuple::new(
        py,
        [
            to_numpy(py, &set.images)?,
            Array1::from_vec(labels).into_pyarray(py).into_any(),
        ],
    )
}

/// Writes named tensors (a state dict: names to tensors or arrays) to a safetensors file,
/// atomically; PyTorch reads it with `safetensors.torch.load_file`.
#[pyfunction]
fn save_tensors(state: &Bound<'_, PyDict>, path: std::path::PathBuf) -> PyResult<()> {
    let mut named = Vec::with_capacity(state.len());
    for (k, v) in state.iter() {
        let name: String = k.extract().map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err("save: state dict keys must be strings")
        })?;
        named.push((name, convert::to_tensor(&v, None)?.detach()));
    }
    guard::run(|| ferrograd::io::save_tensors(&path, &named, Default::default()))?
        .map_err(guard::core_error)
}

/// PyTorch's `torch.set_num_threads`: each op spreads its work over at most `n` threads from
/// now on (the pool's size, `RAYON_NUM_THREADS` or the cores, is the most there can be).
#[pyfunction]
fn set_num_threads(n: i64) -> PyResult<()> {
    if n < 1 {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "set_num_threads: expected a positive number of threads, got {n}"
        )));
    }
    ferrograd::set_num_threads(usize::try_from(n).unwrap_or(usize::MAX));
    Ok(())
}

/// PyTorch's `torch.get_num_threads`: the threads each op spreads its work over.
#[pyfunction]
fn get_num_threads() -> usize {
    ferrograd::num_threads()
}

/// Writes `data` to `path` as `save_tensors` writes: beside it first, then renamed over it
/// (its mode kept, a symbolic link written through), so the old file survives any failure.
#[pyfunction]
fn write_file(data: &[u8], path: std::path::PathBuf) -> PyResult<()> {
    ferrograd::io::write_atomic(&path, data).map_err(guard::core_error)
}

/// The named tensors of a safetensors file (one written by `save_tensors` or by
/// `safetensors.torch.save_file`), as a dict.
#[pyfunction]
fn load_tensors<'py>(py: Python<'py>, path: std::path::PathBuf) -> PyResult<Bound<'py, PyDict>> {
    let (tensors, _) =
        guard::run(|| ferrograd::io::load_tensors(&path))?.map_err(guard::core_error)?;
    named_tensors(py, tensors)
}

/// The named tensors of a safetensors file read into memory (a file object's bytes).
#[pyfunction]
fn load_tensor_bytes<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyDict>> {
    let origin = std::path::Path::new("<file object>");
    let (tensors, _) = guard::run(|| ferrograd::io::load_tensors_from(data, origin))?
        .map_err(guard::core_error)?;
    named_tensors(py, tensors)
}

/// `tensors` as a dict, by name.
fn named_tensors(
    py: Python<'_>,
    tensors: std::collections::HashMap<String, Tensor>,
) -> PyResult<Bound<'_, PyDict>> {
    let mut names: Vec<&String> = tensors.keys().collect();
    names.sort();
    let d = PyDict::new(py);
    for name in names {
        d.set_item(name, PyTensor::new(tensors[name].clone()))?;
    }
    Ok(d)
}

/// Rows `index` of a C-contiguous float32, float64 or int64 numpy array as a tensor, copied
/// once (`None` for another layout or dtype: index it with numpy then).
#[pyfunction]
fn take_rows(
    array: &Bound<'_, PyAny>,
    index: numpy::PyReadonlyArray1<'_, i64>,
) -> PyResult<Option<PyTensor>> {
    Ok(convert::take_rows(array, index.as_slice()?)?.map(PyTensor::new))
}

/// `multinomial(input, num_samples, replacement=False)`: class indices (int64) drawn per
/// row of the weights along the last axis, from the generator `manual_seed` seeds, as
/// PyTorch's.
#[pyfunction]
#[pyo3(signature = (input, num_samples, replacement=false, generator=None))]
fn multinomial(
    input: &Bound<'_, PyAny>,
    num_samples: usize,
    replacement: bool,
    generator: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyTensor> {
    if generator.is_some_and(|g| !g.is_none()) {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "multinomial: draws come from the generator fg.manual_seed seeds (generator=None)",
        ));
    }
    let w = convert::to_tensor(input, None)?;
    guard::run(|| with_default_rng(|rng| w.multinomial(num_samples, replacement, rng)))
        .map(PyTensor::new)
}

/// Number of graph nodes alive in the process (a leak check).
#[pyfunction]
fn live_nodes() -> usize {
    ferrograd::autograd::live_nodes()
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    guard::install_panic_hook();
    guard::register(m)?;
    m.add_class::<PyTensor>()?;
    m.add_function(wrap_pyfunction!(func::func_linearize, m)?)?;
    m.add_function(wrap_pyfunction!(func::func_vmap, m)?)?;
    m.add_function(wrap_pyfunction!(func::func_is_recording, m)?)?;
    m.add_class::<func::PyLinearized>()?;
    m.add_function(wrap_pyfunction!(onnx::onnx_export, m)?)?;
    m.add_function(wrap_pyfunction!(onnx::onnx_load, m)?)?;
    m.add_class::<onnx::PyOnnxModule>()?;
    m.add_class::<profiler::PyProfile>()?;
    m.add_class::<profiler::PyRecordFunction>()?;
    m.add_class::<autograd::PySubstitutes>()?;
    m.add_function(wrap_pyfunction!(profiler::profiler_start, m)?)?;
    m.add_function(wrap_pyfunction!(profiler::profiler_stop, m)?)?;
    m.add_class::<PyDType>()?;
    m.add_class::<autograd::PyGradients>()?;
    nn::register(m)?;
    train::register(m)?;
    graph::register(m)?;
    transformer::register(m)?;
    m.add_function(wrap_pyfunction!(make_tensor, m)?)?;
    m.add_function(wrap_pyfunction!(zeros, m)?)?;
    m.add_function(wrap_pyfunction!(ones, m)?)?;
    m.add_function(wrap_pyfunction!(full, m)?)?;
    m.add_function(wrap_pyfunction!(randn, m)?)?;
    m.add_function(wrap_pyfunction!(rand, m)?)?;
    m.add_function(wrap_pyfunction!(arange, m)?)?;
    m.add_function(wrap_pyfunction!(_global_norm, m)?)?;
    m.add_function(wrap_pyfunction!(linspace, m)?)?;
    m.add_function(wrap_pyfunction!(cat, m)?)?;
    m.add_function(wrap_pyfunction!(stack, m)?)?;
    m.add_function(wrap_pyfunction!(einsum, m)?)?;
    m.add_function(wrap_pyfunction!(lstm_cell, m)?)?;
    m.add_function(wrap_pyfunction!(gru_cell, m)?)?;
    m.add_function(wrap_pyfunction!(seed_generator, m)?)?;
    m.add_function(wrap_pyfunction!(shuffle, m)?)?;
    m.add_function(wrap_pyfunction!(epoch_order, m)?)?;
    m.add_function(wrap_pyfunction!(load_mnist, m)?)?;
    m.add_function(wrap_pyfunction!(live_nodes, m)?)?;
    m.add_function(wrap_pyfunction!(save_tensors, m)?)?;
    m.add_function(wrap_pyfunction!(write_file, m)?)?;
    m.add_function(wrap_pyfunction!(set_num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(get_num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(take_rows, m)?)?;
    m.add_function(wrap_pyfunction!(multinomial, m)?)?;
    m.add_function(wrap_pyfunction!(load_tensors, m)?)?;
    m.add_function(wrap_pyfunction!(load_tensor_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(elementwise::elementwise_primitives, m)?)?;
    m.add_function(wrap_pyfunction!(elementwise::binary_primitives, m)?)?;
    m.add_function(wrap_pyfunction!(autograd::grad, m)?)?;
    m.add_function(wrap_pyfunction!(autograd::set_grad_enabled, m)?)?;
    m.add_function(wrap_pyfunction!(autograd::is_grad_enabled, m)?)?;
    m.add_function(wrap_pyfunction!(autograd::custom_gradient_call, m)?)?;
    m.add_function(wrap_pyfunction!(autograd::checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(autograd::gradcheck, m)?)?;
    Ok(())
}
