//! `ferrograd.profiler`'s core: recording on and off, the report, and named ranges, over the
//! core's `profiler` module (the table and the trace are the core's own).

use ferrograd::profiler::{self, Profile, Scope, SortBy};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

/// What one profile recorded.
#[pyclass(name = "ProfileReport", module = "ferrograd._core", frozen)]
pub struct PyProfile {
    profile: Profile,
}

#[pymethods]
impl PyProfile {
    /// The calls grouped by name, longest total first: `(name, calls, total_ns, self_ns,
    /// bytes, self_bytes, flops, threads)`.
    #[allow(clippy::type_complexity)]
    fn key_averages(&self) -> Vec<(String, u64, u64, u64, u64, u64, u64, usize)> {
        self.profile
            .key_averages()
            .into_iter()
            .map(|s| {
                let sizes = (s.bytes, s.self_bytes, s.flops, s.threads);
                (
                    s.name, s.calls, s.total_ns, s.self_ns, sizes.0, sizes.1, sizes.2, sizes.3,
                )
            })
            .collect()
    }

    /// Every recorded scope: `(name, start_ns, total_ns, self_ns, thread, depth)`.
    fn events(&self) -> Vec<(String, u64, u64, u64, u64, usize)> {
        self.profile
            .events()
            .iter()
            .map(|e| {
                (
                    e.name.clone(),
                    e.start_ns,
                    e.total_ns,
                    e.self_ns,
                    e.thread,
                    e.depth,
                )
            })
            .collect()
    }

    /// The text table, sorted by `sort_by` (`cpu_time_total`, `self_cpu_time_total`,
    /// `count`), its first `row_limit` rows.
    #[pyo3(signature = (sort_by=None, row_limit=100))]
    fn table(&self, sort_by: Option<&str>, row_limit: i64) -> PyResult<String> {
        let order = match sort_by {
            None => SortBy::Total,
            Some(name) => SortBy::parse(name).ok_or_else(|| {
                PyValueError::new_err(format!(
                    "table: sort_by {name:?} is not one of cpu_time_total, self_cpu_time_total, count"
                ))
            })?,
        };
        let rows = usize::try_from(row_limit).unwrap_or(usize::MAX);
        Ok(self
            .profile
            .table_sorted(order, if row_limit < 0 { usize::MAX } else { rows }))
    }

    /// The Chrome trace as JSON text.
    fn chrome_trace(&self) -> String {
        self.profile.chrome_trace()
    }

    /// Writes the Chrome trace to `path`.
    fn export_chrome_trace(&self, path: std::path::PathBuf) -> PyResult<()> {
        self.profile
            .export_chrome_trace(&path)
            .map_err(crate::guard::core_error)
    }
}

/// Starts recording; `RuntimeError` when a profile is already being recorded.
#[pyfunction]
pub fn profiler_start() -> PyResult<()> {
    if profiler::start_recording() {
        Ok(())
    } else {
        Err(PyRuntimeError::new_err(
            "profiler: another profile is already being recorded",
        ))
    }
}

/// Stops recording and gives the report.
#[pyfunction]
pub fn profiler_stop() -> PyProfile {
    PyProfile {
        profile: profiler::stop_recording(),
    }
}

/// A named range, timed from `__enter__` to `__exit__` while a profile records.
#[pyclass(name = "RecordFunction", module = "ferrograd._core", unsendable)]
pub struct PyRecordFunction {
    name: String,
    scope: Option<Scope>,
}

#[pymethods]
impl PyRecordFunction {
    #[new]
    fn new(name: String) -> PyRecordFunction {
        PyRecordFunction { name, scope: None }
    }

    fn __enter__(mut slf: PyRefMut<'_, Self>) -> PyRefMut<'_, Self> {
        slf.scope = profiler::record_function(&slf.name);
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.scope = None;
        false
    }
}
