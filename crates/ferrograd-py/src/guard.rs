//! Calls into the Rust core from Python: a panic (a shape error, a bad axis) becomes a
//! `ferrograd.OpError` carrying the core's message instead of PyO3's `PanicException`, and an
//! exception raised by a Python callback inside the core (a custom gradient's rule) reaches the
//! caller unchanged.

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

/// Guarded calls in progress on any thread: their panics are reported as exceptions, so the
/// panic hook stays quiet about them (kernel threads included).
static GUARDED: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// The exception a Python callback raised, waiting for the unwinding core to return it.
    static PENDING: RefCell<Option<PyErr>> = const { RefCell::new(None) };
}

/// Keeps the default panic message for panics nobody turns into an exception.
pub fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if GUARDED.load(Ordering::Relaxed) == 0 {
                previous(info);
            }
        }));
    });
}

fn catch<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    // Every binding goes through here: the generic part only moves `f` and its result, so
    // that the unwinding machinery below is compiled once, not once per binding.
    let (mut f, mut out) = (Some(f), None);
    catch_dyn(&mut || out = f.take().map(|f| f()))?;
    Ok(out.expect("catch_dyn ran the call or returned its panic"))
}

fn catch_dyn(f: &mut dyn FnMut()) -> Result<(), String> {
    // An exception left by an earlier call that was not guarded must not be raised for this
    // one's panic.
    PENDING.with(|p| p.borrow_mut().take());
    GUARDED.fetch_add(1, Ordering::Relaxed);
    let result = catch_unwind(AssertUnwindSafe(f));
    GUARDED.fetch_sub(1, Ordering::Relaxed);
    result.map_err(|payload| {
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "ferrograd: an operation failed".to_string())
    })
}

fn to_pyerr(message: String) -> PyErr {
    PENDING
        .with(|p| p.borrow_mut().take())
        .unwrap_or_else(|| op_error(in_python_terms(message)))
}

/// `ferrograd.OpError`, what a failed op raises: a `RuntimeError`, as PyTorch raises for a
/// shape mismatch or a bad view, and a `ValueError`, as ferrograd raised before.
static OP_ERROR: pyo3::sync::PyOnceLock<Py<pyo3::types::PyType>> = pyo3::sync::PyOnceLock::new();

/// Makes `OpError` and adds it to the module `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let builtins = py.import("builtins")?;
    let bases = (
        builtins.getattr("RuntimeError")?,
        builtins.getattr("ValueError")?,
    );
    let attrs = pyo3::types::PyDict::new(py);
    attrs.set_item("__module__", "ferrograd")?;
    attrs.set_item(
        "__doc__",
        "An op that cannot run on its operands (shapes, axes, dtypes): a RuntimeError, as \
         PyTorch raises, and a ValueError.",
    )?;
    let class = builtins
        .getattr("type")?
        .call1(("OpError", bases, attrs))?
        .cast_into::<pyo3::types::PyType>()?;
    m.add("OpError", &class)?;
    let _ = OP_ERROR.set(py, class.unbind());
    Ok(())
}

pub fn op_error(message: String) -> PyErr {
    Python::attach(|py| match OP_ERROR.get(py) {
        Some(class) => PyErr::from_type(class.bind(py).clone(), message),
        None => PyValueError::new_err(message),
    })
}

/// The core's messages name its Rust API where they say how to mend a call; from Python the
/// mend is spelled as Python's.
const RUST_TO_PYTHON: [(&str, &str); 2] = [
    (".to_dtype(DType::F32) (or F64)", ".float() (or .double())"),
    ("an i64 tensor", "an int64 tensor"),
];

fn in_python_terms(message: String) -> String {
    RUST_TO_PYTHON
        .iter()
        .fold(message, |m, (rust, python)| m.replace(rust, python))
}

/// Runs `f` holding the GIL (small work, or work that calls back into Python).
pub fn run<R>(f: impl FnOnce() -> R) -> PyResult<R> {
    catch(f).map_err(to_pyerr)
}

/// Runs `f` with the GIL released when `heavy` (kernels worth letting other Python threads
/// run beside; a small op would spend longer releasing and taking the GIL than computing).
pub fn run_heavy<R: Send>(
    py: Python<'_>,
    heavy: bool,
    f: impl FnOnce() -> R + Send,
) -> PyResult<R> {
    if heavy {
        py.detach(|| catch(f)).map_err(to_pyerr)
    } else {
        run(f)
    }
}

/// Elements above which an op releases the GIL while it runs.
pub const HEAVY: usize = 1 << 15;

/// Called where a Python callback failed inside the core: keeps `err` for the guarded call to
/// raise, and unwinds out of the core to it.
pub fn raise_through(err: PyErr, context: &str) -> ! {
    let message = format!("{context}: {err}");
    PENDING.with(|p| *p.borrow_mut() = Some(err));
    std::panic::panic_any(message)
}

/// A core error as the Python exception for it: file errors as `OSError`, the rest as
/// `fg.OpError` (a `RuntimeError` and a `ValueError`), each with the core's message (which
/// names the file or the key).
pub fn core_error(e: ferrograd::Error) -> PyErr {
    match e {
        ferrograd::Error::Io { .. } => PyOSError::new_err(e.to_string()),
        other => op_error(other.to_string()),
    }
}
